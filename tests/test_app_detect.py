"""Letterbox transform and its inverse, NMS against a reference, the YOLOv8 decoder, labels and top-k (issue #19)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import edge_sdk
from edge_sdk import preprocess as pp
from edge_sdk.detect import Detection, Head, decode_yolov8, nms, read_labels, top_k
from edge_sdk.errors import InputValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import detector_model  # noqa: E402


# ------------------------------------------------------------------ letterbox and its inverse
def find_box(channel: np.ndarray) -> tuple[int, int, int, int]:
    """Pixel-edge box of the pixels brighter than mid-grey."""
    ys, xs = np.nonzero(channel > 128)
    return int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1


def test_letterbox_inverse_maps_a_drawn_box_back_exactly():
    """A white box drawn at known frame pixels is found in the model input; mapped back, it is that box."""
    frame = np.zeros((480, 640, 3), np.uint8)
    frame[50:250, 100:300] = 255  # x1=100, y1=50, x2=300, y2=250
    spec = pp.from_dict({"size": [128, 128], "resize": "letterbox", "layout": "NHWC", "scale": 1.0, "pad_value": 0})
    x, t = pp.apply_with_transform(frame, spec)
    assert (t.scale_x, t.scale_y, t.pad_x, t.pad_y) == (0.2, 0.2, 0.0, 16.0)  # 640x480 -> 128x96, 16 rows of padding
    found = find_box(x[0, :, :, 0])
    assert found == (20, 26, 60, 66)
    np.testing.assert_array_equal(t.to_frame([found]), [[100.0, 50.0, 300.0, 250.0]])
    np.testing.assert_array_equal(t.to_input([[100, 50, 300, 250]]), [found])


@pytest.mark.parametrize("resize, size", [("letterbox", [96, 160]), ("stretch", [100, 100]), ("center-crop", [64, 64]),
                                          ("letterbox", [300, 300])])
def test_transform_round_trips_and_describes_the_pixels(resize, size):
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (357, 611, 3), dtype=np.uint8)
    spec = pp.from_dict({"size": size, "resize": resize, "layout": "NCHW", "scale": 1.0})
    x, t = pp.apply_with_transform(frame, spec)
    np.testing.assert_array_equal(x, pp.apply(frame, spec))  # apply() is unchanged
    assert t.frame_size == (611, 357) and t.input_size == (size[1], size[0])
    boxes = rng.uniform(0, 300, (20, 4))
    np.testing.assert_allclose(t.to_frame(t.to_input(boxes)), boxes, rtol=0, atol=1e-9)
    # the whole frame lands on the resized area (inside the input for letterbox, around it for a crop)
    whole = t.to_input([[0, 0, 611, 357]])[0]
    if resize == "letterbox":
        assert whole[0] >= 0 and whole[1] >= 0 and whole[2] <= size[1] and whole[3] <= size[0]
        assert min(whole[0], whole[1]) == 0 or np.isclose(max(whole[2] - size[1], whole[3] - size[0]), 0)
    elif resize == "stretch":
        np.testing.assert_allclose(whole, [0, 0, size[1], size[0]])
    else:
        assert whole[0] <= 0 and whole[1] <= 0 and whole[2] >= size[1] and whole[3] >= size[0]
    clipped = t.to_frame([[-50, -50, 1e4, 1e4]], clip=True)[0]
    np.testing.assert_array_equal(clipped, [0, 0, 611, 357])


# ------------------------------------------------------------------ NMS against a reference
def reference_nms(boxes, scores, thr, classes=None):
    """Textbook greedy NMS, one pair at a time."""
    def iou(a, b):
        iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = iw * ih
        union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
        return inter / union if union > 0 else 0.0

    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keep, removed = [], set()
    for i in order:
        if i in removed:
            continue
        keep.append(i)
        for j in order:
            if j not in removed and j != i and j not in keep and (classes is None or classes[i] == classes[j]):
                if iou(boxes[i], boxes[j]) > thr:
                    removed.add(j)
    return keep


def random_boxes(n, seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 200, (n, 2))
    wh = rng.uniform(5, 80, (n, 2))
    return np.concatenate([xy, xy + wh], 1), rng.uniform(0, 1, n), rng.integers(0, 3, n)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("thr", [0.3, 0.5, 0.7])
def test_nms_matches_the_reference(seed, thr):
    boxes, scores, classes = random_boxes(120, seed)
    assert nms(boxes, scores, thr).tolist() == reference_nms(boxes.tolist(), scores.tolist(), thr)
    assert nms(boxes, scores, thr, classes=classes).tolist() == reference_nms(boxes.tolist(), scores.tolist(), thr,
                                                                             classes.tolist())


def test_nms_edge_cases():
    assert nms(np.zeros((0, 4)), np.zeros(0)).tolist() == []
    same = np.array([[0, 0, 10, 10]] * 3, float)
    assert nms(same, [0.5, 0.9, 0.9], 0.5).tolist() == [1]  # ties keep the lower index
    assert nms(same, [0.5, 0.9, 0.7], 0.5, classes=[0, 1, 2]).tolist() == [1, 2, 0]
    assert len(nms(*random_boxes(50, 1)[:2], 1.0, max_det=5)) == 5


# ------------------------------------------------------------------ the YOLOv8 decoder
def packed(rows: list[tuple[float, float, float, float, list[float]]]) -> np.ndarray:
    """``[1, 4 + C, N]`` from (cx, cy, w, h, scores) rows."""
    return np.array([[cx, cy, w, h, *s] for cx, cy, w, h, s in rows], np.float32).T[None]


def test_decode_yolov8_known_output():
    out = packed([(50, 50, 20, 40, [0.9, 0.1]),   # kept: class 0
                  (52, 50, 20, 40, [0.8, 0.1]),   # same class, IoU ~0.8 -> suppressed
                  (52, 50, 20, 40, [0.1, 0.7]),   # other class, same place -> kept
                  (10, 10, 4, 4, [0.2, 0.1])])    # below conf
    dets = decode_yolov8(out, Head(conf=0.25, iou=0.45), labels=["cat", "dog"])
    assert dets == [Detection("cat", pytest.approx(0.9), (40.0, 30.0, 60.0, 70.0), 0),
                    Detection("dog", pytest.approx(0.7), (42.0, 30.0, 62.0, 70.0), 1)]
    # [1, N, 4 + C] exports decode the same; without labels the label is the class index
    assert [d.box for d in decode_yolov8(out.transpose(0, 2, 1))] == [d.box for d in dets]
    assert decode_yolov8(out)[1].label == "1"
    t = pp.ImageTransform((640, 480), (128, 128), 0.2, 0.2, 0.0, 16.0)
    assert decode_yolov8(out, transform=t)[0].box == pytest.approx((200.0, 70.0, 300.0, 270.0))
    assert decode_yolov8(packed([(50, 50, 20, 40, [0.1, 0.1])])) == []
    with pytest.raises(InputValidationError, match=r"\[1, 4 \+ C, N\]"):
        decode_yolov8(np.zeros((1, 3, 4)))
    with pytest.raises(InputValidationError, match="got \[7\]"):
        decode_yolov8(np.zeros(7))


def test_head_and_labels_arguments(tmp_path):
    with pytest.raises(InputValidationError, match="Unknown head 'yolov99'"):
        Head("yolov99")
    with pytest.raises(InputValidationError, match="out of range"):
        Head(conf=1.5)
    f = tmp_path / "labels.txt"
    f.write_text("person\n\ncar\n", encoding="utf-8")
    assert read_labels(f) == ["person", "car"]
    with pytest.raises(InputValidationError, match="Cannot read labels file"):
        read_labels(tmp_path / "missing.txt")
    with pytest.raises(InputValidationError, match="class names"):
        read_labels([1, 2])
    assert top_k([0.1, 0.7, 0.2], 2, ["a", "b", "c"]) == [("b", pytest.approx(0.7), 1), ("c", pytest.approx(0.2), 2)]
    with pytest.raises(InputValidationError, match="k >= 1"):
        top_k([0.1], 0)


# ------------------------------------------------------------------ end to end: BGR frame -> boxes in frame pixels
@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return detector_model.build_artifact(tmp_path_factory.mktemp("app_detect") / "det")


def test_detections_equal_the_float_model_decoded_by_hand(artifact):
    """infer_image(bgr, color='bgr') gives the boxes a hand-written letterbox + ORT + decode + NMS gives."""
    import onnxruntime as ort

    rng = np.random.default_rng(4)
    small = rng.integers(0, 256, (15, 20, 3), dtype=np.uint8)
    rgb = np.asarray(Image.fromarray(small).resize((640, 480), Image.BILINEAR))
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    # by hand: letterbox 640x480 into 128x128 (scale 0.2, 16 rows of padding), 0..1, NCHW
    canvas = Image.new("RGB", (128, 128), (114, 114, 114))
    canvas.paste(Image.fromarray(rgb).resize((128, 96), Image.BILINEAR), (0, 16))
    x = (np.asarray(canvas, np.float32) / np.float32(255)).transpose(2, 0, 1)[None]
    out = ort.InferenceSession(str(artifact / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0][0]
    cls, score = out[4:].argmax(0), out[4:].max(0)
    want = []
    for i in reference_nms([[out[0, j] - out[2, j] / 2, out[1, j] - out[3, j] / 2, out[0, j] + out[2, j] / 2,
                             out[1, j] + out[3, j] / 2] if score[j] >= 0.25 else [0, 0, 0, 0] for j in range(out.shape[1])],
                           [float(s) if s >= 0.25 else -1.0 for s in score], 0.45, cls.tolist()):
        if score[i] < 0.25:
            continue
        cx, cy, w, h = (float(v) for v in out[:4, i])
        box = [(cx - w / 2) / 0.2, (cy - h / 2 - 16) / 0.2, (cx + w / 2) / 0.2, (cy + h / 2 - 16) / 0.2]
        box = [min(max(box[0], 0), 640), min(max(box[1], 0), 480), min(max(box[2], 0), 640), min(max(box[3], 0), 480)]
        want.append((detector_model.LABELS[cls[i]], float(score[i]), box))
    assert len(want) >= 2, "the stand-in detector should fire on this frame"
    with edge_sdk.load(artifact, head="yolov8", labels=detector_model.LABELS) as model:
        result = model.infer_image(bgr, color="bgr")
        got = [(d.label, d.score, list(d.box)) for d in result.detections]
        assert "postprocess" in result.timings
        assert [g[0] for g in got] == [w[0] for w in want]
        np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-6)
        np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], rtol=0, atol=1e-3)


def test_labels_file_and_head_object_at_load(artifact, tmp_path):
    f = tmp_path / "labels.txt"
    f.write_text("\n".join(detector_model.LABELS), encoding="utf-8")
    frame = np.full((200, 300, 3), 90, np.uint8)
    with edge_sdk.load(artifact, head=Head(conf=0.99), labels=f) as strict_model:
        assert strict_model.labels == detector_model.LABELS
        assert all(d.score >= 0.99 for d in strict_model.infer_image(frame).detections)
    with pytest.raises(InputValidationError, match="head= must be"):
        edge_sdk.load(artifact, head=3)


def test_decode_yolov5_objectness_times_class_score():
    from edge_sdk.detect import decode, decode_yolov5

    rows = np.array([[50, 50, 20, 40, 0.9, 0.8, 0.1],    # score 0.72, class 0
                     [51, 50, 20, 40, 0.8, 0.9, 0.1],    # 0.72 too, same class, overlaps -> suppressed (higher index)
                     [50, 50, 20, 40, 0.2, 0.0, 1.0],    # objectness below conf: dropped before the class score
                     [150, 90, 10, 10, 0.5, 0.1, 0.6]],  # score 0.30, class 1
                    np.float32)[None]
    head = Head("yolov5", conf=0.25, iou=0.45)
    dets = decode_yolov5(rows, head, labels=["cat", "dog"])
    assert [(d.label, round(d.score, 4), d.box) for d in dets] == [("cat", 0.72, (40.0, 30.0, 60.0, 70.0)),
                                                                   ("dog", 0.3, (145.0, 85.0, 155.0, 95.0))]
    assert decode(rows.transpose(0, 2, 1), head) == decode_yolov5(rows, head)  # [1, 5 + C, N] exports
    assert decode_yolov5(rows, Head("yolov5", conf=0.95)) == []
    with pytest.raises(InputValidationError, match="does not produce detections"):
        decode(rows, Head("classifier"))
    with pytest.raises(InputValidationError, match=r"\[1, N, 5 \+ C\]"):
        decode_yolov5(np.zeros((1, 4, 5)))


def test_masks_map_back_to_the_frame():
    """A mask over the letterboxed input (full or quarter resolution) is resized back onto the frame's pixels."""
    frame = np.zeros((480, 640, 3), np.uint8)
    frame[50:250, 100:300] = 255
    spec = pp.from_dict({"size": [128, 128], "resize": "letterbox", "layout": "NHWC", "scale": 1.0, "pad_value": 0})
    x, t = pp.apply_with_transform(frame, spec)
    mask = (x[0, :, :, 0] > 128).astype(np.float32)  # what a perfect segmenter of the white box returns
    back = t.map_to_frame(mask, nearest=True)
    assert back.shape == (480, 640) and back.dtype == np.float32
    np.testing.assert_array_equal(back > 0.5, frame[:, :, 0] > 0)
    quarter = np.zeros((32, 32), np.float32)
    quarter[7:16, 5:15] = 1.0  # input rows 28..64, cols 20..60
    ys, xs = np.nonzero(t.map_to_frame(quarter, nearest=True) > 0.5)
    assert (xs.min(), xs.max() + 1, ys.min(), ys.max() + 1) == (100, 300, 60, 240)
    soft = t.map_to_frame(mask)  # bilinear keeps values in range
    assert 0.0 <= soft.min() and soft.max() <= 1.0
    crop = pp.from_dict({"size": [64, 64], "resize": "center-crop", "layout": "NHWC", "scale": 1.0})
    _, tc = pp.apply_with_transform(frame, crop)
    ones = tc.map_to_frame(np.ones((64, 64), np.float32), nearest=True)
    cols = np.nonzero(ones[240] > 0.5)[0]
    x1, _, x2, _ = tc.to_frame([0, 0, 64, 64])  # the crop's area in the frame (75.3..557.2: integer crop offsets)
    assert abs(cols.min() - x1) <= 1 and abs(cols.max() + 1 - x2) <= 1 and ones[240, :70].max() == 0  # outside: 0
    with pytest.raises(InputValidationError, match="2-D map"):
        t.map_to_frame(np.zeros((1, 4, 4)))
