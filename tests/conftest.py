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
def npy(tmp_path):
    """One input of the hand-built runtime artifacts (tests/rt_artifacts.py) saved as ``x.npy``."""
    import numpy as np

    import rt_artifacts as ra

    p = tmp_path / "x.npy"
    np.save(p, ra.sample_inputs(1, seed=2)[0])
    return p
