"""`edge-sdk freeze` and the device requirement sets, without the package index.

The index-reaching paths (a real lock, installed with --require-hashes) run in `make test-device`
(tests/device_venv/run.py builds its `high` venv from `edge-sdk freeze`'s output).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from edge_sdk.cli_freeze import _requirements, platform_tags

HERE = Path(__file__).resolve().parent


def _run_module():
    spec = importlib.util.spec_from_file_location("device_venv_run", HERE / "run.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _names(reqs: list[str]) -> dict[str, Requirement]:
    return {Requirement(r).name.lower(): Requirement(r) for r in reqs}


def test_device_extra_is_litert_without_the_conversion_stack():
    reqs = _names(_requirements(("device",))[0])
    assert {"numpy", "click", "pillow", "ai-edge-litert"} <= set(reqs), reqs
    for heavy in ("tensorflow", "tf-keras", "onnx", "onnx2tf", "nncf", "tf2onnx", "matplotlib", "distributed", "cryptography"):
        assert heavy not in reqs, heavy
    assert Version("2.4.0") in reqs["numpy"].specifier and Version("1.26.4") in reqs["numpy"].specifier
    assert Version("3.0.0") not in reqs["numpy"].specifier


def test_runtime_extras_accept_numpy_2_and_convert_keeps_its_pins():
    for extra in ("litert", "onnxruntime", "openvino"):
        reqs = _names(_requirements((extra,))[0])
        assert Version("2.0.0") in reqs["numpy"].specifier, extra
    ort = _names(_requirements(("onnxruntime",))[0])["onnxruntime"]
    assert Version("1.18.0") not in ort.specifier  # built against numpy 1: fails to import under numpy 2
    conv = _requirements(("convert",))[0]
    assert "numpy==1.26.4" in conv and "tensorflow==2.19.0" in conv and "onnx2tf==1.29.24" in conv


def test_all_expands_nested_extras_and_markers_lose_only_the_extra_clause():
    reqs = _requirements(("all",))[0]
    names = _names(reqs)
    assert {"tensorflow", "matplotlib", "distributed", "openvino"} <= set(names)
    assert all("extra" not in r for r in reqs), reqs
    tomli = names.get("tomli")
    assert tomli is not None and str(tomli.marker) == 'python_version < "3.11"'


def test_platform_tags_take_older_manylinux_like_pip_does_for_this_machine():
    assert platform_tags("manylinux2014_aarch64")[:2] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    tags = platform_tags("manylinux_2_28_aarch64")
    assert tags[0] == "manylinux_2_28_aarch64" and "manylinux2014_aarch64" in tags and "manylinux_2_28_x86_64" not in tags
    assert platform_tags("macosx_11_0_arm64") == ["macosx_11_0_arm64"]


def test_unknown_extra_and_bad_python_are_input_errors(cli):
    r = cli("freeze", "--extra", "tensorflow")
    assert r.returncode == 3, r.stderr
    assert "no extra 'tensorflow'" in r.stderr and "hint: choose from:" in r.stderr and "device" in r.stderr
    r = cli("freeze", "--extra", "litert", "--python", "3")
    assert r.returncode == 3 and "--python '3'" in r.stderr, r.stderr
    r = cli("freeze", "--extra", "litert", "--with", "numpy>=>2")
    assert r.returncode == 3 and "--with 'numpy>=>2' is not a requirement" in r.stderr, r.stderr


def test_offline_is_a_clear_error(cli, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="5")
    exe = Path(sys.executable).with_name("edge-sdk")
    r = subprocess.run([str(exe), "freeze", "--extra", "litert", "--index-url", f"http://127.0.0.1:{port}/simple"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "The package index cannot be reached" in r.stderr and "hint:" in r.stderr, r.stderr
    assert r.stdout == ""


def test_low_set_is_the_floors():
    run = _run_module()
    low = _names(run.low_requirements())
    assert str(low["onnxruntime"].specifier) == "==1.19"
    assert str(low["ai-edge-litert"].specifier) == "==1.2"
    assert str(low["openvino"].specifier) == "==2024.0"
    assert str(low["numpy"].specifier) == "==1.23.2"
    assert str(_names(run.low_requirements(numpy="2.0.0"))["numpy"].specifier) == "==2.0.0"
    assert "tensorflow" not in low and "onnx" not in low


def test_plugin_refuses_to_run_outside_a_device_venv(tmp_path):
    """Here (the dev venv: edge_sdk from the checkout, TensorFlow installed) the plugin must refuse."""
    import subprocess
    import sys

    (tmp_path / "index.json").write_text("{}")
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    env = {**os.environ, "PYTHONPATH": str(HERE), "EDGE_SDK_PREBUILT": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "plugin", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_x.py")],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "imported from the checkout" in r.stderr or "conversion stack installed" in r.stderr, r.stdout + r.stderr
