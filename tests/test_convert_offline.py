"""Conversion never reaches the network: OpenVINO's converter and NNCF phone home by default.

Each case runs a real conversion in a fresh process (so NNCF is imported there for the first
time) with every socket connect and DNS lookup recorded to a file and refused. The env has no
``CI`` variable, because openvino_telemetry stays quiet in CI by itself and would hide the bug.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models import savedmodel

REPO = Path(__file__).resolve().parents[1]

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
import edge_sdk
edge_sdk.convert(sys.argv[2], ["intel-cpu"], sys.argv[3], calib="random", progress=None)
import time
time.sleep(2)  # telemetry is sent from a forked child: give it time to try
"""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["onnx", "savedmodel"])
def test_openvino_conversion_makes_no_network_attempt(kind, tmp_path):
    src = REPO / "examples" / "digits" / "digits_cnn.onnx" if kind == "onnx" else savedmodel(tmp_path / "sm")
    log = tmp_path / "attempts.log"
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NNCF_CI", "NNCF_DEV")}
    r = subprocess.run([sys.executable, "-c", GUARD, str(log), str(src), str(tmp_path / "out")],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "intel-cpu" / "manifest.json").is_file()
    assert not log.exists(), f"network attempts during conversion: {log.read_text()}"
