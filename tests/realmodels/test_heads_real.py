"""``--head ssd-anchors`` and ``--head segmentation`` on real MediaPipe models (float .tflite, LiteRT).

The anchor spec must generate exactly as many anchors as each detector has output rows; BlazePalm
decoded by the product must give the boxes the practice set's hand-written task decoder gives; the
short-range face detector run on the astronaut photo (letterboxed inside a wider frame) must put
its face box and six keypoints on the face in the *frame's* pixels, equal to a hand-written
letterbox inverse; selfie segmentation's mask must come back on the frame, the padding cut off.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data  # noqa: E402
import tasks  # noqa: E402
from practice import fetch  # noqa: E402

from edge_sdk import preprocess as pp  # noqa: E402
from edge_sdk.anchors import parse_spec  # noqa: E402
from edge_sdk.detect import as_head, decode_mask, decode_outputs, decode_ssd  # noqa: E402

pytestmark = pytest.mark.realmodels

#: The specs of MediaPipe's graphs (palm_detection_cpu, face_detection_short_range, pose_detection).
SPECS = {"palm_detection_lite.tflite": ("strides=8,16,16,16;scale=0.1484375-0.75;fixed=1;conf=0.5;iou=0.3", 192, 2016),
         "face_detection_short_range.tflite": ("strides=8,16,16,16;fixed=1;conf=0.5;iou=0.3", 128, 896),
         "pose_detection.tflite": ("strides=8,16,32,32,32;fixed=1;conf=0.5;iou=0.3", 224, 2254)}


def _interpreter(name: str):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(fetch(name)))
    it.allocate_tensors()
    return it


def _run(it, x: np.ndarray) -> dict[str, np.ndarray]:
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}


def _astronaut_frame() -> np.ndarray:
    """The astronaut (512x512) in a 512x800 frame: letterboxing pads it top and bottom."""
    from PIL import Image

    frame = np.zeros((512, 800, 3), np.uint8)
    frame[:, 150:662] = np.asarray(Image.open(fetch("astronaut.png")).convert("RGB"))
    return frame


@pytest.mark.parametrize("name", list(SPECS))
def test_anchor_count_matches_the_model(name):
    spec, size, count = SPECS[name]
    it = _interpreter(name)
    h, w = (int(v) for v in it.get_input_details()[0]["shape"][1:3])
    rows = {int(d["shape"][1]) for d in it.get_output_details()}
    assert (w, h) == (size, size) and rows == {count}
    assert parse_spec(spec).with_size(w, h).count == count


def test_palm_boxes_equal_the_task_decoder():
    spec, size, _ = SPECS["palm_detection_lite.tflite"]
    head = as_head(f"ssd-anchors:{spec};size={size}")
    it = _interpreter("palm_detection_lite.tflite")
    on_hand = 0
    images, masks = data.hand_scenes(8, seed=3)
    for x, mask in zip(images, masks):
        o = _run(it, x[None])
        boxes, scores = tasks.decode_ssd(o["Identity"], o["Identity_1"], tasks.ssd_anchors(size), size)
        dets = decode_ssd(o["Identity"], o["Identity_1"], head)
        assert len(dets) == len(boxes) and all(len(d.keypoints) == 7 for d in dets)
        np.testing.assert_allclose([d.score for d in dets], scores, rtol=1e-9)
        np.testing.assert_allclose(np.reshape([d.box for d in dets], (-1, 4)), np.asarray(boxes) * size, atol=1e-6)
        # the product's boxes land on the real hand in the photo
        on_hand += sum(mask is not None and bool(mask[int((d.box[1] + d.box[3]) / 2), int((d.box[0] + d.box[2]) / 2)])
                       for d in dets)
    assert on_hand >= 4


def test_face_box_and_keypoints_land_on_the_face_in_frame_pixels():
    spec, size, _ = SPECS["face_detection_short_range.tflite"]
    frame = _astronaut_frame()
    x, t = pp.apply_with_transform(frame, pp.from_dict({"size": [size, size], "resize": "letterbox", "layout": "NHWC",
                                                        "scale": 1 / 127.5, "mean": [1.0], "pad_value": 0}))
    o = _run(_interpreter("face_detection_short_range.tflite"), x)
    dets = decode_outputs(o, as_head("ssd-anchors:" + spec), transform=t, labels=["face"])
    assert len(dets) == 1 and dets[0].label == "face"
    det = dets[0]
    # by hand: 800x512 -> 128x82 (scale 0.16 across, 82/512 down), 23 rows of padding on top
    assert (t.scale_x, t.scale_y, t.pad_x, t.pad_y) == (0.16, 82 / 512, 0.0, 23.0)
    boxes, scores = tasks.decode_ssd(o["regressors"], o["classificators"], tasks.ssd_anchors(size), size)
    (bx,) = np.asarray(boxes) * size
    want = [bx[0] / 0.16, (bx[1] - 23) * 512 / 82, bx[2] / 0.16, (bx[3] - 23) * 512 / 82]
    np.testing.assert_allclose(det.box, want, atol=1e-6)
    assert det.score == pytest.approx(float(scores[0]))
    fx1, fy1, fx2, fy2 = np.asarray(data.ASTRONAUT_FACE) + [150, 0, 150, 0]  # the face's crop, in the frame
    x1, y1, x2, y2 = det.box
    assert fx1 <= x1 < x2 <= fx2 and fy1 <= y1 < y2 <= fy2, (det.box, (fx1, fy1, fx2, fy2))
    assert (x2 - x1) * (y2 - y1) > 0.25 * (fx2 - fx1) * (fy2 - fy1)
    assert len(det.keypoints) == 6 and all(x1 <= kx <= x2 and y1 <= ky <= y2 for kx, ky in det.keypoints)


def test_selfie_mask_comes_back_on_the_frame():
    frame = _astronaut_frame()
    x, t = pp.apply_with_transform(frame, pp.from_dict({"size": [256, 256], "resize": "letterbox", "layout": "NHWC",
                                                        "scale": 1 / 255, "pad_value": 0}))
    out = next(iter(_run(_interpreter("selfie_segmentation.tflite"), x).values()))
    mask = decode_mask(out, transform=t)
    assert mask.shape == (512, 800) and mask.dtype == np.float32 and 0.0 <= mask.min() and mask.max() <= 1.0
    fx1, fy1, fx2, fy2 = np.asarray(data.ASTRONAUT_FACE) + [150, 0, 150, 0]
    assert mask[fy1:fy2, fx1:fx2].mean() > 0.5  # the astronaut's face is the person
    assert mask[:, :140].max() < 0.1 and mask[:, 672:].max() < 0.1  # black side bars of the frame: nobody
    # the model's map, cut and resized by hand (800x512 -> 256x164: rows 46..210 of 256 hold the frame)
    from PIL import Image

    assert (t.pad_y, t.scale_y) == (46.0, 164 / 512)
    m = out[0, :, :, 0]
    by_hand = np.asarray(Image.fromarray(m[46:210].astype(np.float32), mode="F").resize((800, 512), Image.BILINEAR))
    assert np.abs(by_hand - mask).mean() < 0.01


def test_yolox_head_decodes_ddddocrs_detector_like_its_own_decoder():
    """ddddocr's YOLOX (raw grid offsets, log sizes, objectness, a class score; [1, 3549, 6]) through
    ``--head yolox``: convert's check records strides and input size and declares the packed
    output; the product's decoder gives the boxes the task check's hand-written decoder gives, and
    mapped through a letterbox transform they land on the frame."""
    import onnxruntime as ort

    from edge_sdk.converters.heads import postprocess
    from edge_sdk.converters.sources import read_source
    from edge_sdk.errors import InputValidationError

    path = fetch("common_det.onnx")
    declared: dict = {}
    post = postprocess("yolox", None, read_source(path), declared)
    assert post["options"] == {"strides": [8, 16, 32], "size": [416, 416]} and post["output"] == "output"
    assert [(g.name, g.kind) for g in declared["output"].groups] == [("boxes", "boxes"), ("objectness", "objectness"),
                                                                     ("scores", "scores")]
    with pytest.raises(InputValidationError, match="make 14196 cells, but output .output."):
        postprocess("yolox:strides=4,8,16", None, read_source(path), {})
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    head = as_head("yolox", options={**post["options"], "conf": 0.3, "agnostic": True})
    found = 0
    for x in data.captcha_scenes(6, seed=11):
        out = session.run(None, {"images": x[None]})[0]
        want_boxes, want_scores = tasks.decode_yolox(out, 416, thr=0.3)
        got = decode_outputs({"output": out}, head)
        assert len(got) == len(want_boxes)
        np.testing.assert_allclose(np.reshape([d.box for d in got], (-1, 4)), want_boxes * 416, atol=1e-3)
        np.testing.assert_allclose([d.score for d in got], want_scores, atol=1e-6)
        found += len(got)
    assert found >= 6, "the detector should find letters"
    # the same rows seen through a letterbox of a 300x500 frame: boxes come back in frame pixels
    spec = pp.PreprocessSpec(size=[416, 416], resize="letterbox", layout="NCHW", color="BGR", scale=1.0, pad_value=0)
    frame = np.random.default_rng(3).integers(0, 255, (300, 500, 3), np.uint8)
    x, transform = pp.apply_with_transform(frame, spec)
    out = session.run(None, {"images": x})[0]
    inputs = decode_outputs({"output": out}, head)
    framed = decode_outputs({"output": out}, head, transform=transform)
    assert len(framed) == len(inputs)
    for a, b in zip(inputs, framed):
        np.testing.assert_allclose(b.box, np.clip(transform.to_frame(np.array([a.box]))[0], 0, [500, 300, 500, 300]),
                                   atol=1e-3)


def test_ddddocr_ocr_time_major_logits_are_read_as_a_ctc_sequence():
    """ddddocr's OCR outputs raw logits [T=24, 1, C=8210] (PyTorch's time-major LSTM, no softmax):
    the kinds read them as a CTC sequence with blank 0 (they were an 8210-value "embedding" judged by
    cosine, 0.997 on an OpenVINO candidate whose strings differed)."""
    import onnxruntime as ort

    from edge_sdk.converters.accuracy import infer_kinds
    from edge_sdk.converters.sources import read_source

    path = fetch("common.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ref = [{"387": session.run(None, {"input1": x})[0]} for x in data.text_captchas(8, seed=4)]
    assert ref[0]["387"].shape == (24, 1, 8210)
    kind = infer_kinds(read_source(path).outputs, ref, None)["387"]
    assert (kind.kind, kind.blank, kind.source) == ("sequence", 0, "values"), kind
    tokens = [len(tasks_ctc(r["387"])) for r in ref]
    assert min(tokens) >= 3 and max(tokens) <= 8, tokens  # the renderer's 4-6 characters, read as tokens


def tasks_ctc(logits: np.ndarray) -> list[int]:
    from edge_sdk.outputs import ctc_collapse

    return ctc_collapse(np.asarray(logits).argmax(-1).ravel(), 0)
