"""Task heads: turn a model's raw outputs into detections or top-k classes (numpy only).

* :func:`nms`: vectorised greedy non-maximum suppression (one IoU row per kept box, numpy).
* :func:`decode_yolov8`: a YOLOv8-style packed output ``[1, 4 + C, N]`` (``cx, cy, w, h`` in
  model-input pixels, then C class scores in 0..1, as Ultralytics exports it) into
  :class:`Detection` objects, class-aware NMS, boxes mapped back to the original frame's pixels
  through the preprocessing's :class:`~edge_sdk.preprocess.ImageTransform`.
* :func:`decode_yolov5`: YOLOv5-style ``[1, N, 5 + C]`` (objectness times class score).
* :class:`Head`: which decoder and its thresholds; ``edge_sdk.load(..., head="yolov8",
  labels=[...])`` attaches one to a model so that ``result.detections`` is filled.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from .errors import InputValidationError

HEADS: tuple[str, ...] = ("yolov8", "yolov5", "classifier")
#: Heads that produce ``result.detections``.
DETECTION_HEADS: tuple[str, ...] = ("yolov8", "yolov5")


@dataclass(frozen=True)
class Detection:
    """One detected object.

    Attributes:
        label: Class name (from ``labels``), or the class index as a string without labels.
        score: Class score (0..1).
        box: ``(x1, y1, x2, y2)`` in the original frame's pixels (clipped to the frame).
        class_id: Class index in the model's output.
    """

    label: str
    score: float
    box: tuple[float, float, float, float]
    class_id: int


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
            score) or ``classifier`` (labels for :meth:`top_k` only).
        conf: Minimum class score kept (yolov8).
        iou: IoU above which a lower-scored box of the same class is suppressed (yolov8).
        max_det: Most detections returned per frame (yolov8).
        output: Name of the output to decode (``""``: the first output).
    """

    kind: str = "yolov8"
    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    output: str = ""

    def __post_init__(self):
        if self.kind not in HEADS:
            raise InputValidationError(f"Unknown head {self.kind!r}.", f"Use one of: {', '.join(HEADS)}.")
        if not (0.0 <= self.conf <= 1.0 and 0.0 <= self.iou <= 1.0 and self.max_det >= 1):
            raise InputValidationError(f"Head thresholds out of range: conf={self.conf}, iou={self.iou}, max_det={self.max_det}.",
                                       "conf and iou are 0..1, max_det at least 1.")


def as_head(head: Any) -> Head | None:
    """A :class:`Head` from ``None``, a name (``"yolov8"``) or a :class:`Head`.

    Raises:
        InputValidationError: an unknown name or type.
    """
    if head is None or isinstance(head, Head):
        return head
    if isinstance(head, str):
        return Head(kind=head.lower())
    raise InputValidationError(f"head= must be a name or an edge_sdk.detect.Head, got {type(head).__name__}.",
                               f"Use one of: {', '.join(HEADS)}.")


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
            labels: Sequence[str] | None) -> list[Detection]:
    """Class-aware NMS, map to the frame, build the detections."""
    kept = nms(boxes, score, head.iou, classes=cls, max_det=head.max_det)
    boxes = boxes[kept]
    if transform is not None:
        boxes = transform.to_frame(boxes, clip=True)
    return [Detection(label_of(int(c), labels), float(sc), tuple(float(v) for v in bx), int(c))  # type: ignore[arg-type]
            for bx, sc, c in zip(boxes, score[kept], cls[kept])]


def decode_yolov5(output: Any, head: Head | None = None, *, transform=None,
                  labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode a YOLOv5-style output ``[1, N, 5 + C]`` (or ``[1, 5 + C, N]``) into detections.

    Rows are ``cx, cy, w, h`` (model-input pixels), objectness, then C class scores (0..1); a
    candidate needs objectness >= ``conf``, and its score (objectness x best class score) >= ``conf``.

    Raises:
        InputValidationError: the output is not shaped like a YOLOv5 head.
    """
    head = head or Head(kind="yolov5")
    a = np.asarray(output)
    if a.ndim == 3 and a.shape[0] == 1:
        a = a[0]
    if a.ndim == 2 and (a.shape[1] < 6 or (a.shape[0] >= 6 and a.shape[1] > a.shape[0])):
        a = a.T  # [5 + C, N] exports; N is taken as the longer axis
    if a.ndim != 2 or a.shape[1] < 6:
        raise InputValidationError(f"A yolov5 head needs an output [1, N, 5 + C]; got {list(np.shape(output))}.",
                                   "Pick the detection output with Head(output=NAME), or another head.")
    a = a.astype(np.float32, copy=False)
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


def decode(output: Any, head: Head, *, transform=None, labels: Sequence[str] | None = None) -> list[Detection]:
    """Decode with the decoder ``head.kind`` names (``yolov8`` or ``yolov5``).

    Raises:
        InputValidationError: not a detection head, or the output does not fit it.
    """
    if head.kind == "yolov8":
        return decode_yolov8(output, head, transform=transform, labels=labels)
    if head.kind == "yolov5":
        return decode_yolov5(output, head, transform=transform, labels=labels)
    raise InputValidationError(f"Head {head.kind!r} does not produce detections.", f"Use one of: {', '.join(DETECTION_HEADS)}.")


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


__all__ = ["DETECTION_HEADS", "Detection", "HEADS", "Head", "TopK", "as_head", "box_iou", "decode", "decode_yolov5",
           "decode_yolov8", "label_of", "nms",
           "read_labels", "top_k"]
