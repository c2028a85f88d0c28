"""Device profiles: data (TOML) parsed into typed, validated dataclasses.

A profile says what a device runs best: artifact formats, quantization scheme, the static
shape rule, operator constraints, the runtime preference chain, accuracy-gate thresholds,
power sensors and an optional latency budget. Built-in profiles ship as package data in
``edge_sdk/device_profiles/*.toml``; users may pass their own by file path.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from . import typed
from .errors import ProfileError
from .profile_checks import ACCELERATOR_RE, MAX_PROFILE_BYTES, NAME_RE, check_accuracy, check_name, check_numbers

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 devices
    import tomli as tomllib

#: An artifact format name; the allowed ones are those some registered backend reads
#: (:func:`edge_sdk.backends.known_formats`), checked by :func:`parse_profile`.
ArtifactFormat = str
#: A backend name; the allowed ones are the registered backends (:func:`edge_sdk.backends.backend_names`).
Backend = str
#: Extra folders of profile ``*.toml`` files, listed and resolved by name like the built-in ones.
PROFILE_PATH_ENV = "EDGE_SDK_PROFILE_PATH"
PowerSource = Literal["rapl", "ina3221", "tegrastats", "nvml", "hwmon"]

#: Short names users type -> canonical profile names.
ALIASES: dict[str, str] = {
    "jetson": "jetson-orin",
    "orin": "jetson-orin",
    "intel": "intel-cpu",
    "npu": "intel-npu",
    "coral": "coral-edgetpu",
    "edgetpu": "coral-edgetpu",
    "arm": "arm-cpu",
    "vpu": "intel-npu",
    "myriad": "intel-npu",
}

#: Names that resolve but deserve a note (the target was retired upstream).
RETIRED: dict[str, str] = {
    "vpu": "OpenVINO dropped the MYRIAD (VPU) plugin after release 2022.3; "
    "its successor is the Intel NPU: using profile 'intel-npu'.",
    "myriad": "OpenVINO dropped the MYRIAD (VPU) plugin after release 2022.3; "
    "its successor is the Intel NPU: using profile 'intel-npu'.",
}


@dataclass(frozen=True)
class ArtifactSpec:
    """What the converter produces. ``formats[0]`` is the primary artifact."""

    formats: list[ArtifactFormat]
    batch_size: int = 1
    static_shapes: bool = True
    opset: int = 17


@dataclass(frozen=True)
class QuantizationSpec:
    """The quantization scheme the target wants."""

    precision: Literal["int8", "fp16", "fp32"] = "int8"
    weights: Literal["per-channel", "per-tensor"] = "per-channel"
    #: Fully connected (dense) layers' weights in int8 TFLite: ``same`` as ``weights``, or their own
    #: granularity (the Edge TPU: per-channel convolutions, per-tensor dense layers).
    dense_weights: Literal["same", "per-channel", "per-tensor"] = "same"
    weight_dtype: Literal["int8", "uint8"] = "int8"
    activation_dtype: Literal["int8", "uint8"] = "int8"
    activation_symmetric: bool = False
    input_dtype: Literal["float32", "int8", "uint8"] = "float32"
    output_dtype: Literal["float32", "int8", "uint8"] = "float32"
    calibration_method: Literal["minmax", "entropy", "percentile"] = "minmax"
    min_calibration_samples: int = 100
    #: The int8 share of compute (by multiply-accumulates; by op count where those cannot be read)
    #: under which an int8 artifact is not published as int8 (converters/int8_compute.py). An
    #: artifact with compute ops and none of them in int8 never is, whatever the floor.
    min_int8_share: float = 0.0

    @property
    def dense(self) -> Literal["per-channel", "per-tensor"]:
        """The granularity of dense layers' weights (``dense_weights``, else ``weights``)."""
        return self.weights if self.dense_weights == "same" else self.dense_weights

    @property
    def weights_label(self) -> str:
        """``per-channel``, ``per-tensor``, or ``per-channel convolutions, per-tensor dense layers``."""
        if self.dense == self.weights:
            return self.weights
        return f"{self.weights} convolutions, {self.dense} dense layers"


@dataclass(frozen=True)
class OperatorSpec:
    """Operator constraints of the target (empty lists mean no known constraint)."""

    supported: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    max_rank: int = 0
    allowed_dtypes: list[str] = field(default_factory=list)
    single_subgraph: bool = False
    compiler: str = ""


@dataclass(frozen=True)
class RuntimeStep:
    """One entry of the runtime preference chain.

    ``accelerator`` is the delegate (LiteRT), execution provider (ONNX Runtime), device
    (OpenVINO) or ``gpu`` (TensorRT). ``native`` marks the accelerator the profile is for;
    strict mode refuses to run on a step that is not native.
    """

    backend: Backend
    accelerator: str
    format: ArtifactFormat
    native: bool = True


@dataclass(frozen=True)
class RuntimeSpec:
    """Runtime preference chain, best first."""

    chain: list[RuntimeStep]


@dataclass(frozen=True)
class ScoresGate:
    """Thresholds for class scores and logits (after their activation).

    ``confidence``: positions whose float top score reaches it are the ones top-1 and the score
    error are measured on (a detector's thousands of background anchors are not). Positives
    (score >= ``positive_threshold``) of float and int8 are compared by F1 on dense outputs; a
    positive counts as matched when the other side scores it at least ``positive_threshold -
    positive_margin``.

    A packed YOLO-style output is also judged by the objects its head draws (score >=
    ``confidence`` after class-aware NMS): their F1 (``min_positive_f1``), found when the other
    side scores the object at least ``confidence x (1 - object_margin)``, and the recall of the
    class int8 loses most of (``min_class_recall``, for classes with 10+ float detections).

    One probability per sample (a flag, a wake word, a binary classifier) is judged by its
    decision at 0.5 (agreement >= ``min_decision_agreement``) on the samples where float itself is
    decided: at least ``decision_band`` away from 0.5. Stricter than ``min_top1_agreement``: the
    undecided samples are already left out, and what an app does turns on that one decision
    (MediaPipe hand lite's arm-cpu ONNX passed at 0.925 with 3 of 40 hands on the wrong side).
    """

    max_score_error: float = 0.1
    min_positive_f1: float = 0.9
    positive_threshold: float = 0.5
    positive_margin: float = 0.15
    confidence: float = 0.25
    object_margin: float = 0.0
    min_class_recall: float = 0.7
    decision_band: float = 0.05
    min_decision_agreement: float = 0.95


@dataclass(frozen=True)
class RegressionGate:
    """Boxes, landmarks, regressions: absolute error relative to the group's float dynamic range.

    A landmarks output with one set of points per sample is also judged per sample, as landmark
    tasks are (NME): the mean point distance over that sample's own float extent (the diagonal of
    its points' box), averaged over the samples, at most ``max_point_error``. The range alone is
    lenient where the points move over a range much wider than one object (world coordinates,
    small hands or faces in a frame): MediaPipe hand lite's world landmarks at range error 0.018
    were 6.2% of the hand's extent.
    """

    max_error: float = 0.02
    max_error_p99: float = 0.08
    max_point_error: float = 0.05


@dataclass(frozen=True)
class MapGate:
    """Heatmaps and masks: IoU of the maps thresholded at ``threshold`` (mid-range for unbounded maps).

    ``min_iou`` holds for the IoU pooled over every sample and, on masks, for the mean IoU over
    the samples (frames) where float or int8 marks at least ``min_frame_area`` of the map; no such
    frame may fall below ``min_frame_iou``. Pooled alone, a few frames whose person int8 lost
    (selfie segmentation: float marks 33% of a frame, int8 6%) barely moved the figure.
    """

    min_iou: float = 0.85
    threshold: float = 0.5
    min_frame_iou: float = 0.5
    min_frame_area: float = 0.01


@dataclass(frozen=True)
class EmbeddingGate:
    """Embeddings: cosine per sample (mean over samples, and the worst sample)."""

    min_cosine: float = 0.98
    min_sample_cosine: float = 0.95


@dataclass(frozen=True)
class SequenceGate:
    """Per-step class sequences.

    Without a CTC blank every step is a label: step-wise top-1 agreement and whole-sequence
    agreement are judged. With one (a CTC recogniser) the text is what counts: the token error
    rate (edit distance between the collapsed float and int8 sequences over float's tokens,
    the CER of OCR) is judged; step and whole-sequence agreement are reported, because CTC
    alignment jitter moves steps without changing the text and one token in a long line flips
    the whole line. ``min_ctc_sequence_agreement`` is a floor on whole lines for users who need it.
    """

    min_step_agreement: float = 0.95
    min_sequence_agreement: float = 0.9
    max_token_error: float = 0.05
    min_ctc_sequence_agreement: float = 0.0


@dataclass(frozen=True)
class StreamGate:
    """A recurrent state (``--stream``), judged over a long stream: the held-back sequences chained,
    the state never reset, at least 1000 steps. The outputs are judged there by their kinds, as on
    the sequences. The state by its relative error ``|int8 - float| / |float|`` over the stream's
    last quarter: at most ``max_state_error`` (beyond it the state is not the float model's), and
    at most ``max_state_growth`` times its error over the second quarter (past the first steps from
    the initial state): an error still growing at the end of the stream grows on beyond it.

    Measured on 1200-step streams: Silero VAD's int8 state, rounded at every step, reached
    0.8-4.0 and its decisions agreed with float on 47-93% of the steps; with the state path float
    it stayed at 0.09-0.3 (last over second quarter 0.2-1.2) with decisions agreeing on 96-99%, as
    did a code-built LSTM VAD's TFLite state at 0.25 (1.08) with every decision agreeing."""

    max_state_error: float = 0.5
    max_state_growth: float = 1.5


@dataclass(frozen=True)
class AccuracySpec:
    """Accuracy-gate thresholds, per output kind (see :mod:`edge_sdk.outputs`).

    ``min_cosine``/``min_sqnr_db`` judge outputs of unknown kind (``tensor``);
    ``min_top1_agreement`` judges class scores, logits and sequences' steps; the nested tables
    judge the other kinds.
    """

    min_cosine: float = 0.99
    min_sqnr_db: float = 15.0
    min_top1_agreement: float = 0.9
    holdout_fraction: float = 0.2
    scores: ScoresGate = field(default_factory=ScoresGate)
    regression: RegressionGate = field(default_factory=RegressionGate)
    maps: MapGate = field(default_factory=MapGate)
    embedding: EmbeddingGate = field(default_factory=EmbeddingGate)
    sequence: SequenceGate = field(default_factory=SequenceGate)
    stream: StreamGate = field(default_factory=StreamGate)


@dataclass(frozen=True)
class HostSpec:
    """How to tell that the host *is* this device (used by doctor, load and bench)."""

    arch: list[str] = field(default_factory=list)
    device_globs: list[str] = field(default_factory=list)
    usb_ids: list[str] = field(default_factory=list)
    release_files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PowerSpec:
    """Power sensors to try, in order."""

    sensors: list[PowerSource] = field(default_factory=list)


@dataclass(frozen=True)
class BudgetSpec:
    """Optional latency budget, enforced by ``edge-sdk bench``."""

    p99_ms: float | None = None
    p50_ms: float | None = None


@dataclass(frozen=True)
class Profile:
    """A validated device profile."""

    name: str
    description: str
    artifact: ArtifactSpec
    quantization: QuantizationSpec
    runtime: RuntimeSpec
    aliases: list[str] = field(default_factory=list)
    operators: OperatorSpec = field(default_factory=OperatorSpec)
    accuracy: AccuracySpec = field(default_factory=AccuracySpec)
    host: HostSpec = field(default_factory=HostSpec)
    power: PowerSpec = field(default_factory=PowerSpec)
    budget: BudgetSpec = field(default_factory=BudgetSpec)
    notes: str = ""
    source: str = field(default="", compare=False)

    def to_dict(self) -> dict:
        """Plain-dict form (what the manifest embeds); excludes the source path."""
        d = typed.to_dict(self)
        d.pop("source", None)
        return d

    @property
    def sha256(self) -> str:
        """Hash of the profile's content (canonical JSON), recorded in manifests."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()

    @property
    def primary_format(self) -> str:
        return self.artifact.formats[0]


def _check_registered(profile: Profile, where: str) -> None:
    """Formats and backends must be known to a registered backend (:mod:`edge_sdk.backends`)."""
    from .backends import backend_names, get_backend, known_formats

    formats = known_formats()
    for i, fmt in enumerate(profile.artifact.formats):
        if fmt not in formats:
            raise ProfileError(f"{where}: key 'artifact.formats[{i}]': invalid value {fmt!r}",
                               f"allowed values: {', '.join(repr(f) for f in formats)}")
    names = backend_names()
    for i, step in enumerate(profile.runtime.chain):
        if step.backend not in names:
            raise ProfileError(f"{where}: key 'runtime.chain[{i}].backend': invalid value {step.backend!r}",
                               f"allowed values: {', '.join(repr(n) for n in names)}")
        if step.format not in get_backend(step.backend).formats:
            raise ProfileError(f"{where}: key 'runtime.chain[{i}].format': backend '{step.backend}' cannot read "
                               f"'{step.format}'", f"it reads: {', '.join(get_backend(step.backend).formats)}")


def _validate(profile: Profile, where: str) -> Profile:
    """Value checks beyond the schema: identifiers, finite in-range numbers, a consistent chain."""
    check_name(profile.name, f"{where}: key 'name'")
    for i, alias in enumerate(profile.aliases):
        check_name(alias, f"{where}: key 'aliases[{i}]'")
    check_numbers(profile.to_dict(), where)
    if profile.artifact.batch_size < 1:
        raise ProfileError(f"{where}: key 'artifact.batch_size': must be >= 1, got {profile.artifact.batch_size}")
    if not profile.artifact.formats:
        raise ProfileError(f"{where}: key 'artifact.formats': at least one format is required")
    if not profile.runtime.chain:
        raise ProfileError(f"{where}: key 'runtime.chain': at least one runtime step is required")
    _check_registered(profile, where)
    for i, step in enumerate(profile.runtime.chain):
        if step.format not in profile.artifact.formats:
            raise ProfileError(
                f"{where}: key 'runtime.chain[{i}].format': '{step.format}' is not produced by this profile",
                f"formats produced: {', '.join(profile.artifact.formats)}",
            )
        acc = step.accelerator
        if acc.startswith("external:"):
            lib = acc.split(":", 1)[1]
            if not lib.startswith("/") or "\x00" in lib or len(lib) > 1024:
                raise ProfileError(f"{where}: key 'runtime.chain[{i}].accelerator': an external delegate needs an "
                                   f"absolute library path, got {acc[:120]!r}", "e.g. external:/opt/armnn/libarmnnDelegate.so")
        elif not ACCELERATOR_RE.fullmatch(acc):
            raise ProfileError(f"{where}: key 'runtime.chain[{i}].accelerator': invalid accelerator {acc[:80]!r}",
                               "a delegate, execution provider or device name (xnnpack, CPUExecutionProvider, NPU ...)")
    for key, low in (("quantization.min_calibration_samples", profile.quantization.min_calibration_samples),
                     ("operators.max_rank", profile.operators.max_rank), ("artifact.opset", profile.artifact.opset)):
        if low < 0:
            raise ProfileError(f"{where}: key '{key}': must be 0 or more, got {low}")
    share = profile.quantization.min_int8_share
    if not 0.0 <= share <= 1.0:
        raise ProfileError(f"{where}: key 'quantization.min_int8_share': must be between 0 and 1, got {share}",
                           "The share of the compute (multiply-accumulates) that must run in int8, e.g. 0.5.")
    for key in ("p99_ms", "p50_ms"):
        value = getattr(profile.budget, key)
        if value is not None and not value > 0:
            raise ProfileError(f"{where}: key 'budget.{key}': must be above 0, got {value}")
    check_accuracy(typed.to_dict(profile.accuracy), where)
    a = profile.accuracy
    if not (0.0 < a.holdout_fraction < 1.0):
        raise ProfileError(f"{where}: key 'accuracy.holdout_fraction': must be between 0 and 1, got {a.holdout_fraction}")
    if not a.scores.decision_band < 0.5:  # no probability is 0.5 or more away from 0.5: nothing would be judged
        raise ProfileError(f"{where}: key 'accuracy.scores.decision_band': must be below 0.5, got {a.scores.decision_band}",
                           "At 0.5 or more no sample counts as decided and the decisions go unjudged; the default is 0.05.")
    return profile


def parse_profile(data: dict, where: str) -> Profile:
    """Parse a profile from a TOML-derived dict.

    Raises:
        ProfileError: naming ``where``, the key and the allowed values.
    """
    profile = typed.parse(Profile, data, where=where, error=ProfileError)
    object.__setattr__(profile, "source", where)
    return _validate(profile, where)


def load_profile_file(path: str | Path) -> Profile:
    """Read and validate a profile TOML file.

    Raises:
        ProfileError: unreadable, not a regular file, too large, not UTF-8 text (a binary file),
            invalid TOML, or invalid content.
    """
    from .strictjson import read_regular_file

    path = Path(path)
    raw = read_regular_file(path, limit=MAX_PROFILE_BYTES, what="profile file", error=ProfileError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not a text file (invalid UTF-8 at byte {exc.start}); a profile is TOML text.",
                           "Pass a .toml profile file (docs/profiles.md).") from None
    if "\x00" in text:
        raise ProfileError(f"{path}: not a text file (it holds NUL bytes); a profile is TOML text.",
                           "Pass a .toml profile file (docs/profiles.md).")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ProfileError(f"{path}: invalid TOML: nested too deeply") from None
    return parse_profile(data, str(path))


def _builtin_root():
    """Where the built-in profiles live (a folder of ``*.toml``); tests point it at a copy."""
    return resources.files("edge_sdk.device_profiles")


def load_profile_folder(root, label: str = "built-in profile",
                        known: dict[str, Profile] | None = None) -> tuple[dict[str, Profile], dict[str, ProfileError]]:
    """Read every ``*.toml`` in ``root``, each on its own: one broken file does not hide the others.

    Args:
        root: A folder (``Path`` or an ``importlib.resources`` traversable).
        label: How errors name a file of this folder.
        known: Profiles already loaded from other folders: a file repeating one of their names is an error.

    Returns:
        (profiles by canonical name, the error of each file that failed, by file name). A file
        whose profile name repeats an earlier file's is an error too (the first one is kept).
    """
    profiles: dict[str, Profile] = {}
    errors: dict[str, ProfileError] = {}
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".toml"):
            continue
        where = f"{label} {entry.name}"
        try:
            try:
                data = tomllib.loads(entry.read_text(encoding="utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise ProfileError(f"{where}: invalid TOML: {exc}") from None
            prof = parse_profile(data, where)
            first = profiles.get(prof.name) or (known or {}).get(prof.name)
            if first is not None:
                raise ProfileError(f"{where}: key 'name': '{prof.name}' is already defined by "
                                   f"{first.source}", "give each profile file its own name")
        except ProfileError as exc:
            errors[entry.name] = exc
            continue
        profiles[prof.name] = prof
    return profiles, errors


def profile_path(value: str | None = None) -> list[Path]:
    """The extra profile folders named by ``$EDGE_SDK_PROFILE_PATH`` (or ``value``; ``os.pathsep``-separated)."""
    import os

    text = os.environ.get(PROFILE_PATH_ENV, "") if value is None else value
    return [Path(p) for p in text.split(os.pathsep) if p.strip()]


def _builtin_all() -> tuple[dict[str, Profile], dict[str, ProfileError]]:
    import os

    from .backends import backend_names, known_formats

    # a profile is valid relative to the registered backends: a plugin registered later re-reads the folders
    return _profiles_for(os.environ.get(PROFILE_PATH_ENV, ""), tuple(backend_names()), tuple(known_formats()))


@lru_cache(maxsize=4)
def _profiles_for(extra: str, backends: tuple[str, ...], formats: tuple[str, ...]) -> tuple[dict[str, Profile], dict[str, ProfileError]]:
    profiles, errors = load_profile_folder(_builtin_root())
    for folder in profile_path(extra):
        if not folder.is_dir():
            errors[str(folder)] = ProfileError(f"{PROFILE_PATH_ENV}: {folder} is not a folder",
                                               "name folders of profile *.toml files")
            continue
        more, bad = load_profile_folder(folder, label=f"profile in {folder}:", known=profiles)
        profiles.update(more)
        errors.update({str(folder / k): v for k, v in bad.items()})
    if errors:
        import logging

        log = logging.getLogger("edge_sdk.profiles")
        for exc in errors.values():
            log.warning("skipped a profile: %s%s", exc.message, f" ({exc.hint})" if exc.hint else "")
    return profiles, errors


_builtin_all.cache_clear = _profiles_for.cache_clear  # type: ignore[attr-defined]  # tests re-read the folders


def _builtin() -> dict[str, Profile]:
    return _builtin_all()[0]


def builtin_profiles() -> dict[str, Profile]:
    """All built-in profiles that load, by canonical name (see :func:`builtin_profile_errors` for the others)."""
    return dict(_builtin())


def builtin_profile_errors() -> dict[str, ProfileError]:
    """Built-in profile files that failed to load, by file name, each with its error (file, key, allowed values)."""
    return dict(_builtin_all()[1])


def _broken_builtin(key: str) -> ProfileError | None:
    """The load error of the built-in profile file named ``key`` (``key.toml``), if that file is broken."""
    return _builtin_all()[1].get(f"{key}.toml")


def all_aliases() -> dict[str, str]:
    """Alias -> canonical name, from :data:`ALIASES` and each profile's own ``aliases``."""
    out = dict(ALIASES)
    for prof in _builtin().values():
        for alias in prof.aliases:
            out[alias] = prof.name
    return out


def resolve_profile(name_or_path: str | Path | Profile, *, notes: list[str] | None = None) -> Profile:
    """Resolve a profile name, alias or file path.

    Args:
        name_or_path: Canonical name (``jetson-orin``), alias (``jetson``), a ``.toml`` path,
            or an already-parsed :class:`Profile`.
        notes: If given, user-facing notes (e.g. about the retired MYRIAD plugin) are appended.

    Raises:
        ProfileError: unknown name (listing the available ones) or invalid file.
    """
    if isinstance(name_or_path, Profile):
        return name_or_path
    text = str(name_or_path)
    if text.endswith(".toml") or Path(text).is_file():
        return load_profile_file(text)
    key = text.strip().lower()
    builtin = _builtin()
    if key in builtin:
        return builtin[key]
    aliases = all_aliases()
    broken = _broken_builtin(aliases.get(key, key))
    if broken is not None:
        raise ProfileError(f"Built-in profile '{aliases.get(key, key)}' could not be loaded: {broken.message}", broken.hint)
    if key in aliases and aliases[key] in builtin:
        if key in RETIRED and notes is not None:
            notes.append(RETIRED[key])
        return builtin[aliases[key]]
    names = ", ".join(sorted(builtin))
    alias_text = ", ".join(f"{a}->{c}" for a, c in sorted(aliases.items()))
    raise ProfileError(
        f"Unknown profile '{text}'.",
        f"Available profiles: {names}. Aliases: {alias_text}. Or pass a profile file path (*.toml).",
    )
