"""Calibration data: load it, check it against the static inputs, split off the gate's hold-out.

Accepted forms (see :func:`load_calibration`):

* a folder of images, decoded and preprocessed by :func:`edge_sdk.preprocess.apply`, the same
  function the runtime uses, so the device sees exactly what calibration saw;
* a ``.npy`` file (one input) or a ``.npz`` file (one array per input name), each ``[N, ...]``;
* a folder of ``<input name>.npy`` files;
* ``"random"``: uniform noise, for a smoke test only; the artifact is marked uncalibrated.

Arrays are read with ``allow_pickle=False``: a calibration file can never run code.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge_sdk import preprocess as pp
from edge_sdk.errors import CalibrationError, EdgeSDKError
from edge_sdk.manifest import TensorSpec

from .base import Feed

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm"}
#: Samples generated for ``--calib random`` when no count is given.
RANDOM_DEFAULT_COUNT = 16
SPLIT_SEED = 0


@dataclass
class CalibrationSet:
    """Loaded calibration data, split into calibration and hold-out samples.

    Attributes:
        calib: Feeds used for calibration.
        holdout: Feeds held back for the accuracy gate.
        kind: ``images``, ``npy``, ``npz``, ``npy-folder`` or ``random``.
        calibrated: False for ``random``.
        preprocess: The spec images were turned into inputs with (images only).
        info: What goes into the manifest's ``calibration`` section.
        warnings: Things the user should know.
    """

    calib: list[Feed]
    holdout: list[Feed]
    kind: str
    calibrated: bool
    preprocess: pp.PreprocessSpec | None = None
    info: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def default_preprocess(shape: list[int]) -> pp.PreprocessSpec:
    """A spec for an image input of ``shape``: layout from where the channels are, 0..1 scaling."""
    if len(shape) == 4 and shape[1] in (1, 3) and shape[3] not in (1, 3):
        layout = "NCHW"
    elif len(shape) == 4 and shape[3] in (1, 3):
        layout = "NHWC"
    else:
        raise CalibrationError(f"Cannot calibrate input of shape {shape} from images: it is not an image (N,C,H,W / N,H,W,C).",
                               "Pass .npy/.npz arrays instead of an image folder.")
    channels = shape[1] if layout == "NCHW" else shape[3]
    return pp.PreprocessSpec(layout=layout, color="GRAY" if channels == 1 else "RGB")


def _image_samples(folder: Path, inputs: list[TensorSpec], shapes: dict[str, list[int]],
                   spec: pp.PreprocessSpec | None) -> tuple[list[np.ndarray], pp.PreprocessSpec, str]:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise CalibrationError(f"Calibration folder {folder} holds no images ({', '.join(sorted(IMAGE_SUFFIXES))}) "
                               "and no .npy files.", "Put representative images (or <input>.npy arrays) in it.")
    if spec is not None and spec.input:
        name = spec.input
    elif len(inputs) == 1:
        name = inputs[0].name
    else:
        raise CalibrationError(
            f"An image folder can feed one input, but the model has {len(inputs)}: {[s.name for s in inputs]}.",
            "Pass a .npz with one array per input name, or a folder of <input>.npy files.")
    if name not in shapes:
        raise CalibrationError(f"Preprocessing names input '{name}', which the model does not have.",
                               f"Inputs: {', '.join(shapes)}")
    try:
        spec = (spec or default_preprocess(shapes[name])).with_size_from_shape(shapes[name])
        spec = pp.PreprocessSpec(**{**spec.to_dict(), "input": name})
        arrays = [pp.apply(f, spec) for f in files]
    except CalibrationError:
        raise
    except EdgeSDKError as exc:
        raise CalibrationError(f"Calibration images in {folder}: {exc.message}", exc.hint) from None
    return arrays, spec, name


def _load_array_file(path: Path) -> dict[str, np.ndarray] | np.ndarray:
    try:
        if path.suffix.lower() == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        return np.load(path, allow_pickle=False)
    except ValueError as exc:
        raise CalibrationError(f"Cannot read {path}: {exc}", "Save plain numeric arrays (no object arrays).") from None
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise CalibrationError(f"Cannot read {path}: corrupt or not a NumPy file ({exc}).",
                               "Write it again with numpy.save / numpy.savez.") from None


def short_name(name: str) -> str:
    """The name a user knows a TF-exported tensor by: ``serving_default_image:0`` -> ``image``."""
    import re

    return re.sub(r"^serving_default_", "", re.sub(r":\d+$", "", name))


def _apply_short_names(arrays: dict[str, np.ndarray], names: list[str]) -> None:
    """Rename (in place) arrays given under an input's short name to the input's tensor name."""
    shorts = {}
    for n in names:
        shorts.setdefault(short_name(n), []).append(n)
    for key in [k for k in arrays if k not in names]:
        match = shorts.get(key, [])
        if len(match) == 1 and match[0] not in arrays:
            arrays[match[0]] = arrays.pop(key)


def _check_arrays(arrays: dict[str, np.ndarray], inputs: list[TensorSpec], shapes: dict[str, list[int]],
                  where: str) -> int:
    names = [s.name for s in inputs]
    _apply_short_names(arrays, names)
    missing, extra = sorted(set(names) - set(arrays)), sorted(set(arrays) - set(names))
    if missing or extra:
        raise CalibrationError(f"{where}: arrays {sorted(arrays)} do not match the model inputs {names}"
                               + (f" (missing {missing})" if missing else "") + (f" (unexpected {extra})" if extra else "") + ".",
                               "Name one array per model input, e.g. numpy.savez('calib.npz', **{'input': x}).")
    count = None
    for spec in inputs:
        arr, want = arrays[spec.name], shapes[spec.name]
        if arr.dtype != np.dtype(spec.dtype):
            raise CalibrationError(f"{where}: array '{spec.name}' has dtype {arr.dtype}, the input wants {spec.dtype}.",
                                   f"Cast it first, e.g. x.astype(numpy.{spec.dtype}).")
        if list(arr.shape[1:]) != list(want[1:]) or arr.ndim != len(want):
            raise CalibrationError(f"{where}: array '{spec.name}' has shape {list(arr.shape)}; expected [N, {', '.join(map(str, want[1:]))}] "
                                   f"(the input's static shape is {want}).", "Stack samples along the first axis.")
        if count is not None and arr.shape[0] != count:
            raise CalibrationError(f"{where}: arrays have different sample counts ({count} vs {arr.shape[0]} for '{spec.name}').")
        count = arr.shape[0]
        check_finite(arr, spec.name, where)
    return int(count or 0)


def check_finite(arr: np.ndarray, name: str, where: str) -> None:
    """Refuse NaN/Inf in calibration or validation data, before any quantizer sees it.

    One +Inf makes the MLIR quantizer of the TFLite route segfault, and NaN turns every range
    into NaN; the error names the file, the array, the first bad index and how many there are.

    Raises:
        CalibrationError: the array holds a non-finite value.
    """
    if arr.dtype.kind not in "fc":
        return
    finite = np.isfinite(arr)
    if finite.all():
        return
    bad = np.argwhere(~finite)
    first = tuple(int(i) for i in bad[0])
    raise CalibrationError(
        f"{where}: array '{name}' holds {len(bad)} non-finite value(s) ({arr[first]} at index {list(first)}, "
        f"sample {first[0]}).", "Fix or drop those samples: int8 calibration needs finite data.")


def _batches(arrays: dict[str, np.ndarray], count: int, batch: int) -> list[Feed]:
    return [{k: np.ascontiguousarray(v[i:i + batch]) for k, v in arrays.items()} for i in range(0, count - batch + 1, batch)]


def _read(calib, inputs, shapes, preprocess, count, batch):
    """Read calibration data of any accepted form into ``{input: [N, ...]}`` arrays."""
    warnings: list[str] = []
    spec_used = None
    if isinstance(calib, str) and calib == "random":
        n = count or RANDOM_DEFAULT_COUNT
        rng = np.random.default_rng(SPLIT_SEED)
        arrays = {s.name: (rng.uniform(0, 1, [n * batch, *shapes[s.name][1:]]).astype(s.dtype)
                           if np.dtype(s.dtype).kind == "f" else np.zeros([n * batch, *shapes[s.name][1:]], s.dtype))
                  for s in inputs}
        kind, total = "random", n * batch
        warnings.append("calibrated on random data (--calib random): the int8 ranges and the accuracy numbers are not meaningful")
    else:
        path = Path(calib)
        if not path.exists():
            raise CalibrationError(f"Calibration data not found: {path}",
                                   "Pass a folder of images, a .npy/.npz file, or --calib random for a smoke test.")
        if path.is_dir() and not any(path.glob("*.npy")):
            images, spec_used, name = _image_samples(path, inputs, shapes, preprocess)
            if len(inputs) != 1:
                raise CalibrationError("Image calibration feeds one input; the model has several.")
            arrays, kind = {name: np.concatenate(images)}, "images"
        elif path.is_dir():
            arrays = {p.stem: _load_array_file(p) for p in sorted(path.glob("*.npy"))}
            for stem, arr in arrays.items():  # name the very file a bad value is in
                if isinstance(arr, np.ndarray):
                    check_finite(arr, stem, str(path / f"{stem}.npy"))
            kind = "npy-folder"
        elif path.suffix.lower() == ".npz":
            arrays, kind = _load_array_file(path), "npz"
        elif path.suffix.lower() == ".npy":
            if len(inputs) != 1:
                raise CalibrationError(f"A single .npy file can feed one input; the model has {[s.name for s in inputs]}.",
                                       "Use a .npz with one array per input name.")
            arrays, kind = {inputs[0].name: _load_array_file(path)}, "npy"
        else:
            raise CalibrationError(f"Unsupported calibration data {path}.", "Pass a folder of images, a .npy or a .npz file.")
        total = _check_arrays(arrays, inputs, shapes, str(path))
    return arrays, kind, total, spec_used, warnings


def load_calibration(calib, inputs: list[TensorSpec], shapes: dict[str, list[int]], *, holdout_fraction: float,
                     count: int | None = None, preprocess: pp.PreprocessSpec | None = None,
                     min_samples: int = 100, validation=None) -> CalibrationSet:
    """Load calibration data and split it into calibration and hold-out feeds.

    Args:
        calib: Path (image folder, ``.npy``, ``.npz``, folder of ``<input>.npy``) or ``"random"``.
        inputs: The model's inputs (names, dtypes).
        shapes: Static shape per input (dim 0 is the batch of one feed).
        holdout_fraction: Part of the samples held back for the accuracy gate.
        count: Cap on the number of samples used (``--calib-count``).
        preprocess: Preprocessing for images (default: from the input shape, scale 1/255).
        min_samples: Below this many calibration samples a warning says int8 may suffer.
        validation: Separate data for the accuracy gate (same forms as ``calib``, not ``random``).
            When given, nothing is held back from ``calib``: all of it calibrates.

    Returns:
        The split :class:`CalibrationSet`.

    Raises:
        CalibrationError: missing, empty, corrupt, or mismatched data.
    """
    if count is not None and count < 2:
        raise CalibrationError(f"--calib-count {count} is too small: at least 2 samples are needed "
                               "(one to calibrate, one for the accuracy gate).")
    batch = max(s[0] if s else 1 for s in shapes.values())
    arrays, kind, total, spec_used, warnings = _read(calib, inputs, shapes, preprocess, count, batch)
    if spec_used is None and preprocess is not None:
        # Arrays were preprocessed by the user: record the spec they name so the runtime repeats it.
        spec_used = preprocess
    used = total // batch * batch
    if count is not None and count * batch < used:
        warnings.append(f"using {count * batch} of {total} calibration samples (--calib-count {count})")
        used = count * batch
    elif used != total:
        warnings.append(f"{total - used} sample(s) dropped: {total} is not a multiple of the batch size {batch}")
    feeds = _batches({k: v[:used] for k, v in arrays.items()}, used, batch)
    if len(feeds) < 2:
        raise CalibrationError(f"Calibration data has {len(feeds)} usable sample(s); at least 2 are needed "
                               "(one to calibrate, one for the accuracy gate).", "Provide more samples (100+ is advised for int8).")
    if validation is not None:
        if isinstance(validation, str) and validation == "random":
            raise CalibrationError("Validation data cannot be 'random': the accuracy gate needs real samples.")
        v_arrays, v_kind, v_total, _, _ = _read(validation, inputs, shapes, spec_used or preprocess, None, batch)
        hold_feeds = _batches(v_arrays, v_total // batch * batch, batch)
        if not hold_feeds:
            raise CalibrationError(f"Validation data {validation} has no usable sample.")
        calib_feeds, n_hold = feeds, 0
    else:
        n_hold = min(len(feeds) - 1, max(1, round(len(feeds) * holdout_fraction)))
        order = np.random.default_rng(SPLIT_SEED).permutation(len(feeds))
        hold_idx = set(order[:n_hold].tolist())
        calib_feeds = [f for i, f in enumerate(feeds) if i not in hold_idx]
        hold_feeds = [f for i, f in enumerate(feeds) if i in hold_idx]
    if kind != "random" and all(float(np.ptp(a)) == 0.0 for a in arrays.values()):
        warnings.append("every calibration sample is the same constant value: the int8 ranges will not fit real inputs")
    if kind != "random" and len(calib_feeds) < min_samples:
        held = f" (after holding back {n_hold} for the accuracy gate)" if n_hold else ""
        warnings.append(f"only {len(calib_feeds)} calibration sample(s){held}; "
                        f"{min_samples}+ representative samples are advised for int8")
    info = {
        "source": "random" if kind == "random" else str(Path(calib)),
        "kind": kind,
        "calibrated": kind != "random",
        "samples_available": int(total),
        "samples_used": int(used),
        "calibration_samples": len(calib_feeds) * batch,
        "holdout_samples": len(hold_feeds) * batch,
        "holdout_fraction": holdout_fraction if validation is None else None,
        "holdout_source": "calibration split" if validation is None else str(validation),
        "split_seed": SPLIT_SEED,
        "calib_count": count,
    }
    return CalibrationSet(calib_feeds, hold_feeds, kind, kind != "random", spec_used, info, warnings)
