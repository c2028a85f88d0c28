"""Data that cannot judge is refused before anything converts (converters/data_checks.py).

The loading rules run on real arrays through :func:`load_calibration`; the reference and thin-data
rules through a real conversion of a small ONNX classifier built here, by the CLI where the
user-facing message matters (one line, no traceback, no output folder left behind).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_sdk.converters.calibration import load_calibration
from edge_sdk.converters.data_checks import needed_samples, reference_warning, thin_data_warning
from edge_sdk.errors import CalibrationError
from edge_sdk.manifest import TensorSpec
from edge_sdk.outputs import OutputKind
from edge_sdk.profiles import AccuracySpec

from models import write_npz

IMG = [TensorSpec("image", [1, 3, 16, 16], "float32")]
IMG_SHAPES = {"image": [1, 3, 16, 16]}


def _images(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (n, 3, 16, 16)).astype(np.float32)


def _load(arrays, inputs=IMG, shapes=IMG_SHAPES, **kw):
    return load_calibration(arrays, inputs, shapes, holdout_fraction=0.2, **kw)


# ------------------------------------------------------------------ inputs that do not vary
def test_all_zero_calibration_is_refused_naming_the_input():
    with pytest.raises(CalibrationError) as e:
        _load({"image": np.zeros((200, 3, 16, 16), np.float32)})
    msg = str(e.value)
    assert "input 'image' is the same in all 200 sample(s)" in msg and "every value 0" in msg
    assert "--calib random" in e.value.hint


def test_one_image_dithered_is_near_constant_and_refused():
    x = np.repeat(_images(1), 100, axis=0) + np.random.default_rng(1).normal(0, 1e-5, (100, 3, 16, 16)).astype(np.float32)
    with pytest.raises(CalibrationError, match=r"input 'image' is the same in all 100 sample\(s\) \(its values move"):
        _load({"image": x})


def test_varied_images_pass_without_a_data_warning():
    cs = _load({"image": _images(100)})
    assert len(cs.calib) == 80 and not any("repeat" in w or "same" in w for w in cs.warnings)


def test_constant_validation_data_is_refused_as_validation():
    with pytest.raises(CalibrationError, match=r"^Validation data <dict of arrays>: input 'image' is the same"):
        _load({"image": _images(50)}, validation={"image": np.full((20, 3, 16, 16), 0.5, np.float32)})


# ------------------------------------------------------------------ duplicates
def test_95_percent_duplicates_are_refused():
    x = np.concatenate([np.repeat(_images(1), 96, axis=0), _images(4, seed=3)])
    with pytest.raises(CalibrationError, match=r"95 of 100 sample\(s\) repeat another .*only 5 are distinct"):
        _load({"image": x})


def test_near_duplicates_at_int8_resolution_count_as_repeats():
    base = _images(1)
    x = np.concatenate([base + np.float32(1e-4) * i for i in range(90)] + [_images(10, seed=4)])
    with pytest.raises(CalibrationError, match=r"repeat another"):
        _load({"image": x})


def test_some_duplicates_warn_with_the_amount():
    x = np.concatenate([_images(80), np.repeat(_images(1, seed=9), 21, axis=0)])
    cs = _load({"image": x})
    assert any("20 of 101 sample(s) repeat another" in w and "81 distinct" in w for w in cs.warnings)


def test_duplicates_are_judged_over_all_inputs_together():
    # The same image with a different second input is a different sample.
    inputs = IMG + [TensorSpec("gain", [1, 4], "float32")]
    shapes = dict(IMG_SHAPES, gain=[1, 4])
    x = {"image": np.concatenate([_images(50), _images(50)]),
         "gain": np.random.default_rng(2).uniform(0, 2, (100, 1, 4)).astype(np.float32)}
    cs = _load(x, inputs, shapes)
    assert not any("repeat" in w for w in cs.warnings)


# ------------------------------------------------------------------ integers and masks
def test_small_integer_length_and_all_ones_mask_are_not_refused():
    inputs = [TensorSpec("features", [1, 20, 40], "float32"), TensorSpec("length", [1], "int64"),
              TensorSpec("mask", [1, 20], "float32")]
    shapes = {"features": [1, 20, 40], "length": [1], "mask": [1, 20]}
    rng = np.random.default_rng(5)
    arrays = {"features": rng.normal(0, 1, (60, 1, 20, 40)).astype(np.float32),
              "length": np.full((60, 1), 20, np.int64),        # the same small integer in every sample
              "mask": np.ones((60, 1, 20), np.float32)}        # an all-ones mask: constant by nature
    cs = _load(arrays, inputs, shapes)
    assert len(cs.calib) + len(cs.holdout) == 60
    arrays["length"] = rng.integers(1, 4, (60, 1)).astype(np.int64)   # small varying lengths too
    _load(arrays, inputs, shapes)


def test_uint8_pixels_are_judged_as_pixels():
    inputs = [TensorSpec("image", [1, 16, 16, 3], "uint8")]
    with pytest.raises(CalibrationError, match="input 'image' is the same"):
        _load({"image": np.full((40, 1, 16, 16, 3), 7, np.uint8)}, inputs, {"image": [1, 16, 16, 3]})


def test_random_calibration_is_exempt():
    cs = _load("random")
    assert not cs.calibrated


# ------------------------------------------------------------------ the gate's evidence
def test_needed_samples_is_the_exact_rule_of_three():
    assert [needed_samples(p) for p in (0.9, 0.95, 0.98)] == [29, 59, 149]
    for p in (0.9, 0.95, 0.98):
        n = needed_samples(p)
        assert p ** n < 0.05 <= p ** (n - 1)


def test_thin_hold_out_warns_with_the_amount_the_criteria_need():
    ref = [{"probs": np.eye(10)[[i % 10]].astype(np.float32)} for i in range(8)]
    w = thin_data_warning({"probs": OutputKind("scores", axis=-1)}, ref, AccuracySpec(), {"holdout_fraction": 0.2})
    assert w is not None and "on 8 held-back sample(s)" in w and "needs at least 59" in w
    assert "about 295 samples at hold-out fraction 0.2" in w
    ref = ref * 8  # 64 held back: enough
    assert thin_data_warning({"probs": OutputKind("scores", axis=-1)}, ref, AccuracySpec(), {"holdout_fraction": 0.2}) is None
    # Dense outputs (a detector's anchors) and regressions are not judged per sample: no bar.
    dense = [{"boxes": np.zeros((1, 100, 4), np.float32)} for _ in range(8)]
    assert thin_data_warning({"boxes": OutputKind("boxes")}, dense, AccuracySpec(), {}) is None


def test_a_reference_that_never_varies_is_named_and_one_that_varies_is_not():
    same = [{"a": np.zeros((1, 5), np.float32), "b": np.full((1, 2), 3.0, np.float32)} for _ in range(10)]
    w = reference_warning(same, "x.npz")
    assert w is not None and "same outputs on all 10 held-back samples (a every value 0; b every value 3)" in w
    same[3] = {"a": np.zeros((1, 5), np.float32), "b": np.array([[3.0, 3.5]], np.float32)}
    assert reference_warning(same, "x.npz") is None
    # A probability that moves by less than 1e-3 (a wake word never heard) does not vary either.
    flat = [{"p": np.array([[1e-5 * i]], np.float32)} for i in range(10)]
    assert "p moves at most 9e-05" in (reference_warning(flat, "x.npz") or "")


# ------------------------------------------------------------------ end to end, by the CLI
def _classifier(path, offset: float = 0.0):
    """A real ONNX classifier [1, 64] -> softmax over 4 classes; ``offset`` shifts the input before a Relu."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w = rng.normal(0, 0.5, (64, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(offset, np.float32), "off")]
    nodes = [helper.make_node("Sub", ["x", "off"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["m"]), helper.make_node("Softmax", ["m"], ["probs"], axis=-1)]
    graph = helper.make_graph(nodes, "clf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_cli_refuses_constant_calibration_in_one_line_and_writes_nothing(cli, tmp_path):
    model = _classifier(tmp_path / "clf.onnx")
    data = write_npz(tmp_path / "zeros.npz", {"x": np.zeros((300, 1, 64), np.float32)})
    r = cli("convert", str(model), "--profile", "jetson-orin", "--calib", str(data), "--out", str(tmp_path / "out"))
    assert r.returncode == CalibrationError.exit_code, r.stderr
    assert "Traceback" not in r.stderr and "input 'x' is the same in all 300 sample(s)" in r.stderr
    assert not (tmp_path / "out" / "jetson-orin").exists()


def test_held_back_data_whose_float_outputs_do_not_vary_is_reported(cli, tmp_path):
    # Inputs in 0..1 shifted by 10 before a Relu: every output is softmax(0), whatever the input.
    # Reported, not yet refused (data_checks.reference_warning says why); the manifest carries it.
    model = _classifier(tmp_path / "clf.onnx", offset=10.0)
    x = np.random.default_rng(0).uniform(0, 1, (100, 1, 64)).astype(np.float32)
    data = write_npz(tmp_path / "x.npz", {"x": x})
    r = cli("convert", str(model), "--profile", "jetson-orin", "--calib", str(data), "--out", str(tmp_path / "out"),
            "--allow-accuracy-drop")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "jetson-orin" / "manifest.json").read_text())
    assert any("the float model gives the same outputs on all 20 held-back samples" in w for w in manifest["warnings"])


def test_thin_data_warning_reaches_the_manifest(cli, tmp_path):
    model = _classifier(tmp_path / "clf.onnx")
    x = np.random.default_rng(0).uniform(0, 1, (40, 1, 64)).astype(np.float32)
    data = write_npz(tmp_path / "x.npz", {"x": x})
    r = cli("convert", str(model), "--profile", "jetson-orin", "--calib", str(data), "--out", str(tmp_path / "out"),
            "--allow-accuracy-drop", "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "out" / "jetson-orin" / "manifest.json").read_text())
    thin = [w for w in manifest["warnings"] if "held-back sample(s)" in w]
    assert thin and "on 8 held-back sample(s)" in thin[0] and "needs at least 59" in thin[0], manifest["warnings"]
