"""The Edge TPU's CPU tail when recovery keeps a layer float that reads an early tensor.

The Edge TPU compiler maps the ops before the first one it cannot run and leaves every later op
on the CPU. TensorFlow's quantizer puts the DEQUANTIZE of a tensor a float layer reads right
after that tensor's producer: a skip connection read by a float head layer ended the mapped part
a fifth of the way into BlazeFace (full range). :func:`delay_float_ops` moves what the TPU cannot
run after every integer op that does not need it; these tests build such a network by code."""

from __future__ import annotations

import numpy as np
import pytest

import test_tflite_models as tm

from edge_sdk.converters.graph import from_tflite
from edge_sdk.converters.tflite_native import delay_float_ops, quantize_float_tflite

SHAPE = (1, 16, 16, 3)


@pytest.fixture(scope="module")
def skip_tflite(tmp_path_factory):
    """conv1 -> conv2 -> conv3 -> concat(conv3, conv1) -> head: the head reads conv1's output."""
    def build(tf, L, inp):
        c1 = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
        c2 = L.Conv2D(8, 3, padding="same", activation="relu")(c1)
        c3 = L.Conv2D(8, 3, padding="same", activation="relu")(c2)
        return L.Conv2D(4, 1, name="head")(L.Concatenate()([c3, c1]))

    path = tmp_path_factory.mktemp("skip") / "skip.tflite"
    path.write_bytes(tm.keras_tflite(build, SHAPE, seed=5))
    return path


def _input_name(model: bytes) -> str:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_content=model).get_input_details()[0]["name"]


def test_float_layers_reading_an_early_tensor_end_up_in_one_tail(skip_tflite):
    src = skip_tflite.read_bytes()
    g = from_tflite(src)
    name = _input_name(src)
    concat = next(n for n in g.nodes if n.native == "CONCATENATION")
    head = [n.outputs[0] for n in g.nodes[g.nodes.index(concat):]]  # the concat and the head conv, float
    calib = [{name: np.random.default_rng(i).uniform(0, 1, SHAPE).astype(np.float32)} for i in range(30)]
    q, _ = quantize_float_tflite(src, {name: list(SHAPE)}, calib, per_tensor=False, per_tensor_dense=True,
                                 input_dtype="uint8", output_dtype="uint8", float_nodes=head)
    before = [n.native for n in from_tflite(q).nodes]
    # what the quantizer writes: a DEQUANTIZE of conv1's output before conv2 runs (the TPU part
    # would end there, after one convolution of three)
    first_dq = before.index("DEQUANTIZE")
    assert before[first_dq + 1:].count("CONV_2D") >= 2, before

    moved, n = delay_float_ops(q)
    after = [n.native for n in from_tflite(moved).nodes]
    assert n > 0 and sorted(after) == sorted(before)
    first_cpu = after.index("DEQUANTIZE")
    assert "CONV_2D" not in after[first_cpu:first_cpu + after[first_cpu:].index("CONCATENATION")], after
    assert after[:first_cpu].count("CONV_2D") == 3  # every int8 convolution before the tail
    # the same computation, bit for bit
    for i in range(3):
        x = np.random.default_rng(50 + i).uniform(0, 1, SHAPE).astype(np.float32)
        np.testing.assert_array_equal(tm.run_tflite(moved, x), tm.run_tflite(q, x))
    assert delay_float_ops(moved) == (moved, 0)  # already as late as it gets


def test_coral_conversion_keeps_the_tail_late(skip_tflite, tmp_path):
    """Through convert(): with the concat and head kept float, the Edge TPU pre-check's tail starts
    at the DEQUANTIZE ops next to them, after all three convolutions (the input's QUANTIZE and
    three CONV_2D map), not after the first."""
    import edge_sdk
    from edge_sdk.manifest import read_manifest

    name = _input_name(skip_tflite.read_bytes())
    x = np.random.default_rng(0).uniform(0, 1, (120, *SHAPE[1:])).astype(np.float32)
    np.savez(tmp_path / "calib.npz", **{name: x})
    s = edge_sdk.convert(str(skip_tflite), "coral-edgetpu", tmp_path / "out", calib=tmp_path / "calib.npz",
                         recover="off", float_nodes=["CONCATENATION"], allow_accuracy_drop=True)
    pre = read_manifest(s.profiles[0].folder).backend_options["edgetpu_precheck"]
    assert pre["cpu_tail_from"] == 4 and pre["tpu_fraction"] == round(4 / pre["total_ops"], 4), pre
