"""Infer what each output means, once per conversion: declared, else the graph, else the values.

Order of evidence, strongest first:

1. **Declared** by the user (``--output NAME:KIND[:options]``): taken as is (checked to fit).
2. **The graph's tail**: a Softmax (class scores; per-step scores ``[.., T, C]`` are a sequence),
   a Sigmoid (scores; a spatial map is a mask or heatmap), a Concat whose inputs end in an
   activation for some and not for others (a packed head, split into channel groups), an L2
   normalisation (an embedding).
3. **Values seen on the float model** over the held-back samples: probabilities that sum to one;
   one value per anchor far outside [0, 1] (raw logits, e.g. BlazeFace's -60 background); a
   channel axis whose leading channels are coordinates and whose trailing ones stay in [0, 1]
   (a packed detector head; its first score channel is objectness when the class scores beside
   it stay high where it says nothing is, as YOLOv5/YOLOX's conditional class scores); spatial maps; mostly positive vectors of x,y(,z) (landmarks) vs
   signed vectors (embeddings); per-anchor regressions beside per-anchor scores (boxes), and among
   them GFL/DFL distance distributions (4 x 8+ signed logits whose likeliest bins neighbour); a signed
   x, y, z vector with as many points as a landmarks output (3-D world landmarks).
4. Otherwise ``tensor``: whole-tensor cosine and SQNR.

The reason is recorded with the kind, so a user who disagrees sees why and can declare it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edge_sdk.manifest import TensorSpec
from edge_sdk.outputs import OutputGroup, OutputKind, check_fits, dominant_class

from ..graph import GraphView

#: Longest per-step axis read as a sequence (CTC time steps); longer ones are anchor lists.
MAX_SEQUENCE_STEPS = 400
#: Fewest positions for a per-position output (anchors, pixels) to count as dense.
MIN_POSITIONS = 16
_ACTIVATIONS = {"Sigmoid", "HardSigmoid", "Softmax", "LogSoftmax"}


def _in01(x: np.ndarray) -> bool:
    return bool(x.size) and float(x.min()) >= -1e-6 and float(x.max()) <= 1 + 1e-6


def _map_axis(shape: list[int]) -> int | None:
    """Channel axis of a spatial map ``[N, C, H, W]`` / ``[N, H, W, C]`` (None if not a map)."""
    if len(shape) == 4:
        if shape[2] >= 8 and shape[3] >= 8 and shape[1] <= 64:
            return 1
        if shape[1] >= 8 and shape[2] >= 8 and shape[3] <= 64:
            return 3
    return None


def _map_kind(shape: list[int], channel_axis: int, reason: str, source: str, activation: str = "none") -> OutputKind:
    channels = shape[channel_axis]
    return OutputKind("mask" if channels <= 2 else "heatmap", axis=channel_axis, activation=activation,  # type: ignore[arg-type]
                      source=source, reason=reason)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- graph evidence
def from_graph(graph: GraphView, name: str, shape: list[int]) -> OutputKind | None:
    """The kind the op at the output's tail says, or None."""
    direct = graph.tail(name, through={"Identity", "Cast"})
    node = graph.tail(name)
    if node is None:
        return None
    rank = len(shape)
    reshaped = direct is not node  # a Reshape/Transpose sits between the op and the output
    if node.op in ("Softmax", "LogSoftmax"):
        axis = int(node.attrs.get("axis", -1))
        if reshaped:
            axis = -1  # after a reshape only the last axis is known to survive
        axis = axis % rank if rank else 0
        if rank >= 3 and axis == rank - 1 and 4 <= shape[-2] <= MAX_SEQUENCE_STEPS and shape[-1] >= 2:
            return OutputKind("sequence", axis=axis - rank, source="graph",
                              reason=f"{node.native or node.op} over the last axis of [.., T={shape[-2]}, C={shape[-1]}]")
        return OutputKind("scores", axis=axis - rank, source="graph", reason=f"{node.native or node.op} at the tail")
    if node.op in ("Sigmoid", "HardSigmoid"):
        ax = _map_axis(shape)
        if ax is not None:
            return _map_kind(shape, ax, f"{node.native or node.op} over a spatial map", "graph")
        return OutputKind("scores", axis=-1, source="graph", reason=f"{node.native or node.op} at the tail")
    if node.op == "LpNormalization":
        return OutputKind("embedding", source="graph", reason="L2 normalisation at the tail")
    if node.op in ("GlobalAveragePool", "ReduceMean", "GlobalMaxPool", "AveragePool") and int(np.prod(shape[1:])) == max(shape[1:] or [0]) >= 16:
        # features pooled into one vector (a backbone's "feature vector" head): not points, not classes
        return OutputKind("embedding", source="graph", reason=f"{node.native or node.op} pooling features into one vector")
    if node.op == "Concat" and not reshaped and rank:
        return _packed_from_concat(graph, node, shape)
    return None


def _packed_from_concat(graph: GraphView, node, shape: list[int]) -> OutputKind | None:
    rank = len(shape)
    axis = int(node.attrs.get("axis", 0)) % rank
    parts = []
    for t in node.inputs:
        s = graph.shapes.get(t)
        if not s or len(s) != rank or s[axis] < 1:
            return None
        tail = graph.tail(t)
        parts.append(("scores" if tail is not None and tail.op in _ACTIVATIONS else "regression", s[axis]))
    if sum(n for _, n in parts) != shape[axis] or len({k for k, _ in parts}) < 2:
        return None
    groups: list[OutputGroup] = []
    start = 0
    for kind, n in parts:
        if groups and groups[-1].kind == kind:
            groups[-1].stop += n
        else:
            groups.append(OutputGroup(kind, start, start + n, kind))  # type: ignore[arg-type]
        start += n
    _name_groups(groups)
    return OutputKind("packed", axis=axis - rank, groups=groups, source="graph",
                      reason="Concat of an activated branch (scores) and a plain one (coordinates)")


def _name_groups(groups: list[OutputGroup]) -> None:
    seen: dict[str, int] = {}
    for g in groups:
        base = "boxes" if g.kind == "regression" and g.stop - g.start == 4 and "boxes" not in seen else g.kind
        if base == "boxes":
            g.kind = "boxes"
        seen[base] = seen.get(base, 0) + 1
        g.name = base if seen[base] == 1 else f"{base}{seen[base]}"


# ----------------------------------------------------------------------------- value evidence
def _packed_from_values(r: np.ndarray, shape: list[int]) -> OutputKind | None:
    """Leading channels outside [0, 1] and trailing channels inside it, along a channel axis."""
    rank = len(shape)
    for axis in range(1, rank):
        c = shape[axis]
        positions = int(np.prod(shape[1:])) // c
        if c < 3 or positions < MIN_POSITIONS or c > positions:
            continue
        moved = np.moveaxis(r, axis + 1, -1).reshape(-1, c)
        lo, hi = moved.min(0), moved.max(0)
        in01 = (lo >= -1e-6) & (hi <= 1 + 1e-6)
        k = int(np.argmax(in01)) if in01.any() else c
        if 2 <= k < c and in01[k:].all() and not in01[:k].any() and float(np.abs(moved[:, :k]).max()) > 1.5:
            groups = [OutputGroup("regression", 0, k, "regression"), OutputGroup("scores", k, c, "scores")]
            _name_groups(groups)
            return OutputKind("packed", axis=axis - rank, groups=groups, source="values",
                              reason=f"channels 0:{k} range beyond [0, 1] (coordinates), {k}:{c} stay in [0, 1] (scores)")
    return None


#: Objectness evidence: where the first score channel is below this, nothing is there ...
OBJ_ABSENT = 0.05
#: ... yet the class scores beside it reach 0.5 at this share of those positions or more ...
OBJ_CLASSES_HIGH_SHARE = 0.10
#: ... and where it is >= 0.5, a class score >= 0.3 names the object at this share or more.
OBJ_NAMED_SHARE = 0.5


def split_objectness(kind: OutputKind, r: np.ndarray) -> None:
    """Split a packed output's scores group into ``objectness`` + conditional class scores when
    the values say so (``r``: ``[samples, *shape]`` float outputs).

    YOLOv5/YOLOX rows are ``boxes, objectness, classes``: the class scores are trained only where
    an object is, so they stay high where objectness says nothing is, and the detection score is
    their product. Judged as independent scores, a single-class head (class score ~0.9 at every
    anchor) would call every anchor a detection and judge boxes at background anchors. Evidence,
    all needed: the group has 2+ channels not summing to 1 (no softmax); its first channel is
    below :data:`OBJ_ABSENT` at most positions; the other channels still reach 0.5 at
    :data:`OBJ_CLASSES_HIGH_SHARE` of those; and where the first channel is >= 0.5 (10+
    positions) a class reaches 0.3 at :data:`OBJ_NAMED_SHARE` of them. A YOLOv8 head (no
    objectness: background anchors score low in every class) fails the third test.
    """
    if kind.kind != "packed" or kind.source == "declared" or any(g.kind == "objectness" for g in kind.groups):
        return
    ax = kind.axis + 1 if kind.axis >= 0 else kind.axis
    for i, g in enumerate(kind.groups):
        if g.kind != "scores" or g.stop - g.start < 2:
            continue
        part = np.moveaxis(np.take(r, range(g.start, g.stop), axis=ax), ax, -1).reshape(-1, g.stop - g.start)
        part = part.astype(np.float64)
        if not _in01(part) or np.allclose(part.sum(-1), 1.0, atol=1e-3):
            continue
        first, rest = part[:, 0], part[:, 1:].max(axis=1)
        absent, present = first < OBJ_ABSENT, first >= 0.5
        if absent.mean() < 0.5 or present.sum() < 10:
            continue
        high_where_absent = float(np.mean(rest[absent] >= 0.5))
        named = float(np.mean(rest[present] >= 0.3))
        if high_where_absent < OBJ_CLASSES_HIGH_SHARE or named < OBJ_NAMED_SHARE:
            continue
        obj = OutputGroup("objectness", g.start, g.start + 1, "objectness")
        kind.groups[i:i + 1] = [obj, OutputGroup(g.name, g.start + 1, g.stop, "scores")]
        kind.reason += (f"; channel {g.start} is objectness: below {OBJ_ABSENT} at {absent.mean():.0%} of positions, "
                        f"where the class scores still reach 0.5 at {high_where_absent:.0%} (conditional class scores: "
                        "judged as objectness x class score)")
        return


def _detection_list(r: np.ndarray, shape: list[int]) -> OutputKind | None:
    """Rows ``x1, y1, x2, y2, score, class[, ...]`` sorted by score: a detector with its NMS inside
    (Ultralytics ``nms=True``, padded with zero rows) or an NMS-free end-to-end head (YOLOv10, YOLO26:
    the top K). Position by position such a list is meaningless (a score change reorders it; the
    zero padding made a range error of 0.0004 pass anything); it is judged by matching rows."""
    if len(shape) not in (2, 3) or (len(shape) == 3 and shape[0] != 1) or not 6 <= shape[-1] <= 128 or shape[-2] < 5:
        return None  # rows of 6 (+ keypoints or mask coefficients), not a channel-first head
    v = r.reshape(r.shape[0], shape[-2], shape[-1]).astype(np.float64)
    score, cls = v[..., 4], v[..., 5]
    live = score > 0
    if not live.any() or float(score.min()) < 0 or float(score.max()) > 1 + 1e-6:
        return None
    if float(np.abs(cls - np.round(cls)).max()) > 1e-3 or float(cls.min()) < 0:
        return None
    b = v[live][:, :4]
    if float(np.mean((b[:, 2] >= b[:, 0]) & (b[:, 3] >= b[:, 1]))) < 0.99:
        return None
    ordered = float(np.mean(np.all(np.diff(score, axis=1) <= 1e-6, axis=1)))
    if ordered < 0.9:
        return None
    return OutputKind("detections", source="values",
                      reason=f"{shape[-2]} rows of x1, y1, x2, y2, a score in 0..1 and an integer class, sorted by score: "
                             "a detection list (NMS inside, or an end-to-end head), judged by matching rows")


def from_values(r: np.ndarray, shape: list[int]) -> OutputKind | None:
    """The kind the float values suggest (``r``: ``[samples, *shape]``), or None."""
    if not r.size or not np.issubdtype(r.dtype, np.floating):
        return None
    listed = _detection_list(r, shape)
    if listed is not None:
        return listed
    rank = len(shape)
    in01 = _in01(r)
    ax = _map_axis(shape)
    if ax is not None:
        if not in01 and shape[ax] <= 2:
            # Masks are probabilities; an unbounded one- or two-channel map is a feature map (a
            # spectrogram, depth): thresholding it at 0.5 would judge noise. Mask logits from a
            # graph whose tail says nothing: declare --output NAME=mask:logits.
            return OutputKind("regression", source="values",
                              reason=f"a map of unbounded values ({float(r.min()):.3g}..{float(r.max()):.3g}), not "
                                     "probabilities: judged by error relative to its range")
        return _map_kind(shape, ax, "a spatial map with values in [0, 1]" if in01 else "a spatial map", "values")
    packed = _packed_from_values(r, shape)
    if packed is not None:
        return packed
    if rank >= 2 and in01 and np.allclose(r.sum(axis=-1), 1.0, atol=1e-3):
        if rank >= 3 and 4 <= shape[-2] <= MAX_SEQUENCE_STEPS:
            return OutputKind("sequence", axis=-1, source="values", reason="per-step probabilities summing to 1")
        return OutputKind("scores", axis=-1, source="values", reason="probabilities summing to 1 along the last axis")
    last = shape[-1] if rank else 1
    positions = int(np.prod(shape[1:-1])) if rank >= 2 else 1
    ctc = _time_major_ctc(r, shape)
    if ctc is not None:
        return ctc
    if last == 1 and positions >= MIN_POSITIONS:
        if in01:
            return OutputKind("scores", axis=-1, source="values", reason="one probability per position")
        return OutputKind("logits", axis=-1, activation="sigmoid", source="values",
                          reason=f"one value per position, range {float(r.min()):.3g}..{float(r.max()):.3g}: raw logits")
    if positions == 1 or rank <= 1:
        if last <= 4:
            if in01:
                return OutputKind("scores", axis=-1, source="values", reason="a few values in [0, 1]")
            if last == 1:
                return OutputKind("logits", axis=-1, activation="sigmoid", source="values",
                                  reason="one unbounded value per sample: read as a logit")
            return None
        points = _point_layout(r, last)
        if points is not None:
            dims, how = points
            # image points: x, y place them (a third value is a relative depth estimate)
            return OutputKind("landmarks", dims=dims, coords=2, source="values",
                              reason=f"{last // dims} points of {dims} values with positive x, y: {how} coordinates")
        peaky = _class_logits(r, last)
        if peaky is not None:
            return peaky
        return OutputKind("embedding", source="values", reason=f"a signed {last}-value vector")
    if rank >= 3 and last == 2 and positions >= 4 and _point_layout(r.reshape(r.shape[0], -1), 2 * positions) == (2, "normalised"):
        # [1, K, 2] of x, y in 0..1 (a face-alignment head's 68 or 98 points): one object's points
        return OutputKind("landmarks", dims=2, coords=2, source="values",
                          reason=f"{positions} points of x, y in 0..1: normalised coordinates")
    if rank >= 3 and positions >= MIN_POSITIONS and last >= 2:
        return OutputKind("regression", source="values", reason=f"{last} values per position (e.g. box/keypoint offsets)")
    return None


#: Normalised coordinates: at least this share of x, y values inside (0.02, 0.98)... (probabilities
#: and pooled features crowd at 0 or 1; points of an object inside a crop do not).
MID_SHARE = 0.9


def _point_layout(r: np.ndarray, last: int) -> tuple[int, str] | None:
    """How one vector per sample of ``last`` values holds points, if it does: ``(values per point,
    "pixel" | "normalised")``.

    x and y are positions, so positive; z may be signed. Pixel coordinates span more than 1.
    Normalised ones (0..1 of the crop, as PFLD-style face alignment and many keypoint heads give
    them) read as cosine-judged embeddings before: they lie in -0.1..1.1 with most x, y away from
    0 and 1, where probabilities and pooled features crowd. Records of x, y, z and visibility (,
    presence) logits (MediaPipe's pose landmarks, 39 x 5) read as triples mix signed logits into
    x and y, so triples fail there. Points of two values read in threes put x or y in the third
    place: a third value as positive and as wide as x, y says the points have two."""
    v = r.reshape(r.shape[0], -1)
    for dims in (3, 2, 5, 4):
        if last % dims or last < 2 * dims:
            continue
        g = v.reshape(v.shape[0], -1, dims)
        xy = g[..., :2]
        if float(np.mean(xy > 0)) < 0.95:
            continue
        if dims == 3 and last % 2 == 0 and float(np.mean(g[..., 2] > 0)) >= 0.95 \
                and float(np.ptp(g[..., 2])) >= 0.5 * float(np.ptp(xy)):
            continue  # x, y pairs read in threes
        if float(np.ptp(xy)) > 1.0:
            return dims, "pixel"
        if dims <= 3 and last // dims >= 4 and float(np.mean((v >= -0.1) & (v <= 1.1))) >= 0.995 \
                and float(np.mean((xy > 0.02) & (xy < 0.98))) >= MID_SHARE:
            return dims, "normalised"
    return None


#: A classifier's raw logits: its top value stands this many standard deviations above the rest...
LOGIT_TOP_Z = 5.0
#: ...in at least this share of the samples (an embedding's largest of 96-2048 roughly normal
#: values sits 3-4 above; openWakeWord's 96-value embedding: 2.8-4.5).
LOGIT_TOP_SHARE = 0.75


def _class_logits(r: np.ndarray, last: int) -> OutputKind | None:
    """One vector per sample whose largest value stands far above the others in most samples, with
    negative values beside it: a classifier's raw logits (a ResNet or MobileNet exported without its
    softmax), judged by top-1 agreement and softmax scores rather than by cosine as an embedding,
    which stays high while the top class flips. Pooled features (all >= 0) are left as embeddings."""
    if last < 10:
        return None
    v = r.reshape(r.shape[0], -1).astype(np.float64)
    if v.shape[1] != last or float(np.mean(v < 0)) < 0.1:
        return None
    top = v.argmax(axis=1)
    rest = np.where(np.arange(last)[None] == top[:, None], np.nan, v)
    spread = np.nanstd(rest, axis=1)
    z = (v.max(axis=1) - np.nanmean(rest, axis=1)) / np.where(spread > 0, spread, np.inf)
    share = float(np.mean(z >= LOGIT_TOP_Z))
    if share < LOGIT_TOP_SHARE:
        return None
    return OutputKind("logits", axis=-1, activation="softmax", source="values",
                      reason=f"{last} signed values whose top one stands {float(np.median(z)):.1f} standard deviations "
                             f"above the rest (median; >= {LOGIT_TOP_Z:g} in {share:.0%} of samples): a classifier's raw logits")


#: Share of all steps a CTC blank takes at least (the greedy path is mostly blank between tokens).
CTC_BLANK_SHARE = 0.3


def _time_major_ctc(r: np.ndarray, shape: list[int]) -> OutputKind | None:
    """``[T, 1, C]`` per-step class logits with the batch in the middle, as a recurrent CRNN exports
    them (PyTorch's time-major LSTM: ddddocr's OCR), read as a CTC sequence: 4..400 steps, 10+
    classes, and one class (the blank) the greedy path takes at ``CTC_BLANK_SHARE`` of all steps
    and in every sample, with other classes between. Without the layout a ``[1, T, C]`` output of
    logits could as well be a detector's query list, whose "no object" class dominates too."""
    if len(shape) != 3 or shape[1] != 1 or not 4 <= shape[0] <= MAX_SEQUENCE_STEPS or shape[2] < 10:
        return None
    path = np.argmax(r, axis=-1).reshape(r.shape[0], -1)  # [samples, T]
    blank, share = dominant_class(r)
    tokens = np.count_nonzero(path != blank, axis=1)
    if share < CTC_BLANK_SHARE or not (path == blank).any(axis=1).all() or tokens.mean() < 1:
        return None
    return OutputKind("sequence", axis=-1, blank=blank, source="values",
                      reason=f"[T={shape[0]}, 1, C={shape[2]}] per-step classes (time-major) whose greedy path is class "
                             f"{blank} at {share:.0%} of steps with {tokens.mean():.1f} other steps per sample: CTC logits")


def infer_blank(r: np.ndarray, kind: OutputKind) -> int | None:
    """CTC blank of a sequence: the class the float model's greedy path is mostly made of."""
    blank, share = dominant_class(r, kind.axis)
    return blank if share >= CTC_BLANK_SHARE else None


#: Share of positions whose argmax is one column, for that column to be a softmax head's background.
BACKGROUND_SHARE = 0.5


def _classes_beside_boxes(kinds: dict[str, OutputKind], shapes: dict[str, list[int]], refs: dict[str, np.ndarray]) -> None:
    """Two per-position outputs over the same positions, one of 4 values (box regressions), the
    other of C >= 2 unbounded values: the other is class logits (an SSD or DETR-style head exported
    without its post-processing), not a regression judged by its range. Softmax when one column is
    the argmax at most positions (a background or "no object" class), else sigmoid."""
    plain = [n for n, k in kinds.items() if k.kind == "regression" and k.source != "declared"]
    for box in [n for n in plain if shapes[n][-1] == 4]:
        for name in plain:
            s, b = shapes[name], shapes[box]
            if name == box or len(s) != len(b) or s[:-1] != b[:-1] or s[-1] < 2 or s[-1] == 4 or refs.get(name) is None:
                continue
            top, share = dominant_class(refs[name])
            softmax = share >= BACKGROUND_SHARE
            kinds[name] = OutputKind(
                "logits", axis=-1, activation="softmax" if softmax else "sigmoid", source="values",
                reason=f"{s[-1]} unbounded values per position beside '{box}' (4 per position, the same positions): "
                       "class logits" + (f"; column {top} is the argmax at {share:.0%} of positions: a softmax's "
                                         "background" if softmax else ", one sigmoid per class"))


def _boxes_beside_scores(kinds: dict[str, OutputKind], shapes: dict[str, list[int]]) -> None:
    """A per-position regression beside per-position scores with the same positions: boxes."""
    scored = [shapes[n] for n, k in kinds.items() if k.kind in ("scores", "logits")]
    for name, kind in kinds.items():
        if kind.kind == "regression" and kind.source != "declared":
            s = shapes[name]
            if any(len(o) == len(s) and o[:-1] == s[:-1] for o in scored):
                kind.kind = "boxes"
                kind.reason += "; beside per-position scores: judged where the scores are confident"


#: Fewest bins per distance read as a distribution (BlazeFace's 16 values = 4 x 4 are offsets).
MIN_BINS = 8
#: Share of (position, side) groups whose two likeliest bins are neighbours, for a distribution.
ADJACENT_SHARE = 0.6


def _bins_of(r: np.ndarray) -> int | None:
    """GFL/DFL box distributions (PicoDet, NanoDet: 4 x 8 logits; raw YOLOv8: 4 x 16): signed
    logits whose groups put their two likeliest bins next to each other (a distance between two
    bins is trained as a two-bin target). Coordinates or offsets grouped so fall on neighbours by
    chance (about 2 in ``bins``)."""
    last = r.shape[-1]
    if last % 4 or last // 4 < MIN_BINS or float(r.min()) >= 0:
        return None
    bins = last // 4
    g = r.reshape(-1, bins)[: 200_000]
    top2 = np.argsort(-g, axis=-1)[:, :2]
    return bins if float(np.mean(np.abs(top2[:, 0] - top2[:, 1]) == 1)) >= ADJACENT_SHARE else None


def _distributions(kinds: dict[str, OutputKind], refs: dict[str, np.ndarray]) -> None:
    """Boxes given as distributions are judged by the distances they decode to, not by their logits."""
    for name, kind in kinds.items():
        if kind.kind == "boxes" and kind.source != "declared" and not kind.bins and refs.get(name) is not None:
            bins = _bins_of(refs[name])
            if bins:
                kind.bins = bins
                kind.reason += (f"; 4 x {bins} logits whose two likeliest bins are neighbours: distance distributions "
                                "(GFL/DFL), judged by the distances they decode to")


def _point_counts(length: int) -> set[int]:
    """How many points a landmarks vector of ``length`` values can hold (2 to 5 values each)."""
    return {length // d for d in (3, 2, 5, 4) if length % d == 0 and length >= 2 * d}


def _world_beside_landmarks(kinds: dict[str, OutputKind], shapes: dict[str, list[int]]) -> None:
    """A signed vector of x, y, z for as many points as a landmarks output holds: the same points
    in 3-D (metric, centred) coordinates, as MediaPipe's hand (21) and pose (39) world landmarks
    beside their image landmarks. Cosine would judge their direction from the origin, which is the
    object's centre; they are coordinates, judged like the image landmarks by error over their range."""
    points: dict[int, str] = {}
    for name, kind in kinds.items():
        if kind.kind == "landmarks":
            for k in _point_counts(int(np.prod(shapes[name][1:])) if len(shapes[name]) > 1 else 1):
                points.setdefault(k, name)
    for name, kind in kinds.items():
        shape = shapes[name]
        if kind.kind != "embedding" or kind.source != "values" or len(shape) < 2:
            continue
        length = int(np.prod(shape[1:]))
        if length % 3 == 0 and length // 3 in points and points[length // 3] != name:
            kinds[name] = OutputKind("landmarks", dims=3, coords=3, source="values",
                                     reason=f"{length // 3} signed x, y, z points, as many as {points[length // 3]}'s "
                                            "landmarks: the same points in 3-D coordinates")


def _one_value(shape: list[int]) -> bool:
    """One value per sample (``[1]``, ``[1, 1]``, ``[1, 1, 1, 1]``): a flag, not a per-position output."""
    return int(np.prod(shape)) == 1 if shape else True


def _per_sample_points(kind: OutputKind, shape: list[int]) -> bool:
    """A landmarks output holding one object's points per sample (not one set per anchor)."""
    return kind.kind == "landmarks" and (len(shape) <= 2 or int(np.prod(shape[:-1])) == 1)


def _presence_beside_landmarks(kinds: dict[str, OutputKind], shapes: dict[str, list[int]]) -> None:
    """A model that returns one object's landmarks and one-value flags beside them (MediaPipe's hand:
    presence, then handedness; face: the face flag; pose landmark's one flag likewise, not run here)
    reads its landmarks and its other flags only where the presence flag says yes: MediaPipe drops
    the hand below 0.5.
    Judged everywhere, a crop with no hand scores its meaningless points and handedness as
    errors. The presence flag is the first flag in output order (MediaPipe's order); the flag
    itself is judged on every sample, so a hand int8 invents or loses still fails. Declared kinds
    are kept as they are; where a declaration names the presence flag (``given=FLAG``), that flag
    is the one the undeclared outputs are read by."""
    flags = [n for n, k in kinds.items() if k.kind in ("scores", "logits") and _one_value(shapes[n])]
    points = [n for n, k in kinds.items() if _per_sample_points(k, shapes[n])]
    named = {k.given for k in kinds.values() if k.given}
    if not flags or not points or len(named) > 1:
        return
    declared = bool(named)
    presence = named.pop() if named else flags[0]
    if presence not in flags:  # a declared given that is no flag: refused by _check_given
        return
    why = (f"read where '{presence}' says yes (the presence flag --output named)" if declared else
           f"read where '{presence}' says yes (the first one-value flag beside per-sample landmarks: their presence "
           "flag; declare given=NAME to name another)")
    for name in points + [f for f in flags if f != presence]:
        kind = kinds[name]
        if kind.source != "declared":
            kind.given = presence
            kind.reason = f"{kind.reason}; {why}" if kind.reason else why


def _check_given(kinds: dict[str, OutputKind], shapes: dict[str, list[int]]) -> None:
    """A declared ``given`` must name another output that is one score or logit per sample.

    Raises:
        InputValidationError: naming the output and what ``given`` must be.
    """
    from edge_sdk.errors import InputValidationError

    for name, kind in kinds.items():
        if not kind.given:
            continue
        flag = kinds.get(kind.given)
        if flag is None or kind.given == name:
            raise InputValidationError(f"--output {name}: given={kind.given} names no other output of the model.",
                                       f"Outputs: {', '.join(kinds)}")
        if flag.kind not in ("scores", "logits") or not _one_value(shapes[kind.given]):
            raise InputValidationError(
                f"--output {name}: given={kind.given} must be one score or logit per sample (a presence flag); "
                f"it is {flag.label()} of shape {shapes[kind.given]}.",
                f"Declare {kind.given} as scores (or logits) if it is the flag, or name the flag output.")
        if flag.given:
            raise InputValidationError(f"--output {name}: given={kind.given}, which is itself judged only where "
                                       f"{flag.given} says yes; name the presence flag itself.")


def infer_kinds(outputs: list[TensorSpec], reference: list[dict[str, np.ndarray]], graph: GraphView | None,
                declared: dict[str, OutputKind] | None = None,
                streams: list[tuple[str, str]] | tuple = ()) -> dict[str, OutputKind]:
    """The kind of every output, with how it was decided.

    Args:
        outputs: The source's outputs (static shapes).
        reference: Float outputs on the held-back samples.
        graph: The float graph (ONNX or TFLite) or None.
        declared: User declarations by output name.
        streams: ``(output, input)`` pairs of ``--stream``: those outputs are ``state`` unless declared.

    Raises:
        InputValidationError: a declaration names no output, does not fit its shape, or declares
            ``state`` on an output no ``--stream`` feeds back.
    """
    from edge_sdk.errors import InputValidationError

    declared = dict(declared or {})
    names = [o.name for o in outputs]
    unknown = sorted(set(declared) - set(names))
    if unknown:
        raise InputValidationError(f"--output names {unknown}, which the model does not have.",
                                   f"Outputs: {', '.join(names)}")
    fed_back = dict(streams)
    loose = sorted(n for n, k in declared.items() if k.kind == "state" and n not in fed_back)
    if loose:
        raise InputValidationError(f"--output declares {', '.join(loose)} a state, but no --stream feeds it back.",
                                   f"Add --stream {loose[0]}:INPUT (the input it becomes at the next step), or "
                                   "declare another kind.")
    kinds: dict[str, OutputKind] = {}
    shapes: dict[str, list[int]] = {}
    refs: dict[str, np.ndarray] = {}
    for spec in outputs:
        r = np.stack([np.asarray(ref[spec.name]) for ref in reference]) if reference else np.zeros((0,))
        shape = list(r.shape[1:]) if r.ndim > 1 else list(spec.shape)
        shapes[spec.name] = shape
        if r.size and np.issubdtype(r.dtype, np.floating):
            refs[spec.name] = r
        kind = declared.get(spec.name)
        if kind is None and spec.name in fed_back:
            kind = OutputKind("state", source="stream",
                              reason=f"fed back as input '{fed_back[spec.name]}' (--stream): judged by the outputs it "
                                     "feeds and by its own error at the end of a long stream")
        if kind is None and graph is not None:
            kind = from_graph(graph, spec.name, shape)
        if kind is None and r.size:
            kind = from_values(r, shape)
        kind = kind or OutputKind("tensor", source="default", reason="no evidence of a kind: whole-tensor metrics")
        if r.size:
            split_objectness(kind, r)
        check_fits(spec.name, kind, shape)
        if kind.kind == "sequence" and kind.blank is None and kind.source != "declared" and r.size:
            kind.blank = infer_blank(r, kind)
        kinds[spec.name] = kind
    _classes_beside_boxes(kinds, shapes, refs)
    _boxes_beside_scores(kinds, shapes)
    _distributions(kinds, refs)  # bins = last axis // 4: they fit by construction
    _world_beside_landmarks(kinds, shapes)
    _presence_beside_landmarks(kinds, shapes)
    _check_given(kinds, shapes)
    return kinds


def kinds_table(kinds: dict[str, OutputKind]) -> list[dict[str, Any]]:
    return [{"output": n, "kind": k.label(), "source": k.source, "reason": k.reason} for n, k in kinds.items()]
