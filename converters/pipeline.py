"""``edge_sdk.convert``: one source model -> one artifact folder per device profile.

Order of work, so that bad input fails before anything expensive or anything written:
resolve profiles, refuse existing output folders (unless ``force``), read the source, fix
static shapes for every profile, load and split the calibration data. Then per profile: run
each format converter into a staging folder beside the destination, write the manifest, run the
accuracy gate through the runtime facade, and publish the folder with one rename. A gate failure
publishes nothing (unless ``allow_accuracy_drop``); any error or interrupt leaves nothing behind.
Each profile is published on its own: an error in a later profile leaves the earlier, complete
and gate-checked artifacts in place (they are valid), and the error names the failing step.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from edge_sdk import preprocess as pp
from edge_sdk import typed
from edge_sdk._deps import version_of
from edge_sdk._version import __version__
from edge_sdk.errors import AccuracyGateError, CalibrationError, ConversionError, InputValidationError
from edge_sdk.fsutil import staging_dir
from edge_sdk.manifest import Manifest, Preprocessing, ProfileRef, SourceInfo, file_entry, write_manifest
from edge_sdk.offline import no_telemetry
from edge_sdk.profiles import Profile, resolve_profile

from . import accuracy as acc
from .base import FORMATS, ConvertJob, FormatResult, SourceModel
from .calibration import CalibrationSet, load_calibration
from .shapes import StaticShapes, fix_shapes, parse_input_shape
from .sources import read_source, to_static_onnx


@dataclass
class ProfileSummary:
    """What happened for one profile.

    Attributes:
        profile: Profile name.
        folder: The artifact folder (exists only when ``published``).
        published: Whether the folder was written.
        formats: Artifact formats produced.
        files: Files of the artifact (relative to ``folder``).
        gate: ``passed``, ``failed`` or ``not_meaningful`` (uncalibrated).
        accuracy: The manifest's accuracy section.
        warnings: Things the user should know.
    """

    profile: str
    folder: str
    published: bool
    formats: list[str]
    files: list[str]
    gate: str
    accuracy: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class ConvertSummary:
    """The result of :func:`convert` (``--json`` prints :meth:`to_dict`)."""

    source: str
    source_format: str
    out: str
    profiles: list[ProfileSummary]

    @property
    def ok(self) -> bool:
        return all(p.published for p in self.profiles)

    def to_dict(self) -> dict[str, Any]:
        return {**typed.to_dict(self), "ok": self.ok}


class _GateFailed(Exception):
    """Raised inside the staging context so the staging folder is discarded."""


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _normalize_shapes(input_shapes) -> dict[str, list[int]]:
    if not input_shapes:
        return {}
    if isinstance(input_shapes, dict):
        return {str(k): [int(d) for d in v] for k, v in input_shapes.items()}
    return dict(parse_input_shape(s) for s in input_shapes)


def _normalize_preprocess(spec) -> pp.PreprocessSpec | None:
    if spec is None or isinstance(spec, pp.PreprocessSpec):
        return spec
    if isinstance(spec, dict):
        return pp.from_dict(spec)
    return pp.parse(str(spec))


def _resolve_profiles(profiles, log) -> list[Profile]:
    items = [profiles] if isinstance(profiles, (str, Path, Profile)) else list(profiles or [])
    if not items:
        raise InputValidationError("No profile given.", "Pass --profile NAME (see `edge-sdk profiles list`).")
    out: dict[str, Profile] = {}
    for item in items:
        notes: list[str] = []
        prof = resolve_profile(item, notes=notes)
        for note in notes:
            log(f"note: {note}")
        out.setdefault(prof.name, prof)
    for prof in out.values():
        for fmt in prof.artifact.formats:
            if fmt not in FORMATS:
                raise ConversionError(f"Profile '{prof.name}' asks for artifact format '{fmt}', which convert cannot make.",
                                      f"Formats convert makes: {', '.join(FORMATS.names())}")
        if prof.quantization.precision != "int8":
            raise ConversionError(f"Profile '{prof.name}' asks for {prof.quantization.precision}; this converter makes int8 artifacts.",
                                  "Use an int8 profile.")
    return list(out.values())


@dataclass
class _Prepared:
    """Per (shapes, hold-out fraction): the static ONNX, the calibration split and the float outputs."""

    shapes: StaticShapes
    static_onnx: Path
    calib: CalibrationSet
    reference: list[dict]
    reference_runtime: str


def convert(model, profiles, out, *, calib=None, calib_count: int | None = None, input_shapes=None, preprocess=None,
            allow_accuracy_drop: bool = False, force: bool = False, validation_fn: Callable | None = None,
            validation=None, progress: Callable[[str], None] | None = _stderr) -> ConvertSummary:
    """Convert ``model`` for each profile into ``out/<profile>/``.

    Args:
        model: Source model path (ONNX, SavedModel folder, ``.keras``/``.h5``, float ``.tflite``).
        profiles: Profile name/alias/path, or a list of them.
        out: Output folder; each profile's artifact lands in ``out/<profile-name>/``.
        calib: Calibration data (image folder, ``.npy``, ``.npz``, folder of ``<input>.npy``) or ``"random"``.
        calib_count: Use at most this many samples.
        input_shapes: ``{name: [d0, ...]}`` or ``["name:d0,d1", ...]`` fixing dynamic dims.
        preprocess: Image preprocessing: a :class:`~edge_sdk.preprocess.PreprocessSpec`, dict or spec string.
        allow_accuracy_drop: Publish even when the accuracy gate fails (the manifest says so).
        force: Replace existing artifact folders.
        validation_fn: NNCF validation function (OpenVINO formats: accuracy-controlled quantization).
        validation: Separate data for the accuracy gate (same forms as ``calib``); by default the
            profile's ``holdout_fraction`` of ``calib`` is held back instead.
        progress: Called with one line per profile and stage (default: stderr; None: silent).

    Returns:
        A :class:`ConvertSummary`.

    Raises:
        ProfileError, ModelLoadError, InputValidationError, CalibrationError, ConversionError: bad
            input or a failed step (nothing is written).
        AccuracyGateError: a profile failed the gate (its folder is not written); ``report`` holds
            the summary.
    """
    # Tools print progress bars (NNCF) and notes to stdout; stdout belongs to the caller (--json).
    out_created = not Path(out).exists()
    try:
        with contextlib.redirect_stdout(sys.stderr), no_telemetry():
            return _convert(model, profiles, out, calib, calib_count, input_shapes, preprocess, allow_accuracy_drop,
                            force, validation_fn, validation, progress or (lambda _line: None))
    finally:
        # Leave no trace of a run that published nothing: remove the output folder we created.
        if out_created and Path(out).is_dir() and not any(Path(out).iterdir()):
            Path(out).rmdir()


def _convert(model, profiles, out, calib, calib_count, input_shapes, preprocess, allow_accuracy_drop, force,
             validation_fn, validation, log) -> ConvertSummary:
    profs = _resolve_profiles(profiles, log)
    out = Path(out)
    existing = [p.name for p in profs if (out / p.name).exists()]
    if existing and not force:
        raise InputValidationError(f"Artifact folder(s) already exist: {', '.join(str(out / n) for n in existing)}.",
                                   "Pass --force (force=True) to replace them, or choose another --out.")
    shapes_user = _normalize_shapes(input_shapes)
    spec = _normalize_preprocess(preprocess)
    if calib is None:
        raise CalibrationError("int8 conversion needs calibration data; none was given.",
                               "Pass --calib DIR_OF_IMAGES (or .npy/.npz), or --calib random for an uncalibrated smoke test.")
    log(f"reading {model}")
    source = read_source(model)
    log(f"source: {source.format}, inputs {[(s.name, s.shape) for s in source.inputs]}, "
        f"outputs {[(s.name, s.shape) for s in source.outputs]}")
    static = {p.name: fix_shapes(source.inputs, p.artifact.batch_size, shapes_user) for p in profs}
    options = {"validation_fn": validation_fn} if validation_fn is not None else {}
    summaries: list[ProfileSummary] = []
    with tempfile.TemporaryDirectory(prefix="edge-sdk-convert-") as tmp:
        root = Path(tmp)
        prepared: dict[str, _Prepared] = {}
        for prof in profs:
            key = json.dumps([static[prof.name].shapes, prof.accuracy.holdout_fraction], sort_keys=True)
            if key not in prepared:
                prepared[key] = _prepare(source, static[prof.name], prof, calib, calib_count, spec, validation,
                                         root / f"prep{len(prepared)}", log)
            summaries.append(_convert_profile(source, prof, prepared[key], out, root / prof.name, force,
                                              allow_accuracy_drop, options, log))
    summary = ConvertSummary(str(model), source.format, str(out), summaries)
    failed = [p for p in summaries if not p.published]
    if failed:
        lines = [f"{p.profile}: " + "; ".join(f for r in p.accuracy.get("formats", {}).values() for f in r["failures"])
                 for p in failed]
        raise AccuracyGateError("Accuracy gate failed (nothing written for these profiles): " + " | ".join(lines),
                                "Calibrate with more representative data, or pass --allow-accuracy-drop to keep the "
                                "artifact (its manifest then records the failure).", report=summary.to_dict())
    return summary


def _prepare(source: SourceModel, shapes: StaticShapes, prof: Profile, calib, calib_count, spec, validation,
             folder: Path, log) -> _Prepared:
    folder.mkdir(parents=True)
    log(f"static shapes: {shapes.shapes}" + (f" ({'; '.join(shapes.notes)})" if shapes.notes else ""))
    cs = load_calibration(calib, source.inputs, shapes.shapes, holdout_fraction=prof.accuracy.holdout_fraction,
                          count=calib_count, preprocess=spec, min_samples=prof.quantization.min_calibration_samples,
                          validation=validation)
    log(f"calibration: {cs.kind}, {cs.info['calibration_samples']} samples for calibration, "
        f"{cs.info['holdout_samples']} for the accuracy gate ({cs.info['holdout_source']})")
    for w in cs.warnings:
        log(f"warning: {w}")
    log("exporting the static float model")
    static_onnx = to_static_onnx(source, shapes.shapes, folder / "float_static.onnx")
    log("running the float reference on the held-back samples")
    ref, runtime = acc.float_outputs(source, static_onnx, cs.holdout)
    return _Prepared(shapes, static_onnx, cs, ref, runtime)


def _run_format(fmt: str, job: ConvertJob) -> FormatResult:
    try:
        converter = FORMATS.get(fmt)
    except ImportError as exc:
        raise ConversionError(f"Artifact format '{fmt}' is not available in this installation ({exc}).") from None
    return converter(job)


def _convert_profile(source: SourceModel, prof: Profile, prep: _Prepared, out: Path, scratch: Path, force: bool,
                     allow_drop: bool, options: dict, log) -> ProfileSummary:
    final = out / prof.name
    try:
        with staging_dir(final, force=force) as stage:
            summary = _build_profile(source, prof, prep, final, stage, scratch, allow_drop, options, log)
    except FileExistsError:
        raise InputValidationError(f"Artifact folder {final} already exists.", "Pass --force to replace it.") from None
    except _GateFailed as failed:
        log(f"[{prof.name}] accuracy gate failed: nothing written")
        return failed.args[0]
    log(f"[{prof.name}] wrote {final}")
    return summary


def _build_profile(source: SourceModel, prof: Profile, prep: _Prepared, final: Path, stage: Path, scratch: Path,
                   allow_drop: bool, options: dict, log) -> ProfileSummary:
    """Convert every format of ``prof`` into ``stage``, write the manifest, run the gate.

    Raises:
        _GateFailed: the gate failed and ``allow_drop`` is False (args[0]: the summary).
    """
    name = prof.name
    cs = prep.calib
    warnings = list(cs.warnings)
    results: dict[str, FormatResult] = {}
    for fmt in prof.artifact.formats:
        log(f"[{name}] {fmt}: converting")
        (scratch / fmt).mkdir(parents=True)
        job = ConvertJob(source=source, profile=prof, input_shapes=prep.shapes.shapes, calib=cs.calib,
                         holdout=cs.holdout, calibrated=cs.calibrated, preprocess=cs.preprocess, workdir=stage,
                         scratch=scratch / fmt, log=lambda m, f=fmt: log(f"[{name}] {f}: {m}"),
                         options=dict(options), static_onnx=prep.static_onnx)
        results[fmt] = _run_format(fmt, job)
        for w in results[fmt].warnings:
            log(f"[{name}] warning: {w}")
            warnings.append(w)
    manifest = _manifest(source, prof, prep, results, stage, warnings)
    write_manifest(stage, manifest)
    log(f"[{name}] accuracy gate on {len(cs.holdout)} held-back sample(s)")
    report = {fmt: acc.evaluate(stage, acc.gate_step(prof, fmt), cs.holdout, prep.reference, prof.accuracy)
              for fmt in prof.artifact.formats}
    passed = all(r["passed"] for r in report.values())
    status = "not_meaningful" if not cs.calibrated else ("passed" if passed else "failed")
    for fmt, r in report.items():
        log(f"[{name}] {fmt} on {r['backend']}/{r['device']}: {acc.format_metrics(r['outputs'])} -> "
            f"{'ok' if r['passed'] else 'FAILED: ' + '; '.join(r['failures'])}")
    manifest.accuracy = {"gate": status, "meaningful": cs.calibrated, "thresholds": acc.thresholds(prof.accuracy),
                         "reference": prep.reference_runtime, "holdout_samples": cs.info["holdout_samples"],
                         "formats": report}
    if status == "failed" and allow_drop:
        warnings.append("accuracy gate FAILED; published anyway because of --allow-accuracy-drop")
    if status == "not_meaningful":
        warnings.append("uncalibrated (--calib random): the accuracy gate was not enforced")
    manifest.warnings = list(dict.fromkeys(warnings))
    write_manifest(stage, manifest)
    published = status != "failed" or allow_drop
    files = sorted(a.path for a in manifest.artifacts) + ["manifest.json"] if published else []
    summary = ProfileSummary(name, str(final), published, list(prof.artifact.formats), files, status,
                             manifest.accuracy, manifest.warnings)
    if not published:
        raise _GateFailed(summary)
    return summary


def _manifest(source: SourceModel, prof: Profile, prep: _Prepared, results: dict[str, FormatResult], stage: Path,
              warnings: list[str]) -> Manifest:
    primary = results[prof.primary_format]
    artifacts = []
    tools: dict[str, str] = {"edge-sdk": __version__}
    backend_options: dict[str, Any] = {"routes": {}}
    for fmt, r in results.items():
        artifacts.append(file_entry(stage, r.model_file, fmt=fmt, precision=r.precision, role="model"))
        artifacts += [file_entry(stage, rel, fmt=fmt, precision=r.precision, role=role) for rel, role in r.extra_files]
        tools.update(r.tools)
        backend_options.update(r.backend_options)
        backend_options["routes"][fmt] = r.route
    if source.format != "onnx":  # the static float ONNX every format starts from came from tf2onnx
        tools.setdefault("tf2onnx", version_of("tf2onnx") or "")
        tools.setdefault("tensorflow", version_of("tensorflow") or "")
    cs = prep.calib
    spec = cs.preprocess.to_dict() if cs.preprocess else None
    static = prep.shapes.to_manifest(source.inputs)
    static["outputs"] = {t.name: list(t.shape) for t in primary.outputs}
    return Manifest(
        profile=ProfileRef(prof.name, prof.sha256, prof.to_dict()),
        source=SourceInfo(str(source.path), source.format, source.sha256),
        artifacts=artifacts, inputs=primary.inputs, outputs=primary.outputs,
        preprocessing=Preprocessing(spec, pp.spec_hash(cs.preprocess)), tools=tools,
        accuracy={"gate": "pending"}, calibration=dict(cs.info), static_shapes=static,
        backend_options=backend_options, warnings=list(dict.fromkeys(warnings)))
