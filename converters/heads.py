"""``convert --head/--labels``: the head checked against the source model's outputs, then recorded.

What this returns becomes the manifest's ``postprocess`` (``edge_sdk.manifest.PostprocessSpec``),
which ``edge_sdk.load`` turns back into a :class:`edge_sdk.detect.Head`. Everything a device needs
to decode goes in it: for ``ssd-anchors`` the full anchor spec with the input size and the two
output names filled in, so the device never guesses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from edge_sdk.errors import InputValidationError
from edge_sdk.outputs import OutputKind, parse_declaration

from .base import SourceModel


def _static(shape) -> list[int]:
    return [int(d) if isinstance(d, int) and d > 0 else -1 for d in shape]


def _input_size(source: SourceModel) -> tuple[int, int] | None:
    """``(width, height)`` of a 4-D image input (NHWC or NCHW), if static."""
    if not source.inputs:
        return None
    s = _static(source.inputs[0].shape)
    if len(s) != 4:
        return None
    w, h = (s[2], s[1]) if s[3] in (1, 3, 4) else (s[3], s[2]) if s[1] in (1, 3, 4) else (-1, -1)
    return (w, h) if w > 0 and h > 0 else None


def _zero_outputs(static: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Zero arrays of the outputs' static shapes (broadcast: no memory), for the runtime's output pickers."""
    return {n: np.broadcast_to(np.float32(0), [max(d, 1) for d in sh]) for n, sh in static.items()}


def _check_labels(names: list[str], classes: int, output: str, shape) -> None:
    if names and len(names) != classes:
        raise InputValidationError(f"--labels has {len(names)} names but output '{output}' {shape} has {classes} "
                                   "classes.", "Give one name per class, in class-index order.")


def _objectness_packed(name: str, axis: int, classes: int) -> OutputKind:
    """A YOLOv5/YOLOX row layout: boxes, objectness, class scores (the gate's packed declaration)."""
    return parse_declaration(f"{name}:packed:axis={axis},boxes=0-4,objectness=4-5,scores=5-{5 + classes}")[1]


def _ssd(head: str, names: list[str], source: SourceModel) -> dict[str, Any]:
    """The ``ssd-anchors`` spec completed from the source (size, output names) and checked against it."""
    from edge_sdk.detect import as_head, ssd_outputs

    h = as_head(head)
    assert h is not None and h.anchors is not None
    size = _input_size(source)
    spec = h.anchors.with_size(*size) if size else h.anchors
    static = {o.name: _static(o.shape) for o in source.outputs}
    fake = _zero_outputs(static)
    boxes, scores = ssd_outputs(fake, spec)
    b, s = static[boxes], static[scores]
    count = spec.count if spec.size else None
    n_rows = b[-2] if len(b) >= 2 else -1
    if count is not None and n_rows > 0 and n_rows != count:
        raise InputValidationError(f"--head ssd-anchors: the spec makes {count} anchors but output '{boxes}' {b} has "
                                   f"{n_rows} rows.", "Check strides, size, ratio and interp against the model.")
    classes = s[-1] if len(s) == 3 and s[-1] > 0 else 1
    _check_labels(names, classes, scores, s)
    spec = replace(spec, boxes=boxes, scores=scores)
    return {"head": "ssd-anchors", "output": boxes, "labels": names, "anchors": spec.to_dict()}


def _boxes_scores(names: list[str], source: SourceModel, declared: dict[str, OutputKind],
                  options: dict[str, Any] | None) -> dict[str, Any]:
    """A ``boxes-scores`` head checked against the source (one ``[1, N, 4]`` boxes output and one
    ``[1, N, C]`` scores output); declares their kinds for the gate unless ``--output`` did."""
    from edge_sdk.detect import Head, boxes_scores_outputs

    static = {o.name: _static(o.shape) for o in source.outputs}
    fake = _zero_outputs(static)
    boxes, scores = boxes_scores_outputs(fake, Head("boxes-scores"))
    classes = static[scores][-1]
    _check_labels(names, classes, scores, static[scores])
    why = ("decoded by the model's TFLite_Detection_PostProcess box coder" if options else "the boxes-scores head's boxes")
    if boxes not in declared:
        declared[boxes] = OutputKind("boxes", source="graph", reason=why)
    if scores not in declared:
        declared[scores] = OutputKind("scores", axis=-1, source="graph", reason="the boxes-scores head's class scores")
    return {"head": "boxes-scores", "output": boxes, "labels": names, "options": dict(options or {})}


def _yolox(text: str, names: list[str], source: SourceModel, declared: dict[str, OutputKind]) -> dict[str, Any]:
    """A ``yolox`` head checked against the source: ``[1, N, 5 + C]`` with N the strides' cells on
    the input; records strides and input size, declares boxes, objectness and class scores."""
    from edge_sdk.detect import YOLOX_STRIDES, as_head, yolox_grid

    h = as_head(text)
    assert h is not None
    out = source.outputs[0]
    shape = _static(out.shape)
    size = h.size or _input_size(source)
    if len(shape) != 3 or min(shape[1:]) < 6 or size is None:
        raise InputValidationError(f"--head yolox: output '{out.name}' has shape {out.shape} and the input "
                                   f"{source.inputs[0].shape if source.inputs else '?'}; expected an image input and "
                                   "an output [1, cells, 5 + classes].", "Pick the head that matches the model's output layout.")
    rows, width = (shape[1], shape[2]) if shape[1] > shape[2] else (shape[2], shape[1])
    strides = h.strides or YOLOX_STRIDES
    cells = len(yolox_grid(size, strides)[0])
    if cells != rows:
        raise InputValidationError(f"--head yolox: strides {list(strides)} on the {size[0]}x{size[1]} input make {cells} "
                                   f"cells, but output '{out.name}' {out.shape} has {rows} rows.",
                                   "Give the model's strides: --head yolox:strides=8,16,32,64.")
    classes = width - 5
    _check_labels(names, classes, out.name, out.shape)
    if out.name not in declared:
        axis = 2 if shape[2] == width else 1
        declared[out.name] = _objectness_packed(out.name, axis, classes)
    return {"head": "yolox", "output": out.name, "labels": names,
            "options": {"strides": list(strides), "size": list(size)}}


def _end2end(names: list[str], source: SourceModel, declared: dict[str, OutputKind]) -> dict[str, Any]:
    """An ``end2end`` head checked against the source (``[1, K, 6+]`` rows); declares the output a
    detection list for the gate. Labels cannot be counted against the model (class ids are values)."""
    out = source.outputs[0]
    shape = _static(out.shape)
    if len(shape) not in (2, 3) or not 6 <= shape[-1] <= 128:
        raise InputValidationError(f"--head end2end: output '{out.name}' has shape {out.shape}; expected [1, K, 6+] "
                                   "rows of x1, y1, x2, y2, score, class.", "Pick the head that matches the model's output layout.")
    if out.name not in declared:
        declared[out.name] = OutputKind("detections", source="declared", reason="--head end2end")
    return {"head": "end2end", "output": out.name, "labels": names}


def postprocess(head, labels, source: SourceModel, declared: dict[str, OutputKind],
                options: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """``--head``/``--labels`` checked against the source's outputs; a yolov8 or yolov5 head
    declares its output's kind for the gate (unless ``--output`` did): boxes and class scores,
    and for yolov5 the objectness channel the class scores are multiplied by; a boxes-scores head
    declares its two outputs. ``options``: thresholds the model itself said (recorded). None when
    no head and no labels were given.

    Raises:
        InputValidationError: an unknown head, a bad anchor spec, unreadable labels, or a class
            or anchor count that does not match the model.
    """
    from edge_sdk.detect import HEADS, read_labels

    if head is None and labels is None:
        return None
    text = str(head or "classifier")
    name = text.partition(":")[0].strip().lower()
    if name not in HEADS:
        raise InputValidationError(f"Unknown --head '{text[:60]}'.", f"Heads: {', '.join(HEADS)} (ssd-anchors:<spec>).")
    names = read_labels(labels) or []
    if name == "ssd-anchors":
        return _ssd(text, names, source)
    if name == "boxes-scores":
        return _boxes_scores(names, source, declared, options)
    if name == "yolox":
        return _yolox(text, names, source, declared)
    if name == "end2end":
        return _end2end(names, source, declared)
    out = source.outputs[0]
    shape = _static(out.shape)
    # yolov8: [1, 4 + C, anchors] (or transposed), anchors the long axis; yolov5: [1, anchors, 5 + C]
    three = len(shape) == 3 and min(shape[1:]) > 0
    seg = (min(shape[1], shape[3]) if len(shape) == 4 else 1) if len(shape) in (3, 4) else None
    classes = {"yolov8": min(shape[1:]) - 4 if three and min(shape[1:]) > 4 else None,
               "yolov5": shape[2] - 5 if three and shape[1] > shape[2] > 5 else None,
               "classifier": shape[-1] if shape and shape[-1] > 0 else None,
               "segmentation": seg if seg is None or seg > 0 else None}[name]
    if name in ("yolov8", "yolov5", "segmentation") and classes is None:
        want = {"yolov8": "[1, 4 + classes, anchors]", "yolov5": "[1, anchors, 5 + classes]",
                "segmentation": "[1, H, W, classes] or [1, classes, H, W]"}[name]
        raise InputValidationError(f"--head {name}: output '{out.name}' has shape {out.shape}; expected {want}.",
                                   "Pick the head that matches the model's output layout.")
    if classes is not None:
        _check_labels(names, classes, out.name, out.shape)
    if name == "yolov8" and classes is not None and out.name not in declared:
        axis = 1 if shape[1] <= shape[2] else 2
        declared[out.name] = parse_declaration(f"{out.name}:packed:axis={axis},boxes=0-4,scores=4-{4 + classes}")[1]
        declared[out.name].source = "declared"
    if name == "yolov5" and classes is not None and out.name not in declared:
        declared[out.name] = _objectness_packed(out.name, 2, classes)
    return {"head": name if head is not None else "classifier", "output": out.name, "labels": names}
