"""What a TFLite recipe keeps float is float: no int8 weights left in a float op, and no activation
rounding a float op's output twice. Both were measured on MediaPipe's selfie segmenter (see
``tflite_native.float_weights_back`` and ``recovery.activations_float``); here on a small network
built by code with the same parts: a convolution read by a separate sigmoid, and a transposed
convolution whose weights span more than one int8 scale holds."""

from __future__ import annotations

import numpy as np
import pytest

import test_tflite_models as tm

from edge_sdk.converters import tflite_native as tn
from edge_sdk.converters.base import Recipe
from edge_sdk.converters.graph import from_tflite
from edge_sdk.converters.recovery import activations_float

SHAPE = (1, 16, 16, 3)


@pytest.fixture(scope="module")
def net():
    def build(tf, L, inp):
        x = L.Conv2D(8, 3, padding="same", activation="relu")(inp)
        x = L.Conv2D(8, 3, padding="same", name="gate_conv")(x)
        x = L.Activation("sigmoid", name="gate")(x)  # no fused form: a LOGISTIC op of its own
        return L.Conv2DTranspose(1, 2, strides=2, padding="same", name="decode")(x)

    def wide_decoder(model):  # one weight 20x the others, as the selfie segmenter's last layer has
        w, b = model.get_layer("decode").get_weights()
        w = np.random.default_rng(2).uniform(-1.0, 1.0, w.shape).astype(np.float32)
        w.flat[0] = -20.0
        model.get_layer("decode").set_weights([w, b])

    model = tm.keras_tflite(build, SHAPE, seed=4, adjust=wide_decoder)
    feeds = [[np.random.default_rng(10 + i).uniform(0, 1, SHAPE).astype(np.float32)] for i in range(20)]
    calibrated = tn.apply_stats(model, tn.calibrate(model, feeds), "minmax")
    return model, calibrated, feeds


@pytest.fixture(scope="module")
def hybrid(net):
    """What TensorFlow's quantizer writes on its own with every op type denylisted: the "float"
    TRANSPOSE_CONV reads int8 weights (one scale of 20/127 for every weight)."""
    model, calibrated, _ = net
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tn, "float_weights_back", lambda q, f: (q, []))
        return _q(calibrated, float_ops=sorted({op for op, _, _ in _ops(model)}))


def _ops(model: bytes) -> list[tuple[str, list[int], list[int]]]:
    schema, m = tn._load(model)
    names = tn._op_names(schema, m)
    return [(names[op.opcodeIndex], [int(i) for i in op.inputs], [int(o) for o in op.outputs])
            for op in m.subgraphs[0].operators]


def _tensor(model: bytes, i: int):
    _, m = tn._load(model)
    return m.subgraphs[0].tensors[i]


def _filled_buffers(model: bytes) -> int:
    _, m = tn._load(model)
    return sum(1 for b in m.buffers if b.data is not None and len(b.data))


def _q(calibrated: bytes, **kw) -> bytes:
    return tn.quantize(calibrated, per_tensor=False, input_dtype="float32", output_dtype="float32", **kw)


def test_a_float_transposed_convolution_gets_its_float_weights_back(net, hybrid):
    model, calibrated, feeds = net
    every_type = sorted({op for op, _, _ in _ops(model)})
    x = feeds[0][0]
    want = tm.run_tflite(model, x)

    tconv = next(ins for op, ins, _ in _ops(hybrid) if op == "TRANSPOSE_CONV")
    assert _tensor(hybrid, tconv[1]).type == 9  # INT8
    assert np.abs(tm.run_tflite(hybrid, x) - want).max() > 1e-3

    restored = _q(calibrated, float_ops=every_type)
    tconv = next(ins for op, ins, _ in _ops(restored) if op == "TRANSPOSE_CONV")
    assert _tensor(restored, tconv[1]).type == 0  # FLOAT32
    np.testing.assert_allclose(tm.run_tflite(restored, x), want, atol=1e-5)
    assert _filled_buffers(restored) == _filled_buffers(hybrid)  # the float weights in place of the int8 copy, not beside it

    # Only the decoder float: it is float indeed, the rest int8.
    part = _q(calibrated, float_ops=["TRANSPOSE_CONV"])
    ops = _ops(part)
    tconv = next(ins for op, ins, _ in ops if op == "TRANSPOSE_CONV")
    assert _tensor(part, tconv[1]).type == 0
    assert any(_tensor(part, ins[1]).type == 9 for op, ins, _ in ops if op == "CONV_2D")


def test_weights_with_no_float_original_stay_as_they_are(net, hybrid):
    """A source that is weight-quantized itself has no float original to give back; given the
    float source, the same hybrid op gets its weights back."""
    model, _, _ = net
    assert tn.float_weights_back(hybrid, hybrid) == (hybrid, [])
    restored, fixed = tn.float_weights_back(hybrid, model)
    assert [label.split()[1] for label in fixed] == ["TRANSPOSE_CONV"] and restored != hybrid


def test_the_activation_a_float_op_feeds_is_float_too(net):
    model, calibrated, _ = net
    graph = from_tflite(model)
    conv = next(n for n in graph.nodes if n.native == "CONV_2D" and graph.consumers(n.outputs[0])[0].native == "LOGISTIC")
    sigmoid = graph.consumers(conv.outputs[0])[0]
    recipe = activations_float(graph, Recipe(float_nodes=(conv.name,), why=((conv.name, "sensitivity"),)))
    assert recipe.float_nodes == (conv.name, sigmoid.name)
    assert dict(recipe.why)[sigmoid.name].startswith(f"activation of the float {conv.name}")
    assert activations_float(graph, recipe) == recipe  # closed already: as it is

    def rounds_conv_output(q: bytes) -> bool:
        """Whether a QUANTIZE reads the float convolution's output."""
        ops = _ops(q)
        _, m = tn._load(q)
        names = {i: (t.name.decode() if isinstance(t.name, bytes) else t.name) for i, t in enumerate(m.subgraphs[0].tensors)}
        out = next(outs[0] for op, _, outs in ops if op == "CONV_2D" and conv.name in names[outs[0]].split(";"))
        return any(op == "QUANTIZE" and ins[0] == out for op, ins, _ in ops)

    assert rounds_conv_output(_q(calibrated, float_nodes=[conv.name]))  # the sigmoid int8: rounded before it
    assert not rounds_conv_output(_q(calibrated, float_nodes=list(recipe.float_nodes)))
