"""Camera frames (issue #19): colour formats against reference conversions, malformed frames, fast resize."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import edge_sdk
from edge_sdk import preprocess as pp
from edge_sdk.errors import InputValidationError
from edge_sdk.frames import frame_to_rgb, i420_to_rgb, nv12_to_rgb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import detector_model  # noqa: E402


def smooth_rgb(h=48, w=64, seed=0) -> np.ndarray:
    """A camera-like RGB image (smooth, full range of colours)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    return np.asarray(Image.fromarray(small).resize((w, h), Image.BILINEAR))


# ----------------------------------------------------------------- YUV references, written out per pixel
def ref_yuv_pixel(y: int, u: int, v: int) -> tuple[int, int, int]:
    """BT.601 limited range, one pixel, plain Python (the reference the vectorised code must match)."""
    c, d, e = y - 16, u - 128, v - 128
    r = 1.164 * c + 1.596 * e
    g = 1.164 * c - 0.813 * e - 0.391 * d
    b = 1.164 * c + 2.018 * d

    def clamp(x):
        return max(0, min(255, int(round(x))))

    return clamp(r), clamp(g), clamp(b)


def yuv_planes(h=6, w=8, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (h, w), dtype=np.uint8), rng.integers(0, 256, (h // 2, w // 2), dtype=np.uint8),
            rng.integers(0, 256, (h // 2, w // 2), dtype=np.uint8))


def ref_rgb(y, u, v) -> np.ndarray:
    h, w = y.shape
    out = np.zeros((h, w, 3), np.uint8)
    for i in range(h):
        for j in range(w):
            out[i, j] = ref_yuv_pixel(int(y[i, j]), int(u[i // 2, j // 2]), int(v[i // 2, j // 2]))
    return out


def pack_nv12(y, u, v) -> np.ndarray:
    uv = np.stack([u, v], axis=-1).reshape(u.shape[0], -1)  # U0 V0 U1 V1 ... per row
    return np.concatenate([y, uv], axis=0)


def pack_i420(y, u, v) -> np.ndarray:
    h, w = y.shape
    return np.concatenate([y.reshape(-1), u.reshape(-1), v.reshape(-1)]).reshape(h * 3 // 2, w)


def test_nv12_matches_the_per_pixel_bt601_reference():
    y, u, v = yuv_planes()
    np.testing.assert_array_equal(nv12_to_rgb(pack_nv12(y, u, v)), ref_rgb(y, u, v))
    np.testing.assert_array_equal(frame_to_rgb(pack_nv12(y, u, v), "nv12"), ref_rgb(y, u, v))


def test_i420_matches_the_per_pixel_bt601_reference():
    y, u, v = yuv_planes(h=10, w=12, seed=5)
    np.testing.assert_array_equal(i420_to_rgb(pack_i420(y, u, v)), ref_rgb(y, u, v))
    np.testing.assert_array_equal(frame_to_rgb(pack_i420(y, u, v), "yuv420"), ref_rgb(y, u, v))


def test_yuv_round_trip_of_an_rgb_image():
    """RGB -> YUV (BT.601 limited range, encoded here independently) -> our decoder: within rounding."""
    rgb = smooth_rgb(16, 24).astype(np.float64)
    rgb = rgb.reshape(8, 2, 12, 2, 3).mean(axis=(1, 3)).repeat(2, 0).repeat(2, 1)  # constant 2x2 blocks: chroma is exact
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    yy = 16 + 0.257 * r + 0.504 * g + 0.098 * b
    uu = 128 - 0.148 * r - 0.291 * g + 0.439 * b
    vv = 128 + 0.439 * r - 0.368 * g - 0.071 * b
    y = np.rint(yy).astype(np.uint8)
    u, v = (np.rint(c[::2, ::2]).astype(np.uint8) for c in (uu, vv))
    got = nv12_to_rgb(pack_nv12(y, u, v)).astype(np.int16)
    assert np.abs(got - np.rint(rgb)).max() <= 3


def test_bgr_and_gray_frames_are_the_reference_conversions():
    rgb = smooth_rgb()
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    np.testing.assert_array_equal(frame_to_rgb(bgr, "bgr"), rgb)
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 7, np.uint8)])
    np.testing.assert_array_equal(frame_to_rgb(rgba, "rgb"), rgb)
    gray = np.asarray(Image.fromarray(rgb).convert("L"))
    np.testing.assert_array_equal(frame_to_rgb(gray[:, :, None], "gray"), gray)


@pytest.fixture(scope="module")
def det(tmp_path_factory):
    folder = detector_model.build_artifact(tmp_path_factory.mktemp("app_frames") / "det", size=64)
    with edge_sdk.load(folder) as model:
        yield model


def test_infer_image_colour_formats_agree_with_rgb(det):
    """A BGR, NV12 or I420 frame gives the model the same input as its RGB reference conversion."""
    rgb = smooth_rgb(120, 160)
    want = det.preprocess(rgb)
    np.testing.assert_array_equal(det.preprocess(np.ascontiguousarray(rgb[:, :, ::-1]), color="bgr"), want)
    np.testing.assert_array_equal(det.preprocess(Image.fromarray(rgb)), want)  # PIL images as before
    y, u, v = yuv_planes(120, 160, seed=9)
    ref = ref_rgb(y, u, v)
    np.testing.assert_array_equal(det.preprocess(pack_nv12(y, u, v), color="nv12"), det.preprocess(ref))
    np.testing.assert_array_equal(det.preprocess(pack_i420(y, u, v), color="YUV420"), det.preprocess(ref))
    gray = np.asarray(Image.fromarray(rgb).convert("L"))
    np.testing.assert_array_equal(det.preprocess(gray, color="gray"), det.preprocess(np.dstack([gray] * 3)))
    a = det.infer_image(np.ascontiguousarray(rgb[:, :, ::-1]), color="bgr")["output0"]
    np.testing.assert_array_equal(a, det.infer_image(rgb)["output0"])


@pytest.mark.parametrize("frame, color, words", [
    (None, "bgr", "Got None"),
    ([[1, 2, 3]], "rgb", "must be a numpy array, got list"),
    ((1, 2), "nv12", "must be a numpy array, got tuple"),
    (np.zeros((0, 0, 3), np.uint8), "rgb", "empty"),
    (np.zeros((0, 640, 3), np.uint8), "bgr", "empty"),
    (np.zeros((48, 64, 3), np.float32), "rgb", "dtype float32; expected a uint8"),
    (np.zeros((48, 64, 3), np.int64), "bgr", "dtype int64"),
    (np.zeros((48,), np.uint8), "rgb", "shape [48]"),
    (np.zeros((2, 48, 64, 3), np.uint8), "rgb", "shape [2, 48, 64, 3]"),
    (np.zeros((48, 64, 4), np.uint8), "bgr", "shape [48, 64, 4]"),
    (np.zeros((48, 64, 3), np.uint8), "gray", "shape [48, 64, 3]"),
    (np.zeros((48, 64), np.uint8), "nv12", ""),  # well-formed: 32 rows of Y, 16 of UV (runs, see below)
    (np.zeros((71, 64), np.uint8), "nv12", "shape [71, 64]"),
    (np.zeros((72, 63), np.uint8), "yuv420", "shape [72, 63]"),
    (np.zeros((48, 64, 3), np.uint8), "hsv", "Unknown frame colour format"),
])
def test_malformed_frames_raise_input_validation_error(det, frame, color, words):
    if color == "nv12" and frame is not None and getattr(frame, "shape", None) == (48, 64):
        det.infer_image(frame, color="nv12")  # a well-formed NV12 buffer (32 rows of Y) runs
        return
    with pytest.raises(InputValidationError) as info:
        det.infer_image(frame, color=color)
    assert words in str(info.value)
    assert "hint:" in str(info.value)  # says what to do


def test_malformed_frames_are_never_a_type_error(det):
    for bad in (None, [], 3, {"a": 1}, np.zeros((0, 0), np.uint8), object()):
        with pytest.raises(InputValidationError):
            det.infer_image(bad)
        with pytest.raises(InputValidationError):
            det.preprocess(bad, color="bgr")


def test_fast_resize_stays_close_and_is_exact_for_small_reductions():
    spec = pp.from_dict({"size": [64, 64], "resize": "letterbox", "layout": "NCHW", "scale": 1.0})
    frame = smooth_rgb(480, 640)
    exact, t1 = pp.apply_with_transform(frame, spec)
    fast, t2 = pp.apply_with_transform(frame, spec, fast=True)
    assert t1 == t2
    diff = np.abs(exact - fast)
    assert diff.max() <= 8 and diff.mean() <= 1.0, (diff.max(), diff.mean())
    big = pp.from_dict({"size": [320, 320], "resize": "letterbox", "layout": "NCHW", "scale": 1.0})
    np.testing.assert_array_equal(pp.apply(frame, big), pp.apply(frame, big, fast=True))  # 2x: no reducing step


def former_formula(img: Image.Image, spec) -> np.ndarray:
    """The preprocessing arithmetic as it was before the one-pass tensor path (what calibration used)."""
    arr = np.asarray(img, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if spec.color == "BGR":
        arr = arr[:, :, ::-1]
    if spec.dtype == "uint8":
        out = arr.astype(np.uint8)
    else:
        out = (((arr * np.float32(spec.scale)) - np.asarray(spec.mean, np.float32))
               / np.asarray(spec.std, np.float32)).astype(np.float32)
    if spec.layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out[None])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("color, mean, std", [("RGB", [0.0], [1.0]), ("RGB", [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
                                              ("BGR", [0.5], [0.25]), ("GRAY", [0.1], [0.3])])
@pytest.mark.parametrize("dtype, scale", [("float32", 1 / 255), ("float32", 1 / 127.5), ("uint8", 1.0)])
def test_one_pass_tensor_is_bit_identical_to_the_former_arithmetic(layout, color, mean, std, dtype, scale):
    frame = np.random.default_rng(1).integers(0, 256, (97, 131, 3), dtype=np.uint8)
    spec = pp.from_dict({"size": [40, 50], "layout": layout, "color": color, "mean": mean, "std": std,
                         "dtype": dtype, "scale": scale})
    img = Image.fromarray(frame).convert("L" if color == "GRAY" else "RGB").resize((50, 40), Image.BILINEAR)
    want, got = former_formula(img, spec), pp.apply(frame, spec)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_fast_gap_argument():
    spec = pp.from_dict({"size": [32, 32], "layout": "NCHW"})
    frame = smooth_rgb(480, 640)
    np.testing.assert_array_equal(pp.apply(frame, spec, fast=3.0), pp.apply(frame, spec, fast=True))
    assert not np.array_equal(pp.apply(frame, spec, fast=1.0), pp.apply(frame, spec))
    for bad in (0.5, float("nan"), "yes"):
        with pytest.raises(InputValidationError, match="reducing gap"):
            pp.apply(frame, spec, fast=bad)
