"""Ops the Edge TPU's table lacks, rewritten exactly (in float) into ops it has, for that target only.

RELU_0_TO_1 is the clamp of the hard sigmoid onnx2tf writes in MobileNetV3's squeeze-excite blocks
(the PP-OCR direction classifier's first one left 11 of its 116 ops mappable); LEAKY_RELU is in the
openWakeWord embedding (3 of 66). Built here by code: a CNN whose clamp is rewritten in the
flatbuffer into the op TensorFlow's converter writes for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import test_tflite_models as tm

from edge_sdk.converters.tflite_native import _Editor, _load, _op_names, _pack, decompose_leaky_relu, relu_0_to_1_as_relu6

SHAPE = (1, 12, 12, 3)


def _interp(model: bytes):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model, num_threads=1)
    it.allocate_tensors()
    return it


def _ops(model: bytes) -> list[str]:
    return [o["op_name"] for o in _interp(model)._get_ops_details()]


@pytest.fixture(scope="module")
def clamp_tflite(tmp_path_factory):
    """conv(ReLU) -> min(., 1) -> leaky -> conv, with the MINIMUM turned into RELU_0_TO_1 (the same
    function on a non-negative input: the op TensorFlow writes for a hard sigmoid's clamp)."""
    def build(tf, L, inp):
        x = L.Conv2D(8, 3, padding="same")(inp)
        x = L.Lambda(lambda t: tf.minimum(tf.maximum(t, 0.0), 1.0))(x)
        x = L.Conv2D(8, 3, padding="same")(x)
        x = L.LeakyReLU(negative_slope=0.2)(x)
        return L.Conv2D(4, 1, name="head")(x)

    model = tm.keras_tflite(build, SHAPE, seed=7)
    schema, m = _load(model)
    names, sg = _op_names(schema, m), m.subgraphs[0]
    edit = _Editor(schema, m, sg)
    for op in sg.operators:
        if names[op.opcodeIndex] == "MINIMUM":
            op.opcodeIndex, op.inputs = edit.opcode("RELU_0_TO_1"), [op.inputs[0]]
            op.builtinOptionsType, op.builtinOptions = 0, None
    return _pack(m, len(model))


def test_rewrites_are_exact_in_float(clamp_tflite):
    ops = _ops(clamp_tflite)
    assert "RELU_0_TO_1" in ops and "LEAKY_RELU" in ops, ops
    relu01, n1 = relu_0_to_1_as_relu6(clamp_tflite)
    both, n2 = decompose_leaky_relu(relu01)
    assert (n1, n2) == (1, 1)
    assert "RELU_0_TO_1" not in _ops(both) and "LEAKY_RELU" not in _ops(both)
    assert relu_0_to_1_as_relu6(both) == (both, 0) and decompose_leaky_relu(both) == (both, 0)
    for seed in range(3):
        x = np.random.default_rng(seed).normal(0, 2, SHAPE).astype(np.float32)
        np.testing.assert_allclose(tm.run_tflite(both, x), tm.run_tflite(clamp_tflite, x), rtol=1e-5, atol=1e-5)


def test_the_edge_tpu_maps_every_op_and_the_cpu_profile_keeps_the_originals(clamp_tflite, tmp_path):
    import edge_sdk
    from edge_sdk.manifest import read_manifest

    src = tmp_path / "clamp.tflite"
    src.write_bytes(clamp_tflite)
    name = _interp(clamp_tflite).get_input_details()[0]["name"]
    np.savez(tmp_path / "calib.npz", **{name: np.random.default_rng(1).normal(0, 1, (120, *SHAPE[1:])).astype(np.float32)})
    # arm-cpu's ONNX sibling too: tf2onnx reads no RELU_0_TO_1, so the file it reads has the rewrite
    s = edge_sdk.convert(str(src), ["coral-edgetpu", "arm-cpu"], tmp_path / "out", calib=tmp_path / "calib.npz",
                         recover="off", allow_accuracy_drop=True)
    assert all(o.status == "published" for p in s.profiles for o in p.outcomes), s.profiles
    coral = read_manifest(Path(s.profiles[0].folder))
    pre = coral.backend_options["edgetpu_precheck"]
    assert pre["ok"] and pre["tpu_fraction"] == 1.0, pre
    route = coral.backend_options["routes"]["tflite-int8"]
    assert "RELU_0_TO_1 as relu6(6x) / 6" in route and "LEAKY_RELU as relu(x) + alpha" in route, route
    arm = Path(s.profiles[1].folder)
    ops = _ops((arm / "model.tflite").read_bytes())
    assert "RELU_0_TO_1" in ops and "LEAKY_RELU" in ops, ops
    assert (arm / "model.onnx").is_file()
