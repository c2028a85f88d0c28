"""``manifest.json``: the contract between the workstation that converts and the device that runs.

Reading a manifest validates it completely: schema, every path stays inside the artifact
folder (no ``..``, no absolute paths, no symlinks), and the sha256 of every listed file,
before anything reaches native code. ``verify=False`` skips only the hash check and is
meant for development.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from . import typed
from ._version import __version__
from .errors import ManifestError
from .fsutil import atomic_write_bytes, sha256_bytes, sha256_file

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
class Preprocessing:
    """The preprocessing applied to calibration data, which the runtime must repeat."""

    spec: dict[str, Any] | None = None
    sha256: str = ""


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


def _safe_relpath(folder: Path, rel: str, where: str) -> Path:
    """Resolve ``rel`` inside ``folder`` or raise: no absolute paths, no ``..``, no symlinks."""
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or "\\" in rel or ".." in pure.parts or rel.startswith("~"):
        raise ManifestError(
            f"{where}: path '{rel}' leaves the artifact folder.",
            "Artifact paths must be relative to the folder, without '..'. The artifact may have been tampered with.",
        )
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


def read_manifest(folder: str | Path, *, verify: bool = True) -> Manifest:
    """Read, validate and (by default) hash-check the manifest of an artifact folder.

    Args:
        folder: The artifact folder (or the manifest.json inside it).
        verify: Check the sha256 of every listed file. Turn off for development only.

    Returns:
        The validated :class:`Manifest`.

    Raises:
        ManifestError: missing/malformed manifest, unsafe path, missing file, size or hash mismatch.
    """
    folder = Path(folder)
    if folder.name == MANIFEST_NAME and folder.is_file():
        folder = folder.parent
    path = folder / MANIFEST_NAME
    if not folder.is_dir():
        raise ManifestError(f"Artifact folder not found: {folder}", "Pass the folder that `edge-sdk convert` wrote.")
    if path.is_symlink():
        raise ManifestError(f"{path} is a symbolic link; refusing to read it.")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(
            f"No {MANIFEST_NAME} in {folder}.",
            "Pass an artifact folder written by `edge-sdk convert` (it holds manifest.json).",
        ) from None
    except OSError as exc:
        raise ManifestError(f"Cannot read {path}: {exc.strerror}") from None
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc}).", "The artifact is corrupt: convert it again.") from None
    if not isinstance(data, dict):
        raise ManifestError(f"{path}: expected a JSON object at the top level.")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ManifestError(
            f"{path}: schema_version {version!r} is not supported by edge-sdk {__version__} (supports {SCHEMA_VERSION}).",
            "Convert the model again with this edge-sdk version, or install the edge-sdk version that wrote it.",
        )
    manifest = typed.parse(Manifest, data, where=str(path), error=ManifestError)
    _check_tensors(manifest, str(path))
    seen = set()
    for i, art in enumerate(manifest.artifacts):
        where = f"{path}: artifacts[{i}]"
        if art.path in seen:
            raise ManifestError(f"{where}: '{art.path}' is listed twice.")
        seen.add(art.path)
        full = _safe_relpath(folder, art.path, where)
        if not full.is_file():
            raise ManifestError(
                f"{where}: file '{art.path}' is missing from {folder}.",
                "The artifact folder is incomplete: copy the whole folder, or convert again.",
            )
        if not verify:
            continue
        size = full.stat().st_size
        if size != art.size_bytes:
            raise ManifestError(
                f"'{art.path}' is {size} bytes but the manifest says {art.size_bytes}: truncated or modified.",
                "Copy the artifact folder again from the source; do not edit files inside it.",
            )
        digest = sha256_file(full)
        if digest != art.sha256:
            raise ManifestError(
                f"'{art.path}' does not match its sha256 in the manifest (tampered or corrupt).",
                "Copy the artifact folder again from the source; do not edit files inside it.",
            )
    return manifest


def _check_tensors(manifest: Manifest, where: str) -> None:
    if not manifest.inputs or not manifest.outputs:
        raise ManifestError(f"{where}: a manifest must list at least one input and one output.")
    for kind, specs in (("inputs", manifest.inputs), ("outputs", manifest.outputs)):
        names = [t.name for t in specs]
        if len(set(names)) != len(names):
            raise ManifestError(f"{where}: duplicate tensor names in '{kind}'.")
        for t in specs:
            if any((not isinstance(d, int)) or d < 1 for d in t.shape):
                raise ManifestError(
                    f"{where}: {kind[:-1]} '{t.name}' has a non-static shape {t.shape}.",
                    "Artifacts must have fully static shapes; convert again with --input-shape.",
                )


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
    blob = (json.dumps(data, indent=2, sort_keys=False) + "\n").encode()
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
    return (Path(path) / MANIFEST_NAME).is_file()


def find_profile_folders(path: str | Path) -> dict[str, Path]:
    """For a `convert` output folder: profile name -> artifact subfolder (one level deep)."""
    path = Path(path)
    out: dict[str, Path] = {}
    if not path.is_dir():
        return out
    for child in sorted(path.iterdir()):
        if child.is_dir() and not child.name.startswith(".") and is_artifact_folder(child):
            try:
                name = json.loads((child / MANIFEST_NAME).read_text())["profile"]["name"]
            except (OSError, ValueError, KeyError, TypeError):
                name = child.name
            out[str(name)] = child
    return out


__all__ = [
    "ArtifactFile",
    "MANIFEST_NAME",
    "Manifest",
    "Preprocessing",
    "ProfileRef",
    "Quantization",
    "SCHEMA_VERSION",
    "SourceInfo",
    "TensorSpec",
    "file_entry",
    "find_profile_folders",
    "is_artifact_folder",
    "preprocessing_hash",
    "read_manifest",
    "write_manifest",
]

