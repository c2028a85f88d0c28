"""Camera frames as numpy arrays: checked, then converted to RGB (or gray) for preprocessing.

A device hands over frames as the camera stack makes them: OpenCV gives BGR ``HxWx3``, V4L2,
GStreamer, Android and Jetson's Argus give NV12 or I420 (``yuv420``) planes in one
``(H*3/2)xW`` buffer, a mono sensor gives ``HxW``. :func:`frame_to_rgb` checks the array
against its stated colour format and returns an ``HxWx3`` RGB (or ``HxW`` gray) uint8 array;
every malformed frame is an :class:`~edge_sdk.errors.InputValidationError` saying what was
wrong and what to pass instead, so a device loop can catch it and skip the frame.

YUV is BT.601 limited ("video") range, as OpenCV's ``COLOR_YUV2RGB_NV12``/``_I420`` and
camera ISPs use: ``R = 1.164(Y-16) + 1.596(V-128)``, ``G = 1.164(Y-16) - 0.813(V-128) -
0.391(U-128)``, ``B = 1.164(Y-16) + 2.018(U-128)``, chroma upsampled by repeating each sample
over its 2x2 block. Importing this module imports numpy only.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np

from .errors import InputValidationError

Color = Literal["rgb", "bgr", "gray", "nv12", "yuv420"]
COLORS: tuple[str, ...] = ("rgb", "bgr", "gray", "nv12", "yuv420")

_HINT = {
    "rgb": "Pass a uint8 HxWx3 RGB array (HxWx4 RGBA is accepted; alpha is dropped).",
    "bgr": "Pass a uint8 HxWx3 BGR array, as cv2.VideoCapture.read() returns it.",
    "gray": "Pass a uint8 HxW (or HxWx1) array.",
    "nv12": "Pass the uint8 (H*3/2)xW buffer: H rows of Y, then H/2 rows of interleaved U,V; H and W even.",
    "yuv420": "Pass the uint8 (H*3/2)xW I420 buffer: H rows of Y, then the U plane, then the V plane; H and W even.",
}


_SHAPES = {"rgb": "HxWx3 (or HxWx4)", "bgr": "HxWx3", "gray": "HxW (or HxWx1)", "nv12": "(H*3/2)xW",
           "yuv420": "(H*3/2)xW"}


def check_color(color: str) -> str:
    """Normalise a colour name (case-insensitive) and refuse unknown ones.

    Raises:
        InputValidationError: not one of :data:`COLORS`.
    """
    c = str(color).lower() if isinstance(color, str) else None
    if c not in COLORS:
        raise InputValidationError(f"Unknown frame colour format {color!r}.",
                                   f"Use one of: {', '.join(COLORS)} (OpenCV frames are 'bgr').")
    return c


def check_frame(frame: Any, color: str = "rgb") -> np.ndarray:
    """Check that ``frame`` is a non-empty uint8 array shaped for ``color``.

    Returns:
        The frame as an ndarray (not copied).

    Raises:
        InputValidationError: None, a list, another type, wrong dtype, rank or channel count,
            an empty frame, or odd YUV sizes; the message names what was wrong.
    """
    color = check_color(color)
    hint = _HINT[color]
    if frame is None:
        raise InputValidationError("Got None instead of a frame (the camera returned no image?).",
                                   "Check the capture call's success flag and skip the frame; " + hint)
    if not isinstance(frame, np.ndarray):
        raise InputValidationError(f"A frame must be a numpy array, got {type(frame).__name__}.",
                                   "Convert it with np.asarray(frame, dtype=np.uint8). " + hint)
    if frame.dtype != np.uint8:
        raise InputValidationError(f"A {color} frame has dtype {frame.dtype}; expected a uint8 array.",
                                   "Camera frames are 0..255 uint8; convert float images with "
                                   "(x * 255).clip(0, 255).astype(np.uint8). " + hint)
    if frame.size == 0:
        raise InputValidationError(f"The frame is empty (shape {list(frame.shape)}).",
                                   "Skip it; the camera delivered no pixels. " + hint)
    shape = list(frame.shape)
    if color in ("rgb", "bgr"):
        ok = frame.ndim == 3 and frame.shape[2] in ((3, 4) if color == "rgb" else (3,))
    elif color == "gray":
        ok = frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 1)
    else:
        ok = frame.ndim == 2 and frame.shape[0] % 3 == 0 and frame.shape[1] % 2 == 0 and (frame.shape[0] * 2 // 3) % 2 == 0
    if not ok:
        raise InputValidationError(f"A {color} frame of shape {shape} does not fit that format; expected a uint8 {_SHAPES[color]} array.", hint)
    return frame


_C = np.arange(256, dtype=np.float64)
#: Per-sample terms of the BT.601 limited-range formula, looked up instead of computed per pixel.
_LUT_Y = (_C - 16.0) * 1.164
_LUT_RV, _LUT_GV = 1.596 * (_C - 128.0), -0.813 * (_C - 128.0)
_LUT_GU, _LUT_BU = -0.391 * (_C - 128.0), 2.018 * (_C - 128.0)


def _yuv_to_rgb(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """BT.601 limited range (float64, rounded half to even); ``u``/``v`` at half resolution both ways.

    Each chroma sample is looked up once and broadcast over its 2x2 block of luma samples; the
    planes are computed contiguously (strided writes into HxWx3 cost 4x more) and interleaved as uint8.
    """
    h, w = y.shape
    yf = _LUT_Y[y.reshape(h // 2, 2, w // 2, 2)]
    uu, vv = u[:, None, :, None], v[:, None, :, None]
    planes = np.empty((3, h // 2, 2, w // 2, 2), np.float64)
    np.add(yf, _LUT_RV[vv], out=planes[0])
    np.add(yf, _LUT_GV[vv], out=planes[1])
    planes[1] += _LUT_GU[uu]
    np.add(yf, _LUT_BU[uu], out=planes[2])
    np.rint(planes, out=planes)
    np.maximum(planes, 0.0, out=planes)
    np.minimum(planes, 255.0, out=planes)
    return np.ascontiguousarray(planes.astype(np.uint8).reshape(3, h, w).transpose(1, 2, 0))


def nv12_to_rgb(frame: np.ndarray) -> np.ndarray:
    """An NV12 buffer ``(H*3/2)xW`` (Y plane, then interleaved U,V at half resolution) as ``HxWx3`` RGB.

    Raises:
        InputValidationError: not a well-formed NV12 buffer.
    """
    frame = check_frame(frame, "nv12")
    h = frame.shape[0] * 2 // 3
    uv = frame[h:].reshape(h // 2, -1, 2)
    return _yuv_to_rgb(frame[:h], uv[..., 0], uv[..., 1])


def i420_to_rgb(frame: np.ndarray) -> np.ndarray:
    """An I420 (``yuv420``) buffer ``(H*3/2)xW`` (Y, then the U plane, then the V plane) as RGB.

    Raises:
        InputValidationError: not a well-formed I420 buffer.
    """
    frame = check_frame(frame, "yuv420")
    h, w = frame.shape[0] * 2 // 3, frame.shape[1]
    chroma = frame[h:].reshape(-1)
    q = (h // 2) * (w // 2)
    return _yuv_to_rgb(frame[:h], chroma[:q].reshape(h // 2, w // 2), chroma[q:].reshape(h // 2, w // 2))


def frame_to_rgb(frame: Any, color: str = "rgb") -> np.ndarray:
    """Check a frame and return it as uint8 ``HxWx3`` RGB, or ``HxW`` for ``gray``.

    RGB input is returned as is (a view: no copy); BGR is a reversed-channel view; RGBA drops
    alpha; NV12/I420 are converted (BT.601 limited range).

    Raises:
        InputValidationError: see :func:`check_frame`.
    """
    color = check_color(color)
    if color == "nv12":
        return nv12_to_rgb(frame)
    if color == "yuv420":
        return i420_to_rgb(frame)
    frame = check_frame(frame, color)
    if color == "gray":
        return frame[:, :, 0] if frame.ndim == 3 else frame
    if color == "bgr":
        return frame[:, :, ::-1]
    return frame[:, :, :3] if frame.shape[2] == 4 else frame


__all__ = ["COLORS", "Color", "check_color", "check_frame", "frame_to_rgb", "i420_to_rgb", "nv12_to_rgb"]
