"""The value checks of :mod:`edge_sdk.manifest`: paths, tensor specs, identifiers, preprocessing.

Pure functions over parsed values, each raising :class:`~edge_sdk.errors.ManifestError` naming
the manifest and the key. Kept apart from the schema so both stay small.
"""

from __future__ import annotations

import math
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .errors import ManifestError

if TYPE_CHECKING:  # pragma: no cover
    from .manifest import Manifest, TensorSpec

#: Longest artifact-relative path, and longest path component, accepted in a manifest.
MAX_REL_PATH = 1024
MAX_PATH_PART = 255
#: Largest static dimension accepted in a tensor spec.
MAX_DIM = 2**31 - 1
#: Integer quantization dtypes and their value ranges (a zero point must lie inside).
INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-(2**31), 2**31 - 1),
              "int64": (-(2**63), 2**63 - 1)}
TAMPERED = "The artifact is corrupt or was edited: copy it again from the source, or convert again."


def safe_relpath(folder: Path, rel: str, where: str) -> Path:
    """Resolve ``rel`` inside ``folder`` or raise: no absolute paths, no ``..``, no symlinks."""
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or "\\" in rel or ".." in pure.parts or rel.startswith("~"):
        raise ManifestError(
            f"{where}: path '{rel[:200]}' leaves the artifact folder.",
            "Artifact paths must be relative to the folder, without '..'. The artifact may have been tampered with.",
        )
    if len(rel) > MAX_REL_PATH or any(len(p) > MAX_PATH_PART for p in pure.parts) or any(ord(c) < 32 for c in rel):
        raise ManifestError(f"{where}: path '{rel[:80]}...' is not a plain file name "
                            f"(control characters, or longer than {MAX_REL_PATH} characters).", TAMPERED)
    full = folder / pure
    probe = folder
    for part in pure.parts:
        probe = probe / part
        if probe.is_symlink():
            raise ManifestError(
                f"{where}: '{rel}' is a symbolic link; artifacts must contain real files.",
                "Copy the files into the artifact folder instead of linking them.",
            )
    try:
        full.resolve().relative_to(folder.resolve())
    except ValueError:
        raise ManifestError(f"{where}: path '{rel}' resolves outside the artifact folder.") from None
    return full


def check_tensors(inputs: list[TensorSpec], outputs: list[TensorSpec], where: str) -> None:
    """Static shapes, unique names, finite positive quantization scales, zero points in range."""
    if not inputs or not outputs:
        raise ManifestError(f"{where}: a manifest must list at least one input and one output.")
    for kind, specs in (("inputs", inputs), ("outputs", outputs)):
        names = [t.name for t in specs]
        if len(set(names)) != len(names):
            raise ManifestError(f"{where}: duplicate tensor names in '{kind}'.")
        for t in specs:
            label = f"{where}: {kind[:-1]} '{t.name[:80]}'"
            if not t.name:
                raise ManifestError(f"{where}: a tensor in '{kind}' has an empty name.", TAMPERED)
            if any((not isinstance(d, int)) or d < 1 for d in t.shape):
                raise ManifestError(
                    f"{label} has a non-static shape {t.shape[:8]}.",
                    "Artifacts must have fully static shapes; convert again with --input-shape.",
                )
            if len(t.shape) > 16 or any(d > MAX_DIM for d in t.shape):
                raise ManifestError(f"{label} has an impossible shape {t.shape[:17]}.", TAMPERED)
            q = t.quantization
            if q is None:
                continue
            if not (math.isfinite(q.scale) and q.scale > 0):
                raise ManifestError(f"{label}: quantization scale {q.scale} must be a finite number above 0.", TAMPERED)
            lo, hi = INT_RANGES.get(q.dtype, (None, None))
            if lo is None:
                raise ManifestError(f"{label}: quantization dtype '{q.dtype}' is not an integer type.", TAMPERED)
            if not lo <= q.zero_point <= hi:
                raise ManifestError(f"{label}: zero point {q.zero_point} is outside {q.dtype} [{lo}, {hi}].", TAMPERED)


def check_identifiers(manifest: Manifest, where: str) -> None:
    """The profile name is an identifier, never a path (it names folders)."""
    from .profile_checks import check_name

    check_name(manifest.profile.name, f"{where}: key 'profile.name'", ManifestError)


def check_preprocessing(manifest: Manifest, where: str, verify: bool) -> None:
    """The recorded preprocessing parses, has sane values, and matches its sha256."""
    from .manifest import preprocessing_hash

    pre = manifest.preprocessing
    if pre.spec is not None:
        from . import preprocess as pp
        from .errors import InputValidationError

        try:
            spec = pp.from_dict(pre.spec, where=f"{where}: preprocessing.spec")
        except InputValidationError as exc:
            raise ManifestError(exc.message, TAMPERED) from None
        from .manifest import format_io

        for fmt in manifest.formats:  # what infer_image would refuse on each format, refused here
            if pre.baked is not None and pre.baked.format == fmt:
                continue  # that format takes the frame itself (check_baked)
            try:
                pp.for_inputs(spec, format_io(manifest, fmt)[0])
            except InputValidationError as exc:
                raise ManifestError(f"{where}: preprocessing.spec does not fit the {fmt} model input: {exc.message}",
                                    TAMPERED) from None
    if verify and pre.sha256 != preprocessing_hash(pre.spec):
        raise ManifestError(f"{where}: the preprocessing spec does not match its sha256 in the manifest "
                            "(edited or corrupt).",
                            "Copy the artifact folder again from the source; do not edit manifest.json.")
    if pre.baked is not None:
        check_baked(manifest, where)


def check_baked(manifest: Manifest, where: str) -> None:
    """``preprocessing.baked`` names a format of this manifest whose input takes frames of its size.

    Raises:
        ManifestError: no spec beside it, an unknown format, a bad frame size, or an input that
            is not the uint8 frame it describes (``[1, H, W, C]``; YUV: ``[1, H*3/2, W, 1]``).
    """
    from .manifest import format_io

    baked, at = manifest.preprocessing.baked, f"{where}: preprocessing.baked"
    if baked is None:
        return
    if manifest.preprocessing.spec is None:
        raise ManifestError(f"{at}: baked preprocessing without a preprocessing spec.", TAMPERED)
    if baked.format not in manifest.formats:
        raise ManifestError(f"{at}: format '{baked.format[:40]}' is not a format of this artifact.", TAMPERED)
    size = baked.frame_size
    if len(size) != 2 or any(not isinstance(d, int) or not 1 <= d <= 16384 for d in size):
        raise ManifestError(f"{at}: frame_size must be [height, width] of 1..16384, got {size[:4]}.", TAMPERED)
    from .runtimes.baked import YUV, frame_shape

    want = frame_shape(baked.color, size)
    if baked.color in YUV and (size[0] % 2 or size[1] % 2):
        raise ManifestError(f"{at}: {baked.color} frames need an even frame_size, got {size}.", TAMPERED)
    spec = next((t for t in format_io(manifest, baked.format)[0] if t.name == baked.input), None)
    if spec is None or list(spec.shape) != want or spec.dtype != "uint8":
        raise ManifestError(f"{at}: input '{baked.input[:80]}' of {baked.format} is not a uint8 {want} frame.", TAMPERED)
