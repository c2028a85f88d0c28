"""A non-editable install: wheel layout, package data, console script, and a core-only install."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Makes every heavy runtime/framework unimportable: what a core-only `pip install edge-sdk` has.
BLOCK = r"""
import sys, importlib.abc
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {'tensorflow','onnxruntime','openvino','ai_edge_litert','tflite_runtime','onnx','nncf','keras'}:
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Block())
sys.path.insert(0, sys.argv[1])
from edge_sdk.cli import main
code = main(sys.argv[2:])
import edge_sdk; assert edge_sdk.__file__.startswith(sys.argv[1]), edge_sdk.__file__
sys.exit(code)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    (whl,) = out.glob("edge_sdk-*.whl")
    return whl


def test_wheel_layout(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert "converters" not in tops and "runtimes" not in tops and "device_profiles" not in tops
    assert "edge_sdk/runtimes/__init__.py" in names
    assert "edge_sdk/converters/__init__.py" in names
    for prof in ("jetson-orin", "intel-cpu", "intel-npu", "coral-edgetpu", "arm-cpu"):
        assert f"edge_sdk/device_profiles/{prof}.toml" in names
    # Every package in the source tree is in the wheel (a forgotten subpackage breaks a real install).
    for init in REPO.glob("edge_sdk/**/__init__.py"):
        assert init.relative_to(REPO).as_posix() in names, init
    for top, pkg in (("converters", "converters"), ("runtimes", "runtimes")):
        for mod in (REPO / top).glob("*.py"):
            assert f"edge_sdk/{pkg}/{mod.name}" in names, mod
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "edge-sdk = edge_sdk.cli:run" in zipfile.ZipFile(wheel).read(entry).decode()


def test_core_only_install_runs_cli(wheel, tmp_path):
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for args in (["--version"], ["profiles", "list", "--json"], ["doctor", "--json"]):
        r = subprocess.run([sys.executable, "-c", BLOCK, str(target), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert '"jetson-orin"' in subprocess.run([sys.executable, "-c", BLOCK, str(target), "profiles", "list", "--json"],
                                             capture_output=True, text=True).stdout
