"""Messages name the real cause (issue 61, item 4): the conversion tools' known failures, each
from the tool's real message, map to a cause and a hint (converters/tool_errors.py); a Python
error inside a tool's own code is said to be the tool's, with its frame, never blamed on the data;
no message carries a source location (TensorFlow glued edge-sdk's own file into one)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from edge_sdk.converters.tool_errors import KNOWN, clean, first_line, tool_error

pytestmark = pytest.mark.usefixtures("isolated")

#: Real messages: ERF, OV_NO_RULE, OV_RESIZE and the NNCF node message were recorded from the tools at this
#: repository's pins (the NNCF one on a third-party model, issue 61); the others are the exact forms the
#: tools' sources write (tf2onnx/tfonnx.py's "Unsupported ops: %s", ORT's NOT_IMPLEMENTED status,
#: OpenVINO's "No translator found for", NNCF's empty-dataset check).
ERF = ("Could not translate MLIR to FlatBuffer./work/main/converters/recovery/__init__.py:583:1: error: 'tf.Erf' op "
       "is neither a custom op nor a flex op\n<unknown>:0: note: loc(fused[\"Erf:\", \"Erf@__inference_fn_40\"]): "
       "called from\n")
OV_NO_RULE = ("Exception from src/inference/src/cpp/core.cpp:84:\nCheck 'false' failed at src/frontends/common_translators/"
              "src/unconverted_ops_report.cpp:151:\nFrontEnd API failed with OpConversionFailure:\nModel wasn't fully "
              "converted.\nSummary:\n-- No conversion rule found for operations: custom.dom.Foo\n\n")
OV_RESIZE = ("Exception from src/inference/src/cpp/core.cpp:84:\nCheck 'false' failed at src/frontends/common_translators/"
             "src/unconverted_ops_report.cpp:151:\nFrontEnd API failed with OpConversionFailure:\nModel wasn't fully "
             "converted. Failed operations detailed log:\n-- Resize-17 with a message:\nCheck '(false)' failed at "
             "src/frontends/onnx/frontend/src/op/resize.cpp:91:\nWhile validating ONNX node '<Node(Resize): y>':\n"
             "tf_crop_and_resize - this type of coordinate transformation mode is not supported. Choose one of the "
             "following modes: tf_half_pixel_for_nn, asymmetric, align_corners, pytorch_half_pixel, half_pixel\n\n"
             "Summary:\n-- Conversion is failed for: Resize-17\n\n")

CASES = [  # tool, message, what the cause must say, what the hint must say
    ("tflite", ERF, "op Erf (tf.Erf) has no TFLite builtin kernel", "onnx-qdq or openvino-ir"),
    ("nncf", "Could not find a node /model/decoder/Gather_3 in NNCFGraph!",
     "NNCF lost node /model/decoder/Gather_3", "--float-nodes '/model/decoder/Gather_3'"),
    ("nncf", "The dataset must not be empty", "could not run the calibration data", "calibration data"),
    ("ov-frontend", OV_NO_RULE, "no conversion rule for custom.dom.Foo", "onnx-qdq or tflite-int8"),
    ("ov-frontend", OV_RESIZE, "cannot convert node 'y' (Resize): tf_crop_and_resize", "onnx-qdq or tflite-int8"),
    ("ov-frontend", "Exception from src/x.cpp:1:\n[ONNX Frontend] Conversion failed for Gather-/model/Gather_3\n",
     "failed to convert Gather-/model/Gather_3", "onnx-qdq or tflite-int8"),
    ("ov-frontend", "No translator found for TFLite_Detection_PostProcess node.",
     "no translator for op TFLite_Detection_PostProcess", "onnx-qdq or tflite-int8"),
    ("tf2onnx", "Unsupported ops: Counter({'TFL_RFFT2D': 1})", "no ONNX form for Counter({'TFL_RFFT2D': 1})",
     "read the model directly"),
    ("ort-quantizer", "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
     "ConvInteger(10) node with name 'c'", "no CPU kernel for ConvInteger", "openvino-ir or tflite-int8"),
]


@pytest.mark.parametrize("tool,message,cause,hint", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_each_known_failure_gives_its_cause_and_hint(tool, message, cause, hint):
    err = tool_error(tool, RuntimeError(message), "converting m", "the generic hint")
    assert err.message.startswith("converting m: ") and cause in err.message, err.message
    assert hint in err.hint and err.hint != "the generic hint", err.hint
    assert not re.search(r"\.(py|cpp|cc|mlir):\d", err.message), err.message  # no source location left
    assert "loc(" not in err.message


def test_every_entry_of_the_table_is_tested_with_a_real_message():
    for known in KNOWN:
        assert any(t == known.tool and re.search(known.pattern, " ".join(clean(m))) for t, m, *_ in CASES), known


def test_a_message_is_never_empty_and_says_what_follows_its_colon():
    assert first_line(RuntimeError("")) == "RuntimeError"
    said = first_line(RuntimeError("FrontEnd API failed with OpConversionFailure:\nop Foo has no kernel"))
    assert said == "FrontEnd API failed with OpConversionFailure: op Foo has no kernel"
    assert clean(ERF) == ["Could not translate MLIR to FlatBuffer. error: 'tf.Erf' op is neither a custom op nor a flex op"]


def test_a_python_error_inside_the_tool_is_said_to_be_the_tools(tmp_path):
    """ONNX Runtime's quantizer really raising inside its own code (an AttributeError in
    calibrate.py): named as its failure with its frame, and the hint does not blame the data."""
    import onnx
    from onnx import TensorProto as T, helper as h
    from onnxruntime.quantization import quantize_static

    g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8), tmp_path / "m.onnx")
    with pytest.raises(AttributeError) as raised:
        quantize_static(str(tmp_path / "m.onnx"), str(tmp_path / "q.onnx"), calibration_data_reader=None)
    err = tool_error("ort-quantizer", raised.value, "ONNX Runtime quantization failed", "generic")
    assert "ONNX Runtime's quantizer failed inside its own code (AttributeError:" in err.message, err.message
    assert re.search(r"at onnxruntime/quantization/\w+\.py:\d+ \(\w+\)", err.message), err.message
    assert "not a problem with your calibration data" in err.hint


@pytest.mark.slow
def test_an_op_tflite_lacks_is_named_without_edge_sdks_own_paths(tmp_path, capsys):
    """A SavedModel with tf.math.erf: the TFLite converter's refusal used to read
    "... FlatBuffer./…/converters/recovery/__init__.py:583:1: error: 'tf.Erf' op is neither ...";
    now it names the op and what runs it, and the ONNX format of the same profile is published."""
    import json

    import tensorflow as tf

    from edge_sdk.cli import main

    rng = np.random.default_rng(0)

    class M(tf.Module):
        def __init__(self):
            self.w1 = tf.Variable(rng.normal(0, .3, (16, 16)).astype(np.float32))
            self.w2 = tf.Variable(rng.normal(0, .3, (16, 4)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([1, 16], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.matmul(tf.math.erf(tf.matmul(x, self.w1)), self.w2)}

    m = M()
    tf.saved_model.save(m, str(tmp_path / "erf"), signatures={"serving_default": m.__call__})
    np.save(tmp_path / "calib.npy", rng.normal(0, 1, (120, 16)).astype(np.float32))
    code = main(["convert", str(tmp_path / "erf"), "--profile", "arm-cpu", "--calib", str(tmp_path / "calib.npy"),
                 "--out", str(tmp_path / "out"), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == summary["exit_code"] == 6
    rows = {o["format"]: o for o in summary["profiles"][0]["outcomes"]}
    reason = rows["tflite-int8"]["reason"]
    assert "op Erf (tf.Erf) has no TFLite builtin kernel" in reason, reason
    assert "onnx-qdq or openvino-ir" in reason  # the hint, in the row
    assert ".py:" not in reason and "/converters/" not in reason, reason
    assert rows["onnx-qdq"]["status"] == "published"
