"""The trust boundary: what an artifact may make this process do, and the one check at the door.

:func:`check_artifact` is the single function that ``edge_sdk.load`` (for every folder it
considers, including each profile of a ``convert`` output folder, before anything is probed)
and ``edge-sdk verify`` run, so the two can never disagree:

1. the manifest file itself (regular file, bounded, strict JSON) and, when trusted keys are
   configured, its Ed25519 signature over exactly the bytes read (:mod:`edge_sdk.signing`);
2. the schema, tensor specs, preprocessing spec and its sha256, paths and every file's sha256
   (:func:`edge_sdk.manifest.parse_manifest`);
3. the embedded profile (valid, and matching ``profile.sha256``), per-format I/O specs, and a
   runtime chain that can run one of the artifact's files;
4. the caller's policy: a chain step ``external:/path/lib.so`` names a native library, and an
   artifact never decides on its own that a library gets loaded. Only the caller does
   (``load(..., allow_external_delegates=[...])``, ``--allow-external-delegate``, or the user
   config file below); anything else is refused before any library is opened;
5. the container of every model file (pure-Python structural checks, no native code);
6. every file a runtime would read beside a model: an ONNX tensor kept in another file
   (``external_data``) must name a file the manifest lists (so hashed, and covered by the
   signature), inside the folder, not a link - never an absolute path, ``..`` or an unlisted file
   (:mod:`edge_sdk.onnx_wire` finds them without native code).

The user config file (``$EDGE_SDK_CONFIG``, else ``$XDG_CONFIG_HOME/edge-sdk/config.toml``,
else ``~/.config/edge-sdk/config.toml``) belongs to the device owner, never to an artifact::

    [trust]
    allow_external_delegates = ["/opt/armnn/libarmnnDelegate.so"]
    trusted_keys = ["/etc/edge-sdk/owner.pub"]     # every load must then be signed by one of them

    [crash_guard]
    enabled = true
    cache_dir = "/var/cache/edge-sdk/verified"
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from . import typed
from .errors import InputValidationError, ManifestError, ProfileError
from .manifest import Manifest, format_io, parse_manifest, read_manifest_bytes
from .profiles import Profile, parse_profile
from .strictjson import dumps_canonical

CONFIG_ENV = "EDGE_SDK_CONFIG"
EXTERNAL = "external:"


@dataclass(frozen=True)
class TrustConfig:
    """``[trust]`` of the user config file."""

    allow_external_delegates: list[str] = field(default_factory=list)
    trusted_keys: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CrashGuardConfig:
    """``[crash_guard]`` of the user config file."""

    enabled: bool = True
    cache_dir: str = ""


@dataclass(frozen=True)
class UserConfig:
    """The device owner's settings (see the module doc)."""

    trust: TrustConfig = field(default_factory=TrustConfig)
    crash_guard: CrashGuardConfig = field(default_factory=CrashGuardConfig)
    source: str = field(default="", compare=False)


def config_path() -> Path:
    """Where the user config file is looked for."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edge-sdk" / "config.toml"


def user_config() -> UserConfig:
    """Read the user config file; a missing file is the defaults.

    Raises:
        InputValidationError: the file exists but is unreadable, not TOML, or has unknown keys.
    """
    path = config_path()
    if not os.path.lexists(path):
        return UserConfig()
    from .strictjson import read_regular_file

    raw = read_regular_file(path, limit=1 << 20, what="edge-sdk config file", error=InputValidationError)
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError) as exc:
        raise InputValidationError(f"{path}: invalid config file ({str(exc)[:200]}).",
                                   f"Fix or remove it (set {CONFIG_ENV} to use another file).") from None
    cfg = typed.parse(UserConfig, data, where=str(path), error=InputValidationError)
    object.__setattr__(cfg, "source", str(path))
    return cfg


@dataclass(frozen=True)
class Policy:
    """What the caller allows an artifact to do.

    Attributes:
        allow_external_delegates: Absolute paths of delegate libraries a chain may load.
        trusted_keys: Public keys (paths, PEM/OpenSSH bytes, key objects); when non-empty, the
            manifest must carry a valid signature by one of them.
    """

    allow_external_delegates: tuple[str, ...] = ()
    trusted_keys: tuple[Any, ...] = ()

    @classmethod
    def resolve(cls, allow_external_delegates: Iterable[str | os.PathLike] | None = None,
                trusted_keys: Iterable[Any] | None = None) -> "Policy":
        """The caller's arguments combined with the user config file.

        Delegate allow lists add up (the owner's file and the caller's list). ``trusted_keys``
        given by the caller replace the file's (``[]`` turns the signature requirement off for
        this call); None uses the file's.

        Raises:
            InputValidationError: a malformed config file, or a relative delegate path.
        """
        cfg = user_config()
        allowed = [*cfg.trust.allow_external_delegates, *(os.fspath(p) for p in (allow_external_delegates or ()))]
        for p in allowed:
            if not os.path.isabs(p):
                raise InputValidationError(f"allowed external delegate '{p}' is not an absolute path.",
                                           "Name the library by its absolute path, e.g. /opt/armnn/libarmnnDelegate.so.")
        keys = tuple(cfg.trust.trusted_keys) if trusted_keys is None else tuple(trusted_keys)
        return cls(tuple(dict.fromkeys(allowed)), keys)

    def delegate_allowed(self, library: str) -> bool:
        """True when ``library`` is on the allow list (compared as resolved absolute paths)."""
        want = os.path.realpath(library)
        return any(os.path.realpath(p) == want for p in self.allow_external_delegates)


@dataclass(frozen=True)
class CheckedArtifact:
    """An artifact folder that passed :func:`check_artifact`.

    Attributes:
        folder: The artifact folder.
        manifest: Its validated manifest.
        profile: The embedded profile (checked against ``profile.sha256`` unless ``verify=False``).
        signed_by: Key id of the trusted key whose signature was checked, or None.
        signature_present: A ``manifest.sig`` lies beside the manifest (checked or not).
        manifest_bytes: The manifest exactly as read and checked (what a signature covers).
    """

    folder: Path
    manifest: Manifest
    profile: Profile
    signed_by: str | None = None
    signature_present: bool = False
    manifest_bytes: bytes = field(default=b"", repr=False, compare=False)


def embedded_profile(manifest: Manifest, where: str, verify: bool = True) -> Profile:
    """Parse the profile embedded in the manifest and check it against its recorded sha256.

    Raises:
        ManifestError: none embedded, invalid, or edited (the chain decides what runs, so an
            edited profile is as bad as an edited model file).
    """
    if not manifest.profile.spec:
        raise ManifestError(f"{where}: the manifest embeds no profile spec; cannot tell how to run it.",
                            "Convert the model again with this edge-sdk version.")
    try:
        profile = parse_profile(manifest.profile.spec, f"{where} (embedded profile)")
    except ProfileError as exc:
        raise ManifestError(exc.message, exc.hint) from None
    # The hash is over the spec as stored (canonical JSON), not over the parsed profile: a later
    # edge-sdk that adds a profile field with a default must not turn every older artifact into
    # an "edited" one. The converter records Profile.sha256, which is this same canonical form.
    stored = hashlib.sha256(dumps_canonical(manifest.profile.spec)).hexdigest()
    if verify and stored != manifest.profile.sha256:
        raise ManifestError(f"{where}: the embedded profile '{profile.name}' does not match its sha256 in the manifest "
                            "(edited or corrupt).",
                            "Copy the artifact folder again from the source; do not edit manifest.json.")
    if profile.name != manifest.profile.name:
        raise ManifestError(f"{where}: profile.name '{manifest.profile.name}' differs from the embedded profile's "
                            f"name '{profile.name}' (edited).", "Copy the artifact folder again from the source.")
    return profile


def check_delegates(profile: Profile, policy: Policy, where: str) -> None:
    """Refuse a chain that names a native library the caller did not allow. Opens nothing.

    Raises:
        ManifestError: an ``external:`` step whose library is not on the allow list.
    """
    for i, step in enumerate(profile.runtime.chain):
        if not step.accelerator.startswith(EXTERNAL):
            continue
        lib = step.accelerator[len(EXTERNAL):]
        if not policy.delegate_allowed(lib):
            raise ManifestError(
                f"{where}: runtime.chain[{i}] asks to load the native library {lib}, which the caller has not allowed; "
                "an artifact never decides that a library gets loaded.",
                f"If you trust it: load(..., allow_external_delegates=['{lib}']), --allow-external-delegate {lib}, "
                f"or list it under [trust] allow_external_delegates in {config_path()}.")


def check_containers(folder: Path, manifest: Manifest) -> None:
    """The pure-Python container check of every model/engine file (no native code runs).

    Raises:
        ModelLoadError: a file is not a well-formed container of its format.
    """
    from .runtimes.select import BACKENDS

    by_format = {}
    for name in BACKENDS.names():
        for fmt in BACKENDS.get(name).formats:
            by_format.setdefault(fmt, BACKENDS.get(name))
    weights = {a.role: folder / a.path for a in manifest.artifacts if a.role == "weights"}
    for art in manifest.artifacts:
        runner = by_format.get(art.format)
        # Model files, and Edge TPU models (role engine); a TensorRT engine shipped beside an ONNX
        # model is only deserialized after its version/GPU check, by TensorRT's own reader.
        if runner is None or not (art.role == "model" or (art.role == "engine" and art.path.endswith(".tflite"))):
            continue
        runner.validate_container(folder / art.path, weights)


def _mapped(path: Path):
    """A read-only map of the regular file ``path`` (opened without following links), or b"" when empty."""
    import mmap

    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        if os.fstat(fd).st_size == 0:
            return b""
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def check_external_data(folder: Path, manifest: Manifest, where: str) -> None:
    """Refuse an ONNX file whose tensors read bytes the manifest does not cover (see the module doc, 6).

    Raises:
        ManifestError: a tensor names no file, an absolute/escaping path, a link, an unlisted file,
            or a span past the end of the listed file.
        ModelLoadError: an ONNX file is not a well-formed protobuf message.
    """
    from pathlib import PurePosixPath

    from .errors import ModelLoadError
    from .manifest_checks import TAMPERED, safe_relpath
    from .onnx_wire import WireError, external_refs

    listed = {str(PurePosixPath(a.path)): a for a in manifest.artifacts}
    for art in manifest.artifacts:
        if not art.path.endswith(".onnx"):
            continue
        try:
            data = _mapped(folder / art.path)
        except OSError as exc:
            raise ModelLoadError(f"Cannot read model file {art.path}: {exc.strerror or exc}.") from None
        try:
            refs, damage = external_refs(data), ""
        except WireError as exc:
            refs, damage = [], str(exc)
        if hasattr(data, "close"):  # after the except block: its traceback no longer holds views of the map
            data.close()
        if damage:
            raise ModelLoadError(f"{art.path} is not a valid ONNX model ({damage}).",
                                 "Copy the artifact folder again from the source, or convert the model again.")
        for ref in refs:
            at = f"{where}: '{art.path}' tensor {ref.tensor[:80]!r}"
            loc = ref.location
            if not loc:
                raise ManifestError(f"{at} keeps its data in another file but names none.", TAMPERED)
            pure = PurePosixPath(loc)
            if pure.is_absolute() or ".." in pure.parts or "\\" in loc or loc.startswith("~"):
                raise ManifestError(f"{at} reads its data from {loc[:200]!r}, outside the artifact folder; a runtime "
                                    "would read those bytes unchecked.", TAMPERED)
            safe_relpath(folder, loc, f"{at}: external data")  # links, control characters, escapes
            entry = listed.get(str(pure))
            if entry is None:
                raise ManifestError(
                    f"{at} reads its data from '{pure}', which the manifest does not list: no hash or signature "
                    "covers those bytes.",
                    "List the file in the manifest (convert again), or embed the tensor in the model.")
            end = (ref.offset or 0) + (ref.length or 0)
            if end > entry.size_bytes:
                raise ManifestError(f"{at} reads bytes {ref.offset or 0}..{end} of '{pure}', which has "
                                    f"{entry.size_bytes}.", TAMPERED)


def check_artifact(path: str | Path, *, verify: bool = True, policy: Policy | None = None,
                   allow_unpublished: bool = False) -> CheckedArtifact:
    """Every check an artifact folder must pass before anything native touches it.

    Args:
        path: An artifact folder (or its ``manifest.json``).
        verify: Check hashes (files, preprocessing, embedded profile). Development only: False.
            Ignored when the policy trusts keys: a signature over the manifest vouches for the
            files only through their hashes, so they are always checked then.
        policy: The caller's policy (default: :meth:`Policy.resolve` - the user config file).
        allow_unpublished: Accept a folder the converter did not publish (inspection only).

    Returns:
        The :class:`CheckedArtifact`.

    Raises:
        ManifestError: tampered, corrupt, unsigned (when keys are trusted), or asking for a
            library the caller did not allow.
        ModelLoadError: a model file's container is damaged.
        MissingDependencyError: trusted keys are configured but ``cryptography`` is missing.
    """
    policy = policy if policy is not None else Policy.resolve()
    verify = verify or bool(policy.trusted_keys)
    folder, mpath, raw = read_manifest_bytes(path, allow_unpublished=allow_unpublished)
    where = str(mpath)
    signed_by = None
    from .signing import SIGNATURE_NAME, verify_manifest_signature

    sig_present = os.path.lexists(folder / SIGNATURE_NAME)
    if policy.trusted_keys:
        signed_by = verify_manifest_signature(folder, raw, policy.trusted_keys)
    manifest = parse_manifest(raw, folder, where, verify=verify)
    profile = embedded_profile(manifest, where, verify)
    formats = set(manifest.formats)
    usable = [s for s in profile.runtime.chain if s.format in formats]
    if not usable:
        raise ManifestError(f"{where}: no step of profile '{profile.name}''s runtime chain reads this artifact's "
                            f"files ({', '.join(sorted(formats)) or 'none'}).", "Convert the model again.")
    for fmt in formats:
        format_io(manifest, fmt)
    check_delegates(profile, policy, where)
    check_containers(folder, manifest)
    check_external_data(folder, manifest, where)
    return CheckedArtifact(folder, manifest, profile, signed_by, sig_present, raw)


__all__ = ["CONFIG_ENV", "CheckedArtifact", "CrashGuardConfig", "Policy", "TrustConfig", "UserConfig",
           "check_artifact", "check_containers", "check_delegates", "check_external_data", "config_path", "embedded_profile", "user_config"]
