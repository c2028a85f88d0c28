"""A model that hangs only on real input is stopped, not waited on forever (issue 43, finding 3).

The audit's model: an ONNX ``Loop`` whose trip count comes from the input. The crash guard's trial
runs zeros (no iterations) and passes; then ``infer`` on a real value spun forever in ``load`` +
``infer_image``, ``run`` and ``bench``. ONNX Runtime can be told to stop a run
(``RunOptions.terminate``): the watchdog does so past ``load(watchdog_s=...)`` (automatic: at least
60 s) and the call ends in an ``InputValidationError``. OpenVINO and LiteRT cannot be stopped
in-process; docs/security.md says so.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import InputValidationError
from edge_sdk.manifest import TensorSpec

import rt_artifacts as ra

pytestmark = pytest.mark.usefixtures("isolated")  # tests/conftest.py


def loop_model(path: Path) -> Path:
    """y = x-dependent Loop: trip count = max(x) * 1e12 (zeros: 0 iterations; ones: forever)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    nodes = [helper.make_node("Mul", ["x", "big"], ["xb"]), helper.make_node("Cast", ["xb"], ["trip1"], to=TensorProto.INT64),
             helper.make_node("ReduceMax", ["trip1"], ["trip"], keepdims=0),
             helper.make_node("Loop", ["trip", "cond", "zero"], ["y"], body=body)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                          [numpy_helper.from_array(np.array([1e12], np.float32), "big"),
                           numpy_helper.from_array(np.array(True), "cond"), numpy_helper.from_array(np.zeros(1, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


@pytest.fixture
def looping(tmp_path) -> Path:
    src = loop_model(tmp_path / "loop.onnx")
    return ra.write_artifact(tmp_path / "art", "jetson-orin", [(src, "model.onnx", "onnx-qdq", "model")],
                             [TensorSpec("x", [1], "float32")], [TensorSpec("y", [1], "float32")])


def test_an_input_dependent_loop_is_stopped_by_the_watchdog(looping):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(looping, watchdog_s=1.0) as m:  # the trial (zeros) passes, as in the audit
            assert m.infer(np.zeros(1, np.float32))["y"][0] == 0.0
            for _ in range(2):  # and the model stays usable after a stopped call
                t0 = time.monotonic()
                with pytest.raises(InputValidationError, match="ran past the 1 s watchdog and was stopped"):
                    m.infer(np.ones(1, np.float32))
                assert time.monotonic() - t0 < 30
            assert m.infer(np.full(1, 2e-12, np.float32))["y"][0] == 2.0  # two iterations: not stopped
        with edge_sdk.load(looping) as m:
            assert m._watch is not None and m._watch.limit() == 60.0  # automatic: the floor until calls are timed
            m.infer(np.zeros(1, np.float32))
            assert m._watch.limit() == 60.0  # a sub-millisecond model: the floor still rules
        with edge_sdk.load(looping, watchdog_s=0) as m:
            assert m._watch is None
    for bad in (-1, float("nan"), float("inf"), "10", True):
        with pytest.raises(InputValidationError, match="watchdog_s"):
            edge_sdk.load(looping, watchdog_s=bad)


def test_the_watchdog_is_one_thread_per_model_and_leaves_nothing_armed(looping):
    """No thread per call: one daemon thread per model, started at the first watched call; every
    deadline is disarmed when its call returns."""
    import threading

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with edge_sdk.load(looping, watchdog_s=5) as m:
            before = threading.active_count()
            for _ in range(50):
                m.infer(np.zeros(1, np.float32))
            assert threading.active_count() <= before + 1
            assert not m._watch._armed  # nothing left armed
