"""Shared fixtures. Tiny real models are built by code in tests/models.py, never downloaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Keep TensorFlow quiet and deterministic in test logs.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def run_cli(*args: str, env: dict | None = None, cwd: str | None = None, timeout: int = 600):
    """Run the installed `edge-sdk` console script in a subprocess; returns CompletedProcess."""
    exe = Path(sys.executable).with_name("edge-sdk")
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    """No owner config file and a private verified-models cache: a test sees only its own trust setup."""
    monkeypatch.setenv("EDGE_SDK_CONFIG", str(tmp_path / "no-config.toml"))
    monkeypatch.setenv("EDGE_SDK_VERIFIED_CACHE", str(tmp_path / "verified"))


@pytest.fixture
def npy(tmp_path):
    """One input of the hand-built runtime artifacts (tests/rt_artifacts.py) saved as ``x.npy``."""
    import numpy as np

    import rt_artifacts as ra

    p = tmp_path / "x.npy"
    np.save(p, ra.sample_inputs(1, seed=2)[0])
    return p


def pytest_configure(config):
    config.addinivalue_line("markers", "cases(*names): the real-model matrix cases a test reads "
                            "(tests/realmodels; a test without it reads every case of its matrix)")


def _matrix_cases(item) -> set[str] | None:
    """The matrix cases a real-model test reads: its ``name`` parameter, its ``cases`` marker, or
    None (every case of its matrix)."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "name" in callspec.params:
        return {callspec.params["name"]}
    mark = item.get_closest_marker("cases")
    return set(mark.args) if mark else None


def pytest_itemcollected(item):
    """A real-model test answers ``-k`` to the names of the cases it reads, so ``-k nudenet_yolov8``
    selects that model's tests (and the matrix then converts that model alone)."""
    cases = _matrix_cases(item)
    if cases and Path(str(item.fspath)).parent.name == "realmodels":
        item.extra_keyword_matches.update(cases)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: only what will run
def pytest_collection_modifyitems(session, config, items):
    """The real-model conversion matrices (tests/realmodels/background.py) start now: worker
    processes convert the cases the selected tests read, longest first, and those tests move to the
    end of the session: they convert while the rest of the suite runs, and their tests find them
    done or nearly."""
    if config.option.collectonly:
        return
    sys.path.insert(0, str(REPO / "tests" / "realmodels"))
    import background

    sets: dict[str, list] = {}
    wanted: dict[str, set[str] | None] = {}
    for item in items:
        name = background.MODULES.get(Path(str(item.fspath)).name)
        if name:
            sets.setdefault(name, []).append(item)
            cases = _matrix_cases(item)
            if cases is None or wanted.get(name, set()) is None:
                wanted[name] = None
            else:
                wanted[name] = wanted.get(name, set()) | cases
    if not sets:
        return
    waiting = {id(i) for group in sets.values() for i in group}
    items[:] = [i for i in items if id(i) not in waiting] + [i for group in sets.values() for i in group]
    factory = getattr(config, "_tmp_path_factory", None)
    background.start(wanted, factory.mktemp("realmodels") if factory else None)
