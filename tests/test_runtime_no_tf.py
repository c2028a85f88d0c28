"""A runtime-only install: artifacts load and run with TensorFlow impossible to import.

Each check runs in a fresh interpreter whose import system refuses ``tensorflow`` (and
keras, onnx2tf, nncf, onnx) and the two runtimes the install does not have, like a device that
installed only ``edge-sdk[litert]``, ``[onnxruntime]`` or ``[openvino]``. It also asserts that
nothing tried to import the conversion stack.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import rt_artifacts as ra

SCRIPT = r"""
import sys, warnings
import importlib.abc

BLOCKED = ("tensorflow", "keras", "tf_keras", "onnx2tf", "nncf", "torch", "onnx")
OTHER_RUNTIMES = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 and sys.argv[3] else ()
attempts = []

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in BLOCKED:
            attempts.append(name)
        if top in BLOCKED or top in OTHER_RUNTIMES:
            raise ImportError(f"{name} is not installed (runtime-only install)")
        return None

sys.meta_path.insert(0, Block())
import numpy as np
import edge_sdk
warnings.simplefilter("ignore")
model = edge_sdk.load(sys.argv[1], backend=sys.argv[2] or None)
spec = model.inputs[0]
res = model.infer(np.zeros(spec.shape, np.float32))
assert res.outputs, res
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not loaded and not attempts, (loaded, attempts)
print("OK", res.backend)
"""


RUNTIMES = {"litert": ("ai_edge_litert", "tflite_runtime"), "onnxruntime": ("onnxruntime",), "openvino": ("openvino",)}


def run_without_tf(folder, backend=None, install=None):
    """Run ``folder`` in a child where TF and every runtime but ``install``'s are not importable."""
    others = [m for name, mods in RUNTIMES.items() if name != install for m in mods]
    args = [sys.executable, "-c", SCRIPT, str(folder), backend or "", ",".join(others)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("name, backend, expect", [
    ("jetson-orin", "onnxruntime", "OK onnxruntime/CPUExecutionProvider"),
    ("intel-cpu", None, "OK openvino/CPU"),
])
def test_onnxruntime_and_openvino_run_without_tensorflow(tmp_path_factory, name, backend, expect):
    arts = ra.onnx_artifacts(tmp_path_factory)
    assert expect in run_without_tf(arts[name], backend, install=expect.split()[1].split("/")[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["coral-edgetpu", "arm-cpu"])
def test_litert_runs_without_tensorflow(tmp_path_factory, name):
    arts = ra.tflite_artifacts(tmp_path_factory)
    assert "OK litert/xnnpack" in run_without_tf(arts[name], install="litert")


def test_runtime_modules_import_no_runtime_at_import_time():
    """Importing the facade and every runner is cheap: runtimes are imported on first use only."""
    code = ("import sys\n"
            "from edge_sdk.runtimes import facade, select, base, tensors, sandbox, tflite_check\n"
            "from edge_sdk.runtimes import litert, onnxruntime, openvino, tensorrt\n"
            "import edge_sdk\n"
            "edge_sdk.load\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'onnxruntime', 'openvino', 'ai_edge_litert', 'tflite_runtime', 'tensorrt', 'onnx'))\n"
            "assert not heavy, heavy\n"
            "print('clean')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "clean" in r.stdout, r.stdout + r.stderr
