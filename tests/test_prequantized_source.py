"""An ONNX source that is already quantized (ONNX Runtime's quantize_dynamic: MatMulInteger,
DynamicQuantizeLinear; ddddocr's recognizer ships with DynamicQuantizeLSTM). The int8 formats
quantize a float model with the calibration data; on a quantized one ONNX Runtime's quantizer
failed with "KeyError: '140_scale'" and onnx2tf with "no converter for DynamicQuantizeLSTM". Each
int8 format now says the model is already quantized, names the ops and what to convert instead;
nothing of the refused profile is written."""

from __future__ import annotations

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import ConversionError

pytestmark = pytest.mark.slow


def _dynamic_quantized(tmp_path):
    import onnx
    from onnx import TensorProto, helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [64, 128], rng.normal(0, 0.2, (64, 128)).astype(np.float32).ravel())
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [128, 10], rng.normal(0, 0.2, (128, 10)).astype(np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["hr"]),
         helper.make_node("MatMul", ["hr", "w2"], ["logits"]), helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)],
        "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])], [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), str(tmp_path / "f.onnx"))
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8)
    np.savez(tmp_path / "calib.npz", x=rng.normal(0, 1, (40, 64)).astype(np.float32))
    return tmp_path / "q.onnx"


def test_an_already_quantized_onnx_gets_one_answer_from_every_int8_format(tmp_path):
    """OpenVINO used to quantize the int8 weights again and publish without a word while the
    other formats refused: every format now gives the same refusal, the format's name aside."""
    model = _dynamic_quantized(tmp_path)
    with pytest.raises(ConversionError) as err:
        edge_sdk.convert(model, ["arm-cpu", "intel-cpu"], tmp_path / "out", calib=tmp_path / "calib.npz", progress=None)
    outcomes = {o.format: o for p in err.value.summary.profiles for o in p.outcomes}
    labels = {"onnx-qdq": "int8 QDQ ONNX", "tflite-int8": "int8 TFLite", "openvino-ir": "int8 OpenVINO IR"}
    answers = set()
    for fmt, label in labels.items():
        reason = outcomes[fmt].reason
        assert outcomes[fmt].status == "conversion_failed", outcomes[fmt]
        assert "q.onnx is already quantized" in reason and "MatMulInteger x2" in reason, reason
        assert "float model this one was quantized from" in reason, reason
        answers.add(reason.replace(label, "FORMAT"))
    assert len(answers) == 1, answers
    assert not (tmp_path / "out" / "arm-cpu").exists() and not (tmp_path / "out" / "intel-cpu").exists()
