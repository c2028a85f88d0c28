"""One profile: convert each format, write the manifest, judge each format, publish what passed.

Each format is converted on its own (a :class:`ConversionError` fails that format, not the
profile), the manifest lists every converted format while the gate runs, and each format is
judged by the gate through the runtime facade. Then:

* formats that passed (or every format, with ``--allow-accuracy-drop``) are published in
  ``out/<profile>/`` with a manifest listing only them and, per format, what passed and why;
* if any format failed its gate, the whole candidate is kept in ``out/.rejected/<profile>/``;
* if nothing passed, ``out/<profile>/`` is not written (an older one is left as it was).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from edge_sdk import preprocess as pp
from edge_sdk._deps import version_of
from edge_sdk._version import __version__
from edge_sdk.errors import ConversionError, InputValidationError
from edge_sdk.fsutil import staging_dir
from edge_sdk.manifest import Manifest, Preprocessing, ProfileRef, SourceInfo, TensorSpec, file_entry, write_manifest
from edge_sdk.outputs import OutputKind
from edge_sdk.profiles import Profile

from . import accuracy as acc
from .base import FORMATS, ConvertJob, FormatResult, SourceModel
from .publish import drop_formats, keep_rejected
from .summary import FormatOutcome, ProfileSummary

if TYPE_CHECKING:
    from .pipeline import Prepared


@dataclass
class BuildContext:
    """Everything one profile's build needs."""

    source: SourceModel
    profile: Profile
    prep: "Prepared"
    out: Path
    scratch: Path
    force: bool
    allow_drop: bool
    options: dict[str, Any] = field(default_factory=dict)
    task: Callable | None = None
    log: Callable[[str], None] = print

    def say(self, line: str) -> None:
        self.log(f"[{self.profile.name}] {line}")


class _NothingPublished(Exception):
    """Raised inside the staging context so the staging folder is discarded (args[0]: summary)."""


def build_profile(ctx: BuildContext) -> ProfileSummary:
    """Build, judge and publish one profile; never raises for a conversion or gate failure."""
    final = ctx.out / ctx.profile.name
    try:
        with staging_dir(final, force=ctx.force) as stage:
            summary = _build(ctx, final, stage)
    except FileExistsError:
        raise InputValidationError(f"Artifact folder {final} already exists.", "Pass --force to replace it.") from None
    except _NothingPublished as nothing:
        summary = nothing.args[0]
        ctx.say("nothing published" + (f": {summary.error}" if summary.error else ""))
        return summary
    ctx.say(f"wrote {final} ({', '.join(summary.formats)})")
    return summary


def _run_format(fmt: str, job: ConvertJob) -> FormatResult:
    try:
        converter = FORMATS.get(fmt)
    except ImportError as exc:
        raise ConversionError(f"Artifact format '{fmt}' is not available in this installation ({exc}).") from None
    return converter(job)


def _convert_formats(ctx: BuildContext, stage: Path) -> tuple[dict[str, FormatResult], dict[str, FormatOutcome], list[str]]:
    cs = ctx.prep.calib
    results: dict[str, FormatResult] = {}
    failed: dict[str, FormatOutcome] = {}
    warnings = list(cs.warnings)
    for fmt in ctx.profile.artifact.formats:
        ctx.say(f"{fmt}: converting")
        (ctx.scratch / fmt).mkdir(parents=True)
        before = {p for p in stage.rglob("*")}
        job = ConvertJob(source=ctx.source, profile=ctx.profile, input_shapes=ctx.prep.shapes.shapes, calib=cs.calib,
                         holdout=cs.holdout, calibrated=cs.calibrated, preprocess=cs.preprocess, workdir=stage,
                         scratch=ctx.scratch / fmt, log=lambda m, f=fmt: ctx.say(f"{f}: {m}"),
                         options=dict(ctx.options), onnx_provider=ctx.prep.onnx, tflite_provider=ctx.prep.tflite,
                         cache={"shared": ctx.prep.shared, "dir": ctx.scratch / fmt})
        try:
            results[fmt] = _run_format(fmt, job)
        except ConversionError as exc:
            reason = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
            failed[fmt] = FormatOutcome(fmt, "conversion_failed", reason)
            ctx.say(f"{fmt}: conversion FAILED: {reason}")
            for p in sorted(set(stage.rglob("*")) - before, reverse=True):  # leave nothing of it behind
                p.unlink() if p.is_file() else p.rmdir()
            continue
        for w in results[fmt].warnings:
            ctx.say(f"warning: {fmt}: {w}")
            warnings.append(f"{fmt}: {w}")
    return results, failed, warnings


def _build(ctx: BuildContext, final: Path, stage: Path) -> ProfileSummary:
    name, cs = ctx.profile.name, ctx.prep.calib
    results, outcomes, warnings = _convert_formats(ctx, stage)
    if not results:
        raise _NothingPublished(ProfileSummary(name, str(final), False, [], [], "not_run", {}, warnings,
                                               list(outcomes.values()), error="no format could be converted"))
    manifest = _manifest(ctx, results, stage, warnings)
    write_manifest(stage, manifest)
    ctx.say(f"accuracy gate on {len(cs.holdout)} held-back sample(s)")
    reports = {}
    for fmt in results:
        r = acc.evaluate(stage, acc.gate_step(ctx.profile, fmt), cs.holdout, ctx.prep.reference, ctx.profile.accuracy,
                         ctx.prep.kinds, ctx.task)
        reports[fmt] = r
        where = f"{r['backend']}/{r['device']}" + ("" if r["native"] else " (CPU stand-in)")
        ctx.say(f"{fmt} gate on {where}: {acc.format_metrics(r['outputs'])}")
        ctx.say(f"{fmt} gate: " + ("passed" if r["passed"] else "FAILED: " + "; ".join(r["failures"])))
    passed = [f for f in results if reports[f]["passed"] or not cs.calibrated]
    failing = [f for f in results if f not in passed]
    meaningful = cs.calibrated
    accuracy = {"gate": "not_meaningful" if not meaningful else ("failed" if failing else "passed"),
                "meaningful": meaningful, "thresholds": acc.thresholds(ctx.profile.accuracy),
                "reference": ctx.prep.reference_runtime, "holdout_samples": cs.info["holdout_samples"],
                "kinds": acc.kinds_table(ctx.prep.kinds), "formats": reports}
    manifest.accuracy = accuracy
    rejected = ""
    if failing and not ctx.allow_drop:
        reason = "; ".join(f"{f}: {'; '.join(reports[f]['failures'][:3])}" for f in failing)
        rejected = str(keep_rejected(stage, ctx.out, name, manifest, reason))
        ctx.say(f"rejected candidate kept for inspection in {rejected}")
    for f in results:
        status = "published" if f in passed else ("kept" if ctx.allow_drop else "gate_failed")
        why = "" if f in passed else "; ".join(reports[f]["failures"])
        outcomes[f] = FormatOutcome(f, status, why, acc.format_metrics(reports[f]["outputs"]), results[f].route)  # type: ignore[arg-type]
    ordered = [outcomes[f] for f in ctx.profile.artifact.formats if f in outcomes]
    publish = list(results) if ctx.allow_drop else passed
    if not publish:
        raise _NothingPublished(ProfileSummary(name, str(final), False, [], [], "failed", accuracy, warnings, ordered,
                                               rejected, "every format failed its accuracy gate"))
    if failing and not ctx.allow_drop:
        drop_formats(stage, manifest, set(failing))
        manifest = _manifest(ctx, {f: results[f] for f in publish}, stage, warnings)
        accuracy = dict(accuracy, gate="passed" if meaningful else "not_meaningful",
                        formats={f: reports[f] for f in publish},
                        rejected={f: {"status": "gate_failed", "failures": reports[f]["failures"], "kept_in": rejected}
                                  for f in failing})
    if any(o.status == "conversion_failed" for o in ordered):
        accuracy.setdefault("rejected", {}).update({o.format: {"status": "conversion_failed", "reason": o.reason}
                                                    for o in ordered if o.status == "conversion_failed"})
    manifest.accuracy = accuracy
    if accuracy["gate"] == "failed":
        warnings.append("accuracy gate FAILED; published anyway because of --allow-accuracy-drop")
    if not meaningful:
        warnings.append("uncalibrated (--calib random): the accuracy gate was not enforced")
    manifest.warnings = list(dict.fromkeys(warnings))
    write_manifest(stage, manifest)
    files = sorted(a.path for a in manifest.artifacts) + ["manifest.json"]
    return ProfileSummary(name, str(final), True, publish, files, accuracy["gate"], accuracy, manifest.warnings,
                          ordered, rejected)


def _with_kinds(specs: list[TensorSpec], kinds: dict[str, OutputKind], source_outputs: list[TensorSpec]) -> list[TensorSpec]:
    names = [s.name for s in source_outputs]
    for i, spec in enumerate(specs):
        spec.kind = kinds.get(spec.name) or (kinds.get(names[i]) if i < len(names) else None)
    return specs


def _manifest(ctx: BuildContext, results: dict[str, FormatResult], stage: Path, warnings: list[str]) -> Manifest:
    source, prof, prep = ctx.source, ctx.profile, ctx.prep
    primary = next(r for f, r in results.items())
    artifacts = []
    tools: dict[str, str] = {"edge-sdk": __version__}
    backend_options: dict[str, Any] = {"routes": {}}
    for fmt, r in results.items():
        artifacts.append(file_entry(stage, r.model_file, fmt=fmt, precision=r.precision, role="model"))
        artifacts += [file_entry(stage, rel, fmt=fmt, precision=r.precision, role=role) for rel, role in r.extra_files]
        tools.update(r.tools)
        backend_options.update(r.backend_options)
        backend_options["routes"][fmt] = r.route
    if source.format in ("keras", "savedmodel") or tools.get("tf2onnx"):  # the static float ONNX came from tf2onnx
        tools.setdefault("tf2onnx", version_of("tf2onnx") or "")
        tools.setdefault("tensorflow", version_of("tensorflow") or "")
    cs = prep.calib
    spec = cs.preprocess.to_dict() if cs.preprocess else None
    static = prep.shapes.to_manifest(source.inputs)
    static["outputs"] = {t.name: list(t.shape) for t in primary.outputs}
    return Manifest(
        profile=ProfileRef(prof.name, prof.sha256, prof.to_dict()),
        source=SourceInfo(str(source.path), source.format, source.sha256),
        artifacts=artifacts, inputs=primary.inputs, outputs=_with_kinds(primary.outputs, prep.kinds, source.outputs),
        preprocessing=Preprocessing(spec, pp.spec_hash(cs.preprocess)), tools=tools,
        accuracy={"gate": "pending"}, calibration=dict(cs.info), static_shapes=static,
        backend_options=backend_options, warnings=list(dict.fromkeys(warnings)))
