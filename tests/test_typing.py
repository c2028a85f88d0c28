"""mypy on a device app that uses the public API (issue #19, "typed").

mypy cannot follow the editable install's import hook (``__editable___edge_sdk_*_finder``), so the
test lays out the package as the wheel installs it (``[tool.setuptools.package-dir]`` read from
pyproject.toml: ``converters/`` -> ``edge_sdk/converters`` and so on) as a tree of symlinks and
points ``MYPYPATH`` at it. Only the example is checked; everything it imports is followed silently
(``--follow-imports=silent``), which takes a few seconds here.

The test can fail: the same app with the typo ``model.infer_imag(...)``, with ``edge_sdk.lod(...)``
and with a ``Detection`` score used as a string must each be reported; if ``edge_sdk.load`` were
``Any`` to mypy, or the package's ``__getattr__`` visible to it, they would not.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
MYPY_TIMEOUT_S = 120

APP = '''\
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

import edge_sdk


def detect(artifact: str, frames: Iterable[npt.NDArray[np.uint8]]) -> list[tuple[str, float]]:
    found: list[tuple[str, float]] = []
    try:
        with edge_sdk.load(artifact, head="yolov8", labels=["person"]) as model:
            for result in model.pipeline(frames, color="bgr", max_in_flight=2):
                for det in result.detections:
                    found.append((det.label, det.score))
            first = next(iter(frames))
            one = model.infer_image(first, color="bgr")
            names: list[str] = list(one.keys())
            print(names, one.top_k(1))
    except edge_sdk.InputValidationError as exc:
        print("skipped a frame:", exc)
    except edge_sdk.MissingDependencyError as exc:
        print(exc)
    return found
'''


def _package_tree(dest: Path) -> Path:
    """``dest/edge_sdk``: symlinks laid out as the wheel installs the package."""
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())
    dirs = cfg["tool"]["setuptools"]["package-dir"]
    assert dirs["edge_sdk"] == "edge_sdk", dirs
    root = dest / "edge_sdk"
    root.mkdir(parents=True)
    for entry in (REPO / "edge_sdk").iterdir():
        if entry.name != "__pycache__":
            (root / entry.name).symlink_to(entry)
    for pkg, src in dirs.items():
        if pkg != "edge_sdk":
            sub = pkg.split(".", 1)[1]
            assert "." not in sub, pkg
            (root / sub).symlink_to(REPO / src)
    assert (root / "py.typed").exists()
    return dest


def _mypy(tmp_path: Path, source: str) -> tuple[int, str, float]:
    app = tmp_path / "device_app.py"
    app.write_text(source)
    env = {**os.environ, "MYPYPATH": str(tmp_path / "pkgs")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
                           "--show-error-codes", "--no-color-output", str(app)],
                          capture_output=True, text=True, timeout=MYPY_TIMEOUT_S, env=env, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


@pytest.fixture
def pkgs(tmp_path: Path) -> Path:
    return _package_tree(tmp_path / "pkgs")


def test_mypy_passes_on_a_device_app(tmp_path: Path, pkgs: Path) -> None:
    rc, out, seconds = _mypy(tmp_path, APP)
    assert rc == 0, out
    assert "Success: no issues found in 1 source file" in out, out
    assert seconds < 60, f"mypy took {seconds:.1f} s"


@pytest.mark.parametrize("bad, expected", [
    (("model.infer_image(first", "model.infer_imag(first"), '"Model" has no attribute "infer_imag"; maybe "infer_image"?'),
    (("found.append((det.label, det.score))", "found.append((det.label, det.score.upper()))"),
     '"float" has no attribute "upper"'),
    # the package's lazy names go through a module __getattr__ at run time only: to mypy a typo is an error
    (("edge_sdk.load(artifact", "edge_sdk.lod(artifact"), 'Module has no attribute "lod"'),
])
def test_mypy_reports_mistakes(tmp_path: Path, pkgs: Path, bad: tuple[str, str], expected: str) -> None:
    old, new = bad
    assert old in APP
    rc, out, _ = _mypy(tmp_path, APP.replace(old, new))
    assert rc == 1, out
    assert expected in out, out
    assert "device_app.py:" in out and "1 error in 1 file" in out, out


def test_lazy_names_still_resolve_at_run_time() -> None:
    """Hiding ``__getattr__`` from type checkers changes nothing at run time: lazy import, same error."""
    code = ("import sys, edge_sdk\n"
            "assert 'edge_sdk.runtimes.facade' not in sys.modules\n"
            "assert edge_sdk.load.__module__ == 'edge_sdk.runtimes.facade'\n"
            "try:\n    edge_sdk.lod\nexcept AttributeError as exc:\n    print(exc)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "module 'edge_sdk' has no attribute 'lod'", proc.stdout
