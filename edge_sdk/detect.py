"""Task heads: turn a model's raw outputs into detections or top-k classes (numpy only).

* :func:`nms`: vectorised greedy non-maximum suppression (one IoU row per kept box, numpy).
* :func:`decode_yolov8`: a YOLOv8-style packed output ``[1, 4 + C, N]`` (``cx, cy, w, h`` in
  model-input pixels, then C class scores in 0..1, as Ultralytics exports it) into
  :class:`Detection` objects, class-aware NMS, boxes mapped back to the original frame's pixels
  through the preprocessing's :class:`~edge_sdk.preprocess.ImageTransform`.
* :func:`decode_yolov5`: YOLOv5-style ``[1, N, 5 + C]`` (objectness times class score).
* :func:`decode_yolox`: YOLOX exported without its decoding (``[1, N, 5 + C]``: grid offsets and
  log sizes per stride, objectness, class scores), decoded over the strides' grids.
* :func:`decode_ssd`: SSD / BlazeFace / BlazePalm box regressions ``[1, N, 4 + 2K]`` and class
  scores or logits ``[1, N, C]`` against generated anchors (:mod:`edge_sdk.anchors`).
* :func:`decode_boxes_scores`: decoded boxes ``[1, N, 4]`` (``x1, y1, x2, y2`` in input pixels)
  beside class scores ``[1, N, C]`` (what ``convert`` makes of TensorFlow's
  ``TFLite_Detection_PostProcess``, and pre-NMS exports of that layout).
* :func:`decode_end2end`: a detection list ``[1, K, 6+]`` (``x1, y1, x2, y2, score, class`` in
  input pixels: NMS inside the model, or an NMS-free end-to-end head such as YOLOv10's).
* :func:`decode_mask`: a segmentation output as a class-index or probability map over the frame.
* :class:`Head`: which decoder and its thresholds; ``edge_sdk.load(..., head="yolov8",
  labels=[...])`` attaches one to a model so that ``result.detections`` is filled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from .anchors import AnchorSpec, decode_boxes, parse_spec, ssd_anchors
from .errors import InputValidationError

HEADS: tuple[str, ...] = ("yolov8", "yolov5", "yolox", "ssd-anchors", "boxes-scores", "end2end", "classifier",
                          "segmentation")
#: Heads that produce ``result.detections``.
DETECTION_HEADS: tuple[str, ...] = ("yolov8", "yolov5", "yolox", "ssd-anchors", "boxes-scores", "end2end")
#: What a manifest's ``postprocess.options`` may record for a detection head: thresholds, and a
#: yolox head's ``strides`` and input ``size`` ``[W, H]``.
HEAD_OPTIONS: tuple[str, ...] = ("conf", "iou", "max_det", "agnostic", "strides", "size")
#: YOLOX's strides (P3-P5).
YOLOX_STRIDES: tuple[int, ...] = (8, 16, 32)


@dataclass(frozen=True)
class Detection:
    """One detected object.

    Attributes:
        label: Class name (from ``labels``), or the class index as a string without labels.
        score: Class score (0..1).
        box: ``(x1, y1, x2, y2)`` in the original frame's pixels (clipped to the frame).
        class_id: Class index in the model's output.
        keypoints: ``(x, y)`` points in the frame's pixels (``ssd-anchors`` heads with keypoints,
            e.g. BlazePalm's 7), else empty.
    """

    label: str
    score: float
    box: tuple[float, float, float, float]
    class_id: int
    keypoints: tuple[tuple[float, float], ...] = ()


class TopK(NamedTuple):
    """One entry of :meth:`InferenceResult.top_k`: class name (or index as text), score, index."""

    label: str
    score: float
    index: int


@dataclass(frozen=True)
class Head:
    """How to decode a model's outputs.

    Attributes:
        kind: ``yolov8`` (packed ``[1, 4 + C, N]`` boxes and class scores), ``yolov5``
            (``[1, N, 5 + C]``: boxes, objectness, class scores; score = objectness x class
            score), ``ssd-anchors`` (box regressions and scores against ``anchors``),
            ``boxes-scores`` (decoded boxes ``[1, N, 4]`` beside class scores ``[1, N, C]``),
            ``classifier`` (labels for :meth:`top_k` only) or ``segmentation`` (``result.mask``).
        conf: Minimum class score kept (yolov8).
        iou: IoU above which a lower-scored box of the same class is suppressed (yolov8).
        max_det: Most detections returned per frame (yolov8).
        output: Name of the output to decode (``""``: the first output; ``boxes-scores``: the boxes).
        anchors: The anchor spec of an ``ssd-anchors`` head (:func:`edge_sdk.anchors.parse_spec`).
        agnostic: NMS across classes (a box suppresses overlapping boxes of every class), as
            TensorFlow's fast ``TFLite_Detection_PostProcess`` does; else within each class.
        strides: A ``yolox`` head's feature strides (default :data:`YOLOX_STRIDES`).
        size: A ``yolox`` head's input ``(width, height)`` (default: the preprocessing's).
    """

    kind: str = "yolov8"
    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    output: str = ""
    anchors: AnchorSpec | None = None
    agnostic: bool = False
    strides: tuple[int, ...] = ()
    size: tuple[int, int] | None = None

    def __post_init__(self):
        if self.kind not in HEADS:
            raise InputValidationError(f"Unknown head {self.kind!r}.", f"Use one of: {', '.join(HEADS)}.")
        if (self.kind == "ssd-anchors") != (self.anchors is not None):
            raise InputValidationError("An ssd-anchors head needs an anchor spec (and only it takes one).",
                                       "Use head='ssd-anchors:strides=8,16,16,16;fixed=1' or Head('ssd-anchors', anchors=...).")
        if not (0.0 <= self.conf <= 1.0 and 0.0 <= self.iou <= 1.0 and self.max_det >= 1):
            raise InputValidationError(f"Head thresholds out of range: conf={self.conf}, iou={self.iou}, max_det={self.max_det}.",
                                       "conf and iou are 0..1, max_det at least 1.")


def head_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """Checked detection thresholds (``conf``, ``iou``, ``max_det``, ``agnostic``) as :class:`Head` fields.

    Raises:
        InputValidationError: an unknown key or a value of the wrong type or range.
    """
    out: dict[str, Any] = {}
    for key, value in dict(options or {}).items():
        if key not in HEAD_OPTIONS:
            raise InputValidationError(f"Unknown head option {key!r}.", f"Options: {', '.join(HEAD_OPTIONS)}.")
        if key == "agnostic":
            if not isinstance(value, bool):
                raise InputValidationError(f"Head option agnostic must be true or false, got {value!r}.")
            out[key] = value
        elif key in ("strides", "size"):
            items = [v.strip() for v in value.split(",")] if isinstance(value, str) else value
            try:
                ints = tuple(int(v) for v in items) if isinstance(items, (list, tuple)) and not any(
                    isinstance(v, (bool, float)) for v in items) else ()
            except (TypeError, ValueError):
                ints = ()
            if not ints or min(ints) < 1 or (key == "size" and len(ints) != 2) or len(ints) > 8:
                want = "two integers [W, H]" if key == "size" else "1-8 integers >= 1, e.g. 8,16,32"
                raise InputValidationError(f"Head option {key} must be {want}, got {value!r}.")
            out[key] = ints
        elif key == "max_det":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputValidationError(f"Head option max_det must be an integer >= 1, got {value!r}.")
            out[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
                raise InputValidationError(f"Head option {key} must be a number in 0..1, got {value!r}.")
            out[key] = float(value)
    return out


def as_head(head: Any, anchors: Any = None, options: Mapping[str, Any] | None = None) -> Head | None:
    """A :class:`Head` from ``None``, a name (``"yolov8"``, ``"ssd-anchors:<spec>"``) or a :class:`Head`.

    Args:
        head: The head.
        anchors: An ``ssd-anchors`` spec given apart from the name (the manifest's ``anchors``).
        options: Thresholds recorded with the head (the manifest's ``postprocess.options``).

    Raises:
        InputValidationError: an unknown name or type, or a bad anchor spec or option.
    """
    if head is None or isinstance(head, Head):
        return head
    if isinstance(head, str):
        kind, _, spec = head.partition(":")
        kind = kind.strip().lower()
        opts = head_options(options)
        if kind == "yolox" and spec:  # yolox:strides=8,16,32[;size=WxH]
            opts.update(head_options(_yolox_spec(spec)))
            return Head(kind="yolox", **opts)
        if kind != "ssd-anchors" or not (spec or anchors):
            return Head(kind=head.lower(), **opts)
        a = parse_spec(spec or anchors)
        return Head(kind=kind, anchors=a, **{"conf": Head.conf if a.conf is None else a.conf,
                                              "iou": Head.iou if a.iou is None else a.iou, **opts})
    raise InputValidationError(f"head= must be a name or an edge_sdk.detect.Head, got {type(head).__name__}.",
                               f"Use one of: {', '.join(HEADS)}.")


def _yolox_spec(spec: str) -> dict[str, Any]:
    """``strides=8,16,32;size=640x640`` as head options."""
    out: dict[str, Any] = {}
    for part in (p for p in spec.split(";") if p.strip()):
        key, eq, value = part.partition("=")
        key = key.strip().lower()
        if not eq or key not in ("strides", "size"):
            raise InputValidationError(f"yolox: unknown or malformed key in {part.strip()!r}.",
                                       "Write yolox:strides=8,16,32 (and size=WxH where it is not the input's).")
        out[key] = value.replace("x", ",") if key == "size" else value
    return out


def read_labels(labels: Any) -> list[str] | None:
    """Class names from a sequence of strings or a text file (one name per line, blank lines skipped).

    Raises:
        InputValidationError: unreadable file or not strings.
    """
    if labels is None:
        return None
    if isinstance(labels, str | Path):
        try:
            text = Path(labels).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputValidationError(f"Cannot read labels file {labels}: {exc}",
                                       "Pass a UTF-8 text file with one class name per line, or a list of names.") from None
        return [line.strip() for line in text.splitlines() if line.strip()]
    out = list(labels)
    if not all(isinstance(x, str) for x in out):
        raise InputValidationError("labels= must be class names (strings) or a text file path.",
                                   "Example: labels=['person', 'bicycle', 'car'].")
    return out


def label_of(index: int, labels: Sequence[str] | None) -> str:
    """The class name of ``index`` (its number as text when there is no name for it)."""
    return labels[index] if labels is not None and 0 <= index < len(labels) else str(index)


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one ``x1, y1, x2, y2`` box against ``[N, 4]`` boxes."""
    xx1 = np.maximum(box[0], boxes[:, 0])
    yy1 = np.maximum(box[1], boxes[:, 1])
    xx2 = np.minimum(box[2], boxes[:, 2])
    yy2 = np.minimum(box[3], boxes[:, 3])
    inter = np.clip(xx2 - xx1, 0, None) * np.clip(yy2 - yy1, 0, None)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def nms(boxes: Any, scores: Any, iou_threshold: float = 0.45, *, classes: Any = None,
        max_det: int | None = None) -> np.ndarray:
    """Greedy non-maximum suppression: indices of the kept boxes, highest score first.

    A box is dropped when its IoU with an already kept, higher-scored box (of the same class,
    when ``classes`` is given) is above ``iou_threshold``. Ties in score keep the lower index.

    Args:
        boxes: ``[N, 4]`` ``x1, y1, x2, y2``.
        scores: ``[N]``.
        iou_threshold: Suppress above this IoU.
        classes: ``[N]`` class ids: suppress only within a class (boxes are offset per class).
        max_det: Stop after this many kept boxes.
    """
    b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if len(b) == 0:
        return np.zeros(0, dtype=np.int64)
    if classes is not None:  # separate classes by moving each class's boxes far apart
        span = float(np.abs(b).max()) * 2 + 1.0
        b = b + np.asarray(classes, dtype=np.float64).reshape(-1, 1) * span
    order = np.argsort(-s, kind="stable")
    keep: list[int] = []
    limit = max_det or len(order)
    while order.size and len(keep) < limit:
        i = order[0]
        keep.append(int(i))
        rest = order[1:]
        order = rest[box_iou(b[i], b[rest]) <= iou_threshold]
    return np.asarray(keep, dtype=np.int64)


def decode_yolov8(output: Any, head: Head | None = None, *, transform=None,
                  labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode a YOLOv8-style output ``[1, 4 + C, N]`` (or ``[1, N, 4 + C]``) into detections.

    Args:
        output: Rows ``cx, cy, w, h`` (model-input pixels) then C class scores (0..1).
        head: Thresholds (default :class:`Head`).
        transform: The preprocessing's :class:`~edge_sdk.preprocess.ImageTransform`; boxes are
            mapped back to the original frame's pixels and clipped to it. None: input pixels.
        labels: Class names.

    Returns:
        Detections, highest score first.

    Raises:
        InputValidationError: the output is not shaped like a YOLOv8 head.
    """
    head = head or Head()
    a = np.asarray(output)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim == 2 and (a.shape[0] < 5 or (a.shape[1] >= 5 and a.shape[0] > a.shape[1])):
        a = a.T  # [N, 4 + C] (transposed exports; N is taken as the longer axis)
    if a.ndim != 2 or a.shape[0] < 5 or a.shape[1] < 1:
        raise InputValidationError(f"A yolov8 head needs an output [1, 4 + C, N]; got {list(np.shape(output))}.",
                                   "Pick the packed box/score output with Head(output=NAME), or another head.")
    a = a.astype(np.float32, copy=False)
    scores_all = a[4:]
    cls = scores_all.argmax(axis=0)
    score = scores_all[cls, np.arange(a.shape[1])]
    keep = score >= head.conf
    if not keep.any():
        return []
    cx, cy, w, h = a[0, keep], a[1, keep], a[2, keep], a[3, keep]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float64)
    return _finish(boxes, score[keep], cls[keep], head, transform, labels)


def _finish(boxes: np.ndarray, score: np.ndarray, cls: np.ndarray, head: Head, transform,
            labels: Sequence[str] | None, points: np.ndarray | None = None) -> list[Detection]:
    """Class-aware NMS, map to the frame, build the detections (``points``: ``[N, K, 2]`` keypoints)."""
    kept = nms(boxes, score, head.iou, classes=None if head.agnostic else cls, max_det=head.max_det)
    boxes = boxes[kept]
    pts = points[kept] if points is not None and points.shape[1] else np.zeros((len(kept), 0, 2))
    if transform is not None:
        boxes = transform.to_frame(boxes, clip=True)
        pts = transform.to_frame(np.concatenate([pts, pts], -1))[..., :2] if pts.size else pts
    return [Detection(label_of(int(c), labels), float(sc), tuple(float(v) for v in bx), int(c),  # type: ignore[arg-type]
                      tuple((float(x), float(y)) for x, y in p))
            for bx, sc, c, p in zip(boxes, score[kept], cls[kept], pts)]


def decode_yolov5(output: Any, head: Head | None = None, *, transform=None,
                  labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode a YOLOv5-style output ``[1, N, 5 + C]`` (or ``[1, 5 + C, N]``) into detections.

    Rows are ``cx, cy, w, h`` (model-input pixels), objectness, then C class scores (0..1); a
    candidate needs objectness >= ``conf``, and its score (objectness x best class score) >= ``conf``.

    Raises:
        InputValidationError: the output is not shaped like a YOLOv5 head.
    """
    head = head or Head(kind="yolov5")
    return _objectness_rows(_yolo_rows(output, "yolov5"), head, transform, labels)


def _objectness_rows(a: np.ndarray, head: Head, transform, labels: Sequence[str] | None) -> list[Detection]:
    """Rows ``cx, cy, w, h`` (input pixels), objectness, class scores: objectness >= ``conf``, score
    objectness x best class score >= ``conf``, then NMS (yolov5, and yolox once its grid is decoded)."""
    a = a[a[:, 4] >= head.conf]
    if not len(a):
        return []
    cls_scores = a[:, 5:] * a[:, 4:5]
    cls = cls_scores.argmax(axis=1)
    score = cls_scores[np.arange(len(a)), cls]
    keep = score >= head.conf
    cx, cy, w, h = a[keep, 0], a[keep, 1], a[keep, 2], a[keep, 3]
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1).astype(np.float64)
    return _finish(boxes, score[keep], cls[keep], head, transform, labels)


def _yolo_rows(output: Any, name: str) -> np.ndarray:
    """``[1, N, 5 + C]`` (or ``[1, 5 + C, N]``) as float32 ``[N, 5 + C]``."""
    a = np.asarray(output)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim == 2 and (a.shape[1] < 6 or (a.shape[0] >= 6 and a.shape[1] > a.shape[0])):
        a = a.T  # [5 + C, N] exports; N is taken as the longer axis
    if a.ndim != 2 or a.shape[1] < 6:
        raise InputValidationError(f"A {name} head needs an output [1, N, 5 + C]; got {list(np.shape(output))}.",
                                   "Pick the detection output with Head(output=NAME), or another head.")
    return a.astype(np.float32, copy=False)


def yolox_grid(size: tuple[int, int], strides: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """YOLOX's cells for an input ``(width, height)``: ``[N, 2]`` cell ``(x, y)`` and ``[N, 1]`` stride,
    stride by stride, row-major within each (the order its exporter concatenates the levels in)."""
    w, h = size
    cells, steps = [], []
    for st in strides:
        yy, xx = np.meshgrid(np.arange(h // st), np.arange(w // st), indexing="ij")
        cells.append(np.stack([xx.ravel(), yy.ravel()], 1))
        steps.append(np.full((xx.size, 1), st))
    return np.concatenate(cells).astype(np.float64), np.concatenate(steps).astype(np.float64)


def decode_yolox(output: Any, head: Head | None = None, *, transform=None,
                 labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode a YOLOX output exported without its decoding (``decode_in_inference=False``, as
    YOLOX's own ONNX export and ddddocr's detector are): rows ``[1, N, 5 + C]`` of x, y offsets in
    cells, log w, h, objectness and C class scores (0..1). Box centre ``(offset + cell) * stride``,
    size ``exp(log size) * stride``; score objectness x best class score, as :func:`decode_yolov5`.

    Raises:
        InputValidationError: no input size (neither ``head.size`` nor a transform), or N is not the
            strides' cell count for that size.
    """
    head = head or Head(kind="yolox")
    a = _yolo_rows(output, "yolox")
    size = head.size or (transform.input_size if transform is not None else None)
    if size is None:
        raise InputValidationError("A yolox head needs the input size to lay out its grid.",
                                   "Decode through infer_image(), or give Head('yolox', size=(W, H)).")
    strides = head.strides or YOLOX_STRIDES
    cells, steps = yolox_grid(size, strides)
    if len(cells) != len(a):
        raise InputValidationError(f"yolox: strides {list(strides)} on a {size[0]}x{size[1]} input make {len(cells)} "
                                   f"cells, but the output has {len(a)} rows.",
                                   "Give the model's strides: --head yolox:strides=8,16,32,64.")
    keep = a[:, 4] >= head.conf  # decode only the rows objectness keeps
    r = a[keep].astype(np.float64)
    r[:, :2] = (r[:, :2] + cells[keep]) * steps[keep]
    r[:, 2:4] = np.exp(np.clip(r[:, 2:4], -20.0, 20.0)) * steps[keep]
    return _objectness_rows(r, head, transform, labels)


def decode_end2end(output: Any, head: Head | None = None, *, transform=None,
                   labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode a detection list ``[1, K, 6+]``: rows ``x1, y1, x2, y2`` (model-input pixels),
    score, class id, made by NMS inside the model or an NMS-free head. Rows scoring at least
    ``head.conf`` are kept as they are (no NMS: the model did it), at most ``head.max_det``, and
    mapped to the frame.

    Raises:
        InputValidationError: the output is not rows of at least 6 values.
    """
    head = head or Head(kind="end2end")
    a = np.asarray(output, dtype=np.float64)
    a = a[0] if a.ndim == 3 and a.shape[0] == 1 else a
    if a.ndim != 2 or a.shape[1] < 6:
        raise InputValidationError(f"An end2end head needs an output [1, K, 6+] (x1, y1, x2, y2, score, class); got "
                                   f"{list(np.shape(output))}.", "Pick the detection output with Head(output=NAME).")
    rows = a[a[:, 4] >= head.conf]
    rows = rows[np.argsort(-rows[:, 4], kind="stable")][: head.max_det]
    boxes = rows[:, :4].copy()
    if transform is not None:
        boxes = transform.to_frame(boxes, clip=True)
    cls = np.round(rows[:, 5]).astype(np.int64)
    return [Detection(label_of(int(c), labels), float(s), tuple(float(v) for v in b), int(c))  # type: ignore[arg-type]
            for b, s, c in zip(boxes, rows[:, 4], cls)]


def _rows(a: Any) -> np.ndarray:
    """``[1, N, D]``, ``[N, D]``, ``[1, N]`` or ``[N]`` as ``[N, D]``."""
    a = np.asarray(a)
    if a.ndim == 3 and a.shape[0] == 1:
        return a[0]
    return a.reshape(-1, 1) if a.ndim == 1 or (a.ndim == 2 and a.shape[0] == 1) else a


def ssd_outputs(outputs: Mapping[str, Any], spec: AnchorSpec) -> tuple[str, str]:
    """The names of the box-regression and score outputs: the spec's, else by shape.

    Boxes are ``[1, N, 4 + 2K]``; of two such outputs the one with 4 columns (else the first) is
    the boxes and the other the scores.

    Raises:
        InputValidationError: a named output is missing, or the two cannot be told apart.
    """
    names = list(outputs)
    for key in ("boxes", "scores"):
        name = getattr(spec, key)
        if name and name not in outputs:
            raise InputValidationError(f"ssd-anchors: {key} output {name!r} is not an output of this model.",
                                       f"Outputs: {', '.join(names)}.")
    if spec.boxes and spec.scores:
        return spec.boxes, spec.scores
    shaped = {n: _rows(outputs[n]).shape for n in names}
    cand = [n for n in names if len(shaped[n]) == 2 and shaped[n][1] >= 4 and shaped[n][1] % 2 == 0 and n != spec.scores]
    boxes = spec.boxes or next((n for n in cand if shaped[n][1] == 4), cand[0] if cand else "")
    scores = spec.scores or next((n for n in names if n != boxes and len(shaped[n]) == 2
                                  and shaped[n][0] == shaped.get(boxes, (0,))[0]), "")
    if not boxes or not scores:
        raise InputValidationError(f"ssd-anchors needs a boxes output [1, N, 4 + 2K] and a scores output [1, N, C]; "
                                   f"got {', '.join(f'{n} {list(np.shape(outputs[n]))}' for n in names)}.",
                                   "Name them in the spec: boxes=NAME;scores=NAME.")
    return boxes, scores


def decode_ssd(boxes: Any, scores: Any, head: Head, *, transform=None,
               labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode SSD-style outputs against the anchors of ``head.anchors``.

    Args:
        boxes: Box regressions ``[1, N, 4 + 2K]`` (``x, y, w, h`` or ``y, x, h, w`` per the spec's
            ``order``, then K keypoints), relative to N anchors.
        scores: ``[1, N, C]`` class logits (``sigmoid=1``) or scores.
        head: An ``ssd-anchors`` head (thresholds, anchor spec; a spec without ``size`` takes the
            model input's from ``transform``).
        transform: The preprocessing's :class:`~edge_sdk.preprocess.ImageTransform`; boxes and
            keypoints are mapped to the original frame's pixels. None: model-input pixels.
        labels: Class names.

    Returns:
        Detections (with keypoints, if any), highest score first.

    Raises:
        InputValidationError: not an ssd-anchors head, no input size, or outputs that do not fit
            the spec's anchors.
    """
    if head.kind != "ssd-anchors" or head.anchors is None:
        raise InputValidationError(f"decode_ssd needs an ssd-anchors head, got {head.kind!r}.")
    spec = head.anchors if transform is None else head.anchors.with_size(*transform.input_size)
    anchors = ssd_anchors(spec)
    raw, s = _rows(boxes), _rows(scores)
    if raw.ndim != 2 or raw.shape[1] < 4 or raw.shape[1] % 2 or s.ndim != 2 or len(s) != len(raw) or len(raw) != len(anchors):
        raise InputValidationError(f"ssd-anchors: the spec makes {len(anchors)} anchors; outputs are boxes "
                                   f"{list(np.shape(boxes))} and scores {list(np.shape(scores))}.",
                                   "Expected boxes [1, N, 4 + 2K] and scores [1, N, C] with N the anchor count: "
                                   "check strides, size, ratio and interp.")
    s = s.astype(np.float64)
    if spec.sigmoid:  # MediaPipe clips logits at +-100 (score_clipping_thresh) before the sigmoid
        s = 1.0 / (1.0 + np.exp(-np.clip(s, -100.0, 100.0)))
    if spec.ignore:
        s[:, [i for i in spec.ignore if i < s.shape[1]]] = -np.inf
    cls = s.argmax(axis=1)
    score = s[np.arange(len(s)), cls]
    keep = np.nonzero(score >= head.conf)[0]
    if not keep.size:
        return []
    box, points = decode_boxes(raw[keep], anchors[keep], spec)
    return _finish(box, score[keep], cls[keep], head, transform, labels, points)


def boxes_scores_outputs(outputs: Mapping[str, Any], head: Head) -> tuple[str, str]:
    """The names of the boxes ``[1, N, 4]`` and scores ``[1, N, C]`` outputs of a ``boxes-scores``
    head: ``head.output`` (else the one output with 4 columns) and the other output with N rows.

    Raises:
        InputValidationError: a named output is missing, or the two cannot be told apart.
    """
    names = list(outputs)
    if head.output and head.output not in outputs:
        raise InputValidationError(f"boxes-scores: output {head.output!r} is not an output of this model.",
                                   f"Outputs: {', '.join(names)}.")
    shaped = {n: _rows(outputs[n]).shape for n in names}
    four = [n for n in names if len(shaped[n]) == 2 and shaped[n][1] == 4]
    boxes = head.output or (four[0] if len(four) == 1 else "")
    rows = shaped[boxes][0] if boxes else -1
    others = [n for n in names if n != boxes and len(shaped[n]) == 2 and shaped[n][0] == rows]
    if not boxes or len(others) != 1:
        raise InputValidationError("A boxes-scores head needs one boxes output [1, N, 4] and one scores output "
                                   f"[1, N, C]; got {', '.join(f'{n} {list(np.shape(outputs[n]))}' for n in names)}.",
                                   "Name the boxes output: Head('boxes-scores', output=NAME).")
    return boxes, others[0]


def decode_boxes_scores(boxes: Any, scores: Any, head: Head, *, transform=None,
                        labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode decoded boxes ``[1, N, 4]`` (``x1, y1, x2, y2`` in model-input pixels) and class
    scores ``[1, N, C]`` (0..1): best class per row at or above ``head.conf``, NMS (across
    classes with ``head.agnostic``), at most ``head.max_det``, mapped to the frame.

    Raises:
        InputValidationError: the two outputs do not have the same rows, or boxes are not 4 wide.
    """
    b, s = _rows(boxes), _rows(scores)
    if b.ndim != 2 or b.shape[1] != 4 or s.ndim != 2 or len(s) != len(b):
        raise InputValidationError(f"boxes-scores: boxes {list(np.shape(boxes))} and scores {list(np.shape(scores))} "
                                   "do not pair.", "Expected boxes [1, N, 4] and scores [1, N, C] with the same N.")
    s = s.astype(np.float64)
    cls = s.argmax(axis=1)
    score = s[np.arange(len(s)), cls]
    keep = np.nonzero(score >= head.conf)[0]
    if not keep.size:
        return []
    return _finish(b[keep].astype(np.float64), score[keep], cls[keep], head, transform, labels)


def decode_mask(output: Any, *, transform=None) -> np.ndarray:
    """A segmentation output as a map over the original frame (or the model's map without ``transform``).

    Several channels (``[1, H, W, C]`` or ``[1, C, H, W]``, the class axis being the shortest)
    give a class-index map (argmax, resized with nearest neighbour); one channel gives a
    probability map (sigmoid applied when the values are logits outside 0..1; bilinear).

    Args:
        output: ``[1, H, W, C]``, ``[1, C, H, W]``, ``[1, H, W]`` or ``[H, W]``.
        transform: The preprocessing's :class:`~edge_sdk.preprocess.ImageTransform`: letterbox
            padding is cut off and the map resized to the frame.

    Returns:
        uint8 (up to 256 classes, else int32) class indices, or float32 probabilities,
        ``[frame_height, frame_width]``.

    Raises:
        InputValidationError: not a map.
    """
    a = np.asarray(output)
    a = a[0] if a.ndim == 4 and a.shape[0] == 1 else a
    if a.ndim == 3 and 1 in (a.shape[0], a.shape[-1]):  # one channel (or a batch of one)
        a = a[0] if a.shape[0] == 1 else a[..., 0]
    if a.ndim not in (2, 3) or a.size == 0 or min(a.shape) < 1:
        raise InputValidationError(f"A segmentation head needs an output [1, H, W, C], [1, C, H, W] or [1, H, W]; "
                                   f"got {list(np.shape(output))}.", "Pick the mask output with Head(output=NAME).")
    if a.ndim == 2:
        p = a.astype(np.float32)
        if p.min() < 0.0 or p.max() > 1.0:
            p = (1.0 / (1.0 + np.exp(-np.clip(p, -80.0, 80.0)))).astype(np.float32)
        return p if transform is None else transform.map_to_frame(p)
    chw = a if a.shape[0] <= min(a.shape[1:]) else a.transpose(2, 0, 1)
    classes = chw.argmax(axis=0)
    dtype = np.uint8 if chw.shape[0] <= 256 else np.int32
    if transform is None:
        return classes.astype(dtype)
    return np.rint(transform.map_to_frame(classes.astype(np.float32), nearest=True)).astype(dtype)


def decode(output: Any, head: Head, *, transform=None, labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode with the decoder ``head.kind`` names (``yolov8`` or ``yolov5``).

    Raises:
        InputValidationError: not a single-output detection head, or the output does not fit it.
    """
    if head.kind == "yolov8":
        return decode_yolov8(output, head, transform=transform, labels=labels)
    if head.kind == "yolov5":
        return decode_yolov5(output, head, transform=transform, labels=labels)
    if head.kind == "yolox":
        return decode_yolox(output, head, transform=transform, labels=labels)
    if head.kind == "end2end":
        return decode_end2end(output, head, transform=transform, labels=labels)
    hint = f"Use decode_outputs() for {head.kind} (two outputs)." if head.kind in ("ssd-anchors", "boxes-scores") else ""
    raise InputValidationError(f"Head {head.kind!r} does not produce detections from one output.",
                               hint or f"Use one of: {', '.join(DETECTION_HEADS)}.")


def decode_outputs(outputs: Mapping[str, Any], head: Head, *, transform=None,
                   labels: Sequence[str] | None = None) -> "list[Detection] | np.ndarray | None":
    """Apply ``head`` to a result's outputs: detections, a mask (``segmentation``), or None (``classifier``).

    Raises:
        InputValidationError: a named output is missing or an output does not fit the head.
    """
    if head.kind == "classifier":
        return None
    if head.kind == "ssd-anchors":
        assert head.anchors is not None
        b, s = ssd_outputs(outputs, head.anchors)
        return decode_ssd(outputs[b], outputs[s], head, transform=transform, labels=labels)
    if head.kind == "boxes-scores":
        b, s = boxes_scores_outputs(outputs, head)
        return decode_boxes_scores(outputs[b], outputs[s], head, transform=transform, labels=labels)
    if head.output and head.output not in outputs:
        raise InputValidationError(f"Head output {head.output!r} is not an output of this model.",
                                   f"Outputs: {', '.join(outputs)}.")
    out = outputs[head.output] if head.output else next(iter(outputs.values()))
    if head.kind == "segmentation":
        return decode_mask(out, transform=transform)
    return decode(out, head, transform=transform, labels=labels)


def class_count(head: Head | None, outputs: Sequence[Any]) -> int | None:
    """How many classes the outputs (``TensorSpec``-like: ``name``, ``shape``) hold for ``head``, where the
    shape says so: a classifier's one ``[1, C]`` output, yolov8's ``[1, 4 + C, N]`` (or transposed: C + 4
    is the short axis), yolov5/yolox's ``[1, N, 5 + C]`` (the head's named output, else the first);
    None where it cannot be told. The converter's ``--labels`` check counts the same way."""
    kind = "classifier" if head is None else head.kind
    if kind == "classifier":
        shapes = [list(t.shape) for t in outputs]
        return shapes[0][1] if len(shapes) == 1 and len(shapes[0]) == 2 and shapes[0][0] == 1 else None
    if kind not in ("yolov8", "yolov5", "yolox") or not outputs:
        return None
    out = next((t for t in outputs if t.name == head.output), outputs[0]) if head.output else outputs[0]
    shape = list(out.shape)
    if len(shape) != 3:
        return None
    return min(shape[1:]) - 4 if kind == "yolov8" else shape[2] - 5


def check_fit(head: Head | None, outputs: Sequence[Any], labels: Sequence[str] | None = None, *,
              input_size: tuple[int, int] | None = None) -> None:
    """Refuse at load (and ``verify``) what the first frame would refuse: the head's own decoder runs
    once on zero outputs of the model's static shapes, and labels must number the classes.

    Args:
        head: The head (None: no decoding).
        outputs: The model's output specs (``name``, ``shape``).
        labels: Class names, when given.
        input_size: The model input ``(width, height)`` the preprocessing makes (a yolox grid needs it).

    Raises:
        InputValidationError: the outputs do not fit the head, or the labels do not number its classes.
    """
    if head is not None and head.kind != "classifier" and not (head.kind == "yolox" and not head.size and not input_size):
        from .preprocess import ImageTransform

        zeros = {t.name: np.zeros([max(int(d), 1) for d in t.shape], np.float32) for t in outputs}
        transform = ImageTransform(input_size, input_size, 1.0, 1.0, 0.0, 0.0) if input_size else None
        decode_outputs(zeros, head, transform=transform, labels=labels)
    n = class_count(head, outputs)
    if labels is not None and n is not None and len(labels) != n:
        raise InputValidationError(
            f"{len(labels)} labels for a model whose {'output' if head is None else head.kind + ' output'} holds {n} classes.",
            "Pass this model's label file: one name per class, in class order.")


def apply_head(result: Any, head: Head | None, *, transform=None, labels: Sequence[str] | None = None) -> bool:
    """Decode an ``InferenceResult``'s outputs with ``head`` into its ``detections`` or ``mask``.

    The one place :meth:`Model.infer_image` and the pipelined path decode a frame.

    Returns:
        True when something was decoded (False: no head, or a ``classifier`` head).

    Raises:
        InputValidationError: an output does not fit the head.
    """
    if head is None or head.kind == "classifier":
        return False
    decoded = decode_outputs(result.outputs, head, transform=transform, labels=labels)
    if isinstance(decoded, np.ndarray):
        result._mask = decoded
    else:
        result._detections = decoded
    return True


def top_k(scores: Any, k: int = 5, labels: Sequence[str] | None = None) -> list[TopK]:
    """The ``k`` highest scores of a classifier output (batch of one), with their labels.

    Raises:
        InputValidationError: ``k`` below 1.
    """
    if k < 1:
        raise InputValidationError(f"top_k needs k >= 1, got {k}.")
    s = np.asarray(scores).reshape(-1)
    idx = np.argsort(-s, kind="stable")[:k]
    return [TopK(label_of(int(i), labels), float(s[i]), int(i)) for i in idx]


__all__ = ["DETECTION_HEADS", "Detection", "HEADS", "HEAD_OPTIONS", "Head", "TopK", "apply_head", "as_head", "box_iou",
           "boxes_scores_outputs", "decode", "decode_boxes_scores", "decode_mask", "decode_outputs", "decode_ssd",
           "decode_end2end", "decode_yolov5", "decode_yolov8", "decode_yolox", "head_options", "label_of", "nms", "ssd_outputs", "read_labels",
           "top_k", "YOLOX_STRIDES", "yolox_grid"]
