"""ONNX Runtime without an int8 kernel for an op its QDQ fusion hands int8 (a code-built graph, the
real ONNX Runtime): the runner falls back to the unfused QDQ graph (float ops between the same
quantize/dequantize steps) and says so.

Found on MediaPipe's BlazePose detector converted for jetson-orin: with s8 activations kept on x86
(``session.qdqisint8allowed``), ORT fused DQ -> DepthToSpace -> Q into an int8 DepthToSpace it has
no kernel for, and the int8 artifact could not even be loaded for its gate. ORT's s8 -> u8
conversion loads it, but wrapped BlazePose's keypoints around (-489 came out +335).
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from edge_sdk.runtimes.base import RunnerConfig  # noqa: E402
from edge_sdk.runtimes.onnxruntime import X86, OnnxRuntimeRunner  # noqa: E402


def _qdq_depth_to_space(path):
    """x -> Q(int8) -> DQ -> DepthToSpace -> Q (same scale) -> DQ -> y."""
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "s")
    zero = numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q0"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq0"),
             helper.make_node("DepthToSpace", ["xd"], ["d2s"], blocksize=2, mode="DCR", name="d2s"),
             helper.make_node("QuantizeLinear", ["d2s", "s", "z"], ["yq"], name="q1"),
             helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["y"], name="dq1")]
    graph = helper.make_graph(nodes, "d2s", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])], [scale, zero])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


@pytest.mark.skipif(not X86, reason="the s8 activation setting is the x86 CPU path (on ARM it is ORT's default)")
def test_missing_int8_kernel_falls_back_to_the_unfused_graph(tmp_path):
    import onnxruntime as ort

    path = tmp_path / "model.onnx"
    _qdq_depth_to_space(path)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    with pytest.raises(Exception, match="DepthToSpace"):  # the failure this guards against is real here
        ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    runner = OnnxRuntimeRunner(RunnerConfig(model_path=path, accelerator="CPUExecutionProvider")).activate()
    assert "DepthToSpace" in runner.details["int8_arithmetic"] and "simulated in float" in runner.details["int8_arithmetic"]
    x = np.random.default_rng(0).uniform(-3, 3, (1, 8, 4, 4)).astype(np.float32)
    y = runner.infer_impl([x])[0]
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the graph as written
    expect = ort.InferenceSession(str(path), plain, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(y, expect, atol=1e-6)
    np.testing.assert_allclose(y, np.clip(np.round(x / 0.05), -128, 127).reshape(1, 2, 2, 2, 4, 4)
                               .transpose(0, 3, 4, 1, 5, 2).reshape(1, 2, 8, 8) * 0.05, atol=1e-6)  # by hand (DCR)
