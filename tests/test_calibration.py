"""Calibration loading, checking and splitting (no ML framework needed: fast)."""

from __future__ import annotations

import numpy as np
import pytest

from edge_sdk.converters.calibration import load_calibration
from edge_sdk.errors import CalibrationError
from edge_sdk.manifest import TensorSpec
from edge_sdk.preprocess import PreprocessSpec, apply

from models import write_constant_images, write_image_folder, write_npz

IMG = [TensorSpec("image", [-1, 32, 32, 3], "float32")]
IMG_SHAPES = {"image": [1, 32, 32, 3]}
TWO = [TensorSpec("image", [-1, 3, -1, 16], "float32"), TensorSpec("aux", [-1, 4], "float32")]
TWO_SHAPES = {"image": [1, 3, 24, 16], "aux": [1, 4]}


def _two_arrays(n=20, dtype=np.float32):
    rng = np.random.default_rng(0)
    return {"image": rng.uniform(0, 1, (n, 3, 24, 16)).astype(dtype), "aux": rng.normal(0, 1, (n, 4)).astype(dtype)}


def test_image_folder_uses_the_runtime_preprocessing_and_holds_back_a_fifth(tmp_path):
    folder = write_image_folder(tmp_path / "imgs", n=20)
    cs = load_calibration(folder, IMG, IMG_SHAPES, holdout_fraction=0.2)
    assert cs.kind == "images" and cs.calibrated
    assert len(cs.calib) == 16 and len(cs.holdout) == 4
    assert cs.preprocess.layout == "NHWC" and cs.preprocess.size == [32, 32] and cs.preprocess.input == "image"
    # Same function as the runtime: every feed equals preprocess.apply of one of the images.
    expected = [apply(p, cs.preprocess) for p in sorted(folder.iterdir())]
    for feed in cs.calib + cs.holdout:
        assert feed["image"].shape == (1, 32, 32, 3) and feed["image"].dtype == np.float32
        assert any(np.array_equal(feed["image"], e) for e in expected)
    # Hold-out and calibration are disjoint.
    hold = {f["image"].tobytes() for f in cs.holdout}
    assert not hold & {f["image"].tobytes() for f in cs.calib}
    assert cs.info["holdout_samples"] == 4 and cs.info["calibration_samples"] == 16
    assert any("100+" in w for w in cs.warnings)  # 16 is small for int8: say so


def test_explicit_preprocessing_spec_is_applied(tmp_path):
    folder = write_image_folder(tmp_path / "imgs", n=4)
    spec = PreprocessSpec(layout="NCHW", scale=1.0, mean=[127.5], std=[127.5])
    cs = load_calibration(folder, [TensorSpec("x", [1, 3, 32, 32], "float32")], {"x": [1, 3, 32, 32]},
                          holdout_fraction=0.25, preprocess=spec)
    arr = np.concatenate([f["x"] for f in cs.calib + cs.holdout])
    assert arr.shape[1:] == (3, 32, 32) and arr.min() >= -1.0 and arr.max() <= 1.0 and arr.min() < -0.5


def test_npz_per_input_name_and_count_cap(tmp_path):
    path = write_npz(tmp_path / "c.npz", _two_arrays(30))
    cs = load_calibration(path, TWO, TWO_SHAPES, holdout_fraction=0.2, count=10)
    assert len(cs.calib) + len(cs.holdout) == 10 and len(cs.holdout) == 2
    assert set(cs.calib[0]) == {"image", "aux"} and cs.calib[0]["aux"].shape == (1, 4)
    assert any("using 10 of 30" in w for w in cs.warnings)
    assert cs.info["samples_used"] == 10 and cs.info["samples_available"] == 30


def test_npy_folder_per_input_name(tmp_path):
    folder = tmp_path / "arrs"
    folder.mkdir()
    for k, v in _two_arrays(10).items():
        np.save(folder / f"{k}.npy", v)
    cs = load_calibration(folder, TWO, TWO_SHAPES, holdout_fraction=0.2)
    assert cs.kind == "npy-folder" and len(cs.calib) == 8


def test_separate_validation_data_is_used_for_the_gate(tmp_path):
    calib = write_image_folder(tmp_path / "calib", n=6, seed=1)
    val = write_image_folder(tmp_path / "val", n=5)
    cs = load_calibration(calib, IMG, IMG_SHAPES, holdout_fraction=0.2, validation=val)
    assert len(cs.calib) == 6 and len(cs.holdout) == 5
    # A constant calibration set is refused before the validation data is read (tests/test_data_checks.py).
    with pytest.raises(CalibrationError, match="input 'image' is the same in all 6 sample"):
        load_calibration(write_constant_images(tmp_path / "const", n=6), IMG, IMG_SHAPES, holdout_fraction=0.2,
                         validation=val)
    assert cs.info["holdout_source"] == str(val)


def test_random_is_marked_uncalibrated():
    cs = load_calibration("random", TWO, TWO_SHAPES, holdout_fraction=0.2, count=5)
    assert not cs.calibrated and cs.kind == "random" and cs.info["calibrated"] is False
    assert len(cs.calib) + len(cs.holdout) == 5
    assert any("not meaningful" in w for w in cs.warnings)


@pytest.mark.parametrize("case, match", [
    ("missing", "not found"),
    ("empty_folder", "holds no images"),
    ("corrupt_image", "Cannot decode image"),
    ("corrupt_npz", "corrupt or not a NumPy file"),
    ("pickled", "Cannot read"),
    ("wrong_dtype", "dtype float64"),
    ("wrong_shape", "has shape"),
    ("missing_input", "missing"),
    ("too_few", "at least 2"),
    ("images_for_two_inputs", "feed one input"),
])
def test_bad_calibration_is_one_clear_error(tmp_path, case, match):
    inputs, shapes = TWO, TWO_SHAPES
    if case == "missing":
        data = tmp_path / "nope"
    elif case == "empty_folder":
        data = tmp_path / "empty"
        data.mkdir()
        inputs, shapes = IMG, IMG_SHAPES
    elif case == "corrupt_image":
        data = write_image_folder(tmp_path / "imgs", n=3)
        (data / "img_001.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")
        inputs, shapes = IMG, IMG_SHAPES
    elif case == "corrupt_npz":
        data = tmp_path / "c.npz"
        data.write_bytes(b"PK\x03\x04garbage")
    elif case == "pickled":
        data = tmp_path / "c.npy"
        np.save(data, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        inputs, shapes = IMG, IMG_SHAPES
    elif case == "wrong_dtype":
        data = write_npz(tmp_path / "c.npz", _two_arrays(5, np.float64))
    elif case == "wrong_shape":
        arrays = _two_arrays(5)
        arrays["image"] = arrays["image"][:, :, :20]
        data = write_npz(tmp_path / "c.npz", arrays)
    elif case == "missing_input":
        data = write_npz(tmp_path / "c.npz", {"image": _two_arrays(5)["image"]})
    elif case == "too_few":
        data = write_npz(tmp_path / "c.npz", _two_arrays(1))
    else:
        data = write_image_folder(tmp_path / "imgs", n=3)
    with pytest.raises(CalibrationError, match=match) as err:
        load_calibration(data, inputs, shapes, holdout_fraction=0.2)
    assert err.value.message and "Traceback" not in str(err.value)


def test_a_single_npy_feeds_a_streams_one_stepped_input(tmp_path):
    """With --stream stateN:state the state starts at zeros, so a .npy of [N, T, 576] chunks feeds
    the one input left (Silero VAD's OpenVINO export: input [1, 576], state [2, 1, 128]); it was
    refused as 'the model has [input, state]'. Two stepped inputs still need a .npz."""
    inputs = [TensorSpec("input", [1, 576], "float32"), TensorSpec("state", [2, 1, 128], "float32")]
    shapes = {"input": [1, 576], "state": [2, 1, 128]}
    path = tmp_path / "chunks.npy"
    np.save(path, np.random.default_rng(0).normal(0, 0.1, (10, 6, 576)).astype(np.float32))
    cs = load_calibration(str(path), inputs, shapes, holdout_fraction=0.2, streams=[("stateN", "state")])
    assert len(cs.calib_sequences) == 8 and len(cs.holdout_sequences) == 2
    first = cs.calib_sequences[0]
    assert len(first) == 6 and first[0]["input"].shape == (1, 576)
    with pytest.raises(CalibrationError, match="besides its stream state"):
        load_calibration(str(path), inputs + [TensorSpec("aux", [1, 4], "float32")], {**shapes, "aux": [1, 4]},
                         holdout_fraction=0.2, streams=[("stateN", "state")])
    with pytest.raises(CalibrationError, match="can feed one input"):
        load_calibration(str(path), inputs, shapes, holdout_fraction=0.2)
