"""Task checks for the practice set: does the int8 artifact do the model's job like the float model?

Independent of the gate on purpose: each check decodes the outputs the way the model's own
pipeline does (MediaPipe's SSD anchors and sigmoid for BlazePalm, landmark coordinates, PP-OCR's
CTC greedy decoding with the model's character list, openWakeWord embeddings) and compares the
*decoded* results of float and int8 on the same inputs. A task check knows nothing of kinds,
thresholds or cosines, so when it agrees with the gate, the gate told the truth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class TaskResult:
    """A task verdict with its figures.

    ``margin``: the deciding figure's distance to its threshold, relative (>= 0 passes). Within
    :data:`RESOLUTION` the check cannot tell pass from fail (one detection of 40 moves a
    detector's F1 by 2.5%): such a verdict is *borderline* and neither confirms nor contradicts the gate.
    """

    passed: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    margin: float = 1.0

    @property
    def borderline(self) -> bool:
        return abs(self.margin) < RESOLUTION


#: Relative distance to a task threshold below which a verdict is borderline.
RESOLUTION = 0.03


def _margin(value: float, threshold: float, higher: bool = True) -> float:
    return ((value - threshold) if higher else (threshold - value)) / threshold


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.clip(np.asarray(x, np.float64), -80, 80)))


# ----------------------------------------------------------------------------- detection (BlazePalm)
def ssd_anchors(size: int = 192, strides=(8, 16, 16, 16), interp: float = 1.0) -> np.ndarray:
    """MediaPipe SsdAnchorsCalculator with fixed anchor size (palm/face detectors): ``[N, 2]`` centres.

    The product's one implementation (:func:`edge_sdk.anchors.ssd_anchors`, behind
    ``--head ssd-anchors``); tests/test_app_ssd.py checks it against a line-by-line port of
    MediaPipe's calculator; the decoding below stays hand-written.
    """
    from edge_sdk.anchors import parse_spec, ssd_anchors as generate

    return generate(parse_spec({"strides": list(strides), "size": size, "fixed": 1, "interp": interp}))[:, :2]


def decode_ssd(boxes: np.ndarray, logits: np.ndarray, anchors: np.ndarray, size: int, thr: float = 0.5):
    """Boxes (x1, y1, x2, y2 normalised) and scores above ``thr``, after weighted-free greedy NMS."""
    scores = _sigmoid(logits.reshape(-1))
    raw = boxes.reshape(len(anchors), -1)
    cx = raw[:, 0] / size + anchors[:, 0]
    cy = raw[:, 1] / size + anchors[:, 1]
    w, h = raw[:, 2] / size, raw[:, 3] / size
    b = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], 1)
    picked = greedy_nms(b, scores, thr, 0.3)
    return b[picked], scores[picked]


def greedy_nms(boxes: np.ndarray, scores: np.ndarray, thr: float, max_iou: float) -> list[int]:
    """Indices of the boxes scoring >= ``thr``, best first, each kept unless it overlaps a kept one
    by ``max_iou`` or more."""
    keep = np.where(scores >= thr)[0]
    picked: list[int] = []
    for k in keep[np.argsort(-scores[keep])]:
        if all(iou(boxes[k], boxes[j]) < max_iou for j in picked):
            picked.append(int(k))
    return picked


def iou(a, b) -> float:
    x1, y1 = max(a[0], b[0]), max(a[1], b[1])
    x2, y2 = min(a[2], b[2]), min(a[3], b[3])
    inter = max(0.0, x2 - x1) * max(0.0, y2 - y1)
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def detection_check(ref: list[tuple], test: list[tuple], min_f1: float = 0.9) -> TaskResult:
    """Match int8 detections to float ones per image (IoU >= 0.5): F1 over all images."""
    tp = fp = fn = 0
    for (rb, _), (tb, _) in zip(ref, test):
        used = set()
        for r in rb:
            best = max(((iou(r, t), j) for j, t in enumerate(tb) if j not in used), default=(0.0, -1))
            if best[0] >= 0.5:
                tp += 1
                used.add(best[1])
            else:
                fn += 1
        fp += len(tb) - len(used)
    f1 = 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    return TaskResult(f1 >= min_f1, f"detections F1 {f1:.3f} (float {tp + fn}, int8 {tp + fp}, matched {tp})",
                      {"f1": round(f1, 4), "float_detections": tp + fn, "int8_detections": tp + fp}, _margin(f1, min_f1))


def ssd_task(boxes: str, scores: str, size: int, strides, interp: float = 1.0):
    """Detections of a MediaPipe SSD detector (:func:`ssd_anchors`; ``interp`` 0: one anchor per
    cell, as BlazeFace full range), float against int8 (:func:`detection_check`)."""
    anchors = ssd_anchors(size, strides, interp)

    def task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        dec = lambda o: decode_ssd(o[boxes], o[scores], anchors, size)  # noqa: E731
        return detection_check([dec(o) for o in ref_outs], [dec(o) for o in test_outs])
    return task


def decode_yolox(row: np.ndarray, size: int = 416, strides=(8, 16, 32), thr: float = 0.3):
    """YOLOX rows (x, y offsets in cells, log w, h, objectness, class scores): grid decode, score
    objectness x best class, greedy NMS at IoU 0.45 (ddddocr's own post-processing, its threshold)."""
    grids, steps = [], []
    for st in strides:
        k = size // st
        yy, xx = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
        grids.append(np.stack([xx.ravel(), yy.ravel()], 1))
        steps.append(np.full((k * k, 1), st))
    g, st = np.concatenate(grids), np.concatenate(steps)
    r = np.asarray(row, np.float64).reshape(len(g), -1)
    xy, wh = (r[:, :2] + g) * st, np.exp(np.clip(r[:, 2:4], -10, 10)) * st
    b = np.concatenate([xy - wh / 2, xy + wh / 2], 1) / size
    scores = r[:, 4] * r[:, 5:].max(axis=1)
    picked = greedy_nms(b, scores, thr, 0.45)
    return b[picked], scores[picked]


def decode_yolov8(out: np.ndarray, size: int = 320, thr: float = 0.25):
    """Ultralytics YOLOv8 ``[1, 4 + C, N]`` (cx, cy, w, h in input pixels, then class scores): best
    class per anchor at ``thr``, class-aware greedy NMS at IoU 0.45 (Ultralytics' defaults). Boxes
    are normalised and moved by 2 x their class, so that boxes of different classes never match
    (Ultralytics' own offset trick): :func:`detection_check` then also requires the same class."""
    r = np.asarray(out, np.float64).reshape(out.shape[-2], out.shape[-1]).T
    cls, scores = r[:, 4:].argmax(1), r[:, 4:].max(1)
    xy, wh = r[:, :2], r[:, 2:4]
    b = np.concatenate([xy - wh / 2, xy + wh / 2], 1) / size + 2.0 * cls[:, None]
    picked = greedy_nms(b, scores, thr, 0.45)
    return b[picked], scores[picked]


def yolov8_task(output: str = "output0", size: int = 320):
    """Detections of a YOLOv8 head (:func:`decode_yolov8`), float against int8, same class required."""
    def task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        dec = lambda o: decode_yolov8(o[output], size)  # noqa: E731
        return detection_check([dec(o) for o in ref_outs], [dec(o) for o in test_outs])
    return task


def yolox_task(output: str = "output", size: int = 416):
    """Detections of a YOLOX head (:func:`decode_yolox`), float against int8 (:func:`detection_check`)."""
    def task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        dec = lambda o: decode_yolox(o[output], size)  # noqa: E731
        return detection_check([dec(o) for o in ref_outs], [dec(o) for o in test_outs])
    return task


def truth_f1(dets: list[tuple], masks: list) -> tuple[float, int, int, int]:
    """Detections against the truth: an image with a hand counts one hit when a detection's centre
    lies on the pasted hand photo (its mask; the hand fills most of it), a miss when none does;
    every other detection is a false one."""
    tp = fp = fn = 0
    for (boxes, _), mask in zip(dets, masks):
        hits = 0
        for b in boxes:
            if mask is not None:
                h, w = mask.shape
                x, y = int((b[0] + b[2]) / 2 * w), int((b[1] + b[3]) / 2 * h)
                if 0 <= x < w and 0 <= y < h and mask[y, x]:
                    hits += 1
                    continue
            fp += 1
        if mask is not None:
            tp, fn = tp + (hits > 0), fn + (hits == 0)
            fp += max(0, hits - 1)  # two palms on one hand: one of them is false
    f1 = 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    return f1, tp, fp, fn


def palm_truth_task(masks: list, tolerance: float = 0.05, boxes: str = "Identity", scores: str = "Identity_1"):
    """BlazePalm (lite and full: 2016 anchors at 192 px) against the truth (where the hand photo
    is): the int8 model's F1 may be at most ``tolerance`` below the float model's. Also reported:
    int8 detections matched to float's."""
    anchors = ssd_anchors(192, (8, 16, 16, 16), 1.0)

    def task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        ref = [decode_ssd(o[boxes], o[scores], anchors, 192) for o in ref_outs]
        test = [decode_ssd(o[boxes], o[scores], anchors, 192) for o in test_outs]
        fr, fq = truth_f1(ref, masks), truth_f1(test, masks)
        same = detection_check(ref, test)
        floor = fr[0] - tolerance
        return TaskResult(fq[0] >= floor,
                          f"F1 against the truth {fq[0]:.3f} (float {fr[0]:.3f}; hands {fq[1] + fq[3]}, found "
                          f"{fq[1]} vs {fr[1]}, false {fq[2]} vs {fr[2]}); vs float: {same.summary}",
                          {"f1": round(fq[0], 4), "float_f1": round(fr[0], 4), "hits": fq[1], "float_hits": fr[1],
                           "false": fq[2], "float_false": fr[2], "vs_float": same.figures},
                          _margin(fq[0], max(floor, 1e-6)))
    return task


# ----------------------------------------------------------------------------- landmarks
def landmark_check(ref: np.ndarray, test: np.ndarray, scale: float, max_nme: float = 0.02) -> TaskResult:
    """Mean x,y point distance normalised by ``scale`` (the crop size)."""
    r, t = ref.reshape(ref.shape[0], -1, 3)[..., :2], test.reshape(test.shape[0], -1, 3)[..., :2]
    nme = float(np.mean(np.linalg.norm(r - t, axis=-1)) / scale)
    worst = float(np.max(np.mean(np.linalg.norm(r - t, axis=-1), axis=1)) / scale)
    return TaskResult(nme <= max_nme, f"landmark error {nme:.2%} of the crop (worst image {worst:.2%})",
                      {"nme": round(nme, 5), "nme_worst": round(worst, 5)}, _margin(nme, max_nme, higher=False))


def face_landmark_task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
    """MediaPipe's face mesh: the face flag on every crop, the 468 points where float's flag says a
    face is there (MediaPipe drops the face below 0.5)."""
    fr = _sigmoid(np.stack([o["conv2d_31"] for o in ref_outs]).ravel()) >= 0.5
    ft = _sigmoid(np.stack([o["conv2d_31"] for o in test_outs]).ravel()) >= 0.5
    face = np.flatnonzero(fr)
    lm = landmark_check(np.stack([o["conv2d_21"] for o in ref_outs])[face], np.stack([o["conv2d_21"] for o in test_outs])[face], 192)
    agree = float(np.mean(fr == ft))
    return TaskResult(lm.passed and agree >= 0.95, f"{lm.summary} on {face.size} of {fr.size} crops; face flag agreement {agree:.2%}",
                      {**lm.figures, "face_flag_agreement": round(agree, 4), "faces": int(face.size)},
                      min(lm.margin, _margin(agree, 0.95)))


def iris_task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
    a = landmark_check(np.stack([o["output_iris"] for o in ref_outs]), np.stack([o["output_iris"] for o in test_outs]), 64)
    b = landmark_check(np.stack([o["output_eyes_contours_and_brows"] for o in ref_outs]),
                       np.stack([o["output_eyes_contours_and_brows"] for o in test_outs]), 64)
    return TaskResult(a.passed and b.passed, f"iris {a.summary}; contours {b.summary}", {"iris": a.figures, "contours": b.figures},
                      min(a.margin, b.margin))


def hand_landmark_task(ref_outs: list[dict], test_outs: list[dict], max_world: float = 0.05) -> TaskResult:
    """MediaPipe's hand landmarks, read its own way: the hand-presence flag on every crop (>= 95% of
    them on the same side of 0.5), and where float's presence says a hand is there (MediaPipe's hand
    landmarker drops the hand below its 0.5 presence confidence) the 21 image points (x, y error over
    the 224-pixel crop, <= 2%), the same points in metric 3-D world coordinates (mean point distance
    over the hand's extent, the diagonal of float's own 3-D box, <= 5%) and handedness (>= 95%)."""
    def stack(outs, key):
        return np.stack([np.asarray(o[key], np.float64).reshape(-1) for o in outs])

    present, present_q = stack(ref_outs, "Identity_1")[:, 0] >= 0.5, stack(test_outs, "Identity_1")[:, 0] >= 0.5
    hand = np.flatnonzero(present)
    image = landmark_check(stack(ref_outs, "Identity")[hand], stack(test_outs, "Identity")[hand], 224)
    wr = stack(ref_outs, "Identity_3")[hand].reshape(hand.size, -1, 3)
    wt = stack(test_outs, "Identity_3")[hand].reshape(hand.size, -1, 3)
    extent = np.linalg.norm(wr.max(axis=1) - wr.min(axis=1), axis=-1)
    per_sample = np.mean(np.linalg.norm(wr - wt, axis=-1), axis=1) / np.maximum(extent, 1e-9)
    world, worst = float(per_sample.mean()), float(per_sample.max())
    flags = {"Identity_1": float(np.mean(present == present_q)),
             "Identity_2": float(np.mean((stack(ref_outs, "Identity_2")[hand] >= 0.5) == (stack(test_outs, "Identity_2")[hand] >= 0.5)))}
    agree = min(flags.values())
    return TaskResult(image.passed and world <= max_world and agree >= 0.95,
                      f"on the {hand.size} of {len(ref_outs)} crops float finds a hand in: image {image.summary}; world "
                      f"landmark error {world:.2%} of the hand's extent (worst image {worst:.2%}); handedness agreement "
                      f"{flags['Identity_2']:.0%}; presence agreement {flags['Identity_1']:.0%} on every crop",
                      {**image.figures, "world": round(world, 5), "world_worst": round(worst, 5), "flags": flags,
                       "hands": int(hand.size)},
                      min(image.margin, _margin(world, max_world, higher=False), _margin(agree, 0.95)))


# ----------------------------------------------------------------------------- text recognition
def ctc_decode(probs: np.ndarray, charset: list[str]) -> str:
    idx = probs.reshape(-1, probs.shape[-1]).argmax(-1)
    out, prev = [], 0
    for i in idx:
        if i != prev and i != 0:
            out.append(charset[i] if i < len(charset) else "?")
        prev = i
    return "".join(out)  # spaces kept; PaddleOCR's metric (rec_metric) ignores them


def ocr_charset(onnx_path) -> list[str]:
    import onnx

    meta = {p.key: p.value for p in onnx.load(str(onnx_path), load_external_data=False).metadata_props}
    return ["<blank>"] + meta["character"].split("\n") + [" "]


def rec_metric(preds: list[str], truth: list[str]) -> tuple[float, float]:
    """PaddleOCR's own recogniser metric (``ppocr.metrics.RecMetric``, its defaults): spaces
    ignored, ``acc`` the share of lines read exactly, ``norm_edit_dis`` one minus the mean of
    ``edit distance / max(len)``. The distance is the gate's (one Levenshtein in the product);
    everything else here is PaddleOCR's, not the gate's."""
    from edge_sdk.converters.accuracy.metrics import edit_distance

    p = [x.replace(" ", "") for x in preds]
    t = [x.replace(" ", "") for x in truth]
    acc = float(np.mean([a == b for a, b in zip(p, t)]))
    ned = 1.0 - float(np.mean([edit_distance(a, b) / max(len(a), len(b), 1) for a, b in zip(p, t)]))
    return acc, ned


#: How far int8 may fall behind float on the rendered lines: two lines of 40 read wrong, one point
#: of normalised edit distance.
OCR_ACC_DROP, OCR_NED_DROP = 0.05, 0.01


def ocr_task(charset: list[str], truth: list[str]) -> Callable[[list[dict], list[dict]], TaskResult]:
    """The recogniser's task is to read the line: float and int8 are both scored against the
    rendered text with PaddleOCR's metric, and int8 must read like float does."""
    def check(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        name = next(iter(ref_outs[0]))
        rs = [ctc_decode(o[name], charset) for o in ref_outs]
        ts = [ctc_decode(o[name], charset) for o in test_outs]
        assert len(rs) == len(truth), (len(rs), len(truth))
        facc, fned = rec_metric(rs, truth)
        acc, ned = rec_metric(ts, truth)
        same = float(np.mean([a == b for a, b in zip(rs, ts)]))
        summary = (f"lines read exactly {acc:.0%} (float {facc:.0%}), norm. edit distance {ned:.3f} "
                   f"(float {fned:.3f}); equal to float's string {same:.0%}")
        return TaskResult(acc >= facc - OCR_ACC_DROP and ned >= fned - OCR_NED_DROP, summary,
                          {"acc": round(acc, 4), "float_acc": round(facc, 4), "norm_edit_dis": round(ned, 4),
                           "float_norm_edit_dis": round(fned, 4), "same_as_float": round(same, 4),
                           "examples": [[a, b] for a, b in zip(rs, ts) if a != b][:3]},
                          min(_margin(acc, facc - OCR_ACC_DROP), _margin(ned, fned - OCR_NED_DROP)))
    return check


# ----------------------------------------------------------------------------- embeddings
def embedding_task(ref_outs: list[dict], test_outs: list[dict], min_cos: float = 0.98) -> TaskResult:
    name = next(iter(ref_outs[0]))
    r = np.stack([o[name].ravel() for o in ref_outs]).astype(np.float64)
    t = np.stack([o[name].ravel() for o in test_outs]).astype(np.float64)
    cos = np.sum(r * t, 1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(t, axis=1))
    # openWakeWord's classifiers read these embeddings: the nearest float neighbour must be the same sample.
    sims = (t / np.linalg.norm(t, axis=1, keepdims=True)) @ (r / np.linalg.norm(r, axis=1, keepdims=True)).T
    nn = float(np.mean(np.argmax(sims, 1) == np.arange(len(r))))
    return TaskResult(float(cos.mean()) >= min_cos and nn >= 0.95,
                      f"embedding cosine mean {cos.mean():.4f} (min {cos.min():.4f}), nearest-neighbour retrieval {nn:.0%}",
                      {"cosine_mean": round(float(cos.mean()), 5), "cosine_min": round(float(cos.min()), 5), "nn": nn},
                      min(_margin(float(cos.mean()), min_cos), _margin(nn, 0.95)))


def mel_task(embedding_onnx) -> Callable[[list[dict], list[dict]], TaskResult]:
    """The melspectrogram front end's task is its consumer's: its float and int8 outputs go through
    the *float* embedding model and the embeddings are compared like the embedding model's own."""
    import onnxruntime as ort

    from data import mel_to_window

    sess = ort.InferenceSession(str(embedding_onnx), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name

    def embed(outs: list[dict]) -> list[dict]:
        return [{"embedding": sess.run(None, {name: mel_to_window(next(iter(o.values())))})[0]} for o in outs]

    def check(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        res = embedding_task(embed(ref_outs), embed(test_outs))
        res.summary = "through the float embedding model: " + res.summary
        return res
    return check


# ----------------------------------------------------------------------------- the wider set (wider.py)
def direction_task(truth: np.ndarray) -> Callable[[list[dict], list[dict]], TaskResult]:
    """The text-direction classifier: agreement with float (>= 95%) and accuracy against the truth
    (at most 5 points below float's)."""
    def task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        key = next(iter(ref_outs[0]))
        ref = np.array([np.asarray(o[key]).argmax() for o in ref_outs])
        test = np.array([np.asarray(o[key]).argmax() for o in test_outs])
        acc_f, acc_q, agree = float(np.mean(ref == truth)), float(np.mean(test == truth)), float(np.mean(ref == test))
        return TaskResult(agree >= 0.95 and acc_q >= acc_f - 0.05,
                          f"accuracy {acc_q:.0%} (float {acc_f:.0%}), agreement with float {agree:.0%}",
                          {"accuracy": acc_q, "accuracy_float": acc_f, "agreement": agree},
                          min(_margin(agree, 0.95), _margin(acc_q, max(acc_f - 0.05, 1e-9))))
    return task


def agreement_task(min_agreement: float = 0.9, max_error: float = 0.1) -> Callable[[list[dict], list[dict]], TaskResult]:
    """A classifier without a truth: int8's top-1 agrees with float's on at least ``min_agreement``
    of the samples, and float's top class keeps its probability within ``max_error`` on average."""
    def task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
        key = next(iter(ref_outs[0]))
        ref = np.stack([np.asarray(o[key]).reshape(-1) for o in ref_outs])
        test = np.stack([np.asarray(o[key]).reshape(-1) for o in test_outs])
        top = ref.argmax(1)
        agree = float(np.mean(top == test.argmax(1)))
        err = float(np.mean(np.abs(ref[np.arange(len(top)), top] - test[np.arange(len(top)), top])))
        counts = np.bincount(top, minlength=ref.shape[1])
        return TaskResult(agree >= min_agreement and err <= max_error,
                          f"top-1 agreement with float {agree:.0%}, top-class probability error {err:.3f} (float's "
                          f"classes over the samples: {counts.tolist()})",
                          {"agreement": agree, "probability_error": round(err, 4), "float_classes": counts.tolist()},
                          min(_margin(agree, min_agreement), _margin(err, max_error, higher=False)))
    return task


def mask_task(ref_outs: list[dict], test_outs: list[dict], min_iou: float = 0.85, max_diff: float = 0.05,
              min_area: float = 0.05, min_frame_iou: float = 0.5) -> TaskResult:
    """A segmentation mask (MediaPipe's selfie segmentation: person confidence per pixel), frame by
    frame: on frames where float finds a person (at least ``min_area`` of the frame at 0.5) the
    thresholded masks' mean IoU (>= 0.85) and the worst frame's (>= 0.5: a person int8 loses is
    a glitch every app shows), and the confidence apps blend with (mean absolute difference
    <= 0.05). The gate judges frames too, from 1% of the map marked by either side."""
    key = next(iter(ref_outs[0]))
    ious, diffs = [], []
    for r, t in zip(ref_outs, test_outs):
        a, b = np.asarray(r[key], np.float64), np.asarray(t[key], np.float64)
        diffs.append(float(np.mean(np.abs(a - b))))
        ma, mb = a >= 0.5, b >= 0.5
        if ma.mean() >= min_area:
            ious.append(float(np.sum(ma & mb) / np.sum(ma | mb)))
    iou = float(np.mean(ious)) if ious else 1.0
    worst = min(ious, default=1.0)
    diff = float(np.mean(diffs))
    return TaskResult(iou >= min_iou and worst >= min_frame_iou and diff <= max_diff,
                      f"person mask IoU {iou:.3f} against float's on {len(ious)} frames with a person "
                      f"(worst frame {worst:.2f}), confidence difference {diff:.4f}",
                      {"iou": round(iou, 4), "frames": len(ious), "worst": round(worst, 4),
                       "mean_abs_diff": round(diff, 5)},
                      min(_margin(iou, min_iou), _margin(worst, min_frame_iou), _margin(diff, max_diff, higher=False)))


def vad_task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
    """Voice activity over one long unseen stream, each side carrying its own state: the speech /
    no-speech decision at 0.5 agrees on >= 95% of the steps float decides (its probability at
    least 0.05 from 0.5), and the probability moves by at most 0.05 on average."""
    key = next(iter(ref_outs[0]))
    ref = np.array([float(np.asarray(o[key]).ravel()[0]) for o in ref_outs])
    test = np.array([float(np.asarray(o[key]).ravel()[0]) for o in test_outs])
    decided = np.abs(ref - 0.5) >= 0.05
    agree = float(np.mean((ref[decided] >= 0.5) == (test[decided] >= 0.5))) if decided.any() else 1.0
    err = float(np.mean(np.abs(ref - test)))
    return TaskResult(err <= 0.05 and agree >= 0.95,
                      f"over {len(ref)} steps: speech decisions agree {agree:.1%} (float says speech on "
                      f"{np.mean(ref >= 0.5):.0%}), probability error {err:.4f}",
                      {"agreement": agree, "score_error": err, "steps": len(ref)},
                      min(_margin(err, 0.05, higher=False), _margin(agree, 0.95)))


def wake_task(ref_outs: list[dict], test_outs: list[dict]) -> TaskResult:
    """A wake-word score: decisions at 0.5 agree (>= 95%) and the score moves by at most 0.05 on average."""
    key = next(iter(ref_outs[0]))
    ref = np.array([float(np.asarray(o[key]).ravel()[0]) for o in ref_outs])
    test = np.array([float(np.asarray(o[key]).ravel()[0]) for o in test_outs])
    err, agree = float(np.mean(np.abs(ref - test))), float(np.mean((ref >= 0.5) == (test >= 0.5)))
    return TaskResult(err <= 0.05 and agree >= 0.95,
                      f"score error {err:.4f}, decisions agree {agree:.0%} (float's highest score {ref.max():.3f})",
                      {"score_error": err, "agreement": agree}, min(_margin(err, 0.05, higher=False), _margin(agree, 0.95)))
