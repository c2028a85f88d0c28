"""int8 PReLU and XNNPACK: MediaPipe's detectors and landmark models are PReLU networks, and
XNNPACK (LiteRT 2.1 and 2.3) takes no int8 PRELU (nor int8 RELU): each one ran on LiteRT's own
kernels between delegate partitions, and BlazePalm's int8 model ran slower than its float source.
The TFLite route rewrites PReLU exactly (in float) into ops XNNPACK takes in int8; these tests
build a PReLU network by code and check the rewrite, the delegation and the accuracy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import test_tflite_models as tm

from edge_sdk.converters.tflite_native import decompose_prelu, quantize_float_tflite
from edge_sdk.bench.ops import not_delegated

SHAPE = (1, 24, 24, 3)


@pytest.fixture(scope="module")
def prelu_tflite(tmp_path_factory):
    def build(tf, L, inp):
        x = L.Conv2D(16, 3, padding="same")(inp)
        x = L.PReLU(shared_axes=[1, 2])(x)
        y = L.DepthwiseConv2D(3, padding="same")(x)
        x = L.Add()([x, y])
        x = L.PReLU(shared_axes=[1, 2])(x)
        x = L.Conv2D(8, 3, strides=2, padding="same")(x)
        return L.PReLU(shared_axes=[1, 2], name="head")(x)

    def slopes(model):  # negative slopes that matter (Keras initialises alpha to 0)
        for layer in model.layers:
            if type(layer).__name__ == "PReLU":
                layer.set_weights([np.random.default_rng(1).uniform(0.05, 0.4, layer.get_weights()[0].shape)])

    path = tmp_path_factory.mktemp("prelu") / "prelu.tflite"
    path.write_bytes(tm.keras_tflite(build, SHAPE, seed=3, adjust=slopes))
    return path


def _interp(model: bytes):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model, num_threads=1)
    it.allocate_tensors()
    return it


def _run(model: bytes, x: np.ndarray) -> np.ndarray:
    it = _interp(model)
    d, o = it.get_input_details()[0], it.get_output_details()[0]
    if d["dtype"] != np.float32:
        scale, zp = d["quantization"]
        x = np.clip(np.round(x / scale) + zp, -128, 127).astype(d["dtype"])
    it.set_tensor(d["index"], x)
    it.invoke()
    y = it.get_tensor(o["index"])
    if o["dtype"] != np.float32:
        scale, zp = o["quantization"]
        y = (y.astype(np.float32) - zp) * scale
    return y


def _left_out(model: bytes) -> list[str]:
    """Op types XNNPACK left to LiteRT's own kernels."""
    it = _interp(model)
    ops = it._get_ops_details()
    out = not_delegated(ops, {d["index"] for d in it.get_input_details()}, {d["index"] for d in it.get_output_details()})
    return sorted(o["op_name"] for o in ops if o["index"] in out)


def _calib(n=40, seed=0, name="image"):
    return [{name: np.random.default_rng(seed + i).normal(0, 1, SHAPE).astype(np.float32)} for i in range(n)]


def test_rewrite_is_exact_in_float(prelu_tflite):
    src = prelu_tflite.read_bytes()
    rewritten, n = decompose_prelu(src)
    assert n == 3
    assert decompose_prelu(rewritten) == (rewritten, 0)
    x = np.random.default_rng(9).normal(0, 1, SHAPE).astype(np.float32)
    np.testing.assert_allclose(_run(rewritten, x), _run(src, x), rtol=1e-6, atol=1e-6)


def test_int8_prelu_is_not_delegated_and_the_rewrite_is(prelu_tflite):
    kw = dict(per_tensor=False, input_dtype="float32", output_dtype="float32")
    name = _interp(prelu_tflite.read_bytes()).get_input_details()[0]["name"]
    shapes, calib = {name: list(SHAPE)}, _calib(name=name)
    plain, _ = quantize_float_tflite(prelu_tflite.read_bytes(), shapes, calib, **kw)
    assert "PRELU" in _left_out(plain)  # what the rewrite is for (fails if XNNPACK learns int8 PReLU)
    rewritten, _ = decompose_prelu(prelu_tflite.read_bytes())
    q, _ = quantize_float_tflite(rewritten, shapes, calib, **kw)
    assert _left_out(q) == []
    # and int8 after the rewrite is as close to float as int8 PReLU was
    xs = [c[name] for c in _calib(10, seed=100, name=name)]
    ref = [_run(prelu_tflite.read_bytes(), x) for x in xs]

    def err(model):
        return float(np.mean([np.abs(_run(model, x) - r).mean() / (np.abs(r).mean() + 1e-9) for x, r in zip(xs, ref)]))

    assert err(q) < max(1.5 * err(plain), 0.02), (err(q), err(plain))


def test_convert_records_the_rewrite_and_publishes_a_fully_delegated_model(prelu_tflite, tmp_path):
    import edge_sdk

    np.savez(tmp_path / "calib.npz", image=np.concatenate([c["image"] for c in _calib(60)]))
    summary = edge_sdk.convert(str(prelu_tflite), ["arm-cpu"], tmp_path / "out", calib=tmp_path / "calib.npz",
                               progress=None, recover="off", allow_accuracy_drop=True)
    folder = Path(next(p.folder for p in summary.profiles))
    from edge_sdk.manifest import read_manifest

    m = read_manifest(folder, allow_unpublished=True)
    assert "PRELU decomposed for XNNPACK (x3)" in m.backend_options["routes"]["tflite-int8"]
    assert _left_out((folder / "model.tflite").read_bytes()) == []
