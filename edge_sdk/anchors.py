"""SSD anchors: the spec of ``--head ssd-anchors:<spec>``, the anchors it generates, the box decoding.

The anchors follow MediaPipe's ``SsdAnchorsCalculator`` (BlazeFace, BlazePalm, MediaPipe's SSD
MobileNet graphs) and the box decoding its ``TensorsToDetectionsCalculator``; TensorFlow Object
Detection API SSDs are the same decoding with ``order=yxhw;xy_scale=10;wh_scale=5;exp=1``.

The spec is ``key=value`` pairs joined by ``;`` (or a JSON file holding an object with the same
keys). Keys (defaults in brackets):

* ``strides``: feature-map strides, one per layer, e.g. ``8,16,16,16`` (required).
* ``size``: model input ``WxH`` or one number for a square [the model's input].
* ``scale``: ``MIN-MAX`` anchor scales over the layers [``0.1484375-0.75``].
* ``ratio``: aspect ratios per layer [``1.0``]; ``interp``: the extra anchor's ratio, at the
  scale between this layer's and the next one's, 0 for none [``1.0``].
* ``reduce``: 1 for the TF-OD lowest layer (ratios 1, 2, 0.5 at scales 0.1, s, s) [0].
* ``fixed``: 1 for anchors of size 1 x 1 (BlazeFace/BlazePalm) [0]; ``offset``: anchor centre
  within its cell, ``X`` or ``X,Y`` [0.5].
* ``order``: ``xywh`` (BlazeFace/BlazePalm) or ``yxhw`` (TF-OD) of the box regressions [``xywh``].
* ``xywh_scale`` (all four), ``xy_scale``, ``wh_scale``, ``x_scale``, ``y_scale``, ``w_scale``,
  ``h_scale``: divisors of the regressions [the input width/height].
* ``exp``: 1 when sizes are ``exp(h / h_scale) * anchor_h`` (TF-OD) [0].
* ``sigmoid``: 1 when the scores output holds logits [1]; ``ignore``: class ids never reported
  (a background class) [none].
* ``conf``, ``iou``: score threshold and NMS IoU of the head [the head's: 0.25, 0.45].
* ``boxes``, ``scores``: output names [by shape: ``[1, N, 4 + 2K]`` boxes, ``[1, N, C]`` scores].

BlazePalm (``palm_detection_lite``, 2016 anchors):
``strides=8,16,16,16;scale=0.1484375-0.75;fixed=1;size=192;conf=0.5;iou=0.3``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputValidationError

_HINT = "Write the spec as key=value pairs joined by ';', e.g. strides=8,16,16,16;fixed=1;size=192 (docs/heads.md)."


@dataclass(frozen=True)
class AnchorSpec:
    """A parsed ``ssd-anchors`` spec (see the module docstring for the keys)."""

    strides: tuple[int, ...]
    size: tuple[int, int] | None = None
    scale: tuple[float, float] = (0.1484375, 0.75)
    ratio: tuple[float, ...] = (1.0,)
    interp: float = 1.0
    reduce: bool = False
    fixed: bool = False
    offset: tuple[float, float] = (0.5, 0.5)
    order: str = "xywh"
    x_scale: float | None = None
    y_scale: float | None = None
    w_scale: float | None = None
    h_scale: float | None = None
    exp: bool = False
    sigmoid: bool = True
    ignore: tuple[int, ...] = ()
    conf: float | None = None
    iou: float | None = None
    boxes: str = ""
    scores: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready keys (what the manifest's ``postprocess.anchors`` records), unset ones left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v != f.default or f.name == "strides":
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    def with_size(self, width: int, height: int) -> "AnchorSpec":
        """This spec with ``size`` filled in, unless it has one."""
        return self if self.size else replace(self, size=(int(width), int(height)))

    @property
    def count(self) -> int:
        """Anchors this spec generates (needs ``size``)."""
        return len(ssd_anchors(self))


def _bad(key: str, value: Any, want: str) -> InputValidationError:
    return InputValidationError(f"ssd-anchors spec: bad {key}={str(value)[:60]!r}: {want}.", _HINT)


def _floats(key: str, v: Any) -> tuple[float, ...]:
    items = v if isinstance(v, list | tuple) else str(v).replace(",", " ").split()
    try:
        out = tuple(float(x) for x in items)
    except (TypeError, ValueError):
        raise _bad(key, v, "numbers separated by commas") from None
    if not out or not all(math.isfinite(x) for x in out):
        raise _bad(key, v, "finite numbers separated by commas")
    return out


def _one(key: str, v: Any, low: float = 0.0, high: float = math.inf, *, strict_low: bool = False) -> float:
    x = _floats(key, v)
    if len(x) != 1 or x[0] < low or x[0] > high or (strict_low and x[0] == low):
        raise _bad(key, v, f"one number in {'(' if strict_low else '['}{low}, {high}]")
    return x[0]


def _flag(key: str, v: Any) -> bool:
    if isinstance(v, bool) or v in (0, 1):
        return bool(v)
    if str(v).lower() in ("1", "true", "yes"):
        return True
    if str(v).lower() in ("0", "false", "no"):
        return False
    raise _bad(key, v, "0 or 1")


def _size(v: Any) -> tuple[int, int]:
    parts = list(v) if isinstance(v, list | tuple) else str(v).lower().replace("x", ",").split(",")
    try:
        wh = [int(p) for p in parts]
    except (TypeError, ValueError):
        raise _bad("size", v, "WxH or one number, in pixels") from None
    if len(wh) == 1:
        wh *= 2
    if len(wh) != 2 or min(wh) < 1 or max(wh) > 16384:
        raise _bad("size", v, "WxH or one number, in pixels")
    return wh[0], wh[1]


def _strides(v: Any) -> tuple[int, ...]:
    s = _floats("strides", v)
    if len(s) > 16 or any(x < 1 or x != int(x) or x > 4096 for x in s):
        raise _bad("strides", v, "1 to 16 positive whole numbers")
    return tuple(int(x) for x in s)


def _scale(v: Any) -> tuple[float, float]:
    parts = list(v) if isinstance(v, list | tuple) else str(v).replace("-", ",").split(",")
    x = _floats("scale", parts)
    if len(x) != 2 or not 0 < x[0] <= x[1]:
        raise _bad("scale", v, "MIN-MAX with 0 < MIN <= MAX")
    return x[0], x[1]


def _pair(key: str, v: Any) -> tuple[float, float]:
    x = _floats(key, v)
    if len(x) not in (1, 2) or not all(0.0 <= y <= 1.0 for y in x):
        raise _bad(key, v, "X or X,Y in 0..1")
    return (x[0], x[-1])


def _name(key: str, v: Any) -> str:
    if not isinstance(v, str) or len(v) > 256 or not v.isprintable():
        raise _bad(key, v, "an output name")
    return v


_PARSERS = {
    "strides": _strides, "size": _size, "scale": _scale,
    "ratio": lambda v: tuple(_one("ratio", x, 0.0, 100.0, strict_low=True) for x in _floats("ratio", v)),
    "interp": lambda v: _one("interp", v, 0.0, 100.0), "reduce": lambda v: _flag("reduce", v),
    "fixed": lambda v: _flag("fixed", v), "offset": lambda v: _pair("offset", v),
    "x_scale": lambda v: _one("x_scale", v, 0.0, strict_low=True),
    "y_scale": lambda v: _one("y_scale", v, 0.0, strict_low=True),
    "w_scale": lambda v: _one("w_scale", v, 0.0, strict_low=True),
    "h_scale": lambda v: _one("h_scale", v, 0.0, strict_low=True),
    "exp": lambda v: _flag("exp", v), "sigmoid": lambda v: _flag("sigmoid", v),
    "ignore": lambda v: tuple(int(_one("ignore", x, 0, 1e6)) for x in _floats("ignore", v)),
    "conf": lambda v: _one("conf", v, 0.0, 1.0), "iou": lambda v: _one("iou", v, 0.0, 1.0),
    "boxes": lambda v: _name("boxes", v), "scores": lambda v: _name("scores", v),
}
#: Shorthands that set several scale divisors at once.
_GROUPS = {"xywh_scale": ("x_scale", "y_scale", "w_scale", "h_scale"), "xy_scale": ("x_scale", "y_scale"),
           "wh_scale": ("w_scale", "h_scale")}


def _order(v: Any) -> str:
    if str(v).lower() not in ("xywh", "yxhw"):
        raise _bad("order", v, "xywh or yxhw")
    return str(v).lower()


def _pairs(text: str) -> dict[str, Any]:
    """``k=v;k=v`` (or a JSON file's object) as a dict of raw values."""
    text = text.strip()
    if text.lower().endswith(".json") or (text and Path(text).is_file()):
        try:
            data = json.loads(Path(text).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputValidationError(f"Cannot read the ssd-anchors spec file {text}: {exc}",
                                       "Pass a JSON object with the spec's keys, e.g. {\"strides\": [8, 16, 16, 16]}.") from None
        if not isinstance(data, dict):
            raise InputValidationError(f"The ssd-anchors spec file {text} holds no JSON object.", _HINT)
        return data
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise InputValidationError(f"ssd-anchors spec: {item[:60]!r} is not key=value.", _HINT)
        if key.strip() in out:
            raise InputValidationError(f"ssd-anchors spec: {key.strip()[:40]!r} is given twice.", _HINT)
        out[key.strip()] = value.strip()
    return out


def parse_spec(spec: str | dict[str, Any] | AnchorSpec) -> AnchorSpec:
    """An :class:`AnchorSpec` from ``k=v;...`` text, a JSON file path, or a dict of the same keys.

    Raises:
        InputValidationError: an unknown key (the known ones are listed), a bad value (naming the
            key), no ``strides``, or an unreadable file.
    """
    if isinstance(spec, AnchorSpec):
        return spec
    raw = dict(spec) if isinstance(spec, dict) else _pairs(str(spec))
    known = sorted([*_PARSERS, *_GROUPS, "order"])
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _GROUPS:
            values.update({k: _one(key, value, 0.0, strict_low=True) for k in _GROUPS[key]})
        elif key == "order":
            values["order"] = _order(value)
        elif key in _PARSERS:
            values[key] = _PARSERS[key](value)
        else:
            raise InputValidationError(f"ssd-anchors spec: unknown key {str(key)[:40]!r}.", f"Keys: {', '.join(known)}.")
    if "strides" not in values:
        raise InputValidationError("ssd-anchors spec: strides is missing.", _HINT)
    return AnchorSpec(**values)


def ssd_anchors(spec: AnchorSpec) -> np.ndarray:
    """The anchors of ``spec`` as ``[N, 4]`` ``x_center, y_center, w, h`` (normalised to the input).

    MediaPipe's ``SsdAnchorsCalculator``: consecutive layers of the same stride share one grid
    (their anchors interleave per cell); each layer adds one anchor per aspect ratio at its scale
    and, with ``interp``, one between its scale and the next layer's.

    Raises:
        InputValidationError: the spec has no ``size``.
    """
    if spec.size is None:
        raise InputValidationError("ssd-anchors spec: size is missing and the model input size is unknown.",
                                   "Add size=WxH to the spec.")
    return _anchors(spec.strides, spec.size, spec.scale, spec.ratio, spec.interp, spec.reduce, spec.fixed, spec.offset).copy()


def _layer_scale(lo: float, hi: float, i: int, n: int) -> float:
    return (lo + hi) * 0.5 if n == 1 else lo + (hi - lo) * i / (n - 1.0)


@lru_cache(maxsize=16)
def _anchors(strides, size, scale, ratios, interp, reduce, fixed, offset) -> np.ndarray:
    n, out, layer = len(strides), [], 0
    while layer < n:
        sizes: list[tuple[float, float]] = []  # (w, h) per anchor of one cell
        last = layer
        while last < n and strides[last] == strides[layer]:
            s = _layer_scale(scale[0], scale[1], last, n)
            pairs = ([(1.0, 0.1), (2.0, s), (0.5, s)] if last == 0 and reduce
                     else [(r, s) for r in ratios] + ([(interp, math.sqrt(s * (1.0 if last == n - 1 else
                                                                              _layer_scale(scale[0], scale[1], last + 1, n))))]
                                                      if interp > 0 else []))
            sizes += [(sc * math.sqrt(r), sc / math.sqrt(r)) for r, sc in pairs]
            last += 1
        fw, fh = math.ceil(size[0] / strides[layer]), math.ceil(size[1] / strides[layer])
        ys, xs = np.meshgrid((np.arange(fh) + offset[1]) / fh, (np.arange(fw) + offset[0]) / fw, indexing="ij")
        wh = np.ones((len(sizes), 2)) if fixed else np.asarray(sizes, np.float64)
        cells = np.stack([xs.ravel(), ys.ravel()], 1)  # row-major: y outer, x inner, anchors innermost
        out.append(np.concatenate([np.repeat(cells, len(sizes), 0), np.tile(wh, (len(cells), 1))], 1))
        layer = last
    a = np.concatenate(out) if out else np.zeros((0, 4))
    a.setflags(write=False)
    return a


def decode_boxes(raw: np.ndarray, anchors: np.ndarray, spec: AnchorSpec) -> tuple[np.ndarray, np.ndarray]:
    """Box regressions ``[N, 4 + 2K]`` -> boxes ``[N, 4]`` ``x1, y1, x2, y2`` and keypoints ``[N, K, 2]``,
    in model-input pixels (MediaPipe's ``TensorsToDetectionsCalculator::DecodeBoxes``)."""
    assert spec.size is not None
    w_in, h_in = spec.size
    xs, ys = spec.x_scale or w_in, spec.y_scale or h_in
    ws, hs = spec.w_scale or w_in, spec.h_scale or h_in
    r = raw.astype(np.float64, copy=False)
    ix, iy, iw, ih = (0, 1, 2, 3) if spec.order == "xywh" else (1, 0, 3, 2)
    ax, ay, aw, ah = anchors[:, 0], anchors[:, 1], anchors[:, 2], anchors[:, 3]
    cx = r[:, ix] / xs * aw + ax
    cy = r[:, iy] / ys * ah + ay
    if spec.exp:
        w = np.exp(np.clip(r[:, iw] / ws, -40, 40)) * aw
        h = np.exp(np.clip(r[:, ih] / hs, -40, 40)) * ah
    else:
        w, h = r[:, iw] / ws * aw, r[:, ih] / hs * ah
    boxes = np.stack([(cx - w / 2) * w_in, (cy - h / 2) * h_in, (cx + w / 2) * w_in, (cy + h / 2) * h_in], 1)
    k = (r.shape[1] - 4) // 2
    kp = r[:, 4:4 + 2 * k].reshape(len(r), k, 2)
    if spec.order != "xywh":
        kp = kp[:, :, ::-1]
    kx = (kp[:, :, 0] / xs * aw[:, None] + ax[:, None]) * w_in
    ky = (kp[:, :, 1] / ys * ah[:, None] + ay[:, None]) * h_in
    return boxes, np.stack([kx, ky], -1)


__all__ = ["AnchorSpec", "decode_boxes", "parse_spec", "ssd_anchors"]
