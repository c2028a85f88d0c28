"""edge-sdk never reaches the network: OpenVINO phones home on import, convert_model and NNCF too.

Each case runs in a fresh process (so OpenVINO and NNCF are imported there for the first time)
with every socket connect and DNS lookup recorded to a file and refused. The environment has no
``CI`` variable, because openvino_telemetry stays quiet in CI by itself and would hide the bug.
Without ``edge_sdk.offline.no_telemetry`` these cases record ``dns www.google-analytics.com``.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models import savedmodel

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"

GUARD = r"""
import socket, sys
log = sys.argv[1]
def record(what):
    with open(log, "a") as fh:
        fh.write(what + "\n")
def connect(self, addr):
    record(f"connect {addr}")
    raise OSError("network blocked by test")
def getaddrinfo(host, *args, **kwargs):
    record(f"dns {host}")
    raise socket.gaierror("network blocked by test")
socket.socket.connect = connect
socket.getaddrinfo = getaddrinfo
import warnings
warnings.simplefilter("ignore")
import edge_sdk
arg = sys.argv[3]
exec(sys.argv[2])
import time
time.sleep(2)  # telemetry is sent from a forked child or a thread: give it time to try
"""

CONVERT = 'edge_sdk.convert(arg, ["intel-cpu"], sys.argv[4], calib="random", progress=None)'
LOAD = ('import numpy as np\n'
        'with edge_sdk.load(arg) as m:\n'
        '    m.infer(np.zeros(m.inputs[0].shape, np.float32))')
DOCTOR = 'from edge_sdk.cli import main\nmain(["doctor", "--json"])'


def run_guarded(tmp_path, code, arg, *extra):
    log = tmp_path / "attempts.log"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NNCF_CI", "NNCF_DEV")}
    r = subprocess.run([sys.executable, "-c", GUARD, str(log), code, str(arg), *map(str, extra)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert not log.exists(), f"network attempts: {log.read_text()}"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["onnx", "savedmodel"])
def test_openvino_conversion_makes_no_network_attempt(kind, tmp_path):
    src = DIGITS / "digits_cnn.onnx" if kind == "onnx" else savedmodel(tmp_path / "sm")
    run_guarded(tmp_path, CONVERT, src, tmp_path / "out")
    assert (tmp_path / "out" / "intel-cpu" / "manifest.json").is_file()


@pytest.mark.slow
def test_loading_an_openvino_artifact_makes_no_network_attempt(tmp_path):
    import edge_sdk

    edge_sdk.convert(str(DIGITS / "digits_cnn.onnx"), ["intel-cpu"], tmp_path / "out", calib="random", progress=None)
    run_guarded(tmp_path, LOAD, tmp_path / "out" / "intel-cpu")


def test_doctor_makes_no_network_attempt(tmp_path):
    run_guarded(tmp_path, DOCTOR, "-")
