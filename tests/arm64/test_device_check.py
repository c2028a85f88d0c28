"""The device-side recorder of the arm64 harness, on the host: it tells an import from a presence
check, and a runtime that crashes natively is recorded against its case instead of ending the check."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CLASSIFY = r"""
import importlib, importlib.util, sys
sys.path.insert(0, sys.argv[1])
import device_check as d
d.CONVERSION_STACK = ("nosuchpkg_edge_sdk_probe",)
importlib.util.find_spec("nosuchpkg_edge_sdk_probe")         # what doctor does: a lookup
try:
    import nosuchpkg_edge_sdk_probe                           # an import, even a failing one
except ImportError:
    pass
try:
    importlib.import_module("nosuchpkg_edge_sdk_probe.sub")
except ImportError:
    pass
print(d.ATTEMPTS, d.LOOKUPS)
"""


def test_recorder_tells_imports_from_lookups():
    r = subprocess.run([sys.executable, "-c", CLASSIFY, str(HERE)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['nosuchpkg_edge_sdk_probe', 'nosuchpkg_edge_sdk_probe'] ['nosuchpkg_edge_sdk_probe']"


CRASH = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import device_check as d
tmp = Path(sys.argv[2])
d.__file__ = str(tmp / "crash.py")  # the child it starts is this script
rec = d.case_in_child({"id": "c1", "folder": str(tmp)}, tmp, tmp)
print(rec["case"], rec["error"]["type"], rec["error"]["message"])
"""


def test_a_crashing_case_is_recorded_not_fatal(tmp_path):
    (tmp_path / "crash.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    # in a child interpreter: importing device_check installs its import recorder
    r = subprocess.run([sys.executable, "-c", CRASH, str(HERE), str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("c1 Crash the process died (signal 11)"), r.stdout
