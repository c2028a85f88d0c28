"""Camera frames for a graph that preprocesses them itself (``convert --bake-preprocess``).

When the manifest's ``preprocessing.baked`` names the format that runs, ``Model.infer_image``
hands the frame to the runtime as it is (a ``[1, H, W, C]`` uint8 view, no copy), after
checking that it has the colour format and size the graph was built for; the graph does the
colour conversion, resize, normalisation and layout change. Images given as paths, bytes or
PIL images are decoded into that colour format and must have that size too. NV12 and I420
(``yuv420``) frames are one ``(H*3/2) x W`` plane, fed as ``[1, H*3/2, W, 1]`` (OpenVINO's
``NV12_SINGLE_PLANE`` / ``I420_SINGLE_PLANE``; BT.601 limited range, as :mod:`edge_sdk.frames`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from edge_sdk.errors import InputValidationError
from edge_sdk.manifest import BakedPreprocessing, Manifest
from edge_sdk.preprocess import ImageTransform, PreprocessSpec, from_dict, resize_geometry


YUV = ("nv12", "yuv420")


def frame_shape(color: str, size: tuple[int, int] | list[int]) -> list[int]:
    """The graph input for frames of ``size`` ``(height, width)`` in ``color``: ``[1, H, W, C]``,
    or ``[1, H*3/2, W, 1]`` for the one-plane YUV formats."""
    h, w = int(size[0]), int(size[1])
    if color in YUV:
        return [1, h * 3 // 2, w, 1]
    return [1, h, w, 1 if color == "gray" else 3]


def rgb_to_yuv(rgb: np.ndarray, color: str) -> np.ndarray:
    """``HxWx3`` RGB (H, W even) as one NV12 or I420 plane ``(H*3/2) x W``: BT.601 limited range,
    chroma averaged over 2x2 blocks (the inverse of :func:`edge_sdk.frames.nv12_to_rgb`)."""
    x = np.asarray(rgb, np.float64)
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    y = 16.0 + 0.257 * r + 0.504 * g + 0.098 * b
    u = 128.0 - 0.148 * r - 0.291 * g + 0.439 * b
    v = 128.0 + 0.439 * r - 0.368 * g - 0.071 * b
    h, w = y.shape

    def half(c: np.ndarray) -> np.ndarray:
        return c.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))

    def q(c: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(c), 0, 255).astype(np.uint8)

    uh, vh = half(u), half(v)
    if color == "nv12":
        chroma = np.stack([uh, vh], axis=-1).reshape(h // 2, w)
    else:
        chroma = np.concatenate([uh.ravel(), vh.ravel()]).reshape(h // 2, w)
    return np.ascontiguousarray(np.concatenate([q(y), q(chroma)], axis=0))


class BakedFrames:
    """Checks frames against ``preprocessing.baked`` and feeds them as they are.

    Attributes:
        name: The graph input that takes the frame.
        color: The frame colour format the graph takes (``bgr``, ``rgb``, ``gray``, ``nv12``, ``yuv420``).
        size: ``(height, width)`` of the frames.
        transform: Where a frame's pixels land in the model input (the same for every frame).
    """

    def __init__(self, baked: BakedPreprocessing, spec: PreprocessSpec):
        self.name, self.color = baked.input, baked.color
        self.size = (int(baked.frame_size[0]), int(baked.frame_size[1]))
        self._shape = tuple(frame_shape(baked.color, self.size))
        nh, nw, top, left = resize_geometry(spec, self.size)
        h, w = spec.size or self.size
        fh, fw = self.size
        self.transform = ImageTransform((fw, fh), (w, h), nw / fw, nh / fh, float(left), float(top))

    def describe(self) -> str:
        """One line for ``Model.describe()``."""
        return f"in the graph ({self.color} uint8 frames of {self.size[0]}x{self.size[1]})"

    def feed(self, image: Any, color: str = "rgb") -> tuple[np.ndarray, ImageTransform]:
        """The model input for one frame: a ``[1, H, W, C]`` uint8 view of it, and the transform.

        Raises:
            InputValidationError: another colour format or size than the graph takes, or a
                malformed frame / unreadable image.
        """
        from edge_sdk.frames import check_color, check_frame

        if not _is_image_file(image):  # arrays, and anything else check_frame refuses clearly (None, lists)
            color = check_color(color)
            if color != self.color:
                raise InputValidationError(
                    f"This artifact's graph takes {self.color} frames (preprocessing baked in at conversion); "
                    f"got color='{color}'.",
                    f"Pass color='{self.color}' frames, or convert again with --bake-preprocess "
                    f"{self.size[0]}x{self.size[1]},{color}.")
            frame = check_frame(image, color)
        else:
            frame = self._decode(image)
        if frame.ndim == 2:
            frame = frame[:, :, None]
        if (1, *frame.shape) != self._shape:
            h, w = (frame.shape[0] * 2 // 3 if self.color in YUV else frame.shape[0]), frame.shape[1]
            got = f"{h}x{w}" + ("" if self.color in YUV else f"x{frame.shape[2]}")
            raise InputValidationError(
                f"This artifact's graph takes {self.size[0]}x{self.size[1]} {self.color} frames (preprocessing baked "
                f"in at conversion); got {got}.",
                f"Resize frames to {self.size[0]}x{self.size[1]} (height x width), or convert again with "
                f"--bake-preprocess {h}x{w}.")
        return np.ascontiguousarray(frame)[None], self.transform

    def _decode(self, image: Any) -> np.ndarray:
        """A path, bytes or PIL image as a uint8 array in the graph's colour format."""
        from edge_sdk.preprocess import open_image

        img = open_image(image)
        if self.color == "gray":
            return np.asarray(img.convert("L"))
        rgb = np.asarray(img.convert("RGB"))
        if self.color in YUV:
            if rgb.shape[:2] != self.size:  # the size check's message names the image's own size
                return np.zeros((rgb.shape[0] * 3 // 2, rgb.shape[1]), np.uint8)
            return rgb_to_yuv(rgb, self.color)
        return rgb[..., ::-1] if self.color == "bgr" else rgb


def _is_image_file(image: Any) -> bool:
    """A path, encoded bytes or a PIL image (decoded by Pillow), not a frame array."""
    if isinstance(image, str | Path | bytes | bytearray | memoryview):
        return True
    from PIL import Image

    return isinstance(image, Image.Image)


def baked_frames(manifest: Manifest, fmt: str) -> BakedFrames | None:
    """A :class:`BakedFrames` when format ``fmt`` of this artifact holds the preprocessing, else None."""
    baked = manifest.preprocessing.baked
    if baked is None or baked.format != fmt or manifest.preprocessing.spec is None:
        return None
    spec = from_dict(manifest.preprocessing.spec, where="manifest preprocessing")
    if spec.size is None:  # the model tensor (manifest.inputs, not this format's frame input) has the size
        target = next((t for t in manifest.inputs if t.name == baked.input), manifest.inputs[0])
        spec = spec.with_size_from_shape(list(target.shape))
    return BakedFrames(baked, spec)


__all__ = ["YUV", "BakedFrames", "baked_frames", "frame_shape", "rgb_to_yuv"]
