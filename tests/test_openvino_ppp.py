"""``convert --bake-preprocess``: OpenVINO PrePostProcessor steps in the int8 IR, checked against the host path.

Real conversions (NNCF, OpenVINO) of two small real models: the YOLOv8-shaped detector of
examples/detector_model.py (NCHW RGB input, letterbox) and the bundled digits CNN (NHWC gray
input, stretch). Each is converted twice, with and without baking, and the two artifacts must
agree on BGR camera frames they never saw (within the documented tolerance of
converters/openvino_bake.py; the resize algorithms differ, so they are close, not equal).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import edge_sdk
from edge_sdk.converters.openvino_bake import MAX_REL, MIN_COSINE, compare, parse_bake
from edge_sdk.converters.pipeline import convert
from edge_sdk.errors import ConversionError, InputValidationError, ManifestError
from edge_sdk.manifest import read_manifest
from edge_sdk.runtimes.baked import rgb_to_yuv
from models import digit_images, write_image_folder

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "examples" / "digits"
FRAME = (480, 640)


def camera_frames(n: int, seed: int, size=FRAME, gray: bool = False) -> list[np.ndarray]:
    """BGR (or gray) uint8 frames: digit images upscaled to the frame size, sensor-like noise added."""
    imgs, _ = digit_images(n, size=96, seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for im in imgs:
        big = np.asarray(Image.fromarray(im).resize((size[1], size[0]), Image.BILINEAR), np.float64)
        rgb = np.clip(big + rng.normal(0, 12, big.shape), 0, 255).astype(np.uint8)
        out.append(np.asarray(Image.fromarray(rgb).convert("L")) if gray else np.ascontiguousarray(rgb[..., ::-1]))
    return out


def _pair(root: Path, model: Path, calib, preprocess, bake: str, **kw) -> dict[str, Path]:
    out = {}
    for name, b in (("plain", None), ("baked", bake)):
        convert(str(model), "intel-cpu", root / name, calib=str(calib), preprocess=preprocess, bake_preprocess=b,
                progress=None, **kw)
        out[name] = root / name / "intel-cpu"
    return out


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> dict[str, Path]:
    sys.path.insert(0, str(REPO / "examples"))
    import detector_model

    root = tmp_path_factory.mktemp("ppp_det")
    onnx = detector_model.build_onnx(root / "det.onnx", size=64)
    calib = write_image_folder(root / "calib", n=48, size=96)
    pre = "size=64x64,resize=letterbox,layout=NCHW,color=RGB,scale=1/255,mean=0.45,std=0.25"
    return _pair(root, onnx, calib, pre, "480x640,bgr")


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("ppp_digits")
    return _pair(root, DIGITS / "digits_cnn.onnx", DIGITS / "calib", str(DIGITS / "preprocess.json"),
                 "480x640,bgr", calib_count=60)


def _agree(plain: Path, baked: Path, frames, color: str) -> dict:
    with edge_sdk.load(plain) as p, edge_sdk.load(baked) as b:
        ref = [list(p.infer_image(f, color=color).outputs.values()) for f in frames]
        got = [list(b.infer_image(f, color=color).outputs.values()) for f in frames]
        assert b.infer_image(frames[0], color=color).transform == p.infer_image(frames[0], color=color).transform
    return compare(ref, got)


def test_detector_baked_matches_host_path(detector):
    """NCHW RGB letterbox model fed BGR frames: colour swap, letterbox, normalisation, layout in the graph."""
    check = _agree(detector["plain"], detector["baked"], camera_frames(6, seed=77), "bgr")
    assert check["passed"], check
    assert check["min_cosine"] >= MIN_COSINE and check["max_rel"] <= MAX_REL
    # without the colour swap the graph would see R and B exchanged: far outside the tolerance
    swapped = camera_frames(6, seed=77)
    with edge_sdk.load(detector["plain"]) as p, edge_sdk.load(detector["baked"]) as b:
        ref = [list(p.infer_image(f, color="rgb").outputs.values()) for f in swapped]
        got = [list(b.infer_image(f, color="bgr").outputs.values()) for f in swapped]
    assert compare(ref, got)["max_rel"] > check["max_rel"]


def test_digits_baked_gray_model_from_bgr_frames(digits):
    """NHWC one-channel model fed BGR frames: BGR -> GRAY and a 15x stretch in the graph."""
    check = _agree(digits["plain"], digits["baked"], camera_frames(8, seed=5), "bgr")
    assert check["passed"], check
    with edge_sdk.load(digits["plain"]) as p, edge_sdk.load(digits["baked"]) as b:
        frames = camera_frames(8, seed=6)
        top_plain = [int(np.argmax(p.infer_image(f, color="bgr")["probs"])) for f in frames]
        top_baked = [int(np.argmax(b.infer_image(f, color="bgr")["probs"])) for f in frames]
    assert top_plain == top_baked


def test_pipeline_and_submit_feed_baked_frames(detector):
    """pipeline()/submit() go through the same frame check and feed as infer_image()."""
    frames = camera_frames(4, seed=21)
    with edge_sdk.load(detector["baked"]) as b:
        one = [b.infer_image(f, color="bgr")["output0"] for f in frames]
        piped = [r["output0"] for r in b.pipeline(frames, max_in_flight=2, color="bgr")]
        submitted = b.submit(frames[0], color="bgr").result()["output0"]
        with pytest.raises(InputValidationError, match="takes bgr frames"):
            list(b.pipeline(frames[:1], color="rgb"))
    for a, c in zip(one, piped):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(one[0], submitted, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("color", ["nv12", "yuv420"])
def test_yuv_frames_baked(detector, tmp_path, color):
    """One-plane NV12 / I420 frames: OpenVINO's YUV -> RGB (BT.601 limited) in the graph, against the host path."""
    sys.path.insert(0, str(REPO / "examples"))
    import detector_model

    onnx = detector_model.build_onnx(tmp_path / "det.onnx", size=64)
    calib = write_image_folder(tmp_path / "calib", n=48, size=96)
    convert(str(onnx), "intel-cpu", tmp_path / "o", calib=str(calib), progress=None,
            preprocess="size=64x64,resize=letterbox,layout=NCHW,color=RGB,scale=1/255,mean=0.45,std=0.25",
            bake_preprocess=f"480x640,{color}")
    baked = tmp_path / "o" / "intel-cpu"
    assert read_manifest(baked).backend_options["io"]["openvino-ir"]["inputs"][0]["shape"] == [1, 720, 640, 1]
    frames = [rgb_to_yuv(np.ascontiguousarray(f[..., ::-1]), color) for f in camera_frames(4, seed=31)]
    assert _agree(detector["plain"], baked, frames, color)["passed"]
    with edge_sdk.load(baked) as b:
        with pytest.raises(InputValidationError, match="got 400x640"):
            b.infer_image(frames[0][:600], color=color)
        with pytest.raises(InputValidationError, match=f"takes {color} frames"):
            b.infer_image(camera_frames(1, seed=1)[0], color="bgr")


def test_rgb_to_yuv_inverts_the_frame_decoders():
    from edge_sdk.frames import i420_to_rgb, nv12_to_rgb

    rgb = np.asarray(Image.fromarray(digit_images(1, size=64, seed=2)[0][0]).resize((64, 48)))
    for color, decode in (("nv12", nv12_to_rgb), ("yuv420", i420_to_rgb)):
        plane = rgb_to_yuv(rgb, color)
        assert plane.shape == (72, 64) and plane.dtype == np.uint8
        # chroma is shared by 2x2 blocks, so only a block-flat image comes back exactly
        flat = np.repeat(np.repeat(rgb[::2, ::2], 2, axis=0), 2, axis=1)
        assert np.abs(decode(rgb_to_yuv(flat, color)).astype(int) - flat).max() <= 2


def test_manifest_records_baking_and_round_trips(detector, tmp_path):
    m = read_manifest(detector["baked"])
    baked = m.preprocessing.baked
    assert baked is not None and baked.format == "openvino-ir" and baked.input == "images"
    assert (baked.color, baked.frame_size, baked.layout, baked.element_type) == ("bgr", [480, 640], "NHWC", "uint8")
    assert baked.resize in ("linear", "pillow") and baked.check["tried"][baked.resize]["passed"]
    assert [t.shape for t in m.inputs] == [[1, 3, 64, 64]]  # the model tensor the spec describes stays the contract
    assert m.backend_options["io"]["openvino-ir"]["inputs"][0]["shape"] == [1, 480, 640, 3]
    assert read_manifest(detector["plain"]).preprocessing.baked is None
    # an old manifest (no "baked" key at all) still loads
    old = tmp_path / "old"
    shutil.copytree(detector["plain"], old)
    data = json.loads((old / "manifest.json").read_text())
    del data["preprocessing"]["baked"]
    (old / "manifest.json").write_text(json.dumps(data))
    assert read_manifest(old).preprocessing.baked is None
    # a frame size that the IR's recorded input does not have is refused at the door
    bad = tmp_path / "bad"
    shutil.copytree(detector["baked"], bad)
    data = json.loads((bad / "manifest.json").read_text())
    data["preprocessing"]["baked"]["frame_size"] = [240, 320]
    (bad / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="baked"):
        read_manifest(bad)


def test_baked_artifact_refuses_other_frames(detector):
    frame = camera_frames(1, seed=3)[0]
    with edge_sdk.load(detector["baked"]) as b:
        assert b.describe()["preprocessing"].startswith("in the graph (bgr uint8 frames of 480x640")
        assert b.inputs[0].shape == [1, 480, 640, 3] and b.inputs[0].dtype == "uint8"
        with pytest.raises(InputValidationError, match="takes bgr frames") as exc:
            b.infer_image(frame, color="rgb")
        assert "color='bgr'" in exc.value.hint
        with pytest.raises(InputValidationError, match=r"takes 480x640 bgr frames .*; got 360x640") as exc:
            b.infer_image(frame[:360], color="bgr")
        assert "--bake-preprocess 360x640" in exc.value.hint
        for bad in (None, [1, 2, 3], frame.astype(np.float32), frame[:, :, :2]):
            with pytest.raises(InputValidationError):
                b.infer_image(bad, color="bgr")
        # an image file of the frame size is decoded into the graph's colour format
        path = Path(b.folder).parent / "frame.png"
        Image.fromarray(np.ascontiguousarray(frame[..., ::-1])).save(path)
        from_file = b.infer_image(path)["output0"]
        np.testing.assert_array_equal(from_file, b.infer_image(frame, color="bgr")["output0"])
    with edge_sdk.load(detector["plain"]) as p:
        assert p.describe()["preprocessing"].startswith("on the host")


def test_failed_check_fails_the_format_and_publishes_nothing_half_baked(tmp_path):
    """RESIZE_LINEAR forced on a 7.5x letterbox misses the tolerance: the IR is not published."""
    sys.path.insert(0, str(REPO / "examples"))
    import detector_model

    onnx = detector_model.build_onnx(tmp_path / "det.onnx", size=64)
    calib = write_image_folder(tmp_path / "calib", n=48, size=96)
    with pytest.raises(ConversionError, match="disagrees with the host preprocessing") as exc:
        convert(str(onnx), "intel-cpu", tmp_path / "o", calib=str(calib), progress=None,
                preprocess="size=64x64,resize=letterbox,layout=NCHW,color=RGB,scale=1/255",
                bake_preprocess="480x640,bgr,resize=linear")
    assert "resize=pillow" in str(exc.value)
    assert not (tmp_path / "o" / "intel-cpu").exists()


def test_bake_options_are_checked_before_any_work(tmp_path):
    for text, match in (("480by640", "frame size"), ("bgr", "frame size missing"), ("480x640,yuv", "colour"), ("480x640,resize=cubic", "resize"),
                        ("480x640,frames=2", "unknown key"), ("481x640,nv12", "even sides")):
        with pytest.raises(InputValidationError, match=match):
            parse_bake(text)
    assert parse_bake("480x640") == parse_bake({"frame_size": [480, 640], "color": "bgr"})
    with pytest.raises(InputValidationError, match="OpenVINO IR artifacts only"):
        convert(str(DIGITS / "digits_cnn.onnx"), "arm-cpu", tmp_path / "o", calib=str(DIGITS / "calib"),
                bake_preprocess="480x640", progress=None)
    assert not (tmp_path / "o").exists()


def test_cli_bake_preprocess(tmp_path, capsys):
    from edge_sdk.cli import main

    common = ["convert", str(DIGITS / "digits_cnn.onnx"), "--profile", "intel-cpu", "--calib", str(DIGITS / "calib"),
              "--calib-count", "40", "--preprocess", str(DIGITS / "preprocess.json")]
    assert main(common + ["--out", str(tmp_path / "o"), "--bake-preprocess", "240x320,rgb,resize=pillow"]) == 0
    baked = read_manifest(tmp_path / "o" / "intel-cpu").preprocessing.baked
    assert baked is not None and (baked.color, baked.frame_size, baked.resize) == ("rgb", [240, 320], "pillow")
    capsys.readouterr()
    assert main(common + ["--out", str(tmp_path / "p"), "--bake-preprocess", "640"]) == InputValidationError.exit_code
    assert "frame size '640' is not HxW" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_bench_baked_vs_host(detector):
    """Time per frame, baked vs host preprocessing (numbers for docs; no timing assertion)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from bench_bake_preprocess import measure

    ms = measure(detector["plain"], detector["baked"], camera_frames(2, seed=9), rounds=2, per_round=5)
    assert set(ms) == {"host", "baked"} and all(v > 0 for v in ms.values())
