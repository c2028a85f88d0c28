"""Preprocessing baked into an OpenVINO IR with ``PrePostProcessor`` (``convert --bake-preprocess``).

After the int8 IR passed its accuracy gate (the gate judged the IR the host feeds with
:func:`edge_sdk.preprocess.apply`), the recorded preprocessing is compiled into the graph:
the IR then takes the camera frame itself, ``uint8 [1, H, W, C]`` NHWC in the camera's colour
format at one static frame size, and does colour conversion, resize (stretch, letterbox or
centre crop, in uint8 as Pillow does), ``scale``/``mean``/``std`` and the NHWC -> model layout
change on the device. The frame size is static: PrePostProcessor's resize needs the source
spatial dims, and the NPU compiles static shapes only.

The baked IR is checked against the host path on the same frames before it replaces the
plain one: the held-back samples, turned back into pixels, upscaled to the frame size with
camera-like detail added. Every output of every frame must agree within :data:`MIN_COSINE`
and :data:`MAX_REL` (the resize algorithms differ, so a little difference is expected).
``resize=auto`` takes OpenVINO's ``RESIZE_LINEAR`` (fast; no antialiasing) when the frame is
shrunk by at most 2x and it passes the check, and ``RESIZE_BILINEAR_PILLOW`` (Pillow's
antialiased bilinear, as calibration resized; slower on the CPU) otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from edge_sdk import preprocess as pp
from edge_sdk import typed
from edge_sdk._deps import require
from edge_sdk.errors import ConversionError, InputValidationError
from edge_sdk.manifest import TensorSpec
from edge_sdk.runtimes.baked import YUV, frame_shape, rgb_to_yuv

from .base import FormatResult

if TYPE_CHECKING:
    from .build import BuildContext
    from .recovery import Recovery
    from .summary import FormatOutcome

#: The format whose graph can hold the preprocessing.
FORMAT = "openvino-ir"
#: Frame colour formats a baked graph takes.
COLORS = ("bgr", "rgb", "gray", "nv12", "yuv420")
RESIZES = ("auto", "linear", "pillow")
#: Tolerance of the baked graph against the host path, per output and frame.
MIN_COSINE = 0.995
#: ... and the largest absolute difference over the largest absolute reference value.
MAX_REL = 0.05
#: ``resize=auto`` tries OpenVINO's RESIZE_LINEAR (no antialiasing) up to this downscale factor.
LINEAR_MAX_DOWNSCALE = 2.0
#: Frames the check runs (held-back samples, at most this many).
MAX_FRAMES = 16
#: Std of the per-pixel detail added to the upscaled frames (0..255): an upscaled small image is
#: smoother than a camera frame and would hide the aliasing of a resize without antialiasing.
FRAME_DETAIL = 16.0
_HINT = "Example: --bake-preprocess 480x640,bgr (HxW of the camera frames, their colour; resize=auto|linear|pillow)."


@dataclass(frozen=True)
class BakeRequest:
    """What ``--bake-preprocess`` asked for.

    Attributes:
        frame_size: ``(height, width)`` of the camera frames.
        color: Their colour format (``bgr``: OpenCV; ``rgb``; ``gray``; ``nv12``, ``yuv420``: one plane).
        resize: ``auto``, ``linear`` or ``pillow`` (see the module docstring).
    """

    frame_size: tuple[int, int]
    color: str = "bgr"
    resize: str = "auto"


def parse_bake(value: Any) -> BakeRequest | None:
    """``"480x640[,bgr][,resize=linear]"``, a dict of :class:`BakeRequest` fields, or one; None: no baking.

    Raises:
        InputValidationError: a malformed size, an unknown colour or resize.
    """
    if value is None or value is False or isinstance(value, BakeRequest):
        return value or None
    fields: dict[str, Any] = {}
    if isinstance(value, dict):
        fields = dict(value)
    else:
        parts = [p.strip() for p in str(value).split(",") if p.strip()]
        for part in parts:
            key, sep, val = part.partition("=")
            key = key.strip().lower() if sep else ("frame_size" if part[0].isdigit() else "color")
            fields[key] = (val if sep else part).strip()
    unknown = set(fields) - {"frame_size", "size", "color", "resize"}
    if unknown:
        raise InputValidationError(f"--bake-preprocess: unknown key(s) {', '.join(sorted(unknown))}.", _HINT)
    size: Any = fields.get("frame_size", fields.get("size"))
    try:
        dims = [int(d) for d in (size.lower().split("x") if isinstance(size, str) else size)]
    except (TypeError, ValueError, AttributeError):
        dims = []
    if len(dims) != 2 or not all(1 <= d <= pp.MAX_SIDE for d in dims):
        shown = "missing" if size is None else repr(size if isinstance(size, str) else list(size))
        raise InputValidationError(f"--bake-preprocess: frame size {shown} is not HxW (sides 1..{pp.MAX_SIDE}).", _HINT)
    color, resize = str(fields.get("color", "bgr")).lower(), str(fields.get("resize", "auto")).lower()
    if color not in COLORS:
        raise InputValidationError(f"--bake-preprocess: colour '{color}' is not one of {', '.join(COLORS)}.", _HINT)
    if resize not in RESIZES:
        raise InputValidationError(f"--bake-preprocess: resize '{resize}' is not one of {', '.join(RESIZES)}.", _HINT)
    if color in YUV and (dims[0] % 2 or dims[1] % 2):
        raise InputValidationError(f"--bake-preprocess: {color} frames have even sides, got {dims[0]}x{dims[1]}.", _HINT)
    return BakeRequest((dims[0], dims[1]), color, resize)


def check_profiles(request: BakeRequest | None, formats: list[list[str]]) -> None:
    """Refuse baking when no profile makes an OpenVINO IR (before any work).

    Raises:
        InputValidationError: none of the profiles' formats is ``openvino-ir``.
    """
    if request is not None and not any(FORMAT in fmts for fmts in formats):
        raise InputValidationError("--bake-preprocess applies to OpenVINO IR artifacts only; no profile given makes one.",
                                   "Add --profile intel-cpu or intel-npu, or drop --bake-preprocess.")


def bake_formats(ctx: "BuildContext", recs: "dict[str, Recovery]", stage: Path,
                 outcomes: "dict[str, FormatOutcome]") -> None:
    """Bake the preprocessing into the staged OpenVINO IR (after its gate); a failure fails that format only."""
    request = ctx.options.get("bake")
    if request is None or FORMAT not in recs:
        return
    from .summary import FormatOutcome

    rec = recs[FORMAT]
    try:
        rec.chosen.result = bake(stage, rec.chosen.result, ctx.prep.calib.preprocess, request,
                                 ctx.prep.calib.holdout, Path(ctx.scratch) / "bake", ctx.say, ctx.prep.kinds)
    except ConversionError as exc:
        reason = f"--bake-preprocess: {exc.message}" + (f" (hint: {exc.hint})" if exc.hint else "")
        ctx.say(f"{FORMAT}: conversion FAILED: {reason}")
        outcomes[FORMAT] = FormatOutcome(FORMAT, "conversion_failed", reason)
        for rel in rec.chosen.files():
            (stage / rel).unlink(missing_ok=True)
        del recs[FORMAT]


def bake(stage: Path, result: FormatResult, spec: pp.PreprocessSpec | None, request: BakeRequest,
         holdout: list[dict[str, np.ndarray]], scratch: Path, say: Callable[[str], None] = print,
         kinds: dict | None = None) -> FormatResult:
    """Replace the staged IR by one with the preprocessing in its graph, checked against the host path.

    Args:
        stage: The profile's staging folder holding the gated IR.
        result: What the OpenVINO converter returned for it.
        spec: The preprocessing calibration used (with its size).
        request: Frame size, colour and resize asked for.
        holdout: Held-back feeds (turned into the frames of the check).
        scratch: A private folder for the baked IR before it replaces the staged one.
        say: Progress lines.
        kinds: Output kinds by name, copied into this format's recorded outputs.

    Returns:
        ``result`` with the frame input recorded (``backend_options.io``, ``preprocess_baked``).

    Raises:
        ConversionError: no image preprocessing, a frame colour the model cannot take, or the
            baked graph disagrees with the host path beyond the tolerance.
    """
    ov = require("openvino", "baking preprocessing into an OpenVINO IR")
    if spec is None or spec.size is None:
        raise ConversionError("no image preprocessing was recorded.",
                              "Calibrate on an image folder, or pass --preprocess, so there is a recipe to bake.")
    if request.color == "gray" and spec.color != "GRAY":
        raise ConversionError(f"gray frames cannot feed a {spec.color} model.", "Use bgr or rgb frames.")
    if request.color in YUV and spec.color == "GRAY":
        raise ConversionError(f"{request.color} frames are not baked for a GRAY model.",
                              f"Use bgr or rgb frames, or the host path: infer_image(frame, color='{request.color}').")
    core, xml = ov.Core(), stage / result.model_file
    name = spec.input or core.read_model(str(xml)).inputs[0].get_any_name()
    frames = holdout_frames(holdout, name, spec, request)
    plain = core.compile_model(core.read_model(str(xml)), "CPU")
    reference = [_run(plain, {name: pp.apply(f, spec, color=request.color)}) for f in frames]
    tried: dict[str, dict[str, Any]] = {}
    for alg in _candidates(spec, request):
        try:
            model = with_ppp(core.read_model(str(xml)), name, spec, request, alg)
            compiled = core.compile_model(model, "CPU")
        except Exception as exc:  # noqa: BLE001 - OpenVINO raises C++ exceptions as RuntimeError subclasses
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.startswith("Check")), "")
            raise ConversionError(f"OpenVINO's PrePostProcessor refused the steps ({alg} resize): {first[:300]}",
                                  "Report this with the preprocessing spec; convert without --bake-preprocess meanwhile.") from None
        shape = frame_shape(request.color, request.frame_size)
        tried[alg] = compare(reference, [_run(compiled, {name: f.reshape(shape)}) for f in frames])
        say(f"{FORMAT}: baked preprocessing ({request.color} {request.frame_size[0]}x{request.frame_size[1]}, "
            f"resize {alg}) vs host path on {len(frames)} frames: min cosine {tried[alg]['min_cosine']:.5f}, "
            f"max rel {tried[alg]['max_rel']:.4f}" + ("" if tried[alg]["passed"] else " (outside tolerance)"))
        if tried[alg]["passed"]:
            break
    else:
        raise ConversionError(f"the baked graph disagrees with the host preprocessing ({_figures(tried)}; tolerance "
                              f"cosine >= {MIN_COSINE}, max rel <= {MAX_REL}).",
                              "Try resize=pillow, or a frame size closer to the model input.")
    _save(ov, model, stage, result, scratch)
    return _record(result, name, spec, request, alg, tried, len(frames), kinds)


def _candidates(spec: pp.PreprocessSpec, request: BakeRequest) -> tuple[str, ...]:
    """The resize algorithms to try, in order: ``auto`` tries ``linear`` only up to a 2x downscale.

    RESIZE_LINEAR samples 2x2 pixels with no antialiasing: beyond 2x it skips pixels, and on
    the digits CNN fed 480x640 frames (15x) the outputs moved by up to 24% of their range on
    frames the check had passed on (docs/profiles.md); Pillow's bilinear averages them, as
    calibration did.
    """
    if request.resize != "auto":
        return (request.resize,)
    nh, nw, _, _ = pp.resize_geometry(spec, request.frame_size)
    factor = max(request.frame_size[0] / nh, request.frame_size[1] / nw)
    return ("linear", "pillow") if factor <= LINEAR_MAX_DOWNSCALE else ("pillow",)


def with_ppp(model, name: str, spec: pp.PreprocessSpec, request: BakeRequest, alg: str):
    """``model`` with PrePostProcessor steps: u8 NHWC frame -> colour -> resize -> float -> scale/mean/std -> layout."""
    import openvino as ov
    from openvino.preprocess import ColorFormat, PaddingMode, PrePostProcessor, ResizeAlgorithm

    colors = {"bgr": ColorFormat.BGR, "rgb": ColorFormat.RGB, "gray": ColorFormat.GRAY,
              "nv12": ColorFormat.NV12_SINGLE_PLANE, "yuv420": ColorFormat.I420_SINGLE_PLANE}
    h, w = request.frame_size
    ppp = PrePostProcessor(model)
    inp = ppp.input(name)
    inp.tensor().set_element_type(ov.Type.u8).set_layout(ov.Layout("NHWC")).set_color_format(
        colors[request.color]).set_spatial_static_shape(h, w)  # YUV: OpenVINO makes it [1, h*3/2, w, 1]
    inp.model().set_layout(ov.Layout(spec.layout))
    steps = inp.preprocess()
    if spec.color.lower() != request.color:
        steps.convert_color(colors[spec.color.lower()])
    algorithm = ResizeAlgorithm.RESIZE_LINEAR if alg == "linear" else ResizeAlgorithm.RESIZE_BILINEAR_PILLOW
    nh, nw, top, left = pp.resize_geometry(spec, (h, w))
    mh, mw = spec.size or (0, 0)
    if (nh, nw) != (h, w):
        steps.resize(algorithm, nh, nw)
    steps.convert_element_type(ov.Type.f32)  # after the resize: Pillow resizes uint8 too; pad needs float
    if spec.resize == "letterbox" and (top or left or (nh, nw) != (mh, mw)):
        steps.pad([0, top, left, 0], [0, mh - nh - top, mw - nw - left, 0], float(spec.pad_value), PaddingMode.CONSTANT)
    elif spec.resize == "center-crop" and (nh, nw) != (mh, mw):
        steps.crop([0, -top, -left, 0], [1, mh - top, mw - left, spec.channels])
    if spec.dtype == "uint8":
        steps.convert_element_type(ov.Type.u8)
    else:
        steps.scale(float(1.0 / spec.scale))
        if any(m != 0 for m in spec.mean):
            steps.mean([float(m) for m in spec.mean])
        if any(s != 1 for s in spec.std):
            steps.scale([float(s) for s in spec.std])
    return ppp.build()


def holdout_frames(holdout: list[dict[str, np.ndarray]], name: str, spec: pp.PreprocessSpec,
                   request: BakeRequest) -> list[np.ndarray]:
    """Camera-like frames from the held-back samples: back to pixels, upscaled to the frame size, detail added."""
    from PIL import Image

    rng = np.random.default_rng(0)
    h, w = request.frame_size
    mean, std = np.asarray(spec.mean, np.float64), np.asarray(spec.std, np.float64)
    frames = []
    for feed in holdout[:MAX_FRAMES]:
        x = np.asarray(feed[name], np.float64)[0]
        hwc = x.transpose(1, 2, 0) if spec.layout == "NCHW" else x
        if spec.dtype == "float32":
            hwc = (hwc * std + mean) / spec.scale
        px = np.clip(np.rint(hwc), 0, 255).astype(np.uint8)
        if spec.color == "BGR":
            px = px[..., ::-1]
        img = Image.fromarray(np.ascontiguousarray(px[..., 0] if px.shape[-1] == 1 else px))
        big = np.asarray(img.resize((w, h), Image.Resampling.BILINEAR), np.float64)
        big = np.clip(big + rng.normal(0.0, FRAME_DETAIL, big.shape), 0, 255).astype(np.uint8)
        img = Image.fromarray(big)
        if request.color == "gray":
            frames.append(np.asarray(img.convert("L")))
        elif request.color in YUV:
            frames.append(rgb_to_yuv(np.asarray(img.convert("RGB")), request.color))
        else:
            rgb = np.asarray(img.convert("RGB"))
            frames.append(np.ascontiguousarray(rgb[..., ::-1] if request.color == "bgr" else rgb))
    if request.color == "gray":
        frames = [f[..., None] for f in frames]
    return frames


def compare(reference: list[list[np.ndarray]], got: list[list[np.ndarray]]) -> dict[str, Any]:
    """Worst cosine, absolute and relative difference over every output of every frame, and the verdict."""
    cos, diff, rel = 1.0, 0.0, 0.0
    for ref_outs, got_outs in zip(reference, got):
        for a, b in zip(ref_outs, got_outs):
            a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
            na, nb = np.linalg.norm(a), np.linalg.norm(b)
            c = float(a @ b / (na * nb)) if na and nb else float(np.array_equal(a, b))
            d = float(np.abs(a - b).max()) if a.size else 0.0
            cos, diff = min(cos, c), max(diff, d)
            rel = max(rel, d / max(float(np.abs(a).max()) if a.size else 0.0, 1e-12))
    return {"min_cosine": round(cos, 6), "max_abs": round(diff, 6), "max_rel": round(rel, 6),
            "passed": cos >= MIN_COSINE and rel <= MAX_REL}


def _run(compiled, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    return [np.array(v) for v in compiled(feed).to_tuple()]


def _figures(tried: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{alg}: min cosine {c['min_cosine']:.4f}, max rel {c['max_rel']:.4f}" for alg, c in tried.items())


def _save(ov, model, stage: Path, result: FormatResult, scratch: Path) -> None:
    """Write the baked IR beside, then move it over the staged one (xml and its weights)."""
    scratch.mkdir(parents=True, exist_ok=True)
    xml = scratch / Path(result.model_file).name
    ov.save_model(model, str(xml), compress_to_fp16=False)
    os.replace(xml, stage / result.model_file)
    for rel, role in result.extra_files:
        if role == "weights":
            os.replace(xml.with_suffix(".bin"), stage / rel)


def _record(result: FormatResult, name: str, spec: pp.PreprocessSpec, request: BakeRequest, alg: str,
            tried: dict[str, dict[str, Any]], n: int, kinds: dict | None) -> FormatResult:
    """The result with the frame input as this format's I/O and the manifest's ``preprocessing.baked``."""
    h, w = request.frame_size
    frame = TensorSpec(name, frame_shape(request.color, (h, w)), "uint8", None, "NHWC")
    inputs = [frame if t.name == name else t for t in result.inputs]
    outputs = [replace(t, kind=(kinds or {}).get(t.name, t.kind)) for t in result.outputs]
    io = {FORMAT: {"inputs": [typed.to_dict(t) for t in inputs], "outputs": [typed.to_dict(t) for t in outputs]}}
    check = {"frames": n, "tolerance": {"min_cosine": MIN_COSINE, "max_rel": MAX_REL}, "tried": tried}
    baked = {"format": FORMAT, "input": name, "color": request.color, "frame_size": [h, w], "resize": alg,
             "layout": "NHWC", "element_type": "uint8", "check": check}
    options = dict(result.backend_options, io=io)
    route = f"{result.route} -> PrePostProcessor ({request.color} u8 {h}x{w} -> {spec.resize} {alg} -> {spec.layout})"
    return replace(result, backend_options=options, preprocess_baked=baked, route=route)


__all__ = ["BakeRequest", "bake", "bake_formats", "check_profiles", "compare", "holdout_frames", "parse_bake",
           "with_ppp"]
