"""Output kinds: what each model output *means*, so the gate and the printers judge it by its task.

A whole-tensor cosine says nothing about a detector whose box coordinates (0..320) and class
scores (0..1) share one tensor, or about raw logits whose background sits at -60. So every
output of an artifact carries a kind (``manifest.outputs[].kind``), inferred once at conversion
(see ``edge_sdk.converters.accuracy.kinds``) or declared by the user
(``--output NAME:KIND[:options]``), and read by the accuracy gate, ``edge-sdk run`` and
``infer_image`` alike.

Kinds:

* ``scores``: class scores that are already probabilities along ``axis`` (softmax or sigmoid).
* ``logits``: class scores before their activation (``activation``: sigmoid or softmax), which
  the gate and the printers apply before comparing or ranking.
* ``boxes`` / ``landmarks`` / ``regression``: coordinates and other real values.
* ``heatmap`` / ``mask``: spatial maps (probabilities, or logits with ``activation``).
* ``embedding``: a feature vector compared by direction.
* ``sequence``: per-step class scores ``[..., T, C]`` (``blank``: the CTC blank index, if any).
* ``packed``: several of the above in channel ``groups`` along ``axis`` (YOLO: boxes, scores). A
  group may also be ``objectness`` (one channel, YOLOv5/YOLOX): the class scores beside it are
  then conditional, and a detection's score is objectness times class score.
* ``state``: a recurrent state fed back as an input (``--stream OUT:IN``). Its error shows in the
  outputs it feeds, judged with the artifact carrying its own state; the state itself is judged by
  its relative error at the end of a long stream (does the int8 error grow as it is carried?).
* ``tensor``: nothing known; whole-tensor cosine and SQNR.

An output read only where another says an object is there (``given``: MediaPipe's hand and face
landmarks and handedness are dropped where the presence flag beside them is below 0.5) is
judged on the samples where the float model's flag says yes: what an app never reads is no error.

Pure numpy; no ML framework is imported here (the runtime path uses it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .errors import InputValidationError

KindName = Literal["scores", "logits", "boxes", "landmarks", "regression", "heatmap", "mask", "embedding", "state",
                   "sequence", "packed", "detections", "tensor"]
Activation = Literal["none", "sigmoid", "softmax"]
#: What a channel group of a packed output may hold: a kind, or ``objectness`` (one channel whose
#: product with the class scores beside it is the detection score).
GroupKind = Literal["scores", "logits", "boxes", "landmarks", "regression", "heatmap", "mask", "embedding",
                    "sequence", "packed", "tensor", "objectness"]

KINDS: tuple[str, ...] = ("scores", "logits", "boxes", "landmarks", "regression", "heatmap", "mask", "embedding", "state",
                          "sequence", "packed", "detections", "tensor")
#: Words users type -> the kind they mean.
ALIASES = {"obj": "objectness", "probs": "scores", "probabilities": "scores", "classes": "scores", "coords": "regression",
           "keypoints": "landmarks", "segmentation": "mask", "features": "embedding", "ctc": "sequence",
           "generic": "tensor", "raw": "tensor", "end2end": "detections", "nms": "detections"}
#: Kinds judged as real-valued coordinates / values.
REGRESSION_KINDS = ("boxes", "landmarks", "regression")
#: Kinds judged as spatial maps.
MAP_KINDS = ("heatmap", "mask")


@dataclass
class OutputGroup:
    """A channel range ``[start, stop)`` of a packed output, with its own kind."""

    name: str
    start: int
    stop: int
    kind: GroupKind = "regression"
    activation: Activation = "none"


@dataclass
class OutputKind:
    """What an output means (``manifest.outputs[].kind``).

    Attributes:
        kind: One of :data:`KINDS` (``detections``: a list of rows ``x1, y1, x2, y2, score, class``
            after NMS or from an NMS-free head, judged by matching rows, not position by position).
        axis: The class / channel axis (scores, logits, sequence, packed groups).
        activation: Applied before comparing or ranking (logits; maps given as logits).
        groups: Channel groups along ``axis`` (``packed`` only).
        blank: CTC blank index of a ``sequence`` (None: no CTC collapse).
        bins: Boxes or regressions given as distributions (GFL/DFL: PicoDet, NanoDet, raw YOLOv8
            heads): each value is ``bins`` logits whose softmax expectation is the distance.
        dims: Values per point of a ``landmarks`` output (x, y; x, y, z; MediaPipe pose's x, y, z,
            visibility, presence). None: 3 if the length allows, else 2 (:func:`point_dims`).
        coords: How many of a point's first values place it, for the per-sample point error: 2
            for image landmarks (x, y; their z is a relative depth estimate, near constant across
            an iris), 3 for metric world landmarks. None: ``min(dims, 3)``.
        given: The output (one probability or logit per sample: a presence flag) whose float
            value >= 0.5 marks the samples where this one is read and judged. None: every sample.
            Written to the manifest only when set.
        source: How it was decided: ``declared`` (by the user), ``graph`` (the op at the
            model's tail), ``values`` (ranges seen on the float model), ``shape``, ``stream`` (a
            state ``--stream`` feeds back), ``default``.
        reason: One line saying why, for the report.
    """

    kind: KindName = "tensor"
    axis: int = -1
    activation: Activation = "none"
    groups: list[OutputGroup] = field(default_factory=list)
    blank: int | None = None
    bins: int | None = None
    dims: int | None = None
    coords: int | None = None
    given: str | None = field(default=None, metadata={"omit_if_none": True})
    source: Literal["declared", "graph", "values", "shape", "stream", "default"] = "default"
    reason: str = ""

    def label(self) -> str:
        """Short human form, e.g. ``packed(boxes 0:4, scores 4:84 @axis 1)``."""
        if self.kind == "packed":
            parts = ", ".join(f"{g.name} {g.start}:{g.stop}" + (f" {g.kind}" if g.kind != g.name else "")
                              for g in self.groups)
            return f"packed({parts} @axis {self.axis})"
        extra = f", {self.activation}" if self.activation != "none" else ""
        if self.bins:
            extra = f", {self.bins} bins{extra}"
        if self.dims or self.coords:
            placed = {2: ", judged by x, y", 3: ", judged by x, y, z"}.get(self.coords or 0, "")
            extra = (f", {self.dims} values per point" if self.dims else "") + f"{placed}{extra}"
        if self.kind in ("scores", "logits", "sequence"):
            extra = f", axis {self.axis}{extra}"
        if self.given:
            extra += f", where {self.given} says yes"
        return f"{self.kind}{'(' + extra[2:] + ')' if extra else ''}"


def canonical(word: str, group: bool = False) -> str:
    """The kind a word names (aliases resolved), or raise listing the kinds; ``group``: also
    ``objectness`` (a channel group of a packed output).

    Raises:
        InputValidationError: unknown kind.
    """
    w = word.strip().lower()
    w = ALIASES.get(w, w)
    if w not in KINDS and not (group and w == "objectness"):
        raise InputValidationError(f"Unknown output kind '{word}'.",
                                   f"Kinds: {', '.join(KINDS)}" + ("; a packed group may also be objectness" if group else ""))
    return w


def _int(value: str, what: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise InputValidationError(f"--output: {what} must be an integer, got '{value}'.") from None


def parse_declaration(text: str) -> tuple[str, OutputKind]:
    """Parse ``NAME:KIND[:key=value,...]`` (output names may themselves contain ':').

    Options: ``axis=N``, ``activation=sigmoid|softmax|none``, ``blank=N`` and, for ``packed``,
    one ``GROUP=START-STOP`` (or ``GROUP=START-STOP/KIND``) per channel group, e.g.
    ``output0:packed:axis=1,boxes=0-4,scores=4-84``.

    Raises:
        InputValidationError: malformed declaration.
    """
    parts = text.split(":")
    idx = max((i for i, p in enumerate(parts) if i > 0 and ALIASES.get(p.strip().lower(), p.strip().lower()) in KINDS),
              default=None)
    if idx is None:
        raise InputValidationError(f"--output '{text}': expected NAME:KIND[:options].",
                                   f"Kinds: {', '.join(KINDS)}; e.g. output0:packed:axis=1,boxes=0-4,scores=4-84")
    name, kind = ":".join(parts[:idx]), canonical(parts[idx])
    opts = ":".join(parts[idx + 1:])
    out = OutputKind(kind=kind, source="declared", reason="declared by the user")  # type: ignore[arg-type]
    if kind == "logits":
        out.activation = "softmax"
    for item in filter(None, (o.strip() for o in opts.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise InputValidationError(f"--output '{text}': option '{item}' is not key=value.")
        key = key.strip().lower()
        if key == "axis":
            out.axis = _int(value, "axis")
        elif key == "activation":
            if value not in ("none", "sigmoid", "softmax"):
                raise InputValidationError(f"--output '{text}': activation must be none, sigmoid or softmax.")
            out.activation = value  # type: ignore[assignment]
        elif key == "blank":
            out.blank = _int(value, "blank")
        elif key == "bins" and kind in REGRESSION_KINDS:
            out.bins = _int(value, "bins")
            if out.bins < 2:
                raise InputValidationError(f"--output '{text}': bins must be 2 or more (the logits per distance).")
        elif key == "dims" and kind == "landmarks":
            out.dims = _int(value, "dims")
            if not 2 <= out.dims <= 8:
                raise InputValidationError(f"--output '{text}': dims is the values per point, 2 to 8 (x, y[, z, ...]).")
        elif key == "coords" and kind == "landmarks":
            out.coords = _int(value, "coords")
            if out.coords not in (2, 3):
                raise InputValidationError(f"--output '{text}': coords is 2 (x, y) or 3 (x, y, z): the values that place a point.")
        elif key == "given" and kind in (*REGRESSION_KINDS, "scores", "logits"):
            if not value.strip():
                raise InputValidationError(f"--output '{text}': given names the presence output, e.g. given=Identity_1.")
            out.given = value.strip()
        elif kind == "packed":
            span, _, gkind = value.partition("/")
            lo, dash, hi = span.partition("-")
            if not dash:
                raise InputValidationError(f"--output '{text}': group '{key}' needs START-STOP, got '{value}'.")
            if not gkind and ALIASES.get(key, key) not in (*KINDS, "objectness"):
                raise InputValidationError(f"--output '{text}': say what group '{key}' holds, e.g. {key}={value}/scores.")
            g_kind = canonical(gkind or key, group=True)
            act = "sigmoid" if g_kind == "logits" else "none"
            out.groups.append(OutputGroup(key, _int(lo, "group start"), _int(hi, "group stop"), g_kind, act))  # type: ignore[arg-type]
        else:
            raise InputValidationError(f"--output '{text}': unknown option '{key}'.",
                                       "Options: axis, activation, blank, bins (boxes given as distributions), dims (values per "
                                       "landmark point), coords (2 or 3: those that place it), given (the presence output whose "
                                       "float yes marks the samples where this one is judged), and GROUP=START-STOP for packed "
                                       "outputs.")
    if kind == "packed" and not out.groups:
        raise InputValidationError(f"--output '{text}': a packed output needs its groups, e.g. boxes=0-4,scores=4-84.")
    if kind == "packed":
        _check_objectness(f"--output '{text}'", out)
    return name, out


def _check_objectness(where: str, kind: OutputKind) -> None:
    obj = [g for g in kind.groups if g.kind == "objectness"]
    if len(obj) > 1 or any(g.stop - g.start != 1 for g in obj):
        raise InputValidationError(f"{where}: a packed output has at most one objectness group, of one channel.",
                                   "e.g. boxes=0-4,objectness=4-5,scores=5-85 (YOLOv5).")
    if obj and not any(g.kind in ("scores", "logits") for g in kind.groups):
        raise InputValidationError(f"{where}: an objectness group needs class scores beside it.",
                                   "Declare it as scores instead (e.g. scores=4-5) if it is the only score.")


def check_fits(name: str, kind: OutputKind, shape: list[int]) -> None:
    """Check a kind against the output's static shape.

    Raises:
        InputValidationError: the axis or a group does not fit.
    """
    rank = len(shape)
    if kind.kind in ("scores", "logits", "sequence", "packed") and not -rank <= kind.axis < rank:
        raise InputValidationError(f"Output '{name}' has rank {rank}; axis {kind.axis} is out of range.")
    if kind.bins and (not rank or shape[-1] % kind.bins):
        raise InputValidationError(f"Output '{name}' of shape {shape}: its last axis does not split into groups of "
                                   f"{kind.bins} bins.", "bins is the number of logits per distance (e.g. 8 for PicoDet).")
    if kind.coords and kind.kind == "landmarks" and rank:
        dims = point_dims(int(np.prod(shape[1:] if rank > 1 else shape)), kind) or 0
        if kind.coords > dims:  # it would be judged by fewer values than it says place a point
            raise InputValidationError(f"Output '{name}' of shape {shape}: coords={kind.coords} is more than its "
                                       f"{dims} values per point." if dims else
                                       f"Output '{name}' of shape {shape}: its values do not split into points.",
                                       "Declare dims too (e.g. dims=3,coords=3), or coords=2 for x, y.")
    if kind.dims and (not rank or shape[-1] % kind.dims):
        raise InputValidationError(f"Output '{name}' of shape {shape}: its last axis does not split into points of {kind.dims} values.",
                                   "dims is the number of values per landmark point (2: x, y; 3: x, y, z).")
    if kind.kind == "detections" and (rank < 2 or shape[-1] < 6):
        raise InputValidationError(f"Output '{name}' of shape {shape} cannot be a detection list: it needs rows of "
                                   "x1, y1, x2, y2, score, class ([1, K, 6+]).")
    if kind.kind == "sequence" and rank < 2:
        raise InputValidationError(f"Output '{name}' of shape {shape} cannot be a sequence: it needs [..., T, C].")
    if kind.kind == "packed":
        size = shape[kind.axis]
        spans = sorted((g.start, g.stop, g.name) for g in kind.groups)
        for lo, hi, g in spans:
            if not 0 <= lo < hi <= size:
                raise InputValidationError(f"Output '{name}': group '{g}' {lo}-{hi} is outside axis {kind.axis} of size {size}.")
        for (_, hi, g), (lo2, _, g2) in zip(spans, spans[1:]):
            if lo2 < hi:
                raise InputValidationError(f"Output '{name}': groups '{g}' and '{g2}' overlap.")
        _check_objectness(f"Output '{name}'", kind)


# ----------------------------------------------------------------------------- math shared by gate and printers
def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # overflow-free


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(x, np.float64)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def activate(x: np.ndarray, activation: str, axis: int) -> np.ndarray:
    """Apply ``activation`` (``none`` returns float64 values unchanged)."""
    if activation == "sigmoid":
        return sigmoid(x)
    if activation == "softmax":
        return softmax(x, axis)
    return np.asarray(x, np.float64)


def times_objectness(a: np.ndarray, kind: OutputKind, group: OutputGroup, axis: int) -> np.ndarray | None:
    """A packed output's class-score ``group`` as its head thresholds it: activated (logits by a
    sigmoid unless told otherwise) and multiplied by the objectness channel beside it (YOLOv5,
    YOLOX: the class scores are conditional on it). None when the output has no objectness group.
    ``axis`` is the channel axis of ``a`` (the kind's axis, shifted when ``a`` stacks samples)."""
    obj = next((g for g in kind.groups if g.kind == "objectness"), None)
    if obj is None or group.kind not in ("scores", "logits"):
        return None
    act = "sigmoid" if group.kind == "logits" and group.activation == "none" else group.activation
    scores = activate(np.take(a, range(group.start, group.stop), axis=axis), act, axis)
    return scores * activate(np.take(a, range(obj.start, obj.stop), axis=axis), obj.activation, axis)


def expected_bins(x: np.ndarray, bins: int) -> np.ndarray:
    """GFL/DFL distributions -> distances: the last axis read as groups of ``bins`` logits, each
    group's softmax expectation over 0..bins-1 (in bin units; the decoder multiplies by the stride)."""
    a = np.asarray(x, np.float64)
    g = a.reshape(*a.shape[:-1], a.shape[-1] // bins, bins)
    return np.sum(softmax(g, -1) * np.arange(bins), axis=-1)


def dominant_class(values: np.ndarray, axis: int = -1) -> tuple[int, float]:
    """The class most positions (steps, anchors) pick as their argmax along ``axis``, and the share
    of positions that pick it: a CTC blank, a softmax head's background or "no object" class."""
    picks = np.argmax(values, axis=axis).ravel()
    counts = np.bincount(picks, minlength=int(np.shape(values)[axis]))
    best = int(np.argmax(counts))
    return best, float(counts[best] / max(picks.size, 1))


def ctc_collapse(path: np.ndarray, blank: int | None) -> list[int]:
    """Greedy CTC: merge repeats, drop the blank (``blank`` None: keep the path as it is)."""
    seq = [int(v) for v in np.asarray(path).ravel()]
    if blank is None:
        return seq
    out, prev = [], None
    for v in seq:
        if v != prev and v != blank:
            out.append(v)
        prev = v
    return out


def point_dims(length: int, kind: OutputKind) -> int | None:
    """Values per point of a landmarks output of ``length`` values: the recorded ``dims``, else 3
    when the length splits so, else 2; None when it is no landmarks output or does not split."""
    if kind.kind != "landmarks":
        return None
    if kind.dims:
        return kind.dims if length % kind.dims == 0 else None
    return next((d for d in (3, 2) if length % d == 0 and length >= 2 * d), None)


# ----------------------------------------------------------------------------- printing by kind
def summarize_output(name: str, arr: np.ndarray, kind: OutputKind | None, top_k: int = 5,
              labels: list[str] | None = None) -> dict[str, Any]:
    """A JSON-able summary of one output, by its kind (what ``edge-sdk run`` prints).

    Class scores get the top-k classes; landmarks a point count and ranges; maps the area above
    0.5 and the peak; sequences the greedy path; packed outputs one entry per group.
    """
    a = np.asarray(arr)
    info: dict[str, Any] = {"name": name, "shape": list(a.shape), "dtype": str(a.dtype)}
    if kind is None and (a.ndim == 1 or (a.ndim == 2 and a.shape[0] == 1)) and a.size > 1:
        kind = OutputKind("scores", reason="no kind recorded: a [1, C] vector is shown as class scores")
    k = kind or OutputKind()
    info["kind"] = k.label()
    if a.size:
        info.update(min=float(a.min()), max=float(a.max()), mean=float(a.astype(np.float64).mean()))
    if k.kind == "packed":
        info["groups"] = []
        for g in k.groups:
            part = np.take(a, range(g.start, g.stop), axis=k.axis)
            sub = OutputKind(kind="scores" if g.kind == "objectness" else g.kind, axis=k.axis,  # type: ignore[arg-type]
                             activation=g.activation)
            name, product = g.name, times_objectness(a, k, g, k.axis)
            if product is not None:  # conditional class scores: printed as the head thresholds them
                part, sub, name = product.astype(part.dtype), OutputKind(kind="scores", axis=k.axis), f"{g.name} x objectness"
            info["groups"].append(summarize_output(name, part, sub, top_k, labels))
        return info
    if k.kind in ("scores", "logits") and a.size:
        p = activate(a, k.activation, k.axis)
        p = np.moveaxis(p, k.axis, -1).reshape(-1, p.shape[k.axis])
        if p.shape[0] == 1 and p.shape[1] > 1:
            idx = np.argsort(-p[0], kind="stable")[:top_k]
            info["top_k"] = [{"index": int(i), "score": float(p[0, i]),
                              **({"label": labels[i]} if labels and i < len(labels) else {})} for i in idx]
        else:
            best = p.max(axis=1)
            info["positions"] = int(p.shape[0])
            info["above_0.5"] = int(np.sum(best >= 0.5))
            info["best_score"] = float(best.max()) if best.size else 0.0
    elif k.kind == "sequence" and a.size:
        path = np.moveaxis(a, k.axis, -1).reshape(-1, a.shape[k.axis]).argmax(-1)
        info["path"] = ctc_collapse(path, k.blank)
    elif k.kind in REGRESSION_KINDS and a.size:
        flat = a.reshape(-1)
        dims = point_dims(flat.size, k) or 1
        info["values"] = int(flat.size)
        if k.kind == "landmarks":
            info["points"] = int(flat.size // dims)
    elif k.kind in MAP_KINDS and a.size:
        p = activate(a, k.activation, -1)
        info["area_above_0.5"] = round(float(np.mean(p >= 0.5)), 4)
        info["peak"] = [int(i) for i in np.unravel_index(int(np.argmax(p)), p.shape)]
    elif k.kind == "embedding" and a.size:
        info["l2_norm"] = float(np.linalg.norm(a.astype(np.float64)))
    return info


def describe_lines(summary: dict[str, Any], indent: str = "  ") -> list[str]:
    """Text lines for a :func:`summarize_output` result (the CLI printer)."""
    lines = [f"{indent}{summary['name']}: {summary['kind']} {summary['dtype']} {summary['shape']}"
             + (f" min {summary['min']:.4g} max {summary['max']:.4g}" if "min" in summary else "")]
    for rank, item in enumerate(summary.get("top_k", []), 1):
        label = f" ({item['label']})" if "label" in item else ""
        lines.append(f"{indent}  #{rank}: class {item['index']}{label}  score {item['score']:.4g}")
    if "positions" in summary:
        lines.append(f"{indent}  {summary['above_0.5']} of {summary['positions']} positions score >= 0.5 "
                     f"(best {summary['best_score']:.3g})")
    if "path" in summary:
        lines.append(f"{indent}  greedy path ({len(summary['path'])} symbols): {summary['path'][:40]}")
    if "points" in summary:
        lines.append(f"{indent}  {summary['points']} points")
    if "area_above_0.5" in summary:
        lines.append(f"{indent}  area >= 0.5: {summary['area_above_0.5']:.2%}, peak at {summary['peak']}")
    if "l2_norm" in summary:
        lines.append(f"{indent}  L2 norm {summary['l2_norm']:.4g}")
    for g in summary.get("groups", []):
        lines.extend(describe_lines(g, indent + "  "))
    return lines


__all__ = ["ALIASES", "KINDS", "OutputGroup", "OutputKind", "activate", "canonical", "check_fits", "ctc_collapse", "dominant_class",
           "describe_lines", "parse_declaration", "point_dims", "sigmoid", "softmax", "summarize_output"]
