"""Image preprocessing as data: one spec applied identically at calibration and on the device.

The spec is recorded (with its hash) in the manifest; ``Model.preprocess`` on the device and
the calibration loader in the converter both call :func:`apply`, so the device sees exactly
what the model was calibrated and validated on.

Per pixel: ``x = (pixel * scale - mean[c]) / std[c]`` after decoding, colour conversion and
resizing; then the layout is arranged (NCHW or NHWC) and a batch dimension of 1 is added.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from . import typed
from .errors import InputValidationError

ResizeMode = Literal["stretch", "letterbox", "center-crop"]


@dataclass
class PreprocessSpec:
    """How an image becomes a model input.

    Attributes:
        size: ``[height, width]`` of the model input; ``None`` takes it from the input shape.
        resize: ``stretch`` (ignore aspect), ``letterbox`` (fit and pad with ``pad_value``),
            ``center-crop`` (scale the shorter side, crop the centre).
        layout: ``NCHW`` or ``NHWC``.
        color: ``RGB``, ``BGR`` or ``GRAY`` (one channel).
        scale: Multiplier applied to 0..255 pixel values first (``1/255`` maps to 0..1).
        mean: Per-channel mean subtracted after scaling.
        std: Per-channel std divided after subtracting the mean.
        pad_value: Pixel value (0..255) used by letterbox padding.
        dtype: Output dtype (the model's float input dtype).
        input: Name of the model input the spec applies to (``""``: the only image input).
    """

    size: list[int] | None = None
    resize: ResizeMode = "stretch"
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    color: Literal["RGB", "BGR", "GRAY"] = "RGB"
    scale: float = 1.0 / 255.0
    mean: list[float] = field(default_factory=lambda: [0.0])
    std: list[float] = field(default_factory=lambda: [1.0])
    pad_value: int = 114
    dtype: Literal["float32", "uint8"] = "float32"
    input: str = ""

    def to_dict(self) -> dict[str, Any]:
        return typed.to_dict(self)

    @property
    def channels(self) -> int:
        return 1 if self.color == "GRAY" else 3

    def with_size_from_shape(self, shape: list[int]) -> "PreprocessSpec":
        """Fill ``size`` from a static model input shape (rank 4) if it is not set.

        Raises:
            InputValidationError: the shape is not an image shape for this layout, or disagrees.
        """
        if len(shape) != 4:
            raise InputValidationError(f"Image preprocessing needs a rank-4 input; the model input has shape {shape}.")
        h, w, c = (shape[2], shape[3], shape[1]) if self.layout == "NCHW" else (shape[1], shape[2], shape[3])
        if c != self.channels:
            raise InputValidationError(
                f"Preprocessing makes {self.channels}-channel {self.layout} images but the model input {shape} "
                f"has {c} channels in that layout.",
                "Set color=GRAY for one channel, or the other layout (layout=NCHW / layout=NHWC).",
            )
        if self.size is not None and list(self.size) != [h, w]:
            raise InputValidationError(
                f"Preprocessing size {self.size[0]}x{self.size[1]} does not match the model input {h}x{w}.")
        out = PreprocessSpec(**{**self.to_dict(), "size": [h, w]})
        return out


def from_dict(data: dict, where: str = "preprocessing spec") -> PreprocessSpec:
    """Parse a spec from a dict (JSON / manifest), strictly, and check its values.

    Raises:
        InputValidationError: unknown key, wrong type, or a value :func:`check` refuses.
    """
    return check(typed.parse(PreprocessSpec, data, where=where, error=InputValidationError), where)


#: Largest image side accepted in ``size``.
MAX_SIDE = 16384


def check(spec: PreprocessSpec, where: str = "preprocessing spec") -> PreprocessSpec:
    """Refuse values that would make every input NaN, Inf or garbage.

    ``scale`` and every ``std`` must be finite and above 0, every ``mean`` finite, ``mean``/``std``
    one value or one per channel, ``size`` two sides of 1..16384, ``pad_value`` 0..255.

    Raises:
        InputValidationError: naming ``where``, the key and the value.
    """
    def bad(key: str, msg: str) -> InputValidationError:
        return InputValidationError(f"{where}: '{key}' {msg}",
                                    "Example: size=224x224,scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225")

    if not (math.isfinite(spec.scale) and spec.scale > 0):
        raise bad("scale", f"must be a finite number above 0, got {spec.scale}")
    for key, values in (("mean", spec.mean), ("std", spec.std)):
        if len(values) not in (1, spec.channels):
            raise bad(key, f"needs 1 or {spec.channels} values for {spec.color}, got {len(values)}")
        for v in values:
            if not math.isfinite(v) or (key == "std" and v <= 0):
                raise bad(key, f"values must be finite{' and above 0' if key == 'std' else ''}, got {v}")
    if spec.size is not None and (len(spec.size) != 2 or any(not 1 <= d <= MAX_SIDE for d in spec.size)):
        raise bad("size", f"must be HxW with sides of 1..{MAX_SIDE}, got {spec.size}")
    if not 0 <= spec.pad_value <= 255:
        raise bad("pad_value", f"must be 0..255, got {spec.pad_value}")
    return spec


def _num(text: str) -> float:
    """A number as typed on the command line: ``0.5``, ``1/255``."""
    try:
        if "/" in text:
            a, b = text.split("/", 1)
            return float(a) / float(b)
        return float(text)
    except ZeroDivisionError:
        raise ValueError(f"{text} divides by zero") from None


def parse(text: str) -> PreprocessSpec:
    """Parse a ``--preprocess`` value: a JSON file path, a JSON object, or ``key=value,...``.

    Example: ``size=224x224,layout=NCHW,color=RGB,scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225``
    (lists are separated by ``:``).

    Raises:
        InputValidationError: unknown key or bad value, naming it.
    """
    text = text.strip()
    if text.startswith("{"):
        try:
            return from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise InputValidationError(f"--preprocess: invalid JSON ({exc})") from None
    if text.endswith(".json") or Path(text).is_file():
        from .strictjson import loads, read_regular_file

        raw = read_regular_file(text, limit=1 << 20, what="--preprocess JSON file", error=InputValidationError)
        data = loads(raw, where=f"--preprocess {text}", error=InputValidationError)
        if not isinstance(data, dict):
            raise InputValidationError(f"--preprocess {text}: expected a JSON object.")
        return from_dict(data, where=text)
    data: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in part:
            raise InputValidationError(f"--preprocess: '{part}' is not key=value",
                                       "example: size=224x224,layout=NCHW,scale=1/255,mean=0.5,std=0.5")
        key, val = (s.strip() for s in part.split("=", 1))
        try:
            if key == "size":
                data[key] = [int(v) for v in val.lower().split("x")]
                if len(data[key]) == 1:
                    data[key] = data[key] * 2
            elif key in ("mean", "std"):
                data[key] = [_num(v) for v in val.split(":")]
            elif key == "scale":
                data[key] = _num(val)
            elif key == "pad_value":
                data[key] = int(val)
            elif key in ("layout", "color"):
                data[key] = val.upper()
            else:
                data[key] = val
        except ValueError as exc:
            why = f" ({exc})" if "zero" in str(exc) else ""
            raise InputValidationError(f"--preprocess: bad value for '{key}': {val!r}{why}",
                                       "example: size=224x224,scale=1/255,mean=0.485:0.456:0.406,std=0.229:0.224:0.225") from None
    return from_dict(data, where="--preprocess")


def open_image(image: Any):
    """Open a path, bytes or PIL image as a PIL image.

    Raises:
        InputValidationError: unreadable or not an image.
    """
    from PIL import Image, UnidentifiedImageError

    if isinstance(image, Image.Image):
        return image
    try:
        if isinstance(image, bytes | bytearray | memoryview):
            img = Image.open(io.BytesIO(bytes(image)))
        else:
            img = Image.open(Path(image))
        img.load()
        return img
    except FileNotFoundError:
        raise InputValidationError(f"Image not found: {image}") from None
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        name = image if isinstance(image, str | Path) else f"<{type(image).__name__}>"
        raise InputValidationError(f"Cannot decode image {name}: {exc}", "Pass a PNG, JPEG or other Pillow-readable image.") from None


def apply(image: Any, spec: PreprocessSpec) -> np.ndarray:
    """Decode and preprocess one image into a batch of one: ``[1, C, H, W]`` or ``[1, H, W, C]``.

    Raises:
        InputValidationError: the image cannot be decoded, or the spec has no size.
    """
    from PIL import Image

    if spec.size is None:
        raise InputValidationError("Preprocessing spec has no size; set size=HxW or let the model's input shape fill it.")
    img = open_image(image)
    img = img.convert("L" if spec.color == "GRAY" else "RGB")
    h, w = spec.size
    if spec.resize == "stretch":
        img = img.resize((w, h), Image.BILINEAR)
    elif spec.resize == "letterbox":
        r = min(w / img.width, h / img.height)
        nw, nh = max(1, round(img.width * r)), max(1, round(img.height * r))
        canvas = Image.new(img.mode, (w, h), spec.pad_value if img.mode == "L" else (spec.pad_value,) * 3)
        canvas.paste(img.resize((nw, nh), Image.BILINEAR), ((w - nw) // 2, (h - nh) // 2))
        img = canvas
    else:  # center-crop
        r = max(w / img.width, h / img.height)
        nw, nh = max(w, round(img.width * r)), max(h, round(img.height * r))
        img = img.resize((nw, nh), Image.BILINEAR)
        left, top = (nw - w) // 2, (nh - h) // 2
        img = img.crop((left, top, left + w, top + h))
    arr = np.asarray(img, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[:, :, None]
    if spec.color == "BGR":
        arr = arr[:, :, ::-1]
    if spec.dtype == "uint8":
        out = arr.astype(np.uint8)
    else:
        mean = np.asarray(spec.mean, dtype=np.float32)
        std = np.asarray(spec.std, dtype=np.float32)
        out = ((arr * np.float32(spec.scale)) - mean) / std
        out = out.astype(np.float32)
    if spec.layout == "NCHW":
        out = out.transpose(2, 0, 1)
    return np.ascontiguousarray(out[None, ...])


def spec_hash(spec: PreprocessSpec | None) -> str:
    """Canonical sha256 of a spec, as recorded in manifests."""
    from .manifest import preprocessing_hash

    return preprocessing_hash(spec.to_dict() if spec else None)
