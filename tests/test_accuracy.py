"""Accuracy-gate metrics by output kind, kind inference, declarations and step selection.

Fast and pure numpy/onnx; the gate end to end is in test_gate_e2e.py and test_convert_onnx.py.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from edge_sdk.converters.accuracy import compare, gate_step, infer_kinds, match_outputs
from edge_sdk.converters.accuracy.kinds import from_values
from edge_sdk.converters.accuracy.metrics import edit_distance, evaluate_output, regression_metrics, whole_tensor
from edge_sdk.converters.base import SourceModel
from edge_sdk.converters.heads import postprocess
from edge_sdk.errors import ConversionError, InputValidationError
from edge_sdk.manifest import TensorSpec
from edge_sdk.outputs import OutputGroup, OutputKind, check_fits, ctc_collapse, parse_declaration, summarize_output
from edge_sdk.profiles import AccuracySpec, RuntimeStep, builtin_profiles

SPEC = AccuracySpec(min_cosine=0.98, min_sqnr_db=15.0, min_top1_agreement=0.9)
RNG = np.random.default_rng(0)


def _fake_int8(x: np.ndarray) -> np.ndarray:
    """What one symmetric per-tensor int8 scale (TensorRT's) does to a tensor."""
    scale = float(np.abs(x).max()) / 127.0
    return np.round(x / scale) * scale


# ----------------------------------------------------------------------------- whole-tensor figures
def test_whole_tensor_figures_match_their_definitions():
    ref = RNG.normal(0, 1, (5, 1, 8, 4))
    test = ref + RNG.normal(0, 0.1, ref.shape)
    m = whole_tensor(ref, test)
    r, t = ref.ravel(), test.ravel()
    assert m["sqnr_db"] == pytest.approx(10 * math.log10(np.sum(r ** 2) / np.sum((r - t) ** 2)), abs=1e-3)
    assert m["cosine"] == pytest.approx(np.dot(r, t) / np.linalg.norm(r) / np.linalg.norm(t), abs=1e-6)
    assert m["max_abs_err"] == pytest.approx(np.max(np.abs(r - t)))
    z = np.zeros((1, 4))
    assert whole_tensor(z, z)["cosine"] == 1.0 and whole_tensor(z, np.ones((1, 4)))["cosine"] == 0.0


# ----------------------------------------------------------------------------- scores
def test_classifier_scores_count_top1_flips_and_score_error():
    ref = [np.array([[0.1, 0.9]]), np.array([[0.8, 0.2]]), np.array([[0.3, 0.7]]), np.array([[0.6, 0.4]])]
    test = [np.array([[0.1, 0.9]]), np.array([[0.2, 0.8]]), np.array([[0.3, 0.7]]), np.array([[0.6, 0.4]])]
    m = evaluate_output(ref, test, OutputKind("scores"), SPEC)
    assert m["top1_agreement"] == 0.75 and not m["passed"]
    assert any("top-1 agreement 0.750" in f for f in m["failures"])
    same = evaluate_output(ref, [r.copy() for r in ref], OutputKind("scores"), SPEC)
    assert same["passed"] and same["top1_agreement"] == 1.0 and same["score_error"] == 0.0



def test_a_classifiers_flips_where_float_decides_are_held_to_the_decision_bar():
    """Top-1 over every sample (0.9) lets a classifier lose 3 of 40 confident samples (0.925); where
    float's top class leads by 0.1+ a flip is int8's doing, and those are held to 0.95. Flips of
    near ties are not counted there (they still count in top-1 over all samples)."""
    rng = np.random.default_rng(0)
    ref = []
    for i in range(40):
        p = rng.dirichlet(np.ones(4) * 0.3) * 0.2
        p[i % 4] += 0.8  # float leads clearly on every sample
        ref.append(p[None].astype(np.float32))
    def flip(rows, idx):
        out = [r.copy() for r in rows]
        for i in idx:
            out[i] = np.roll(out[i], 1, axis=1)  # float's top class is no longer int8's
        return out
    bad = evaluate_output(ref, flip(ref, [0, 1, 2]), OutputKind("scores"), SPEC)
    assert bad["top1_agreement"] == 0.925 and bad["top1_agreement"] >= SPEC.min_top1_agreement  # top-1 alone passes...
    assert bad["decided_top1_agreement"] == 0.925 and not bad["passed"]  # ...the decided samples do not
    assert any("top-1 agrees on 37 of 40 samples float decides" in f for f in bad["failures"])
    # near ties: three samples where float's top two are 0.46 / 0.44; their flips are not int8's failing
    tied = [r.copy() for r in ref]
    for i in range(3):
        tied[i] = np.array([[0.46, 0.44, 0.06, 0.04]], np.float32)
    swapped = [r.copy() for r in tied]
    for i in range(3):
        swapped[i] = np.array([[0.44, 0.46, 0.06, 0.04]], np.float32)
    ok = evaluate_output(tied, swapped, OutputKind("scores"), SPEC)
    assert ok["decisions_undecided"] == 3 and ok["decided_top1_agreement"] == 1.0 and ok["passed"], ok


def test_one_probability_per_sample_is_judged_by_its_decision_at_one_half():
    """A flag (hand presence, handedness, a wake word): a small mean score error can hide flips of
    the decision apps take at 0.5 (MediaPipe hand lite: 0.87 -> 0.24 on some hands, mean error 0.09)."""
    p = np.concatenate([np.full(30, 0.05), np.full(6, 0.85), np.full(4, 0.95), [0.52]])
    ref = [np.array([[v]]) for v in p]
    flipped = p.copy()
    flipped[30:35] = 0.45  # five confident "yes" become "no": mean error 0.05
    flipped[-1] = 0.47  # float undecided (0.52): its flip is noise, not counted
    m = evaluate_output(ref, [np.array([[v]]) for v in flipped], OutputKind("scores"), SPEC)
    assert m["score_error"] < SPEC.scores.max_score_error  # the old figure alone passes...
    assert m["decision_agreement"] == 0.875 and m["decisions"] == [11, 5] and not m["passed"]  # ...the decisions do not
    assert m["decisions_undecided"] == 1
    assert any("decisions at 0.5 agree on 35 of 40 samples float decides" in f for f in m["failures"])
    only_noise = p.copy()
    only_noise[-1] = 0.47
    assert evaluate_output(ref, [np.array([[v]]) for v in only_noise], OutputKind("scores"), SPEC)["passed"]
    # three of 40 hands on the wrong side (hand lite's arm-cpu ONNX: 0.925) fail the default 0.95,
    # which top-1's 0.9 would have passed; a profile may lower it
    three = p.copy()
    three[30:33] = 0.3
    m3 = evaluate_output(ref, [np.array([[v]]) for v in three], OutputKind("scores"), SPEC)
    assert m3["decision_agreement"] == 0.925 and not m3["passed"] and SPEC.min_top1_agreement <= 0.925
    lenient = dataclasses.replace(SPEC, scores=dataclasses.replace(SPEC.scores, min_decision_agreement=0.9))
    assert evaluate_output(ref, [np.array([[v]]) for v in three], OutputKind("scores"), lenient)["passed"]
    assert not any("one flip fails" in f for f in m3["failures"])  # 40 samples resolve the bar
    # Over 19 decided samples one flip already fails 0.95: the failure says more data would judge it.
    few = [np.array([[v]]) for v in p[22:]]  # 8 "no", 10 "yes", one undecided
    one = [np.array([[v]]) for v in np.where(np.arange(19) == 12, 0.3, p[22:])]
    m1 = evaluate_output(few, one, OutputKind("scores"), SPEC)
    assert not m1["passed"] and any("over 18 samples one flip fails 0.95: hold back more samples" in f
                                    for f in m1["failures"]), m1["failures"]
    nudged = p + 0.03  # nobody crosses 0.5
    ok = evaluate_output(ref, [np.array([[v]]) for v in nudged], OutputKind("scores"), SPEC)
    assert ok["passed"] and ok["decision_agreement"] == 1.0
    # a raw logit declared with its sigmoid is judged after the activation
    logits = [np.array([[np.log(v / (1 - v))]]) for v in p]
    bad = [np.array([[np.log(v / (1 - v))]]) for v in flipped]
    assert not evaluate_output(logits, bad, OutputKind("logits", activation="sigmoid"), SPEC)["passed"]

def test_yolo_packed_head_collapsed_by_one_scale_fails_although_cosine_is_high():
    """Boxes 0..320 and class scores 0..1 in one [4+C, N] tensor: one int8 scale zeroes the scores."""
    n, classes = 400, 6
    boxes = RNG.uniform(0, 320, (4, n))
    scores = 1 / (1 + np.exp(-RNG.normal(-5, 1.5, (classes, n))))
    scores[2, :12] = RNG.uniform(0.6, 0.95, 12)  # a few real detections
    ref = [np.concatenate([boxes, scores])[None] for _ in range(3)]
    test = [_fake_int8(r) for r in ref]
    kind = OutputKind("packed", axis=1, groups=[OutputGroup("boxes", 0, 4, "boxes"), OutputGroup("scores", 4, 4 + classes, "scores")])
    m = evaluate_output(ref, test, kind, SPEC)
    assert float(m["cosine"]) > 0.99  # the whole-tensor figure says "fine"...
    assert not m["passed"] and m["worst"] == "scores"  # ...the scores group says the detector never fires
    assert not m["groups"]["scores"]["passed"] and m["groups"]["boxes"]["passed"]
    assert any("scores: collapsed" in f for f in m["failures"])
    assert any("positives" in f and "int8 0" in f for f in m["failures"])


def test_logits_with_very_negative_background_pass_when_the_task_is_intact():
    """BlazeFace-style: background logits near -60 move a lot under int8; the faces do not."""
    n = 896
    ref, test = [], []
    for _ in range(4):
        r = RNG.normal(-60, 12, (1, n, 1))
        r[0, :5, 0] = RNG.uniform(2.5, 4.0, 5)
        t = r + RNG.normal(0, 1.0, r.shape)
        t[0, 5:, 0] = RNG.normal(-45, 12, n - 5)  # background anchors wander (nobody looks at them)
        ref.append(r)
        test.append(t)
    as_tensor = evaluate_output(ref, test, OutputKind("tensor"), SPEC)
    assert not as_tensor["passed"]  # the old whole-tensor gate: a false fail
    m = evaluate_output(ref, test, OutputKind("logits", activation="sigmoid"), SPEC)
    assert m["passed"], m["failures"]
    assert m["positive_f1"] == 1.0 and m["positives"] == [20, 20]
    broken = [t.copy() for t in test]
    for b in broken:
        b[0, :5, 0] = -3.0  # the faces are gone
    assert not evaluate_output(ref, broken, OutputKind("logits", activation="sigmoid"), SPEC)["passed"]


def test_regressions_are_judged_at_the_positions_the_scores_call_confident():
    boxes = RNG.uniform(0, 200, (2, 50, 4))
    logits = np.full((2, 50, 1), -8.0)
    logits[:, :3] = 4.0
    noisy = boxes + RNG.normal(0, 0.5, boxes.shape)
    noisy[:, 10:] += 80.0  # wrong boxes only where nothing is detected
    out = compare([{"b": boxes[i], "s": logits[i]} for i in range(2)], [{"b": noisy[i], "s": logits[i]} for i in range(2)],
                  {"b": OutputKind("boxes"), "s": OutputKind("logits", activation="sigmoid")}, SPEC)
    assert out["b"]["passed"] and out["b"]["at_confident_positions"] == 6 and "judged_at" in out["b"]



def test_a_detectors_boxes_are_judged_where_it_detects_not_where_it_hesitates():
    """Anchors scored 0.3 are confident enough for the score check but never become a detection:
    their boxes may wander (BlazePose's did, 9% of the range, with every detection in place); a
    box moved at a detection still fails."""
    boxes = RNG.uniform(0, 200, (4, 60, 4))
    logits = np.full((4, 60, 1), -8.0)
    logits[:, :3] = 4.0                      # detections (0.98)
    logits[:, 3:6] = -0.85                   # hesitations (0.30): confident, not detected
    ok = boxes + RNG.normal(0, 0.3, boxes.shape)
    ok[:, 3:6] += 60.0
    kinds = {"b": OutputKind("boxes"), "s": OutputKind("logits", activation="sigmoid")}
    feed = lambda b: [{"b": b[i], "s": logits[i]} for i in range(4)]  # noqa: E731
    out = compare(feed(boxes), feed(ok), kinds, SPEC)
    assert out["b"]["passed"], out["b"]["failures"]
    assert out["b"]["at_confident_positions"] == 12 and "detections" in out["b"]["judged_at"]
    moved = ok.copy()
    moved[:, 0] += 60.0
    assert not compare(feed(boxes), feed(moved), kinds, SPEC)["b"]["passed"]
    # no detection at all: judged where the scores are confident, as before
    quiet = np.where(logits > 0, -0.85, logits)
    out = compare([{"b": boxes[i], "s": quiet[i]} for i in range(4)], [{"b": ok[i], "s": quiet[i]} for i in range(4)],
                  kinds, SPEC)
    assert not out["b"]["passed"] and "confident" in out["b"]["judged_at"]

def _yolox_rows(samples: int = 4, n: int = 600, seed: int = 1) -> np.ndarray:
    """``[samples, 1, n, 6]`` YOLOX-style rows: raw box regressors, objectness, one class score.
    The class score is conditional (trained only where an object is), so it sits near 0.9 at
    every anchor; objectness is near 0 except at a few objects' anchors."""
    rng = np.random.default_rng(seed)
    rows = np.empty((samples, 1, n, 6))
    rows[..., :4] = rng.normal(0.5, 0.8, (samples, 1, n, 4))
    rows[..., 4] = 1 / (1 + np.exp(-rng.normal(-7, 1.5, (samples, 1, n))))
    rows[..., 5] = rng.uniform(0.8, 0.95, (samples, 1, n))
    rows[:, :, :8, 4] = rng.uniform(0.7, 0.99, (samples, 1, 8))  # eight object anchors per sample
    return rows


def test_objectness_heads_are_judged_by_objectness_times_class_score():
    """YOLOv5/YOLOX: a detection is objectness x class score. Judged as two independent scores,
    the conditional class score (0.9 everywhere) made every anchor a 'positive': invented
    detections vanished among thousands of positives, and boxes were judged at background
    anchors, where nobody reads them (ddddocr's YOLOX detector: the gate passed artifacts that
    invented detections and failed one that did the task)."""
    rows = _yolox_rows()
    kind = OutputKind("packed", axis=-1, groups=[OutputGroup("boxes", 0, 4, "boxes"), OutputGroup("objectness", 4, 5, "objectness"),
                                                  OutputGroup("scores", 5, 6, "scores")])
    flat = OutputKind("packed", axis=-1, groups=[OutputGroup("boxes", 0, 4, "boxes"), OutputGroup("scores", 4, 6, "scores")])
    ref = list(rows)
    noisy = rows.copy()
    noisy[..., 8:, :4] += RNG.normal(0, 1.0, noisy[..., 8:, :4].shape)  # background boxes wander
    noisy[..., :8, :4] += RNG.normal(0, 0.02, noisy[..., :8, :4].shape)
    ok = evaluate_output(ref, list(noisy), kind, SPEC)
    assert ok["passed"], ok["failures"]
    assert ok["groups"]["scores"]["kind"] == "scores x objectness" and ok["groups"]["scores"]["positives"][0] == 32
    assert ok["groups"]["boxes"]["at_confident_positions"] == 32
    assert not evaluate_output(ref, list(noisy), flat, SPEC)["passed"]  # the old reading: boxes at every anchor

    invented = rows.copy()
    invented[:, :, 100:104, 4] = 0.9  # four objects per sample where the float model sees none
    bad = evaluate_output(ref, list(invented), kind, SPEC)
    assert not bad["passed"] and any(f.startswith("scores: positives") for f in bad["failures"]), bad["failures"]
    assert evaluate_output(ref, list(invented), flat, SPEC)["groups"]["scores"]["passed"]  # 16 among ~2400 'positives'


def test_run_prints_conditional_class_scores_times_objectness():
    """``edge-sdk run`` on a YOLOX artifact said '1699 of 3549 positions score >= 0.5' for the class
    scores; what the head thresholds is objectness x class score (7 positions there)."""
    rows = _yolox_rows(samples=1)[0]
    kind = OutputKind("packed", axis=-1, groups=[OutputGroup("boxes", 0, 4, "boxes"), OutputGroup("objectness", 4, 5, "objectness"),
                                                  OutputGroup("scores", 5, 6, "scores")])
    groups = {g["name"]: g for g in summarize_output("output", rows, kind)["groups"]}
    assert groups["objectness"]["above_0.5"] == 8 and groups["scores x objectness"]["above_0.5"] == 8
    assert summarize_output("output", rows, OutputKind("packed", axis=-1, groups=[
        OutputGroup("boxes", 0, 4, "boxes"), OutputGroup("scores", 4, 6, "scores")]))["groups"][1]["above_0.5"] == 600


def test_objectness_is_told_from_the_values_and_from_a_yolov5_head():
    rows = _yolox_rows()
    assert [g.name for g in from_values(rows, [1, 600, 6]).groups] == ["boxes", "scores"]
    kinds = infer_kinds([TensorSpec("out", [1, 600, 6], "float32")], [{"out": r} for r in rows], None)
    assert kinds["out"].label() == "packed(boxes 0:4, objectness 4:5, scores 5:6 @axis -1)", kinds["out"].label()
    assert "objectness" in kinds["out"].reason

    # YOLOv8 (no objectness): class scores are low wherever nothing is -> not split
    v8 = np.concatenate([RNG.uniform(0, 320, (4, 1, 4, 600)), 1 / (1 + np.exp(-RNG.normal(-7, 1.5, (4, 1, 3, 600))))], axis=2)
    v8[:, :, 4, :10] = 0.9
    v8[:, :, 5, 10:20] = 0.9
    k8 = infer_kinds([TensorSpec("out", [1, 7, 600], "float32")], [{"out": r} for r in v8], None)["out"]
    assert k8.label() == "packed(boxes 0:4, scores 4:7 @axis -2)", k8.label()
    # softmax over [background, class]: rows sum to 1 -> not split
    soft = np.concatenate([rows[..., :4], np.stack([1 - rows[..., 4], rows[..., 4]], -1)], -1)
    ks = infer_kinds([TensorSpec("out", [1, 600, 6], "float32")], [{"out": r} for r in soft], None)["out"]
    assert all(g.kind != "objectness" for g in ks.groups), ks.label()
    # a declaration is taken as is
    kd = infer_kinds([TensorSpec("out", [1, 600, 6], "float32")], [{"out": r} for r in rows], None,
                     {"out": parse_declaration("out:packed:axis=2,boxes=0-4,scores=4-6")[1]})["out"]
    assert all(g.kind != "objectness" for g in kd.groups)

    src = SourceModel(Path("m.onnx"), "onnx", "0" * 64, [TensorSpec("images", [1, 3, 416, 416], "float32")],
                      [TensorSpec("out", [1, 3549, 85], "float32")])
    declared: dict = {}
    assert postprocess("yolov5", None, src, declared)["head"] == "yolov5"
    assert declared["out"].label() == "packed(boxes 0:4, objectness 4:5, scores 5:85 @axis 2)"


def _dfl(dist: np.ndarray, bins: int = 8, sharp: float = 4.0) -> np.ndarray:
    """Logits of GFL/DFL distributions whose expectation is ``dist`` (bin units): two neighbouring
    bins share the mass, as the training target does."""
    lo = np.clip(np.floor(dist), 0, bins - 2).astype(int)
    w = dist - lo
    logits = np.full(dist.shape + (bins,), -sharp)
    np.put_along_axis(logits, lo[..., None], np.log(np.maximum(1 - w, 1e-3))[..., None] + sharp, -1)
    np.put_along_axis(logits, lo[..., None] + 1, np.log(np.maximum(w, 1e-3))[..., None] + sharp, -1)
    return logits.reshape(*dist.shape[:-1], -1)


def test_box_distributions_are_judged_by_the_distances_they_decode_to():
    """PicoDet/NanoDet/raw YOLOv8 heads give each box side as 8-16 logits (GFL/DFL): the distance
    is their softmax expectation. Recognised from the values (signed, the two likeliest bins
    neighbours), and judged after decoding; BlazeFace's 16 offsets (4 x 4) are not read so."""
    n = 600
    dist = RNG.uniform(0.5, 6.5, (4, 1, n, 4))
    reg = _dfl(dist)
    scores = np.tile([0.98, 0.01, 0.01], (4, 1, n, 1))
    scores[:, :, :20] = [0.05, 0.9, 0.05]
    kinds = infer_kinds([TensorSpec("s", [1, n, 3], "float32"), TensorSpec("r", [1, n, 32], "float32")],
                        [{"s": scores[i], "r": reg[i]} for i in range(4)], None)
    assert kinds["r"].kind == "boxes" and kinds["r"].bins == 8 and kinds["r"].label() == "boxes(8 bins)"
    offsets = RNG.normal(0, 40, (4, 1, n, 16))
    k16 = infer_kinds([TensorSpec("s", [1, n, 3], "float32"), TensorSpec("r", [1, n, 16], "float32")],
                      [{"s": scores[i], "r": offsets[i]} for i in range(4)], None)["r"]
    assert k16.kind == "boxes" and not k16.bins
    shuffled = reg.reshape(4, 1, n, 4, 8)[..., RNG.permutation(8)].reshape(4, 1, n, 32)  # bins out of order
    assert not infer_kinds([TensorSpec("s", [1, n, 3], "float32"), TensorSpec("r", [1, n, 32], "float32")],
                           [{"s": scores[i], "r": shuffled[i]} for i in range(4)], None)["r"].bins

    # logits that move a lot where the distance barely does pass; a distance moved by 1.5 bins fails
    calm = reg + RNG.normal(0, 0.05, reg.shape)
    calm[..., ::8] -= 3.0  # the first bin of every side: from -4 to -7, probability ~0 either way
    feed = lambda r: [{"s": scores[i], "r": r[i]} for i in range(4)]  # noqa: E731
    out = compare(feed(reg), feed(calm), kinds, SPEC)
    assert out["r"]["passed"], out["r"]["failures"]
    assert "softmax expectation" in out["r"]["decoded"] and out["r"]["at_confident_positions"] == 80
    # the softmax's background class (what 97% of anchors pick) is no class: 80 positives, not 2400
    assert out["s"]["background_class"] == 0 and out["s"]["positives"] == [80, 80]
    invented = scores.copy()
    invented[:, :, 100:108] = [0.1, 0.1, 0.8]  # 32 detections the float model does not make
    bad = compare(feed(reg), [{"s": invented[i], "r": calm[i]} for i in range(4)], kinds, SPEC)["s"]
    assert not bad["passed"] and any("positives" in f for f in bad["failures"]), bad["failures"]
    raw = compare(feed(reg), feed(calm), {**kinds, "r": dataclasses.replace(kinds["r"], bins=None)}, SPEC)
    assert not raw["r"]["passed"]  # judged as raw logits, the calm change fails
    moved = _dfl(np.where(np.arange(n)[None, None, :, None] < 20, np.clip(dist + 1.5, 0, 7), dist))
    assert not compare(feed(reg), feed(moved), kinds, SPEC)["r"]["passed"]


def test_boxes_beside_scores_confident_nowhere_are_not_judged():
    """A detector level that fires on none of the held-back samples: its boxes are background
    anchors nobody decodes (PicoDet's stride-8 level on page layouts); judging them all was the
    whole-tensor mistake. The scores beside them are still judged."""
    boxes = RNG.uniform(0, 200, (3, 50, 4))
    logits = np.full((3, 50, 1), -8.0)
    wild = boxes + RNG.normal(0, 60, boxes.shape)
    kinds = {"b": OutputKind("boxes"), "s": OutputKind("logits", activation="sigmoid")}
    out = compare([{"b": boxes[i], "s": logits[i]} for i in range(3)], [{"b": wild[i], "s": logits[i]} for i in range(3)],
                  kinds, SPEC)
    assert out["b"]["passed"] and out["b"]["at_confident_positions"] == 0 and "no position" in out["b"]["not_judged"]
    fired = logits.copy()
    fired[:, :4] = 3.0  # int8 invents detections there: the scores fail
    out = compare([{"b": boxes[i], "s": logits[i]} for i in range(3)], [{"b": wild[i], "s": fired[i]} for i in range(3)],
                  kinds, SPEC)
    assert not out["s"]["passed"]


# ----------------------------------------------------------------------------- other kinds
def test_landmarks_get_no_top1_and_are_judged_relative_to_their_range():
    pts = RNG.uniform(40, 160, (6, 1, 63))
    kind = from_values(pts, [1, 63])
    assert kind is not None and kind.kind == "landmarks"
    m = evaluate_output(list(pts), list(pts + RNG.normal(0, 0.3, pts.shape)), kind, SPEC)
    assert "top1_agreement" not in m and m["passed"] and "range_error" in m
    bad = evaluate_output(list(pts), list(pts + RNG.normal(0, 8, pts.shape)), kind, SPEC)
    assert not bad["passed"] and any("of the range" in f for f in bad["failures"])


def test_landmark_records_with_visibility_logits_are_landmarks_not_an_embedding():
    """MediaPipe's pose landmarks: 39 records of x, y (pixels), z, visibility and presence logits.
    Read as triples the signed logits land in x and y; read as records of five they are points."""
    rec = np.concatenate([RNG.uniform(20, 240, (6, 39, 2)), RNG.normal(0, 30, (6, 39, 1)),
                          RNG.normal(0, 6, (6, 39, 2))], axis=-1)
    kind = from_values(rec.reshape(6, 1, 195), [1, 195])
    assert kind is not None and kind.kind == "landmarks" and "39 points of 5" in kind.reason
    signed = RNG.normal(0, 1, (6, 1, 195))  # a signed vector of that length stays an embedding
    assert from_values(signed, [1, 195]).kind == "embedding"


def test_world_landmarks_beside_image_landmarks_are_coordinates_not_an_embedding():
    """MediaPipe's hand (21 points) and pose (39 records of 5) models also give the same points in
    metric 3-D coordinates centred on the object: signed x, y, z. Alone such a vector reads as an
    embedding; beside a landmarks output with as many points it is judged as coordinates, by error
    over its range. A signed vector of another length beside them stays an embedding."""
    n = 8
    for image, points in (((n, 1, 63), 21), ((n, 1, 195), 39)):
        img = RNG.uniform(20, 200, image)
        world = RNG.normal(0, 0.05, (n, 1, points * 3))
        emb = RNG.normal(0, 1, (n, 1, 64))
        outs = [TensorSpec("img", [1, image[-1]], "float32"), TensorSpec("world", [1, points * 3], "float32"),
                TensorSpec("emb", [1, 64], "float32")]
        ref = [{"img": img[i], "world": world[i], "emb": emb[i]} for i in range(n)]
        kinds = infer_kinds(outs, ref, None)
        assert kinds["img"].kind == "landmarks"
        assert kinds["world"].kind == "landmarks" and "as many as img" in kinds["world"].reason, kinds["world"]
        assert kinds["emb"].kind == "embedding"
        alone = infer_kinds(outs[1:], [{k: v for k, v in r.items() if k != "img"} for r in ref], None)
        assert alone["world"].kind == "embedding"
    # judged by range error: a 1%-of-range wobble passes, a quarter of the range fails
    kind = kinds["world"]
    span = float(np.ptp(world))
    ok = evaluate_output(list(world), list(world + RNG.normal(0, 0.005 * span, world.shape)), kind, SPEC)
    assert ok["passed"] and "range_error" in ok and "cosine_mean" not in ok
    bad = evaluate_output(list(world), list(world + RNG.normal(0, 0.25 * span, world.shape)), kind, SPEC)
    assert not bad["passed"]


def test_landmarks_are_also_judged_per_sample_over_each_objects_own_extent():
    """A landmark task measures each object's points against that object's size (NME). Over a
    range much wider than one object (hands anywhere in a frame, world coordinates) the range
    error is lenient: MediaPipe hand lite's world landmarks passed at range error 0.018 while they
    were 6.2% of the hand's extent off. Each sample here is a hand of extent ~17 placed anywhere
    in 0..200: a wobble of 1.5% of the range passes the range error and fails per sample."""
    rng = np.random.default_rng(11)
    n = 12
    centres = rng.uniform(20, 180, (n, 1, 3))
    pts = centres + rng.uniform(-5, 5, (n, 21, 3))
    kind = OutputKind("landmarks", dims=3)
    ref = list(pts.reshape(n, 1, 63))
    span = float(np.ptp(pts))
    wobbly = evaluate_output(ref, list((pts + rng.normal(0, 0.015 * span, pts.shape)).reshape(n, 1, 63)), kind, SPEC)
    assert wobbly["range_error"] < SPEC.regression.max_error, wobbly
    assert not wobbly["passed"] and wobbly["point_error"] > 0.1 and wobbly["points"] == 21
    assert any("of each sample's extent" in f for f in wobbly["failures"]), wobbly["failures"]
    fine = evaluate_output(ref, list((pts + rng.normal(0, 0.05, pts.shape)).reshape(n, 1, 63)), kind, SPEC)
    assert fine["passed"] and fine["point_error"] < 0.02, fine
    # one sample off by a quarter of its extent: the mean over 12 samples carries it (2%), the worst names it
    one = pts.copy()
    one[7] += 0.25 * np.linalg.norm(np.ptp(pts[7], axis=0)) / np.sqrt(3)
    m = evaluate_output(ref, list(one.reshape(n, 1, 63)), kind, SPEC)
    assert m["worst_sample"] == 7 and 0.2 < m["point_error_worst"] < 0.3 and m["passed"]
    # a sample whose float points collapse onto one spot (no hand there) is not judged per sample
    dot = pts.copy()
    dot[3] = centres[3] + rng.uniform(-0.01, 0.01, (21, 3))
    wob = dot.copy()
    wob[3] += 0.2
    m = evaluate_output(list(dot.reshape(n, 1, 63)), list(wob.reshape(n, 1, 63)), kind, SPEC)
    assert m["passed"] and m["point_samples_collapsed"] == 1 and m["point_error"] == 0.0, m
    # judged at some samples only (a companion's mask), the worst is still named among all of them
    at = np.ones(n, bool)
    at[[0, 2]] = False
    part, _ = regression_metrics(pts.reshape(n, 1, 63), one.reshape(n, 1, 63), -1, SPEC, at, 3, 3)
    assert part["worst_sample"] == 7 and part["at_confident_positions"] == n - 2, part
    # a landmarks output with no recorded dims is read as x, y, z when its length splits so
    assert evaluate_output(ref, list(one.reshape(n, 1, 63)), OutputKind("landmarks"), SPEC)["points"] == 21


def test_pose_records_are_judged_by_their_coordinates_not_their_visibility_logits():
    """Records of x, y, z, visibility, presence (MediaPipe pose): the per-sample point error reads
    the first three values of each record; a visibility logit moving by 3 is no point moving."""
    rng = np.random.default_rng(12)
    n = 8
    rec = np.concatenate([rng.uniform(20, 240, (n, 39, 2)), rng.normal(0, 30, (n, 39, 1)),
                          rng.normal(0, 6, (n, 39, 2))], axis=-1)
    kind = from_values(rec.reshape(n, 1, 195), [1, 195])
    assert kind.dims == 5
    moved = rec.copy()
    moved[..., 3:] += 3.0
    m = evaluate_output(list(rec.reshape(n, 1, 195)), list(moved.reshape(n, 1, 195)), kind, SPEC)
    assert m["points"] == 39 and m["point_error"] == 0.0


def test_normalised_landmarks_are_points_not_an_embedding():
    """A face-alignment head (PFLD-style: 98 points, x, y in 0..1 of the crop, [1, 196] or
    [1, 98, 2]) read as an embedding was judged by cosine, which a positive vector keeps near 1:
    points 3% of the crop off passed at cosine 0.99+. They are landmarks of two values, judged by
    range and per-face error, and fail there. Probabilities and pooled features in 0..1 crowd at 0
    and stay what they were; so do centred (signed) coordinates, which need a declaration."""
    rng = np.random.default_rng(21)
    n = 10
    pts = rng.uniform(0.3, 0.7, (n, 98, 2))
    flat = pts.reshape(n, 1, 196)
    kind = from_values(flat, [1, 196])
    assert kind.kind == "landmarks" and kind.dims == 2 and "normalised" in kind.reason, kind
    grid = from_values(pts.reshape(n, 1, 98, 2), [1, 98, 2])
    assert grid.kind == "landmarks" and grid.dims == 2, grid
    off = flat + rng.normal(0, 0.03, flat.shape)
    assert evaluate_output(list(flat), list(off), OutputKind("embedding"), SPEC)["passed"]  # what cosine said
    m = evaluate_output(list(flat), list(off), kind, SPEC)
    assert not m["passed"] and m["points"] == 98 and m["point_error"] > 0.05, m
    assert evaluate_output(list(flat), list(flat + rng.normal(0, 0.002, flat.shape)), kind, SPEC)["passed"]
    sparse = np.maximum(rng.normal(0, 0.3, (n, 1, 196)), 0)  # ReLU features: half of them 0
    assert from_values(sparse, [1, 196]).kind == "embedding"
    probs = 1 / (1 + np.exp(-rng.normal(-4, 2, (n, 1, 196))))  # multi-label probabilities, mostly near 0
    assert from_values(probs, [1, 196]).kind != "landmarks"
    assert from_values(pts.reshape(n, 1, 196) * 2 - 1, [1, 196]).kind == "embedding"  # centred: signed


def test_points_of_two_values_are_not_read_in_threes():
    """42 values hold 21 points of x, y or 14 of x, y, z: a third value as positive and as wide as
    x and y is an x or a y, so the points have two; a signed depth beside them makes three."""
    rng = np.random.default_rng(22)
    two = rng.uniform(10, 200, (10, 1, 42))
    assert from_values(two, [1, 42]).dims == 2
    three = np.concatenate([rng.uniform(10, 200, (10, 14, 2)), rng.normal(0, 10, (10, 14, 1))], -1).reshape(10, 1, 42)
    assert from_values(three, [1, 42]).dims == 3


def test_declared_landmark_dims_are_checked_against_the_shape():
    name, kind = parse_declaration("pose:landmarks:dims=5")
    assert (name, kind.kind, kind.dims) == ("pose", "landmarks", 5) and "5 values per point" in kind.label()
    check_fits("pose", kind, [1, 195])
    with pytest.raises(InputValidationError, match="points of 5"):
        check_fits("pose", kind, [1, 63])
    with pytest.raises(InputValidationError, match="2 to 8"):
        parse_declaration("pose:landmarks:dims=1")
    with pytest.raises(InputValidationError, match="unknown option 'dims'"):
        parse_declaration("p:scores:dims=3")
    _, kind = parse_declaration("lm:landmarks:dims=3,coords=2")
    assert kind.coords == 2 and "judged by x, y" in kind.label()
    with pytest.raises(InputValidationError, match="coords is 2"):
        parse_declaration("lm:landmarks:coords=4")
    with pytest.raises(InputValidationError, match="more than its 2 values"):
        check_fits("lm", OutputKind("landmarks", dims=2, coords=3), [1, 42])
    # without dims, 196 values are read as x, y pairs: coords=3 would silently judge by two
    with pytest.raises(InputValidationError, match="coords=3 is more than its 2 values"):
        check_fits("lm", parse_declaration("lm:landmarks:coords=3")[1], [1, 196])
    check_fits("lm", parse_declaration("lm:landmarks:coords=3")[1], [1, 63])


def test_image_landmarks_are_placed_by_x_y_and_world_landmarks_by_x_y_z():
    """An image landmark's third value is a relative depth estimate: across MediaPipe's five iris
    points it spans 0.06 px while int8 moves it by about as much as x and y, which nearly doubled
    the iris's point error (7.3% of its extent with z, 4.0% without) in a plane the task does not
    measure. Image landmarks are judged by x, y; world landmarks (metric 3-D) by x, y, z."""
    rng = np.random.default_rng(23)
    n = 8
    img = np.concatenate([rng.uniform(20, 40, (n, 5, 2)), np.full((n, 5, 1), -3.0)], -1)
    kinds = infer_kinds([TensorSpec("img", [1, 15], "float32"), TensorSpec("world", [1, 15], "float32")],
                        [{"img": img[i].reshape(1, 15), "world": rng.normal(0, 0.02, (1, 15))} for i in range(n)], None)
    assert (kinds["img"].dims, kinds["img"].coords) == (3, 2) and (kinds["world"].dims, kinds["world"].coords) == (3, 3)
    deep = img.copy()
    deep[..., 2] += rng.normal(0, 3.0, (n, 5))  # int8 noise on the depth alone
    m = evaluate_output(list(img.reshape(n, 1, 15)), list(deep.reshape(n, 1, 15)), kinds["img"], SPEC)
    assert m["point_coords"] == 2 and m["point_error"] == 0.0, m
    three = evaluate_output(list(img.reshape(n, 1, 15)), list(deep.reshape(n, 1, 15)), OutputKind("landmarks", dims=3), SPEC)
    assert three["point_coords"] == 3 and three["point_error"] > 0.05


def _ctc_paths(n: int = 10, steps: int = 40, classes: int = 30) -> list[np.ndarray]:
    ref = []
    for _ in range(n):
        path = RNG.integers(1, classes, steps)
        path[RNG.random(steps) < 0.6] = 0  # mostly CTC blanks
        ref.append(np.eye(classes)[path][None] * 0.9 + 0.1 / classes)
    return ref


def test_ctc_sequence_is_judged_by_token_error_rate():
    steps = 40
    ref = _ctc_paths(steps=steps)
    kind = OutputKind("sequence", axis=-1, blank=0)
    m = evaluate_output(ref, [r.copy() for r in ref], kind, SPEC)
    assert m["step_agreement"] == 1.0 and m["sequence_agreement"] == 1.0 and m["token_error"] == 0.0
    assert m["passed"] and "top1_agreement" not in m
    tokens = sum(len(ctc_collapse(r[0].argmax(-1), 0)) for r in ref)
    flipped = [r.copy() for r in ref]
    for f in flipped[:3]:  # one symbol changed in three of ten strings: 3 edits
        k = int(np.argmax(f[0].argmax(-1) > 0))
        f[0, k] = np.roll(f[0, k], 1)
    m = evaluate_output(ref, flipped, kind, SPEC)
    # whole lines differ in 3 of 10, but 3 tokens of ~140 is well inside the CER budget: it passes
    assert m["step_agreement"] == pytest.approx(1 - 3 / (10 * steps)) and m["sequence_agreement"] == 0.7
    assert m["token_error"] == pytest.approx(3 / tokens, abs=1e-6) and m["passed"], m
    # alignment jitter (a symbol's run moved by a step) leaves the text and the verdict alone
    jitter = [r.copy() for r in ref]
    for f in jitter:  # each symbol's run grows into the blank after it (where that keeps the text)
        path = f[0].argmax(-1)
        for i in range(len(path) - 2):
            if path[i] != 0 and path[i + 1] == 0 and path[i + 2] != path[i]:
                f[0, i + 1] = f[0, i]
    mj = evaluate_output(ref, jitter, kind, SPEC)
    assert mj["token_error"] == 0.0 and mj["passed"] and mj["step_agreement"] < 0.9
    # blanks where float reads symbols: the text is lost, the gate fails and says how much
    lost = [r.copy() for r in ref]
    for f in lost[:5]:
        f[0, :, :] = np.eye(f.shape[-1])[0] * 0.9 + 0.1 / f.shape[-1]
    ml = evaluate_output(ref, lost, kind, SPEC)
    assert not ml["passed"] and ml["token_error"] > 0.3
    assert any(x.startswith("token error rate") and f"{tokens} tokens" in x for x in ml["failures"])
    # a profile can ask for whole lines too
    strict = dataclasses.replace(SPEC, sequence=dataclasses.replace(SPEC.sequence, min_ctc_sequence_agreement=0.9))
    ms = evaluate_output(ref, flipped, kind, strict)
    assert not ms["passed"] and any("whole-sequence agreement 0.700 < 0.9" in x for x in ms["failures"])
    assert ctc_collapse(np.array([0, 3, 3, 0, 3, 5, 5, 0]), 0) == [3, 3, 5]
    assert edit_distance([1, 2, 3], [1, 3]) == 1 and edit_distance([], [4, 4]) == 2 and edit_distance([1, 2], [2, 1]) == 2


def test_a_classifiers_raw_logits_are_logits_not_an_embedding():
    """ResNet/MobileNet exported without their softmax end in a Gemm: [1, 1000] signed values. Read
    as an embedding they were judged by cosine, which stays high while the top class flips; a top
    value standing far above the rest says logits. Roughly normal embeddings and pooled (>= 0)
    features are not logits."""
    logits = RNG.normal(0, 2.0, (12, 1, 1000))
    logits[np.arange(12), 0, RNG.integers(0, 1000, 12)] += RNG.uniform(14, 22, 12)
    kind = from_values(logits, [1, 1000])
    assert (kind.kind, kind.activation) == ("logits", "softmax") and "raw logits" in kind.reason
    flipped = logits.copy()
    for k in range(4):  # the runner-up overtakes the top class in 4 of 12 samples: cosine still ~0.99
        top = flipped[k, 0].argmax()
        flipped[k, 0, (top + 1) % 1000] = flipped[k, 0, top] + 0.5
    m = evaluate_output(list(logits), list(flipped), kind, SPEC)
    assert not m["passed"] and m["top1_agreement"] == pytest.approx(8 / 12, abs=1e-6)
    assert from_values(RNG.normal(0, 1, (12, 1, 512)), [1, 512]).kind == "embedding"
    pooled = RNG.exponential(1.0, (12, 1, 1280)) ** 3  # heavy-tailed, non-negative features
    assert from_values(pooled, [1, 1280]).kind != "logits"


def test_pooled_features_at_the_tail_are_an_embedding():
    """A backbone's feature vector (ReLU, global average pool, flatten: [1, 1280], all >= 0) is an
    embedding by the graph; by values alone its positive pairs read as landmark points."""
    from onnx import TensorProto, helper

    from edge_sdk.converters.graph import from_onnx

    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("GlobalAveragePool", ["h"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1280, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1280])])
    graph = from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    pooled = RNG.exponential(1.0, (6, 1, 1280)) ** 3
    assert from_values(pooled, [1, 1280]).kind == "landmarks"  # what values alone say
    kinds = infer_kinds([TensorSpec("y", [1, 1280], "float32")], [{"y": p} for p in pooled], graph)
    assert (kinds["y"].kind, kinds["y"].source) == ("embedding", "graph") and "GlobalAveragePool" in kinds["y"].reason


def test_class_logits_beside_box_regressions_are_logits():
    """An SSD or DETR-style head exported without its post-processing: boxes [1, N, 4] and class
    logits [1, N, C], two per-position outputs that values alone read as regressions. Beside the
    boxes the other is class logits (softmax where one column, a background, is most positions'
    argmax; sigmoid otherwise), and the boxes are judged where those classes are confident."""
    n, c = 300, 21
    boxes = RNG.normal(0, 1.5, (6, 1, n, 4))
    soft = RNG.normal(0, 1, (6, 1, n, c))
    soft[..., 0] += 4.0  # background wins at most anchors
    soft[:, :, :20, 5] += 9.0  # a few anchors see class 5
    sig = RNG.normal(-4, 1, (6, 1, n, c))
    sig[:, :, :20, 3] += 8.0
    for logits, act in ((soft, "softmax"), (sig, "sigmoid")):
        kinds = infer_kinds([TensorSpec("boxes", [1, n, 4], "float32"), TensorSpec("cls", [1, n, c], "float32")],
                            [{"boxes": b, "cls": k} for b, k in zip(boxes, logits)], None)
        assert (kinds["cls"].kind, kinds["cls"].activation) == ("logits", act), kinds["cls"]
        assert kinds["boxes"].kind == "boxes" and "confident" in kinds["boxes"].reason
    # two box-like outputs of 4 stay as they were
    kinds = infer_kinds([TensorSpec("a", [1, n, 4], "float32"), TensorSpec("b", [1, n, 4], "float32")],
                        [{"a": b, "b": b * 2} for b in boxes], None)
    assert kinds["a"].kind == kinds["b"].kind == "regression"


def test_time_major_ctc_logits_are_a_sequence():
    """A CRNN exported time-major ([T, 1, C] raw logits, ddddocr's OCR) has no softmax to say
    "sequence": the greedy path mostly on one class (the blank) says it. The same logits with no
    dominant class, or batch-first [1, T, C] (a detector's query list looks alike), stay as before."""
    paths = np.stack([p[0] for p in _ctc_paths(n=8, steps=24, classes=60)])  # [8, 24, 60] probabilities
    logits = (np.log(paths) * 3.0)[:, :, None, :].astype(np.float32)  # [8, T=24, 1, C=60] signed logits
    kind = from_values(logits, [24, 1, 60])
    assert (kind.kind, kind.blank, kind.axis) == ("sequence", 0, -1) and "CTC logits" in kind.reason
    noise = RNG.normal(0, 1, logits.shape).astype(np.float32)
    assert from_values(noise, [24, 1, 60]).kind != "sequence"
    assert from_values(logits[:, :, 0][:, None], [1, 24, 60]).kind != "sequence"
    assert from_values(logits[:, :2], [2, 1, 60]).kind != "sequence"  # too few steps


def test_sequence_without_blank_is_judged_step_by_step():
    ref = _ctc_paths()
    kind = OutputKind("sequence", axis=-1, blank=None)
    flipped = [r.copy() for r in ref]
    for f in flipped[:3]:
        f[0, 0] = np.roll(f[0, 0], 1)
    m = evaluate_output(ref, flipped, kind, SPEC)
    assert "token_error" not in m and m["sequence_agreement"] == 0.7
    assert not m["passed"] and any("whole-sequence agreement 0.700 < 0.9" in f for f in m["failures"])


def test_masks_by_iou_and_embeddings_by_cosine():
    mask = (RNG.random((3, 1, 32, 32, 1)) > 0.7).astype(np.float64)
    m = evaluate_output(list(mask), list(mask), OutputKind("mask"), SPEC)
    assert m["iou"] == 1.0 and m["passed"]
    shifted = np.roll(mask, 3, axis=2)
    assert not evaluate_output(list(mask), list(shifted), OutputKind("mask"), SPEC)["passed"]
    emb = RNG.normal(0, 1, (5, 1, 96))
    ok = evaluate_output(list(emb), list(emb + RNG.normal(0, 0.05, emb.shape)), OutputKind("embedding"), SPEC)
    assert ok["passed"] and ok["cosine_mean"] > 0.99
    assert not evaluate_output(list(emb), list(emb + RNG.normal(0, 1, emb.shape)), OutputKind("embedding"), SPEC)["passed"]


def test_a_mask_lost_in_a_few_frames_fails_where_the_pooled_iou_passes():
    """Selfie segmentation's int8 artifacts passed a pooled IoU of 0.85-0.94 while on 2-4 of 36
    frames the person float marks was mostly gone. Frame by frame: the mean over frames that show
    something and the worst frame are judged; a heatmap (many channels) keeps the pooled IoU alone."""
    n = 20
    yy, xx = np.mgrid[:32, :32]
    blobs = []
    for i in range(n):  # a person-sized blob per frame, a large one in most
        r = 6 + (i % 5) * 2
        blobs.append((((yy - 16) ** 2 + (xx - 10 - i % 12) ** 2) <= r * r).astype(np.float64)[None, :, :, None])
    ref = np.stack(blobs) * 0.9 + 0.05
    test = ref.copy()
    test[3] = 0.05  # int8 loses the person in one frame, a small one
    m = evaluate_output(list(ref), list(test), OutputKind("mask"), SPEC)
    assert m["iou"] >= SPEC.maps.min_iou  # pooled: passes
    assert m["frames"] == n and m["frame_iou_min"] == 0.0 and m["worst_frame"]["sample"] == 3
    assert not m["passed"] and any("worst frame IoU 0.000" in f for f in m["failures"]), m["failures"]
    empty = ref.copy()
    empty[5] = 0.05  # a frame with nothing in float nor int8 is not judged
    ok = evaluate_output(list(empty), list(empty), OutputKind("mask"), SPEC)
    assert ok["passed"] and ok["frames"] == n - 1 and ok["frame_iou_min"] == 1.0
    heat = evaluate_output(list(ref), list(test), OutputKind("heatmap"), SPEC)
    assert heat["passed"] and heat["frame_iou_min"] == 0.0  # reported, not judged


# ----------------------------------------------------------------------------- inference of kinds
def _onnx_graph(tail: str, out_shape: list[int]):
    import onnx
    from onnx import TensorProto, helper

    from edge_sdk.converters.graph import from_onnx

    nodes = [helper.make_node("Relu", ["x"], ["h"])]
    if tail == "packed":
        nodes += [helper.make_node("Slice", ["h", "s0", "s4", "ax"], ["b0"]), helper.make_node("Mul", ["b0", "k"], ["b"]),
                  helper.make_node("Slice", ["h", "s4", "s9", "ax"], ["c0"]), helper.make_node("Sigmoid", ["c0"], ["c"]),
                  helper.make_node("Concat", ["b", "c"], ["y"], axis=1)]
        inits = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in (("s0", 0), ("s4", 4), ("s9", 9), ("ax", 1))]
        inits.append(helper.make_tensor("k", TensorProto.FLOAT, [], [320.0]))
    else:
        nodes.append(helper.make_node(tail, ["h"], ["y"], **({"axis": -1} if tail == "Softmax" else {})))
        inits = []
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, out_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], inits)
    return from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("tail, shape, want", [
    ("Softmax", [1, 10], "scores(axis -1)"),
    ("Softmax", [1, 40, 100], "sequence(axis -1)"),
    ("Sigmoid", [1, 1, 64, 64], "mask"),
    ("Sigmoid", [1, 3], "scores(axis -1)"),
    ("packed", [1, 9, 100], "packed(boxes 0:4, scores 4:9 @axis -2)"),
])
def test_kinds_come_from_the_graph_tail(tail, shape, want):
    graph = _onnx_graph(tail, shape)
    ref = [{"y": RNG.random(shape)}]
    kinds = infer_kinds([TensorSpec("y", shape, "float32")], ref, graph)
    assert kinds["y"].label() == want and kinds["y"].source == "graph"


def test_kinds_from_values_when_the_graph_says_nothing():
    n = 300
    packed = np.concatenate([RNG.uniform(0, 320, (2, 4, n)), RNG.uniform(0, 1, (2, 5, n))], axis=1)
    k = from_values(packed[:, None], [1, 9, n])
    assert k.kind == "packed" and [(g.name, g.start, g.stop) for g in k.groups] == [("boxes", 0, 4), ("scores", 4, 9)]
    logits = RNG.normal(-50, 10, (3, 1, 896, 1))
    assert from_values(logits, [1, 896, 1]).label() == "logits(axis -1, sigmoid)"
    emb = RNG.normal(0, 5, (3, 1, 1, 1, 96))
    assert from_values(emb, [1, 1, 1, 96]).kind == "embedding"
    probs = RNG.dirichlet(np.ones(7), (4, 1))
    assert from_values(probs, [1, 7]).kind == "scores"
    assert from_values(RNG.normal(0, 1, (3, 1, 5, 5)), [1, 5, 5]) is None
    # a log-mel spectrogram [1, 1, frames, mels] in dB is a feature map, not a mask to threshold
    mel = RNG.normal(-20, 15, (3, 1, 1, 76, 32))
    assert from_values(mel, [1, 1, 76, 32]).kind == "regression"
    assert from_values(RNG.uniform(0, 1, (3, 1, 1, 64, 64)), [1, 1, 64, 64]).kind == "mask"
    assert from_values(RNG.normal(0, 3, (3, 1, 17, 32, 32)), [1, 17, 32, 32]).kind == "heatmap"


def test_boxes_beside_scores_are_recognised():
    kinds = infer_kinds([TensorSpec("reg", [1, 896, 16], "float32"), TensorSpec("cls", [1, 896, 1], "float32")],
                        [{"reg": RNG.normal(0, 50, (1, 896, 16)), "cls": RNG.normal(-40, 10, (1, 896, 1))}], None)
    assert kinds["reg"].kind == "boxes" and kinds["cls"].kind == "logits"


# ----------------------------------------------------------------------------- declarations
def test_declarations_parse_names_with_colons_and_packed_groups():
    name, k = parse_declaration("StatefulPartitionedCall:0:packed:axis=1,boxes=0-4,cls=4-84/scores")
    assert name == "StatefulPartitionedCall:0" and k.kind == "packed" and k.axis == 1 and k.source == "declared"
    assert [(g.name, g.start, g.stop, g.kind) for g in k.groups] == [("boxes", 0, 4, "boxes"), ("cls", 4, 84, "scores")]
    assert parse_declaration("probs:logits:activation=sigmoid")[1].activation == "sigmoid"
    assert parse_declaration("out:ctc:blank=0")[1].kind == "sequence"
    k = parse_declaration("output0:packed:axis=2,boxes=0-4,obj=4-5,scores=5-85")[1]
    assert [(g.name, g.kind) for g in k.groups] == [("boxes", "boxes"), ("obj", "objectness"), ("scores", "scores")]


@pytest.mark.parametrize("bad", ["nokind", "x:wat", "x:packed", "x:packed:boxes=4", "x:scores:axis=one", "x:packed:wat=0-4",
                                 "x:packed:boxes=0-4,obj=4-6,scores=6-9", "x:packed:boxes=0-4,obj=4-5",
                                 "x:obj", "x:boxes:bins=1", "x:scores:bins=8", "x:scores:color=red"])
def test_bad_declarations_are_clear_errors(bad):
    with pytest.raises(InputValidationError):
        parse_declaration(bad)


def test_declaration_must_fit_the_output():
    with pytest.raises(InputValidationError, match="outside axis"):
        infer_kinds([TensorSpec("y", [1, 9, 10], "float32")], [{"y": np.zeros((1, 9, 10))}], None,
                    {"y": parse_declaration("y:packed:axis=1,boxes=0-4,scores=4-12")[1]})
    with pytest.raises(InputValidationError, match="does not have"):
        infer_kinds([TensorSpec("y", [1, 3], "float32")], [{"y": np.zeros((1, 3))}], None, {"z": OutputKind("scores")})


# ----------------------------------------------------------------------------- steps and names
@pytest.mark.parametrize("profile, fmt, backend, accel", [
    ("jetson-orin", "onnx-qdq", "onnxruntime", "CPUExecutionProvider"),
    ("intel-cpu", "openvino-ir", "openvino", "CPU"),
    ("intel-npu", "openvino-ir", "openvino", "CPU"),
    ("arm-cpu", "onnx-qdq", "onnxruntime", "CPUExecutionProvider"),
    ("arm-cpu", "tflite-int8", "litert", "xnnpack"),
    ("coral-edgetpu", "tflite-int8", "litert", "xnnpack"),
])
def test_gate_runs_on_the_cpu_step_of_each_format(profile, fmt, backend, accel):
    step = gate_step(builtin_profiles()[profile], fmt)
    assert (step.backend, step.accelerator, step.format) == (backend, accel, fmt)


def test_outputs_match_by_name_then_position():
    assert match_outputs({"a": 1, "b": 2}, {"b": 0, "a": 0}) == {"b": "b", "a": "a"}
    assert match_outputs({"a": 1}, {"x": 0}) == {"x": "a"}
    with pytest.raises(ConversionError):
        match_outputs({"a": 1, "b": 2}, {"x": 0})


# ----------------------------------------------------------------------------- detection lists
def _det_lists(n: int = 8, k: int = 100, pad: bool = True) -> np.ndarray:
    """[n, 1, k, 6] rows x1, y1, x2, y2, score, class sorted by score; with ``pad`` zero rows after
    the live ones (NMS inside, Ultralytics nms=True), else low-score rows (an end-to-end top K)."""
    out = np.zeros((n, 1, k, 6))
    for s in range(n):
        live = int(RNG.integers(3, 12))
        xy = RNG.uniform(0, 250, (k, 2))
        wh = RNG.uniform(10, 60, (k, 2))
        score = np.sort(np.concatenate([RNG.uniform(0.5, 0.95, live), RNG.uniform(0.0, 0.05, k - live)]))[::-1]
        rows = np.concatenate([xy, xy + wh, score[:, None], RNG.integers(0, 5, (k, 1))], 1)
        if pad:
            rows[live:] = 0
        out[s, 0] = rows
    return out


def test_a_detection_list_is_judged_by_matching_rows():
    """A detector with its NMS inside (or an NMS-free end-to-end head) outputs a sorted list of rows.
    Judged position by position, class flips vanished in a range of hundreds of pixels (passed), and
    two rows trading places failed an artifact that detected the same."""
    for pad in (True, False):
        ref = _det_lists(pad=pad)
        kind = from_values(ref, [1, 100, 6])
        assert kind.kind == "detections" and "matching rows" in kind.reason, kind
    ref = _det_lists()
    same = ref.copy()
    same[:, 0, [0, 1]] = same[:, 0, [1, 0]]  # the two best rows swap places: the same detections
    same[:, 0, 0, 4], same[:, 0, 1, 4] = ref[:, 0, 0, 4], ref[:, 0, 1, 4]  # (scores stay sorted)
    kind = OutputKind("detections")
    m = evaluate_output(list(ref), list(same), kind, SPEC)
    assert m["passed"] and m["detection_f1"] == 1.0, m["failures"]
    assert not evaluate_output(list(ref), list(same), OutputKind("regression"), SPEC)["passed"]
    gone = np.zeros_like(ref)
    m = evaluate_output(list(ref), list(gone), kind, SPEC)
    assert not m["passed"] and m["detection_f1"] == 0.0
    assert any("matched F1 0.000" in f for f in m["failures"])
    moved = ref.copy()
    moved[:, 0, :3, 5] = (moved[:, 0, :3, 5] + 1) % 5  # three detections per image change class
    assert not evaluate_output(list(ref), list(moved), kind, SPEC)["passed"]
    # position by position those class flips are a few units in a range of hundreds of pixels: passed
    assert evaluate_output(list(ref), list(moved), OutputKind("regression"), SPEC)["passed"]
    unsorted = _det_lists(pad=False)
    unsorted[:, 0] = unsorted[:, 0, ::-1]
    assert from_values(unsorted, [1, 100, 6]).kind != "detections"


def test_end2end_head_keeps_the_models_own_rows():
    from edge_sdk.detect import Head, decode_end2end

    rows = np.array([[[10, 20, 50, 60, 0.9, 2], [12, 22, 52, 62, 0.8, 2], [0, 0, 0, 0, 0.0, 0]]], np.float32)
    got = decode_end2end(rows, Head("end2end", conf=0.5), labels=["a", "b", "c"])
    assert [(d.label, round(d.score, 2), d.box) for d in got] == [("c", 0.9, (10.0, 20.0, 50.0, 60.0)),
                                                                 ("c", 0.8, (12.0, 22.0, 52.0, 62.0))]  # no NMS
    with pytest.raises(InputValidationError, match="end2end head needs an output"):
        decode_end2end(np.zeros((1, 5, 4)), Head("end2end"))


def test_sensitivity_skips_tensors_that_are_not_float(tmp_path):
    """A detector with its NMS inside has bool and index tensors; exposed as float outputs they made
    ONNX Runtime refuse the model, and recovery searched no layers (a YOLOv8 exported with nms=True)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    from edge_sdk.converters.recovery.sensitivity import onnx_layers

    w = numpy_helper.from_array(RNG.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(RNG.normal(0, 0.5, (4, 8, 1, 1)).astype(np.float32), "w2")
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Greater", ["r", "half"], ["g"], name="greater"),
             helper.make_node("Where", ["g", "r", "zero"], ["k"], name="where"),
             helper.make_node("Conv", ["k", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], [w, w2, half, zero])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "f.onnx")
    feeds = [{"x": RNG.normal(0, 1, (1, 3, 16, 16)).astype(np.float32)} for _ in range(6)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    quantize_static(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ)
    ranked = onnx_layers(tmp_path / "f.onnx", tmp_path / "q.onnx", feeds)
    assert ranked and "greater" not in {e.name for e in ranked}


def _yolov8_like(samples: int = 6, anchors: int = 600, seed: int = 0) -> np.ndarray:
    """``[S, 1, 4 + 2, N]`` YOLOv8-style rows: centre/size boxes in pixels, two class scores. Per
    sample three faces (class 0) fire 25 anchors each at 0.85-0.95 around one box; one object of a
    rarer class (1) fires 3 anchors at 0.35-0.45, below the per-anchor positive threshold."""
    rng = np.random.default_rng(seed)
    out = np.zeros((samples, 1, 6, anchors))
    out[:, 0, 0:2] = rng.uniform(20, 300, (samples, 2, anchors))
    out[:, 0, 2:4] = rng.uniform(10, 60, (samples, 2, anchors))
    out[:, 0, 4:6] = rng.uniform(0.0, 0.05, (samples, 2, anchors))
    for s in range(samples):
        for k, (cls, count, lo, hi) in enumerate([(0, 25, 0.85, 0.95)] * 3 + [(1, 3, 0.35, 0.45)]):
            idx = np.arange(k * 30, k * 30 + count)
            centre = np.array([40 + 70 * k, 60 + 50 * k])
            out[s, 0, 0:2, idx] = centre + rng.normal(0, 1.5, (count, 2))
            out[s, 0, 2:4, idx] = 40 + rng.normal(0, 1.0, (count, 2))
            out[s, 0, 4 + cls, idx] = rng.uniform(lo, hi, count)
    return out


def test_a_packed_detector_is_judged_by_the_objects_its_head_draws():
    """A YOLOv8n (NudeNet's) lost 5 of 10 detections of its rarer class while the per-anchor
    positive F1 stayed 0.97: faces fire 25 anchors each, the other class three, scored 0.3-0.5.
    The objects the head draws (score >= 0.25 after class-aware NMS) are matched float to int8."""
    rows = _yolov8_like(samples=10)
    kind = OutputKind("packed", axis=-2, groups=[OutputGroup("boxes", 0, 4, "boxes"), OutputGroup("scores", 4, 6, "scores")])
    ok = evaluate_output(list(rows), list(rows + RNG.normal(0, 0.01, rows.shape)), kind, SPEC)
    assert ok["passed"], ok["failures"]
    assert ok["groups"]["objects"]["detections"] == [40, 40] and ok["groups"]["objects"]["object_f1"] == 1.0

    lost = rows.copy()
    lost[:4, 0, 5] *= 0.3  # the rarer class falls below 0.14 on four of ten samples: the pooled F1 still 0.95
    bad = evaluate_output(list(rows), list(lost), kind, SPEC)
    assert bad["groups"]["scores"]["passed"], "per anchor, nothing is lost at 0.5"
    assert not bad["passed"] and bad["groups"]["objects"]["worst_class"] == {"class": 1, "float_detections": 10,
                                                                              "recall": pytest.approx(0.6, abs=1e-3)}
    assert any("class 1: int8 finds 60%" in f for f in bad["failures"]), bad["failures"]
    assert bad["groups"]["objects"]["object_f1"] >= 0.9  # what fails it is the class, not the pool

    near = rows.copy()  # 0.35-0.45 against 0.22: by default what is drawn counts, a margin forgives it
    near[:, 0, 5] = np.where(near[:, 0, 5] > 0.3, 0.22, near[:, 0, 5])
    strict = evaluate_output(list(rows), list(near), kind, SPEC)["groups"]["objects"]
    assert strict["object_recall"] < 1.0 and strict["detections"][0] == 40
    lenient = dataclasses.replace(SPEC, scores=dataclasses.replace(SPEC.scores, object_margin=0.4))
    assert evaluate_output(list(rows), list(near), kind, lenient)["groups"]["objects"]["object_f1"] == 1.0

    raw = rows.copy()  # raw regressors (YOLOX offsets, log sizes) are not boxes: not judged as objects
    raw[:, 0, 2:4] = np.log(raw[:, 0, 2:4]) - 4
    assert "objects" not in evaluate_output(list(raw), list(raw), kind, SPEC)["groups"]
    few = evaluate_output(list(rows[:2]), list(lost[:2]), kind, SPEC)["groups"]["objects"]  # 8 objects: too few to judge
    assert few["passed"] and "draws only 8 object(s)" in few["not_judged"]
    background = rows.copy()  # a softmax head's background class scores every anchor: not sparse objects
    background[:, 0, 4] = 0.9
    assert "objects" not in evaluate_output(list(background), list(background), kind, SPEC)["groups"]


def _ssd_faces(samples: int = 12, seed: int = 3) -> tuple[dict, list[dict[str, np.ndarray]]]:
    """An ssd-anchors head (32x32 input, 40 anchors) and float outputs with one confident face a
    sample, fired by its anchor and a weaker neighbour (several anchors per object, as BlazeFace's)."""
    from edge_sdk.anchors import parse_spec

    spec = dataclasses.replace(parse_spec("strides=8,16;fixed=1;conf=0.5;iou=0.3").with_size(32, 32),
                               boxes="boxes", scores="scores")
    rng = np.random.default_rng(seed)
    outs = []
    for s in range(samples):
        boxes = np.zeros((1, spec.count, 4), np.float32)
        boxes[..., 2:] = 8.0  # 8 px boxes at their anchors
        logits = rng.normal(-8.0, 1.0, (1, spec.count, 1)).astype(np.float32)
        k = int(rng.integers(0, 16))
        logits[0, 2 * k, 0], logits[0, 2 * k + 1, 0] = 4.0, 2.0  # two anchors of one cell: one face after NMS
        outs.append({"boxes": boxes, "scores": logits})
    return {"head": "ssd-anchors", "output": "boxes", "anchors": spec.to_dict()}, outs


def test_a_declared_ssd_head_is_judged_by_the_objects_it_draws(monkeypatch):
    """BlazeFace back camera, jetson-orin: several anchors fire on one face, and the gate passed a
    candidate at a per-anchor positive F1 of 0.94 whose decoded faces matched float's at 0.88. With
    ``--head ssd-anchors`` the gate decodes both models as the device does and matches the faces."""
    import edge_sdk.converters.accuracy as acc

    post, ref = _ssd_faces()
    same = acc.head_objects(ref, [dict(o) for o in ref], post, SPEC)
    assert same is not None
    name, figures, fails = same
    assert name == "scores" and not fails and figures["detections"] == [12, 12] and figures["object_f1"] == 1.0
    assert "40 anchors" in figures["decoded"] and "score >= 0.5" in figures["decoded"]

    lost = [dict(o) for o in ref]
    for o in lost[:3]:  # int8 keeps the weaker anchor of three faces just under the threshold, loses the best
        s = o["scores"].copy()
        s[s > 3.0] = -0.2
        s[(s > 1.0) & (s < 3.0)] = -0.1
        o["scores"] = s
    _, figures, fails = acc.head_objects(ref, lost, post, SPEC)
    assert figures["detections"] == [12, 9] and figures["object_recall"] == pytest.approx(0.75)
    assert fails and "objects (score >= 0.5) F1 0.857" in fails[0], fails

    assert acc.head_objects(ref, lost, None, SPEC) is None  # no head declared: the outputs alone judge
    assert acc.head_objects(ref, lost, {"head": "yolov8", "output": "boxes"}, SPEC) is None
    quiet = [{"boxes": o["boxes"], "scores": np.full_like(o["scores"], -8.0)} for o in ref]
    assert acc.head_objects(quiet, quiet, post, SPEC) is None  # float draws nothing: nothing to match

    # In the gate's report: beside the score output's own figures, in its margins (what recovery ranks by).
    kinds = {"boxes": OutputKind("boxes"), "scores": OutputKind("logits", axis=-1, activation="sigmoid")}
    monkeypatch.setattr(acc, "artifact_outputs", lambda *a, **k: (lost, {}))
    step = RuntimeStep(backend="onnxruntime", accelerator="cpu", format="onnx-qdq")
    report = acc.evaluate(Path("unused"), step, [{}] * 12, ref, SPEC, kinds, head=post)
    m = report["outputs"]["scores"]
    assert not report["passed"] and m["objects"]["object_f1"] == pytest.approx(0.857, abs=1e-3) and m["margins"]["object_f1"] < 0
    assert any(f.startswith("scores: the head's objects (score >= 0.5)") for f in report["failures"]), report["failures"]
    assert "object f1 0.857143" in acc.report_figures(report)  # the one-line figures show it
    monkeypatch.setattr(acc, "artifact_outputs", lambda *a, **k: ([dict(o) for o in ref], {}))
    assert acc.evaluate(Path("unused"), step, [{}] * 12, ref, SPEC, kinds, head=post)["passed"]
