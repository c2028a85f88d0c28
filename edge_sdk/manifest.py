"""``manifest.json``: the contract between the workstation that converts and the device that runs.

Reading a manifest validates it completely: the file itself (a regular file of bounded size,
parsed as strict JSON: no duplicate keys, no NaN/Infinity, no giant numbers, bounded nesting),
the schema, tensor specs (static shapes, finite positive quantization scales, zero points in
range), the preprocessing spec against its sha256, every path staying inside the artifact folder
(no ``..``, no absolute paths, no symlinks, no FIFOs) and the sha256 of every listed file, before
anything reaches native code. ``verify=False`` skips only the hash checks and is meant for
development. :func:`edge_sdk.trust.check_artifact` adds the checks that need the profile and the
caller's policy (signature, embedded profile, external delegates); ``load`` and ``verify`` both
call it.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from . import strictjson, typed
from ._version import __version__
from .errors import InputValidationError, ManifestError
from .fsutil import atomic_write_bytes, sha256_bytes, sha256_file, unpublished_reason
from .manifest_checks import TAMPERED as _TAMPERED
from .manifest_checks import check_identifiers, check_preprocessing, check_tensors, safe_relpath
from .outputs import OutputKind

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"

DType = Literal["float32", "float16", "int8", "uint8", "int16", "int32", "int64", "bool"]


@dataclass
class Quantization:
    """Affine quantization of a tensor: ``real = scale * (q - zero_point)``."""

    scale: float
    zero_point: int
    dtype: DType = "int8"


@dataclass
class TensorSpec:
    """One model input or output. Shapes are fully static in a valid artifact."""

    name: str
    shape: list[int]
    dtype: DType
    quantization: Quantization | None = None
    layout: str = ""
    #: What an output means (see :mod:`edge_sdk.outputs`); None for inputs and old manifests.
    kind: OutputKind | None = None


@dataclass
class ArtifactFile:
    """A file of the artifact, relative to the artifact folder."""

    path: str
    sha256: str
    format: str
    precision: str
    size_bytes: int
    role: Literal["model", "weights", "engine", "log", "data"] = "model"


@dataclass
class SourceInfo:
    path: str
    format: str
    sha256: str


@dataclass
class ProfileRef:
    name: str
    sha256: str
    spec: dict[str, Any] = field(default_factory=dict)


@dataclass
class BakedPreprocessing:
    """Preprocessing compiled into one format's graph (``convert --bake-preprocess``).

    That format's model takes the camera frame itself: ``element_type`` ``[1, H, W, C]``
    (``layout`` NHWC) in ``color``, of exactly ``frame_size`` ``[H, W]``; the graph does the colour
    conversion, resize, scale/mean/std and layout change of ``Preprocessing.spec``.

    Attributes:
        format: The artifact format whose graph holds it (``openvino-ir``).
        input: The graph input that takes the frame.
        color: The frame's colour format: ``bgr``, ``rgb``, ``gray``, ``nv12`` or ``yuv420`` (one
            ``(H*3/2) x W`` plane, the input then ``[1, H*3/2, W, 1]``).
        layout: The frame's layout (``NHWC``).
        element_type: The frame's dtype (``uint8``).
        frame_size: ``[height, width]`` of the frames the graph takes.
        resize: The graph's resize: ``linear`` (OpenVINO RESIZE_LINEAR) or ``pillow``
            (RESIZE_BILINEAR_PILLOW, Pillow's antialiased bilinear, as calibration resized).
        check: Measured at conversion against the host-preprocessed path on the same frames:
            ``frames``, ``min_cosine``, ``max_abs``, ``max_rel`` and the tolerance applied.
    """

    format: str
    input: str
    color: Literal["bgr", "rgb", "gray", "nv12", "yuv420"]
    frame_size: list[int]
    resize: Literal["linear", "pillow"]
    layout: Literal["NHWC"] = "NHWC"
    element_type: Literal["uint8"] = "uint8"
    check: dict[str, Any] = field(default_factory=dict)


@dataclass
class Preprocessing:
    """The preprocessing applied to calibration data, which the runtime must repeat.

    ``baked`` (None for most artifacts and for manifests written before it existed) says one
    format runs that preprocessing inside its graph.
    """

    spec: dict[str, Any] | None = None
    sha256: str = ""
    baked: BakedPreprocessing | None = None


@dataclass
class PostprocessSpec:
    """How :meth:`Model.infer_image` decodes the outputs (``convert --head/--labels``); empty: raw outputs.

    Attributes:
        head: ``yolov8``, ``yolov5``, ``yolox``, ``ssd-anchors``, ``boxes-scores``, ``classifier``,
            ``segmentation`` or ``""`` (none).
        output: The output to decode (``""``: the first; ``ssd-anchors``: the box regressions;
            ``boxes-scores``: the boxes).
        labels: Class names, index order.
        anchors: The complete anchor spec of an ``ssd-anchors`` head (keys of
            :func:`edge_sdk.anchors.parse_spec`, input size and output names filled in); else empty.
        options: What a detection head needs beyond its name: thresholds where the model said
            them (``conf``, ``iou``, ``max_det``, ``agnostic``: those of a
            ``TFLite_Detection_PostProcess`` the conversion replaced), a ``yolox`` head's
            ``strides`` and input ``size``; empty: the head's defaults.
    """

    head: str = ""
    output: str = ""
    labels: list[str] = field(default_factory=list)
    anchors: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class StreamSpec:
    """Recurrent state: ``output`` at step t is fed back as ``input`` at step t + 1 (``--stream OUT:IN``)."""

    output: str
    input: str


@dataclass
class Manifest:
    """The validated content of ``manifest.json`` (schema version 1)."""

    profile: ProfileRef
    source: SourceInfo
    artifacts: list[ArtifactFile]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    schema_version: int = SCHEMA_VERSION
    sdk_version: str = __version__
    created_at: str = ""
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    tools: dict[str, str] = field(default_factory=dict)
    accuracy: dict[str, Any] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)
    static_shapes: dict[str, Any] = field(default_factory=dict)
    backend_options: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: State carried from step to step (``Model.stream()``); empty for a stateless model.
    streams: list[StreamSpec] = field(default_factory=list)
    #: Decoding recorded at conversion (``--head``/``--labels``), used by ``load`` unless overridden.
    postprocess: PostprocessSpec = field(default_factory=PostprocessSpec)

    def to_dict(self) -> dict:
        return typed.to_dict(self)

    def artifact(self, fmt: str | None = None, role: str = "model") -> ArtifactFile:
        """The first artifact file of ``role`` (and ``fmt``, if given).

        Raises:
            ManifestError: none matches.
        """
        for art in self.artifacts:
            if art.role == role and (fmt is None or art.format == fmt):
                return art
        raise ManifestError(
            f"The manifest lists no {role} file" + (f" of format '{fmt}'" if fmt else "") + ".",
            f"Formats present: {', '.join(sorted({a.format for a in self.artifacts})) or 'none'}",
        )

    @property
    def formats(self) -> list[str]:
        return sorted({a.format for a in self.artifacts if a.role == "model"})


#: Largest ``manifest.json`` read (a real one, embedded profile and accuracy report included, is a few KB).
MAX_MANIFEST_BYTES = 4 * 1024 * 1024


def artifact_path(path: str | Path) -> Path:
    """An artifact path argument, refused when the OS could not even look it up.

    Raises:
        ManifestError: longer than PATH_MAX, or a component longer than NAME_MAX (the OS would
            raise ``ENAMETOOLONG`` from any ``stat``).
    """
    text = os.fspath(path)
    if len(text) > strictjson.MAX_PATH_CHARS or any(len(p.encode()) > 255 for p in Path(text).parts):
        raise ManifestError(f"Artifact path is too long ({len(text)} characters, or a name over 255 bytes): "
                            f"{text[:60]}...", "Pass a shorter path.")
    return Path(path)


def manifest_location(folder: str | Path) -> tuple[Path, Path]:
    """(artifact folder, its manifest.json) for a folder or a manifest path.

    Raises:
        ManifestError: the path is too long, or no folder is there.
    """
    folder = artifact_path(folder)
    try:
        if folder.name == MANIFEST_NAME and not folder.is_dir():
            folder = folder.parent
        if not folder.is_dir():
            raise ManifestError(f"Artifact folder not found: {folder}", "Pass the folder that `edge-sdk convert` wrote.")
        path = folder / MANIFEST_NAME
        if not os.path.lexists(path):
            raise ManifestError(f"No {MANIFEST_NAME} in {folder}.",
                                "Pass an artifact folder written by `edge-sdk convert` (it holds manifest.json).")
    except OSError as exc:
        raise ManifestError(f"Cannot open artifact folder {str(folder)[:200]}: {exc.strerror or exc}.") from None
    return folder, path


def read_manifest_bytes(folder: str | Path, *, allow_unpublished: bool = False) -> tuple[Path, Path, bytes]:
    """The raw bytes of an artifact's manifest, read safely (a regular file, bounded size).

    Args:
        folder: The artifact folder (or its manifest.json).
        allow_unpublished: Read a folder that is not a published artifact (see :func:`read_manifest`).

    Returns:
        (artifact folder, manifest path, bytes) - signatures are checked over exactly these bytes.

    Raises:
        ManifestError: missing, a link, a FIFO or other special file, too large, unreadable, or
            not a published artifact.
    """
    folder, path = manifest_location(folder)
    why = None if allow_unpublished else unpublished_reason(folder)
    if why is not None:
        raise ManifestError(f"{folder} is not a published artifact: {why}.",
                            "Load the published profile folder `edge-sdk convert` wrote; a rejected candidate is kept "
                            "for inspection only (load(..., allow_unpublished=True)).")
    raw = strictjson.read_regular_file(path, limit=MAX_MANIFEST_BYTES, what="manifest", error=ManifestError)
    return folder, path, raw


def read_manifest(folder: str | Path, *, verify: bool = True, allow_unpublished: bool = False) -> Manifest:
    """Read, validate and (by default) hash-check the manifest of an artifact folder.

    Args:
        folder: The artifact folder (or the manifest.json inside it).
        verify: Check the sha256 of every listed file and of the preprocessing spec. Turn off
            for development only.
        allow_unpublished: Read a folder that is not a published artifact (a staging folder, a
            candidate the accuracy gate rejected): for the gate itself and for inspection only.

    Returns:
        The validated :class:`Manifest`.

    Raises:
        ManifestError: missing/malformed manifest, unsafe path, missing file, size or hash mismatch.
    """
    folder, path, raw = read_manifest_bytes(folder, allow_unpublished=allow_unpublished)
    return parse_manifest(raw, folder, str(path), verify=verify)


def parse_manifest(raw: bytes, folder: Path, where: str, *, verify: bool = True) -> Manifest:
    """Validate manifest bytes against the files of ``folder`` (see :func:`read_manifest`).

    Raises:
        ManifestError: naming ``where`` and what is wrong.
    """
    data = strictjson.loads(raw, where=where, error=ManifestError, hint="The artifact is corrupt: convert it again.")
    if not isinstance(data, dict):
        raise ManifestError(f"{where}: expected a JSON object at the top level.")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ManifestError(
            f"{where}: schema_version {str(version)[:40]!r} is not supported by edge-sdk {__version__} (supports {SCHEMA_VERSION}).",
            "Convert the model again with this edge-sdk version, or install the edge-sdk version that wrote it.",
        )
    manifest = typed.parse(Manifest, data, where=where, error=ManifestError)
    check_tensors(manifest.inputs, manifest.outputs, where)
    check_identifiers(manifest, where)
    check_preprocessing(manifest, where, verify)
    check_streams(manifest, where)
    check_postprocess(manifest, where)
    seen = set()
    for i, art in enumerate(manifest.artifacts):
        at = f"{where}: artifacts[{i}]"
        if art.path in seen:
            raise ManifestError(f"{at}: '{art.path}' is listed twice.")
        seen.add(art.path)
        full = safe_relpath(folder, art.path, at)
        if not os.path.lexists(full):
            raise ManifestError(f"{at}: file '{art.path}' is missing from {folder}.",
                                "The artifact folder is incomplete: copy the whole folder, or convert again.")
        size, digest = strictjson.hash_regular_file(full, what=f"{at}: file '{art.path}'", error=ManifestError,
                                                    digest=verify)
        if not verify:
            continue
        if size != art.size_bytes:
            raise ManifestError(
                f"'{art.path}' is {size} bytes but the manifest says {art.size_bytes}: truncated or modified.",
                "Copy the artifact folder again from the source; do not edit files inside it.",
            )
        if digest != art.sha256:
            raise ManifestError(
                f"'{art.path}' does not match its sha256 in the manifest (tampered or corrupt).",
                "Copy the artifact folder again from the source; do not edit files inside it.",
            )
    return manifest


#: Limits on recorded labels (a label file is text for people, not a payload).
MAX_LABELS, MAX_LABEL_CHARS = 100_000, 256


def check_postprocess(manifest: Manifest, where: str) -> None:
    """A known head, an output of this manifest, labels that are short printable strings.

    Raises:
        ManifestError: naming what is wrong.
    """
    from edge_sdk.detect import HEADS

    pp = manifest.postprocess
    at = f"{where}: postprocess"
    if pp.head not in ("", *HEADS):
        raise ManifestError(f"{at}: unknown head '{pp.head[:40]}' (known: {', '.join(HEADS)}).",
                            "The artifact is corrupt, or was written by a newer edge-sdk: convert it again.")
    if pp.output and pp.output not in {t.name for t in manifest.outputs}:
        raise ManifestError(f"{at}: output '{pp.output[:80]}' is not an output of this manifest.",
                            "The artifact is corrupt: convert it again.")
    if len(pp.labels) > MAX_LABELS or any(len(x) > MAX_LABEL_CHARS or not x.isprintable() for x in pp.labels):
        raise ManifestError(f"{at}: labels must be at most {MAX_LABELS} printable names of at most "
                            f"{MAX_LABEL_CHARS} characters.", "The artifact is corrupt: convert it again.")
    _check_anchors(pp, manifest, at)
    _check_fit(pp, manifest, at)
    if pp.options:
        from edge_sdk.detect import DETECTION_HEADS, head_options

        if pp.head not in DETECTION_HEADS:
            raise ManifestError(f"{at}: head '{pp.head[:40]}' takes no options.", "The artifact is corrupt: convert it again.")
        try:
            head_options(pp.options)
        except InputValidationError as exc:
            raise ManifestError(f"{at}: options: {exc.message}", "The artifact is corrupt: convert it again.") from None


def image_input_size(manifest: Manifest) -> tuple[int, int] | None:
    """``(width, height)`` of the model input the recorded preprocessing makes, or None."""
    from . import preprocess

    if manifest.preprocessing.spec is None:
        return None
    try:
        spec = preprocess.from_dict(manifest.preprocessing.spec)
        if spec.size is None:
            spec = preprocess.for_inputs(spec, manifest.inputs)[0]
    except InputValidationError:
        return None
    return (spec.size[1], spec.size[0]) if spec.size else None


def _check_fit(pp: PostprocessSpec, manifest: Manifest, at: str) -> None:
    """The recorded head decodes every format's outputs and the recorded labels number its classes
    (:func:`edge_sdk.detect.check_fit`, the very decoder ``infer_image`` runs)."""
    from edge_sdk.detect import as_head, check_fit

    if not pp.head and not pp.labels:
        return
    try:
        head = as_head(pp.head, pp.anchors or None, pp.options or None) if pp.head else None
        if head is not None and pp.output:
            import dataclasses

            head = dataclasses.replace(head, output=pp.output)
    except InputValidationError:
        return  # _check_anchors / the options check name it
    size = image_input_size(manifest)
    for fmt in manifest.formats:
        try:
            check_fit(head, format_io(manifest, fmt)[1], list(pp.labels) or None, input_size=size)
        except InputValidationError as exc:
            raise ManifestError(f"{at}: the recorded head does not fit the {fmt} outputs: {exc.message}",
                                "The artifact is corrupt or was edited: convert it again.") from None


def _check_anchors(pp: PostprocessSpec, manifest: Manifest, at: str) -> None:
    """An ``ssd-anchors`` head carries a valid spec whose outputs exist; other heads carry none."""
    from edge_sdk.anchors import parse_spec

    if (pp.head == "ssd-anchors") != bool(pp.anchors):
        what = "an ssd-anchors head needs anchors" if pp.head == "ssd-anchors" else f"head '{pp.head[:40]}' has anchors"
        raise ManifestError(f"{at}: {what}.", "The artifact is corrupt: convert it again.")
    if not pp.anchors:
        return
    try:
        spec = parse_spec(pp.anchors)
    except InputValidationError as exc:
        raise ManifestError(f"{at}: anchors: {exc.message}", "The artifact is corrupt: convert it again.") from None
    names = {t.name for t in manifest.outputs}
    for name in (spec.boxes, spec.scores):
        if name and name not in names:
            raise ManifestError(f"{at}: anchors name output '{name[:80]}', which this manifest does not have.",
                                "The artifact is corrupt: convert it again.")


def check_streams(manifest: Manifest, where: str) -> None:
    """Each stream names an output and an input of this manifest with as many elements, each once.

    Raises:
        ManifestError: a stream names a tensor the manifest does not have, or shapes that differ.
    """
    ins = {t.name: t for t in manifest.inputs}
    outs = {t.name: t for t in manifest.outputs}
    seen: set[str] = set()
    for i, s in enumerate(manifest.streams):
        at = f"{where}: streams[{i}]"
        if s.output not in outs or s.input not in ins:
            raise ManifestError(f"{at} feeds '{s.output[:80]}' back as '{s.input[:80]}', but the manifest has no such "
                                f"{'output' if s.output not in outs else 'input'}.", "The artifact is corrupt: convert it again.")
        if s.input in seen:
            raise ManifestError(f"{at}: input '{s.input[:80]}' is fed by two streams.", "The artifact is corrupt: convert it again.")
        seen.add(s.input)
        if math.prod(outs[s.output].shape) != math.prod(ins[s.input].shape):
            raise ManifestError(f"{at}: output '{s.output[:80]}' {outs[s.output].shape} cannot feed input "
                                f"'{s.input[:80]}' {ins[s.input].shape}.", "The artifact is corrupt: convert it again.")


def format_io(manifest: Manifest, fmt: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The I/O specs of one artifact format.

    The manifest's ``inputs``/``outputs`` are the artifact's contract. When the formats of one
    profile differ at their boundary (e.g. an NHWC TFLite beside an NCHW ONNX), the converter
    records the differing format under ``backend_options["io"][format] = {"inputs": [...],
    "outputs": [...]}`` (TensorSpec dicts), which then applies to that format.

    Raises:
        ManifestError: a per-format entry is malformed.
    """
    io_all = manifest.backend_options.get("io") or {}
    if not isinstance(io_all, dict):
        raise ManifestError("manifest backend_options.io: expected a table of formats.", _TAMPERED)
    io = io_all.get(fmt)
    if not io:
        return list(manifest.inputs), list(manifest.outputs)
    where = f"manifest backend_options.io.{fmt}"
    if not isinstance(io, dict) or not io.get("inputs") or not io.get("outputs") or \
            not isinstance(io["inputs"], list) or not isinstance(io["outputs"], list):
        raise ManifestError(f"{where}: expected a table with 'inputs' and 'outputs'.")
    parse = lambda items, kind: [typed.parse(TensorSpec, d, where=f"{where}.{kind}", error=ManifestError) for d in items]  # noqa: E731
    ins, outs = parse(io["inputs"], "inputs"), parse(io["outputs"], "outputs")
    check_tensors(ins, outs, where)
    return ins, outs


def file_entry(folder: Path, rel: str, *, fmt: str, precision: str, role: str = "model") -> ArtifactFile:
    """Hash a file in ``folder`` and describe it for the manifest."""
    full = folder / rel
    return ArtifactFile(
        path=PurePosixPath(*Path(rel).parts).as_posix(),
        sha256=sha256_file(full),
        format=fmt,
        precision=precision,
        size_bytes=full.stat().st_size,
        role=role,  # type: ignore[arg-type]
    )


def write_manifest(folder: str | Path, manifest: Manifest) -> Path:
    """Validate and write ``manifest.json`` atomically into ``folder``.

    Raises:
        ManifestError: the manifest would not read back (a bug in the caller).
    """
    folder = Path(folder)
    if not manifest.created_at:
        manifest.created_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data = manifest.to_dict()
    try:
        blob = (json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n").encode()
    except ValueError as exc:  # NaN/Infinity: strict readers (ours included) would refuse the file
        raise ManifestError(f"manifest being written holds a non-finite number ({exc}).") from None
    # Round-trip through the strict parser so a writer bug cannot produce an unreadable manifest.
    typed.parse(Manifest, json.loads(blob), where="manifest being written", error=ManifestError)
    path = folder / MANIFEST_NAME
    atomic_write_bytes(path, blob)
    return path


def preprocessing_hash(spec: dict | None) -> str:
    """Canonical sha256 of a preprocessing spec (empty string for none)."""
    if spec is None:
        return ""
    return sha256_bytes(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())


def is_artifact_folder(path: str | Path) -> bool:
    """True when ``path`` holds a ``manifest.json`` entry (of any kind: reading it checks the rest)."""
    try:
        return Path(path).is_dir() and os.path.lexists(Path(path) / MANIFEST_NAME)
    except (OSError, ValueError):
        return False


def find_profile_folders(path: str | Path) -> dict[str, Path]:
    """For a `convert` output folder: profile name -> artifact subfolder (one level deep).

    Nothing here is trusted: the name is read (safely: regular files only, bounded) just to key
    the map, and is the folder's own name when the manifest is unreadable or the name is not an
    identifier. Every folder is still checked in full before anything loads from it.
    """
    from .profile_checks import NAME_RE

    path = Path(path)
    out: dict[str, Path] = {}
    try:
        if not path.is_dir():
            return out
        children = sorted(path.iterdir())
    except OSError:
        return out
    for child in children:
        if child.name.startswith(".") or child.is_symlink() or not child.is_dir() or not os.path.lexists(child / MANIFEST_NAME):
            continue
        name = child.name
        try:
            raw = strictjson.read_regular_file(child / MANIFEST_NAME, limit=MAX_MANIFEST_BYTES, what="manifest",
                                               error=ManifestError)
            ref = strictjson.loads(raw, where=str(child), error=ManifestError).get("profile", {}).get("name")
            if isinstance(ref, str) and NAME_RE.fullmatch(ref) and ref not in out:
                name = ref
        except (ManifestError, AttributeError):
            pass
        out.setdefault(name, child)
    return out


__all__ = [
    "ArtifactFile",
    "MANIFEST_NAME",
    "Manifest",
    "BakedPreprocessing",
    "Preprocessing",
    "ProfileRef",
    "Quantization",
    "SCHEMA_VERSION",
    "SourceInfo",
    "TensorSpec",
    "artifact_path",
    "file_entry",
    "find_profile_folders",
    "format_io",
    "parse_manifest",
    "read_manifest_bytes",
    "is_artifact_folder",
    "preprocessing_hash",
    "read_manifest",
    "write_manifest",
]

