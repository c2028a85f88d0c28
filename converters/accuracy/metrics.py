"""Metrics that fit the kind of each output, and the verdict against the profile's thresholds.

Every output gets the whole-tensor figures (cosine, SQNR, max abs error) for the record, but is
*judged* by the metrics of its kind (:mod:`edge_sdk.outputs`): top-1 and score error where the
float model is confident, and F1 of the positives, for class scores (after the activation for
logits; a dense softmax's background class, the one most anchors pick, is left out); error
relative to the float dynamic range for boxes, landmarks and regressions (distance
distributions after their softmax expectation; only at
the positions where a detector's scores emit a detection, or else call confident, when it has such a companion); IoU of the
thresholded maps for heatmaps and masks; cosine per sample for embeddings; step and whole
sequence agreement for sequences. A packed output is judged group by group and the worst group
reported; beside an ``objectness`` group, class scores are judged as objectness x class score
(what a YOLOv5/YOLOX head thresholds), and the boxes where that product emits a detection. A group that quantization collapsed (almost no distinct values, or no range left)
fails on its own, whatever else it scores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from edge_sdk.outputs import (MAP_KINDS, REGRESSION_KINDS, OutputKind, activate, ctc_collapse, dominant_class, expected_bins,
                              point_dims, times_objectness)
from edge_sdk.profiles import AccuracySpec, ScoresGate

from .evidence import evidence

#: Above this many distinct float values, an int8 group with at most 2 values has collapsed.
COLLAPSE_MIN_DISTINCT = 16
#: An int8 group whose range is below this fraction of the float range has collapsed.
COLLAPSE_MIN_RANGE = 0.02
#: A state's relative error below this is rounding: its growth is measured from at least here.
STATE_ERROR_FLOOR = 0.05


def _r(x: float, nd: int = 6) -> float | str:
    """JSON-safe, rounded to ``nd`` significant digits (infinities as strings)."""
    x = float(x)
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return float(f"{x:.{nd}g}")


def _check(out: dict[str, Any], fails: list[str], key: str, value: float, threshold: float, higher: bool,
           message: str, values: Any = None, groups: Any = None, n: int | None = None) -> None:
    """Judge one figure: record its relative margin to the threshold (>= 0 passes) and fail if below.

    Also records its evidence (:mod:`.evidence`: the samples it rests on, a one-sided 95% bound and
    what the bound would say), from ``values`` (what the figure is the mean of, per element;
    ``groups``: each element's sample) or ``n`` alone; recorded, not yet deciding."""
    out.setdefault("evidence", {})[key] = evidence(value, threshold, higher, values, groups, n)
    if not math.isfinite(value):  # NaN compares false both ways: it would pass every threshold
        out.setdefault("margins", {})[key] = NON_FINITE_MARGIN
        fails.append(f"{key.replace('_', ' ')} is {_r(value)}, not a finite number")
        return
    margin = (value - threshold) if higher else (threshold - value)
    out.setdefault("margins", {})[key] = round(margin / max(abs(threshold), 1e-6), 4)
    if margin < 0:
        fails.append(message)


#: The margin recorded for a figure or an output that is not a finite number: a failure as deep as a
#: figure of 0 against a higher-is-better threshold, so it ranks below every candidate that measured.
NON_FINITE_MARGIN = -1.0


class OutputMismatch(ValueError):
    """The int8 output cannot be compared with the float one (its shape differs)."""


def non_finite(r: np.ndarray, t: np.ndarray) -> dict[str, Any] | None:
    """Where float and int8 disagree about non-finite values (NaN, +-inf) in one output, stacked
    per sample: ``{"elements", "of", "samples", "int8", "float", "message"}``, or None where they
    do not (positions both sides hold the same infinity, or both NaN, are agreement: the caller
    judges the rest). A quantized model that turns a finite float value into NaN or an infinity
    has failed there, whatever the other figures say; no metric of NaN is a number.
    """
    fin_r, fin_t = np.isfinite(r), np.isfinite(t)
    if fin_r.all() and fin_t.all():
        return None
    same = (r == t) | (np.isnan(r) & np.isnan(t))
    off = ~(fin_r & fin_t) & ~same
    if not off.any():
        return None

    def values(a: np.ndarray) -> list[str]:
        v = a[off & ~np.isfinite(a)]
        return sorted({_r(x) for x in np.unique(v)[:3]} | ({"nan"} if np.isnan(v).any() else set()))  # type: ignore[misc]

    n, samples = int(off.sum()), int(off.reshape(off.shape[0], -1).any(axis=1).sum())
    got, want = values(t), values(r)
    where = f"{n} of {off.size} elements ({samples} of {off.shape[0]} held-back samples)"
    if got:
        msg = f"int8 gives non-finite values ({', '.join(got)}) at {where} where float gives finite ones"
    else:
        msg = f"float gives non-finite values ({', '.join(want)}) at {where} where int8 gives finite ones"
    return {"elements": n, "of": int(off.size), "samples": samples, "int8": got, "float": want, "message": msg}


def score(outputs: dict[str, dict[str, Any]]) -> float:
    """The worst relative margin over every judged figure of every output and group (>= 0: passes)."""
    margins = []
    for m in outputs.values():
        for part in [m, *m.get("groups", {}).values()]:
            margins += list(part.get("margins", {}).values())
    return min(margins) if margins else 0.0


def whole_tensor(r: np.ndarray, t: np.ndarray) -> dict[str, Any]:
    """Cosine, SQNR (dB) and max abs error over all values (for the record; judges ``tensor``)."""
    r, t = r.ravel(), t.ravel()
    noise = float(np.sum((r - t) ** 2))
    signal = float(np.sum(r ** 2))
    denom = float(np.linalg.norm(r) * np.linalg.norm(t))
    cosine = float(np.dot(r, t) / denom) if denom > 0 else (1.0 if noise == 0 else 0.0)
    sqnr = math.inf if noise == 0 else (10.0 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return {"cosine": _r(cosine), "sqnr_db": _r(sqnr, 5), "max_abs_err": _r(float(np.max(np.abs(r - t))) if r.size else 0.0, 8)}


def collapse(r: np.ndarray, t: np.ndarray) -> str:
    """Why the int8 values collapsed ('' if they did not)."""
    sample = slice(None, None, max(1, r.size // 200_000))
    rd = np.unique(r.ravel()[sample]).size
    td = np.unique(t.ravel()[sample]).size
    if rd >= COLLAPSE_MIN_DISTINCT and td <= 2:
        return f"collapsed to {td} distinct value(s) where the float model has {rd}+"
    r_span, t_span = float(np.ptp(r)), float(np.ptp(t))
    if r_span > 0 and t_span < COLLAPSE_MIN_RANGE * r_span:
        return f"collapsed: int8 range {t_span:.3g} vs float {r_span:.3g}"
    return ""


def _probabilities(x: np.ndarray) -> bool:
    """Values in [0, 1] (after the output's activation): thresholded at 0.5, not at mid-range."""
    return bool(x.min() >= -1e-6 and x.max() <= 1 + 1e-6)


def _judge_decided(out: dict[str, Any], fails: list[str], key: str, agree: np.ndarray, lead: np.ndarray,
                   g: ScoresGate, says: str, detail: str) -> None:
    """Agreement over the samples float decides, judged against ``min_decision_agreement``: those
    whose answer leads the alternative by at least twice ``decision_band`` (a probability that far
    from 0.5, a top class that far ahead of its runner-up). The others are near ties whose flips
    are noise; they are counted as ``decisions_undecided``."""
    decided = lead >= 2 * g.decision_band
    if (~decided).any():
        out["decisions_undecided"] = int((~decided).sum())
    if decided.any():
        kept = agree[decided]
        out[key] = _r(float(kept.mean()))
        # Over fewer samples than 1 / (1 - bar) a single flip fails: the bar cannot tell one rare
        # flip from a frequent one there (20 hands of 40 crops, 18 of 19 handedness decisions).
        coarse = kept.size - 1 < g.min_decision_agreement * kept.size and int(kept.sum()) == kept.size - 1
        _check(out, fails, key, float(kept.mean()), g.min_decision_agreement, True,
               f"{says} on {int(kept.sum())} of {kept.size} samples float decides "
               f"({kept.mean():.3f} < {g.min_decision_agreement}; {detail})"
               + (f"; over {kept.size} samples one flip fails {g.min_decision_agreement}: hold back more samples "
                  "float decides to judge the rate" if coarse else ""), values=kept.astype(bool))


def _classes_last(x: np.ndarray, axis: int) -> np.ndarray:
    """``[S, ...]`` with class axis ``axis`` (of one sample) -> ``[positions, C]``."""
    moved = np.moveaxis(x, axis + 1 if axis >= 0 else axis, -1)
    return moved.reshape(-1, moved.shape[-1])


def scores_metrics(r: np.ndarray, t: np.ndarray, axis: int, activation: str, spec: AccuracySpec,
                   samples: int) -> tuple[dict[str, Any], list[str], np.ndarray]:
    """Class scores: returns (figures, failures, the positions companion regressions are judged at:
    the float model's positives on a dense output, else its confident positions)."""
    g = spec.scores
    ax = axis + 1 if axis >= 0 else axis
    p, q = _classes_last(activate(r, activation, ax), axis), _classes_last(activate(t, activation, ax), axis)
    positions, classes = p.shape
    dense = positions > samples
    out: dict[str, Any] = {}
    if dense and classes >= 2 and np.allclose(p.sum(axis=1), 1.0, atol=1e-3):
        # A softmax over [background, classes] (SSD, UltraFace, RetinaFace): the class most
        # anchors pick is "nothing here"; counted as a class, every anchor is a positive and
        # the boxes are judged at background anchors. Judged on the object classes alone.
        bg, share = dominant_class(p, axis=1)
        if share >= 0.5:
            keep = np.arange(classes) != bg
            p, q = p[:, keep], q[:, keep]
            classes -= 1
            out["background_class"] = bg
    best = p.max(axis=1)
    confident = best >= g.confidence if dense else np.ones(positions, bool)
    # each position's sample (positions are sample-major): a rate over positions is bootstrapped by sample
    owner = np.repeat(np.arange(samples), positions // samples) if dense and samples and positions % samples == 0 else None
    out.update(positions=positions // max(samples, 1), classes=classes, confident_positions=int(confident.sum()))
    fails: list[str] = []
    if confident.any():
        top = p[confident].argmax(axis=1)
        err = np.abs(p[confident, top] - q[confident, top])
        out["score_error"] = _r(float(err.mean()))
        at = owner[confident] if owner is not None else None
        _check(out, fails, "score_error", float(err.mean()), g.max_score_error, False,
               f"score error {err.mean():.3f} > {g.max_score_error} on {int(confident.sum())} confident position(s)",
               values=err, groups=at if dense else None)
        if classes > 1:
            agree = top == q[confident].argmax(axis=1)
            out["top1_agreement"] = _r(float(agree.mean()))
            _check(out, fails, "top1_agreement", float(agree.mean()), spec.min_top1_agreement, True,
                   f"top-1 agreement {agree.mean():.3f} < {spec.min_top1_agreement}",
                   values=agree.astype(bool), groups=at if dense else None)
            if not dense:
                # A classifier's top-1 is its decision: where float's top class leads its runner-up
                # by at least twice the decision band, a flip is int8's doing, not a near tie.
                lead = np.diff(np.sort(p, axis=1)[:, -2:], axis=1)[:, 0]
                _judge_decided(out, fails, "decided_top1_agreement", agree, lead, g, "top-1 agrees",
                               f"its top class {2 * g.decision_band:g}+ ahead")
            if classes > 5:
                top5 = np.argsort(-q[confident], axis=1)[:, :5]
                out["top5_agreement"] = _r(float(np.mean(np.any(top5 == top[:, None], axis=1))))
        elif not dense and _probabilities(p):
            # One probability per sample (a wake word, hand presence, handedness, a binary
            # classifier): apps act on its side of 0.5, so that decision is its top-1. A mean
            # score error of 0.09 hid 0.87 -> 0.24 flips on 6 of 40 hands (MediaPipe hand lite).
            # Where float itself is undecided (0.48 vs 0.52) a flip is noise, as for positives.
            a, b = p[:, 0] >= 0.5, q[:, 0] >= 0.5
            out["decisions"] = [int(a.sum()), int(b.sum())]
            _judge_decided(out, fails, "decision_agreement", a == b, np.abs(2 * p[:, 0] - 1), g, "decisions at 0.5 agree",
                           f"float says yes on {int(a.sum())}, int8 on {int(b.sum())}")
    where = confident
    if dense:
        thr, soft = g.positive_threshold, g.positive_threshold - g.positive_margin
        pos_r, pos_t = p >= thr, q >= thr
        # A detector's boxes matter where it emits a detection: judge its regressions at the float
        # model's positives; a box at an anchor scored 0.3 is never drawn (what invented or lost
        # detections do is the positive F1's business).
        emitted = pos_r.any(axis=1)
        if emitted.any():
            where = emitted
        out["regressions_at"] = (f"its detections (float score >= {thr})" if emitted.any()
                                 else f"its confident positions (float score >= {g.confidence})")
        out["positives"] = [int(pos_r.sum()), int(pos_t.sum())]
        # A positive counts as found when the other side scores it within the margin below the
        # threshold: 0.48 vs 0.52 is noise around a threshold, not a lost or invented detection.
        recall = float(np.mean(q[pos_r] >= soft)) if pos_r.any() else 1.0
        precision = float(np.mean(p[pos_t] >= soft)) if pos_t.any() else 1.0
        f1 = 0.0 if recall + precision == 0 else 2 * recall * precision / (recall + precision)
        out["positive_f1"] = _r(f1)
        if pos_r.any() or pos_t.any():
            _check(out, fails, "positive_f1", f1, g.min_positive_f1, True,
                   f"positives (score >= {thr}) F1 {f1:.3f} < {g.min_positive_f1} "
                   f"(float {int(pos_r.sum())}, int8 {int(pos_t.sum())}; recall {recall:.2f}, precision {precision:.2f})",
                   n=samples)
    return out, fails, where


#: A sample whose float points span less than this share of the median sample's extent is not judged
#: per sample: its points collapsed onto one spot (no object there; the app drops them), where any
#: error is a large share of nothing. The range error still covers it.
MIN_EXTENT_SHARE = 0.25


def point_metrics(r: np.ndarray, t: np.ndarray, dims: int, spec: AccuracySpec,
                  coords: int | None = None, index: np.ndarray | None = None) -> tuple[dict[str, Any], list[str]]:
    """Landmarks, one set of points per sample (``[S, values]``): each sample's mean point distance
    over its float extent (the diagonal of the box of its float points), as landmark tasks
    normalise by the object's size (NME). A point is placed by its first ``coords`` values (x, y
    of image landmarks, whose z is a relative depth estimate; x, y, z of world landmarks), by
    default its first (up to) three (pose's visibility and presence follow). ``index``: each row's
    number among all held-back samples (where only some are judged), for the worst sample's name."""
    g = spec.regression
    c = min(coords or 3, dims)
    pr = r.reshape(r.shape[0], -1, dims)[..., :c]
    pt = t.reshape(t.shape[0], -1, dims)[..., :c]
    extent = np.linalg.norm(pr.max(axis=1) - pr.min(axis=1), axis=-1)
    judged = extent >= MIN_EXTENT_SHARE * float(np.median(extent))
    out: dict[str, Any] = {"points": int(pr.shape[1]), "point_coords": c}
    if (~judged).any():
        out["point_samples_collapsed"] = int((~judged).sum())
    if not judged.any():  # every sample's points on one spot: nothing to measure against
        out["point_error_not_judged"] = "the float points span nothing in any sample"
        return out, []
    per = np.mean(np.linalg.norm(pr - pt, axis=-1), axis=1)[judged] / extent[judged]
    where = np.flatnonzero(judged)
    mean, worst = float(per.mean()), int(where[int(per.argmax())])
    if index is not None:
        worst = int(index[worst])
    out.update(point_error=_r(mean), point_error_p90=_r(float(np.percentile(per, 90))),
               point_error_worst=_r(float(per.max())), worst_sample=worst)
    fails: list[str] = []
    _check(out, fails, "point_error", mean, g.max_point_error, False,
           f"mean point error {mean:.2%} of each sample's extent > {g.max_point_error:.0%} "
           f"({pr.shape[1]} points; worst sample {worst}: {float(per.max()):.2%})", values=per)
    return out, fails


def regression_metrics(r: np.ndarray, t: np.ndarray, axis: int, spec: AccuracySpec,
                       mask: np.ndarray | None, dims: int | None = None,
                       coords: int | None = None, index: np.ndarray | None = None) -> tuple[dict[str, Any], list[str]]:
    """Error relative to the float dynamic range; at ``mask`` positions when given. With ``dims``
    (landmarks: values per point) and one row per sample, also :func:`point_metrics` (``index``:
    the rows' numbers among all held-back samples)."""
    g = spec.regression
    span = float(np.ptp(r)) or max(float(np.max(np.abs(r))), 1e-12)
    rr, tt = _classes_last(r, axis), _classes_last(t, axis)
    rows = np.repeat(np.arange(r.shape[0]), rr.shape[0] // max(r.shape[0], 1)) if rr.shape[0] % max(r.shape[0], 1) == 0 else None
    out: dict[str, Any] = {"range": _r(span)}
    if mask is not None and mask.shape[0] == rr.shape[0]:
        if not mask.any():
            # Its scores are confident nowhere in the held-back samples (a detector level that
            # fired on none of them): nothing reads these values there, and judging background
            # anchors is the whole-tensor mistake again. The scores themselves are still judged.
            out.update(at_confident_positions=0, not_judged="its scores are confident at no position of the held-back samples")
            return out, []
        rr, tt = rr[mask], tt[mask]
        rows = rows[mask] if rows is not None else None
        out["at_confident_positions"] = int(mask.sum())
    err = np.abs(rr - tt) / span
    mean, p99 = float(err.mean()), float(np.percentile(err, 99))
    out.update(range_error=_r(mean), range_error_p99=_r(p99), range_error_max=_r(float(err.max())))
    fails = []
    at = np.repeat(rows, err.shape[1]) if rows is not None and err.ndim == 2 else None
    _check(out, fails, "range_error", mean, g.max_error, False, f"mean error {mean:.2%} of the range > {g.max_error:.0%}",
           values=err if at is not None else None, groups=at, n=r.shape[0])
    _check(out, fails, "range_error_p99", p99, g.max_error_p99, False,
           f"p99 error {p99:.2%} of the range > {g.max_error_p99:.0%}", n=r.shape[0])
    samples = r.shape[0]
    per_sample = mask is None or (mask.shape[0] == samples and mask.any())
    if dims and per_sample and r[0].size >= 2 * dims:  # (dims divides it: point_dims)
        pr, pt = r.reshape(samples, -1), t.reshape(samples, -1)
        rows = np.arange(samples) if index is None else np.asarray(index)
        if mask is not None:
            pr, pt, rows = pr[mask], pt[mask], rows[mask]
        figures, f = point_metrics(pr, pt, dims, spec, coords, rows)  # the worst named among all held-back samples
        out["margins"].update(figures.pop("margins", {}))
        out.update(figures)
        fails += f
    return out, fails


def map_metrics(r: np.ndarray, t: np.ndarray, activation: str, spec: AccuracySpec,
                per_frame: bool = False) -> tuple[dict[str, Any], list[str]]:
    """IoU of thresholded maps (probability maps at the threshold, others at each sample's mid-range),
    pooled over every sample; with ``per_frame`` (masks) also frame by frame, on the frames where
    float or int8 marks at least ``min_frame_area`` of the map (the mean and the worst are judged)."""
    g = spec.maps
    p, q = activate(r, activation, -1), activate(t, activation, -1)
    if _probabilities(p):
        thr = np.full((p.shape[0],) + (1,) * (p.ndim - 1), g.threshold)
    else:
        flat = p.reshape(p.shape[0], -1)
        thr = ((flat.min(1) + flat.max(1)) / 2).reshape((-1,) + (1,) * (p.ndim - 1))
    a, b = p >= thr, q >= thr
    union = float(np.sum(a | b))
    iou = 1.0 if union == 0 else float(np.sum(a & b)) / union
    span = float(np.ptp(p)) or 1.0
    out = {"iou": _r(iou), "area": [_r(float(a.mean()), 4), _r(float(b.mean()), 4)],
           "mean_error": _r(float(np.mean(np.abs(p - q))) / span)}
    fails: list[str] = []
    _check(out, fails, "iou", iou, g.min_iou, True, f"IoU {iou:.3f} < {g.min_iou}", n=p.shape[0])
    fa, fb = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
    union = np.sum(fa | fb, axis=1)
    shown = union >= g.min_frame_area * fa.shape[1]
    if shown.any():
        frames = np.sum(fa & fb, axis=1)[shown] / union[shown]
        worst = int(np.flatnonzero(shown)[int(np.argmin(frames))])
        out.update(frames=int(shown.sum()), frame_iou_mean=_r(float(frames.mean())), frame_iou_min=_r(float(frames.min())),
                   worst_frame={"sample": worst, "iou": _r(float(frames.min())),
                                "area": [_r(float(fa[worst].mean()), 4), _r(float(fb[worst].mean()), 4)]})
        if per_frame:
            _check(out, fails, "frame_iou_mean", float(frames.mean()), g.min_iou, True,
                   f"mean IoU over {int(shown.sum())} frames {frames.mean():.3f} < {g.min_iou}", values=frames)
            _check(out, fails, "frame_iou_min", float(frames.min()), g.min_frame_iou, True, n=int(shown.sum()), message=
                   f"worst frame IoU {frames.min():.3f} < {g.min_frame_iou} (sample {worst}: float marks "
                   f"{fa[worst].mean():.1%} of it, int8 {fb[worst].mean():.1%})")
    return out, fails


def match_detections(a: np.ndarray, b: np.ndarray) -> list[tuple[int, int]]:
    """Pairs ``(i, j)``: rows of ``a`` (``x1, y1, x2, y2, score, class``; best score first) each
    matched to the unused row of ``b`` of the same class with the highest IoU, when it is >= 0.5."""
    from edge_sdk.detect import box_iou  # numpy only, as this module

    used: list[int] = []
    pairs = []
    for i in np.argsort(-a[:, 4], kind="stable"):
        same = [j for j in range(len(b)) if j not in used and round(b[j, 5]) == round(a[i, 5])]
        if same:
            ious = box_iou(a[i, :4], b[same, :4])
            if ious.max() >= 0.5:
                used.append(same[int(np.argmax(ious))])
                pairs.append((int(i), used[-1]))
    return pairs


def detections_metrics(r: np.ndarray, t: np.ndarray, spec: AccuracySpec) -> tuple[dict[str, Any], list[str]]:
    """Detection lists (rows ``x1, y1, x2, y2, score, class``): per sample the rows scoring at least
    the confidence are matched, float to int8, greedily by score (same class, IoU >= 0.5). Judged:
    F1 of the matches (the positive F1 threshold), the score error of matched rows, and their
    coordinate error relative to the float boxes' range (mean and p99, the regression thresholds)."""
    g, reg = spec.scores, spec.regression
    tp = fp = fn = 0
    score_err: list[float] = []
    coord_err: list[np.ndarray] = []
    span = 0.0
    for rs, ts in zip(r.reshape(r.shape[0], -1, r.shape[-1]), t.reshape(t.shape[0], -1, t.shape[-1])):
        a, b = rs[rs[:, 4] >= g.confidence], ts[ts[:, 4] >= g.confidence]
        if len(a):
            span = max(span, float(np.ptp(a[:, :4])))
        pairs = match_detections(a, b)
        tp, fn, fp = tp + len(pairs), fn + len(a) - len(pairs), fp + len(b) - len(pairs)
        for i, j in pairs:
            score_err.append(abs(float(a[i, 4] - b[j, 4])))
            coord_err.append(np.abs(a[i, :4] - b[j, :4]))
    f1 = 1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn)
    out: dict[str, Any] = {"detections": [tp + fn, tp + fp], "matched": tp, "detection_f1": _r(f1)}
    fails: list[str] = []
    _check(out, fails, "detection_f1", f1, g.min_positive_f1, True,
           f"detections (score >= {g.confidence}) matched F1 {f1:.3f} < {g.min_positive_f1} (float {tp + fn}, "
           f"int8 {tp + fp}, matched {tp}: same class, IoU >= 0.5)", n=r.shape[0])
    if score_err:
        err = float(np.mean(score_err))
        out["score_error"] = _r(err)
        _check(out, fails, "score_error", err, g.max_score_error, False,
               f"score error {err:.3f} > {g.max_score_error} over {tp} matched detection(s)", n=r.shape[0])
        c = np.concatenate(coord_err) / (span or 1.0)
        mean, p99 = float(c.mean()), float(np.percentile(c, 99))
        out.update(range_error=_r(mean), range_error_p99=_r(p99))
        _check(out, fails, "range_error", mean, reg.max_error, False,
               f"matched boxes: mean error {mean:.2%} of the range > {reg.max_error:.0%}")
        _check(out, fails, "range_error_p99", p99, reg.max_error_p99, False,
               f"matched boxes: p99 error {p99:.2%} of the range > {reg.max_error_p99:.0%}")
    return out, fails


#: Objects the float model must draw on the held-back samples before their F1 is judged.
MIN_OBJECTS = 10
#: Float detections of one class before its own recall is judged (5 of 8 lost is noise-sized).
MIN_CLASS_OBJECTS = 10
#: Candidates per sample the object check keeps (NMS is quadratic in them).
MAX_CANDIDATES = 1000


def _packed_detections(x: np.ndarray, kind: OutputKind, ax: int, soft: float, iou: float,
                       scores_in_range: bool = True) -> list[np.ndarray] | None:
    """Per sample, what a YOLO-style head draws from a packed ``[.., 4 + C (+ objectness)]`` output:
    rows ``x1, y1, x2, y2, score, class`` scoring at least ``soft`` after class-aware NMS (boxes
    read as centre x, y, width, height, as YOLOv5/v8/v11 write them; the best class's score,
    times objectness where there is one). None when the output is not such a head: not exactly one
    4-channel box group beside one score group, or (``scores_in_range``, the float side) scores
    outside 0..1, or a third of all anchors scoring (a softmax's background class: SSD-style)."""
    from edge_sdk.detect import nms  # numpy only, as this module

    boxes = [g for g in kind.groups if g.kind == "boxes"]
    scores = [g for g in kind.groups if g.kind in ("scores", "logits")]
    if len(boxes) != 1 or boxes[0].stop - boxes[0].start != 4 or len(scores) != 1:
        return None
    g = scores[0]
    product = times_objectness(x, kind, g, ax)
    if product is None:
        act = "sigmoid" if g.kind == "logits" and g.activation == "none" else g.activation
        product = activate(np.take(x, range(g.start, g.stop), axis=ax), act, ax)
    if scores_in_range and (product.min() < -1e-6 or product.max() > 1 + 1e-6):
        return None
    samples = x.shape[0]
    box = np.moveaxis(np.take(x, range(boxes[0].start, boxes[0].stop), axis=ax), ax, -1).reshape(samples, -1, 4)
    cls = np.moveaxis(product, ax, -1).reshape(samples, box.shape[1], -1)
    if scores_in_range and np.mean(cls.max(axis=2) >= soft) > 0.3:
        return None  # a third of all anchors "detect": a background class or a dense map, not sparse objects
    out = []
    for b, c in zip(box, cls):
        best, label = c.max(axis=1), c.argmax(axis=1)
        keep = np.flatnonzero(best >= soft)
        if len(keep) > MAX_CANDIDATES:  # int8 garbage scoring everywhere: its best ones are enough to judge
            keep = keep[np.argsort(-best[keep], kind="stable")[:MAX_CANDIDATES]]
        rows = np.concatenate([b[keep, :2] - b[keep, 2:] / 2, b[keep, :2] + b[keep, 2:] / 2,
                               best[keep, None], label[keep, None]], axis=1)
        out.append(rows[nms(rows[:, :4], rows[:, 4], iou, classes=rows[:, 5])] if len(keep) else rows)
    return out


def packed_objects_metrics(r: np.ndarray, t: np.ndarray, kind: OutputKind, ax: int,
                           spec: AccuracySpec) -> tuple[dict[str, Any], list[str]] | None:
    """A packed detector output judged as the objects its head draws, float against int8.

    Anchor by anchor, a face that fires 30 anchors outweighs a rarer class that fires three: a
    YOLOv8n lost 5 of its 10 detections of one class (scores 0.3-0.5) while the per-anchor
    positive F1 stayed 0.97. Here the rows of both models are decoded (:func:`_packed_detections`)
    at the confidence threshold (``scores.confidence``, the 0.25 YOLO heads draw at) and matched
    per sample, same class and IoU >= 0.5. A detection counts as found when the other model scores
    the object at least ``1 - object_margin`` of that threshold; by default (0) that is what the
    device draws: with a 10% margin the gate published a YOLOv8n candidate whose drawn detections
    matched float's at F1 0.886. None when the output is not such a head, or its box channels are
    not boxes where the float model detects (raw regressors: negative sizes)."""
    g = spec.scores
    conf = g.confidence
    soft = conf * (1 - g.object_margin)
    ref = _packed_detections(r, kind, ax, soft, 0.45)
    if ref is None:
        return None
    test = _packed_detections(t, kind, ax, soft, 0.45, scores_in_range=False) or []
    shown = [a[a[:, 4] >= conf] for a in ref]
    if not any(len(a) for a in shown):
        return None
    if min(float(np.min(a[:, 2:4] - a[:, 0:2])) for a in shown if len(a)) <= 0:
        return None  # box channels that are not boxes (raw offsets, log sizes): nothing to match
    return object_figures(ref, test, conf, spec, "centre/size boxes, best class x objectness, class-aware NMS at "
                          f"IoU 0.45, score >= {conf}" + (f" (found at >= {soft:.3g})" if soft < conf else ""))


def object_figures(ref: list[np.ndarray], test: list[np.ndarray], conf: float, spec: AccuracySpec,
                   decoded: str) -> tuple[dict[str, Any], list[str]]:
    """Float's and int8's decoded detections matched sample by sample (rows ``x1, y1, x2, y2,
    score, class``, each decoded at the finding threshold; those at ``conf`` or above are what the
    device draws): float's drawn objects int8 finds (recall), int8's drawn objects float finds
    (precision), their F1 and the worst class's recall, judged by ``spec.scores``.
    Precondition: float draws something on some sample."""
    g = spec.scores
    shown = [a[a[:, 4] >= conf] for a in ref]
    drawn = [a[a[:, 4] >= conf] for a in test]
    found = sum(len(match_detections(a, b)) for a, b in zip(shown, test))
    kept = sum(len(match_detections(b, a)) for a, b in zip(ref, drawn))
    n_ref, n_test = sum(len(a) for a in shown), sum(len(b) for b in drawn)
    recall, precision = found / n_ref, (kept / n_test if n_test else 1.0)
    f1 = 0.0 if recall + precision == 0 else 2 * recall * precision / (recall + precision)
    classes = sorted({int(c) for a in shown for c in a[:, 5]})
    out: dict[str, Any] = {"kind": "objects", "detections": [n_ref, n_test], "object_f1": _r(f1),
                           "object_recall": _r(recall), "object_precision": _r(precision),
                           "decoded": decoded, "classes": classes}
    # The class the int8 model loses most of (MIN_CLASS_OBJECTS+ float detections), by its own
    # recall: a rare class's losses barely move the pooled F1.
    per = {}
    for c in classes:
        a = [x[x[:, 5] == c] for x in shown]
        n = sum(len(x) for x in a)
        if n >= MIN_CLASS_OBJECTS:
            per[c] = (sum(len(match_detections(x, y)) for x, y in zip(a, test)) / n, n)
    fails: list[str] = []
    if n_ref < MIN_OBJECTS:  # one object of five moves F1 by 0.1: the per-anchor figures judge alone
        out["not_judged"] = f"the float model draws only {n_ref} object(s) on the held-back samples (< {MIN_OBJECTS})"
        out["passed"] = True
        return out, fails
    _check(out, fails, "object_f1", f1, g.min_positive_f1, True,
           f"objects (score >= {conf}) F1 {f1:.3f} < {g.min_positive_f1} (float {n_ref}, int8 {n_test}; recall "
           f"{recall:.2f}, precision {precision:.2f})", n=len(shown))
    if per:
        worst = min(per, key=lambda c: per[c][0])
        rec, n = per[worst]
        out["worst_class"] = {"class": worst, "float_detections": n, "recall": _r(rec)}
        _check(out, fails, "worst_class_recall", rec, g.min_class_recall, True,
               f"class {worst}: int8 finds {rec:.0%} of float's {n} detections (< {g.min_class_recall:.0%})", n=len(shown))
    out["passed"] = not fails
    return out, fails


def embedding_metrics(r: np.ndarray, t: np.ndarray, spec: AccuracySpec) -> tuple[dict[str, Any], list[str]]:
    g = spec.embedding
    rr, tt = r.reshape(r.shape[0], -1), t.reshape(t.shape[0], -1)
    denom = np.linalg.norm(rr, axis=1) * np.linalg.norm(tt, axis=1)
    cos = np.where(denom > 0, np.sum(rr * tt, axis=1) / np.maximum(denom, 1e-30), 1.0)
    out = {"cosine_mean": _r(float(cos.mean())), "cosine_min": _r(float(cos.min()))}
    fails = []
    _check(out, fails, "cosine_mean", float(cos.mean()), g.min_cosine, True, f"mean cosine {cos.mean():.4f} < {g.min_cosine}",
           values=cos)
    _check(out, fails, "cosine_min", float(cos.min()), g.min_sample_cosine, True,
           f"worst sample cosine {cos.min():.4f} < {g.min_sample_cosine}", n=cos.size)
    return out, fails


def state_metrics(r: np.ndarray, t: np.ndarray, spec: AccuracySpec, judge: str) -> tuple[dict[str, Any], list[str]]:
    """A recurrent state (``--stream``) per step: its relative error ``|int8 - float| / |float|``.

    Args:
        judge: ``end``: the steps are one long stream, and the mean over its last quarter is held
            to ``stream.max_state_error`` and to ``stream.max_state_growth`` times the second
            quarter's (is the error still growing as the state is carried?); ``all``: the mean over
            every step is held to ``max_state_error`` (no long stream could be run); ``none``:
            figures only (the sequences as given, where the long stream judges the state).
    """
    rr, tt = r.reshape(r.shape[0], -1), t.reshape(t.shape[0], -1)
    norm = np.linalg.norm(rr, axis=1)
    floor = max(1e-3 * float(np.median(norm)), 1e-12) if norm.size else 1e-12
    rel = np.linalg.norm(tt - rr, axis=1) / np.maximum(norm, floor)
    denom = norm * np.linalg.norm(tt, axis=1)
    cos = np.where(denom > 0, np.sum(rr * tt, axis=1) / np.maximum(denom, 1e-30), 1.0)
    out: dict[str, Any] = {"state_error_mean": _r(float(rel.mean())), "state_error_max": _r(float(rel.max())),
                           "cosine_mean": _r(float(cos.mean())), "cosine_min": _r(float(cos.min()))}
    fails: list[str] = []
    g = spec.stream
    if judge == "end":
        quarters = [q for q in np.array_split(rel, 4) if q.size]
        end = float(quarters[-1].mean())
        out["state_error_by_quarter"] = [_r(float(q.mean()), 4) for q in quarters]
        out["state_error_end"] = _r(end)
        _check(out, fails, "state_error_end", end, g.max_state_error, False,
               f"relative state error {end:.3f} over the last {len(quarters[-1])} steps of the long stream > {g.max_state_error}",
               n=len(quarters[-1]))
        if len(quarters) == 4:
            # Below a twentieth of the state's norm an error is rounding, however it moves.
            growth = end / max(float(quarters[1].mean()), STATE_ERROR_FLOOR)
            out["state_error_growth"] = _r(growth, 4)
            _check(out, fails, "state_error_growth", growth, g.max_state_growth, False,
                   f"the state's error still grows at the end of the long stream: {end:.3f} over its last quarter, "
                   f"{growth:.2f}x the second quarter's (> {g.max_state_growth}x)", n=rel.size)
    elif judge == "all":
        _check(out, fails, "state_error_mean", float(rel.mean()), g.max_state_error, False,
               f"mean relative state error {rel.mean():.3f} > {g.max_state_error}", values=rel)
    else:
        out["not_judged"] = "judged over the long stream"
    return out, fails


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (token ids, or the characters of strings)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        diag, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            diag, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diag + (x != y))
    return row[-1]


def sequence_metrics(r: np.ndarray, t: np.ndarray, kind: OutputKind, spec: AccuracySpec) -> tuple[dict[str, Any], list[str]]:
    g = spec.sequence
    ax = kind.axis + 1 if kind.axis >= 0 else kind.axis
    pr, pt = np.argmax(r, axis=ax), np.argmax(t, axis=ax)
    step = float(np.mean(pr == pt))
    pr, pt = pr.reshape(pr.shape[0], -1), pt.reshape(pt.shape[0], -1)
    ref = [ctc_collapse(a, kind.blank) for a in pr]
    test = [ctc_collapse(b, kind.blank) for b in pt]
    seq = float(np.mean([a == b for a, b in zip(ref, test)]))
    out = {"step_agreement": _r(step), "sequence_agreement": _r(seq), "ctc_blank": kind.blank}
    fails: list[str] = []
    if kind.blank is None:
        _check(out, fails, "step_agreement", step, g.min_step_agreement, True,
               f"step agreement {step:.3f} < {g.min_step_agreement}", values=(pr == pt).astype(bool),
               groups=np.repeat(np.arange(pr.shape[0]), pr.shape[1]))
        _check(out, fails, "sequence_agreement", seq, g.min_sequence_agreement, True,
               f"whole-sequence agreement {seq:.3f} < {g.min_sequence_agreement}",
               values=np.array([a == b for a, b in zip(ref, test)], bool))
        return out, fails
    # CTC: the text decides (alignment jitter moves steps, not text); one token of a long line
    # flips the whole line, so the token error rate is judged and whole lines are a floor.
    tokens = sum(len(a) for a in ref)
    err = sum(edit_distance(a, b) for a, b in zip(ref, test)) / max(tokens, 1)
    out["token_error"] = _r(err)
    _check(out, fails, "token_error", err, g.max_token_error, False,
           f"token error rate {err:.3f} > {g.max_token_error} (edit distance of the CTC-collapsed sequences "
           f"over float's {tokens} tokens; whole sequences equal: {seq:.3f})", n=len(ref))
    if g.min_ctc_sequence_agreement > 0:
        _check(out, fails, "sequence_agreement", seq, g.min_ctc_sequence_agreement, True,
               f"whole-sequence agreement {seq:.3f} < {g.min_ctc_sequence_agreement} (CTC-collapsed)",
               values=np.array([a == b for a, b in zip(ref, test)], bool))
    return out, fails


def tensor_metrics(whole: dict[str, Any], spec: AccuracySpec, out: dict[str, Any]) -> list[str]:
    fails: list[str] = []
    _check(out, fails, "cosine", float(whole["cosine"]), spec.min_cosine, True,
           f"cosine {float(whole['cosine']):.4f} < {spec.min_cosine}", n=out.get("samples"))
    sqnr = float(whole["sqnr_db"])
    _check(out, fails, "sqnr_db", min(sqnr, 1e3), spec.min_sqnr_db, True, f"SQNR {sqnr:.2f} dB < {spec.min_sqnr_db} dB",
           n=out.get("samples"))
    return fails


def judge_part(r: np.ndarray, t: np.ndarray, kind: str, axis: int, activation: str, spec: AccuracySpec,
               okind: OutputKind, samples: int, mask: np.ndarray | None,
               state_judge: str = "all", index: np.ndarray | None = None) -> tuple[dict[str, Any], list[str], np.ndarray | None]:
    """Metrics and failures of one output or packed group; returns the confident mask of scores
    (``state_judge``: how a ``state`` is judged, see :func:`state_metrics`; ``index``: the samples'
    numbers among all held-back samples where only some are judged)."""
    whole = whole_tensor(r, t)
    out: dict[str, Any] = dict(whole)
    fails: list[str] = []
    conf = None
    collapsed = collapse(r, t)
    if collapsed:
        fails.append(collapsed)
        out["collapsed"] = collapsed
    if kind in ("scores", "logits"):
        act = activation if activation != "none" or kind == "scores" else ("sigmoid" if r.shape[axis] == 1 else "softmax")
        figures, f, conf = scores_metrics(r, t, axis, act, spec, samples)
    elif kind in REGRESSION_KINDS:
        bins = okind.bins if okind.kind in REGRESSION_KINDS else None
        if bins:  # distributions: judged as the distances they decode to
            r, t = expected_bins(r, bins), expected_bins(t, bins)
        dims = point_dims(int(np.prod(r.shape[1:])), okind) if kind == "landmarks" else None  # None for a packed group
        figures, f = regression_metrics(r, t, axis, spec, mask, dims, okind.coords, index)
        if bins:
            figures["decoded"] = f"softmax expectation over {bins} bins"
    elif kind in MAP_KINDS:
        figures, f = map_metrics(r, t, activation, spec, per_frame=kind == "mask")
    elif kind == "embedding":
        figures, f = embedding_metrics(r, t, spec)
    elif kind == "state":
        figures, f = state_metrics(r, t, spec, state_judge)
    elif kind == "sequence":
        figures, f = sequence_metrics(r, t, okind, spec)
    elif kind == "detections":
        figures, f = detections_metrics(r, t, spec)
    else:
        figures = {"samples": samples}
        f = tensor_metrics(whole, spec, figures)
    out.update(figures)
    if collapsed:
        out.setdefault("margins", {})["collapse"] = -1.0
    fails.extend(f)
    out["passed"] = not fails
    return out, fails, conf


def evaluate_output(ref: list[np.ndarray], test: list[np.ndarray], kind: OutputKind, spec: AccuracySpec,
                    mask: np.ndarray | None = None, state_judge: str = "all",
                    index: np.ndarray | None = None) -> dict[str, Any]:
    """Judge one output over all held-back samples.

    Args:
        ref / test: Float and int8 outputs, one array per sample (same shapes).
        kind: The output's kind.
        spec: The profile's thresholds.
        mask: Confident positions from a companion scores output (regressions only).
        state_judge: How a ``state`` output is judged (:func:`state_metrics`): ``end`` of a long
            stream, ``all`` steps, or ``none``.
        index: Where ``ref``/``test`` are some of the held-back samples (those a presence flag
            says hold the object), their numbers among all of them.

    Returns:
        ``{"kind", whole-tensor figures, kind figures, "groups"?, "worst"?, "failures", "passed"}``.
    """
    r = np.stack([np.asarray(a, np.float64) for a in ref])
    t = np.stack([np.asarray(a, np.float64) for a in test])
    if r.shape != t.shape:
        raise OutputMismatch(f"int8 output shape {list(t.shape[1:])} differs from the float {list(r.shape[1:])}")
    samples = r.shape[0]
    out: dict[str, Any] = {"kind": kind.label(), "samples": samples}
    bad = non_finite(r, t)
    if bad is not None:
        msg = bad.pop("message")
        return {**out, "non_finite": bad, "margins": {"finite": NON_FINITE_MARGIN}, "failures": [msg],
                "passed": False, "_mask": None}
    if not (np.isfinite(r).all() and np.isfinite(t).all()):  # the same infinities on both sides: judge the rest
        both = np.isfinite(r) & np.isfinite(t)
        r, t = np.where(both, r, 0.0), np.where(both, t, 0.0)
    if kind.kind != "packed":
        part, fails, conf = judge_part(r, t, kind.kind, kind.axis, kind.activation, spec, kind, samples, mask,
                                       state_judge, index)
        out.update(part)
        out["failures"] = fails
        out["_mask"] = conf
        return out
    out.update(whole_tensor(r, t))
    ax = kind.axis + 1 if kind.axis >= 0 else kind.axis
    groups: dict[str, Any] = {}
    fails: list[str] = []
    conf_mask = None
    # Scores first (they give the boxes their mask), then objectness, then the regressions.
    ordered = sorted(kind.groups, key=lambda g: (g.kind in REGRESSION_KINDS, g.kind == "objectness"))
    for g in ordered:
        rs, ts = np.take(r, range(g.start, g.stop), axis=ax), np.take(t, range(g.start, g.stop), axis=ax)
        gkind, act, label = g.kind, g.activation, g.kind + (f"({g.activation})" if g.activation != "none" else "")
        if g.kind == "objectness":
            gkind = "scores"
        product = times_objectness(r, kind, g, ax)
        if product is not None:
            # Conditional class scores (YOLOv5, YOLOX): what the head thresholds is objectness x
            # class score; judged alone, a class score of 0.9 where nothing is would count.
            rs, ts = product, times_objectness(t, kind, g, ax)
            gkind, act, label = "scores", "none", f"{label} x objectness"
        part, f, conf = judge_part(rs, ts, gkind, kind.axis, act, spec, kind, samples,
                                   conf_mask if g.kind in REGRESSION_KINDS else None)
        if conf is not None and conf_mask is None:
            conf_mask = conf
        part = {"kind": label, "channels": [g.start, g.stop], **part}
        groups[g.name] = part
        fails.extend(f"{g.name}: {x}" for x in f)
    out["groups"] = {g.name: groups[g.name] for g in kind.groups}
    objects = packed_objects_metrics(r, t, kind, ax, spec)
    if objects is not None:
        part, f = objects
        out["groups"]["objects"] = part
        fails.extend(f"objects: {x}" for x in f)
    out["worst"] = _worst(out["groups"])
    out["failures"] = fails
    out["passed"] = not fails
    out["_mask"] = conf_mask
    return out


def _worst(groups: dict[str, dict[str, Any]]) -> str:
    failing = [n for n, g in groups.items() if not g["passed"]]
    if failing:
        return failing[0]
    # else the group with the lowest cosine (the objects a head draws are no tensor: they have none)
    return min((n for n in groups if "cosine" in groups[n]), key=lambda n: float(groups[n]["cosine"]))


def one_line(name: str, m: dict[str, Any]) -> str:
    """``name [kind]: the figures that judge it`` for progress lines and reports."""
    keys = ("detection_f1", "object_f1", "top1_agreement", "decided_top1_agreement", "decision_agreement", "score_error", "positive_f1", "range_error", "range_error_p99", "point_error", "iou", "frame_iou_mean",
            "frame_iou_min", "cosine_mean", "cosine_min", "token_error", "step_agreement", "sequence_agreement",
            "state_error_end", "state_error_mean")
    if "non_finite" in m:
        f = m["non_finite"]
        return (f"{name} [{m['kind']}]: non-finite ({', '.join(f['int8'] or f['float'])}) at {f['elements']} of "
                f"{f['of']} elements")
    if "groups" in m:
        return "; ".join(one_line(f"{name}/{g}", gm) for g, gm in m["groups"].items())
    if "object_f1" in m.get("objects", {}):  # a declared head's objects, judged beside this output
        m = {**m, "object_f1": m["objects"]["object_f1"]}
    shown = [f"{k.replace('_', ' ')} {m[k]}" for k in keys if k in m]
    if m.get("not_judged"):
        shown.append(f"not judged: {m['not_judged']}")
    if not shown or m.get("kind") == "tensor":
        shown = [f"cosine {m['cosine']}", f"SQNR {m['sqnr_db']} dB"] + shown
    if m.get("collapsed"):
        shown.append(m["collapsed"])
    return f"{name} [{m['kind']}]: " + ", ".join(shown)
