"""A real fleet on loopback for the tests: `edge-sdk fleet serve` and `fleet join` as subprocesses.

Each process gets its own session (process group) so teardown can kill it and any bench child
it started; every wait has a timeout.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

EXE = str(Path(sys.executable).with_name("edge-sdk"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fleet:
    """A scheduler and devices on loopback; ``stop()`` kills them all (by process group)."""

    def __init__(self, tmp: Path, tls: Path | None = None):
        self.tmp, self.tls = Path(tmp), tls
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen] = {}
        scheme = "tls" if tls else "tcp"
        self.address = f"{scheme}://127.0.0.1:{self.port}"

    def _start(self, name: str, args: list[str], ready: str, timeout: float = 90.0,
               env: dict | None = None) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w+")
        proc = subprocess.Popen([EXE, *args], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})))
        self.procs[name] = proc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = (self.tmp / f"{name}.log").read_text()
            if ready in text:
                return proc
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited {proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"{name} not ready after {timeout} s:\n{(self.tmp / f'{name}.log').read_text()[-3000:]}")

    def serve(self) -> "Fleet":
        tls = ["--tls", str(self.tls)] if self.tls else []
        self._start("scheduler", ["fleet", "serve", "--port", str(self.port), "--dashboard-port", "0", *tls],
                    "fleet scheduler at")
        return self

    def join(self, name: str, profiles: str, env: dict | None = None) -> subprocess.Popen:
        tls = ["--tls", str(self.tls)] if self.tls else []
        return self._start(name, ["fleet", "join", self.address, "--name", name, "--profiles", profiles, *tls],
                           f"as '{name}'", env=env)

    def kill(self, name: str) -> None:
        """SIGKILL a member and everything it started (a device dying mid-run)."""
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def stop(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text()


def quickstart_folder(arts: dict[str, Path], dest: Path) -> Path:
    """A `convert` output folder like the quick start's (one artifact folder per profile), from the
    hand-built test artifacts (real ONNX/OpenVINO/TFLite models; no conversion matrix)."""
    if not dest.exists():
        dest.mkdir(parents=True)
        for prof in ("intel-cpu", "intel-npu", "jetson-orin", "arm-cpu", "coral-edgetpu"):
            shutil.copytree(arts[prof], dest / prof)
    return dest
