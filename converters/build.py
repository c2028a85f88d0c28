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

import errno
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from edge_sdk import preprocess as pp
from edge_sdk._deps import version_of
from edge_sdk._version import __version__
from edge_sdk.errors import (ConversionBugError, ConversionError, DelegateUnavailableError, InputValidationError,
                             MissingDependencyError, describe_bug)
from edge_sdk.fsutil import staging_dir
from edge_sdk import typed
from edge_sdk.manifest import (BakedPreprocessing, Manifest, PostprocessSpec, Preprocessing, ProfileRef, SourceInfo,
                               StreamSpec, TensorSpec, file_entry,
                               write_manifest)
from edge_sdk.outputs import OutputKind
from edge_sdk.profiles import Profile

from . import accuracy as acc
from .base import FORMATS, FormatResult, SourceModel
from .int8_compute import INT8_FORMATS, floor_failure, label
from .openvino_bake import bake_formats
from .publish import drop_formats, keep_rejected
from .recovery import Recovery, RecoveryConfig, convert_format, copy_into
from .recovery.report import REPORT_STEM, write_report
from .summary import FormatOutcome, ProfileSummary
from .targets import record_float_layers

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
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)

    def say(self, line: str) -> None:
        self.log(f"[{self.profile.name}] {line}")


class _NothingPublished(Exception):
    """Raised inside the staging context so the staging folder is discarded (args[0]: summary)."""


#: Storage faults that end one profile, not the run: no space, quota, read-only, permission, file too large.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def storage_fault(exc: OSError) -> str:
    """One line naming the fault and the file(s) it hit (source and destination of a copy)."""
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f)
    return f"{exc.strerror or exc} (errno {exc.errno}{': ' + where if where else ''})"


def build_profile(ctx: BuildContext) -> ProfileSummary:
    """Build, judge and publish one profile; never raises for a conversion or gate failure, nor for a
    full disk or an unwritable folder (the staging folder is removed; the next profile is tried)."""
    final = ctx.out / ctx.profile.name
    try:
        with staging_dir(final, force=ctx.force) as stage:
            summary = _build(ctx, final, stage)
    except FileExistsError:
        raise InputValidationError(f"Artifact folder {final} already exists.", "Pass --force to replace it.") from None
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            error = describe_bug(exc, f"building the {ctx.profile.name} artifact") + "; nothing of it was published"
            ctx.say(f"nothing published: {error}")
            return ProfileSummary(ctx.profile.name, str(final), False, [], [], "not_run", {}, [], [], error=error, bug=True)
        error = f"could not write it: {storage_fault(exc)}; nothing of it was published"
        ctx.say(f"nothing published: {error}")
        return ProfileSummary(ctx.profile.name, str(final), False, [], [], "not_run", {}, [], [], error=error)
    except _NothingPublished as nothing:
        summary = nothing.args[0]
        ctx.say("nothing published" + (f": {summary.error}" if summary.error else ""))
        return summary
    except Exception as exc:  # noqa: BLE001 - our bug: this profile's row says so, the next one is tried
        error = describe_bug(exc, f"building the {ctx.profile.name} artifact") + "; nothing of it was published"
        ctx.say(f"nothing published: {error}")
        return ProfileSummary(ctx.profile.name, str(final), False, [], [], "not_run", {}, [], [], error=error, bug=True)
    ctx.say(f"wrote {final} ({', '.join(summary.formats)})")
    return summary


def _convert_formats(ctx: BuildContext) -> tuple[dict[str, Recovery], dict[str, FormatOutcome], list[str]]:
    """Each format: its baseline candidate and, when that fails the gate, the recovery loop."""
    cs = ctx.prep.calib
    recs: dict[str, Recovery] = {}
    failed: dict[str, FormatOutcome] = {}
    warnings = list(cs.warnings)
    for fmt in ctx.profile.artifact.formats:
        ctx.say(f"{fmt}: converting")
        if fmt not in FORMATS:
            failed[fmt] = FormatOutcome(fmt, "conversion_failed", f"format '{fmt}' is not available in this installation")
            continue
        try:
            recs[fmt] = convert_format(ctx, fmt, ctx.recovery)
        except (ConversionError, MissingDependencyError, DelegateUnavailableError, InputValidationError) as exc:
            reason = exc.message + (f" (hint: {exc.hint})" if exc.hint else "")
            failed[fmt] = FormatOutcome(fmt, "conversion_failed", reason, bug=isinstance(exc, ConversionBugError))
            ctx.say(f"{fmt}: conversion FAILED: {reason}")
            continue
        except MemoryError:
            failed[fmt] = FormatOutcome(fmt, "conversion_failed", "ran out of memory converting or judging it")
            ctx.say(f"{fmt}: conversion FAILED: out of memory")
            continue
        except Exception as exc:  # noqa: BLE001 - our bug: this format's row says so, the others go on
            if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
                raise  # a full disk or an unwritable folder ends the profile (build_profile says so)
            reason = describe_bug(exc, f"converting {fmt}")
            failed[fmt] = FormatOutcome(fmt, "conversion_failed", reason, bug=True)
            ctx.say(f"{fmt}: conversion FAILED: {reason}")
            continue
        for w in recs[fmt].chosen.result.warnings:
            ctx.say(f"warning: {fmt}: {w}")
            warnings.append(f"{fmt}: {w}")
    return recs, failed, warnings


def _int8_floor(ctx: BuildContext, results: dict, reports: dict) -> set[str]:
    """"int8 means int8": the formats whose chosen artifact is not int8 enough for the profile's
    floor (``quantization.min_int8_share``) fail their gate, the reason first. Decided after
    recovery, on the artifact it chose: recovery keeps the fewest layers float that pass, so no
    passing candidate of higher share was left behind. Each report's ``int8_compute.floor`` records
    the decision and the accuracy verdict it was made beside (``accuracy_passed``)."""
    floor = ctx.profile.quantization.min_int8_share
    target = "" if ctx.profile.operators.compiler == "edgetpu_compiler" else ctx.profile.name  # the TPU runs no float
    refused = set()
    for fmt, r in reports.items():
        c = r.get("int8_compute")
        if fmt not in INT8_FORMATS or results[fmt].precision != "int8" or not c:
            continue
        why = floor_failure(c, floor, target)
        c["floor"] = {"min_share": floor, "by": "MACs" if c.get("mac_share") is not None else "ops",
                      "passed": not why, "accuracy_passed": bool(r["passed"])}
        if why:
            refused.add(fmt)
            r["failures"] = [why] + list(r.get("failures") or [])
            r["passed"] = False
    return refused


def _build(ctx: BuildContext, final: Path, stage: Path) -> ProfileSummary:
    name, cs = ctx.profile.name, ctx.prep.calib
    recs, outcomes, warnings = _convert_formats(ctx)
    if not recs:
        raise _NothingPublished(ProfileSummary(name, str(final), False, [], [], "not_run", {}, warnings,
                                               list(outcomes.values()), error="no format could be converted"))
    for rec in recs.values():
        copy_into(rec.chosen, stage)
    bake_formats(ctx, recs, stage, outcomes)  # --bake-preprocess: after the gate, checked on its own
    if not recs:
        raise _NothingPublished(ProfileSummary(name, str(final), False, [], [], "not_run", {}, warnings,
                                               list(outcomes.values()), error="no format could be converted"))
    results = {fmt: rec.chosen.result for fmt, rec in recs.items()}
    reports = {fmt: rec.chosen.report for fmt, rec in recs.items()}
    manifest = manifest_for(ctx, results, stage, warnings)
    _record_recovery(ctx, manifest, recs, stage)
    not_int8 = _int8_floor(ctx, results, reports)
    for fmt, r in reports.items():
        where = f"{r['backend']}/{r['device']}" + ("" if r["native"] else " (CPU stand-in)")
        ctx.say(f"{fmt} gate on {where}: {acc.report_figures(r)}")
        if r.get("int8_compute"):
            ctx.say(f"{fmt} int8 compute (convolutions, matmuls running in int8): {label(r['int8_compute'])}")
        ctx.say(f"{fmt} gate: " + ("passed" if r["passed"] else "FAILED: " + "; ".join(r["failures"])))
    passed = [f for f in results if (reports[f]["passed"] or not cs.calibrated) and f not in not_int8]
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
        outcomes[f] = FormatOutcome(f, status, why, acc.report_figures(reports[f]), results[f].route,  # type: ignore[arg-type]
                                    "" if f in passed or (f in not_int8 and reports[f]["int8_compute"]["floor"]["accuracy_passed"])
                                    else recs[f].advice, dict(reports[f].get("int8_compute") or {}))
    ordered = [outcomes[f] for f in ctx.profile.artifact.formats if f in outcomes]
    publish = list(results) if ctx.allow_drop else passed
    if not publish:
        raise _NothingPublished(ProfileSummary(name, str(final), False, [], [], "failed", accuracy, warnings, ordered,
                                               rejected, "every format failed its gate (accuracy, or int8 share)"))
    if failing and not ctx.allow_drop:
        drop_formats(stage, manifest, set(failing))
        recovery = manifest.backend_options.get("recovery")
        manifest = manifest_for(ctx, {f: results[f] for f in publish}, stage, warnings)
        if recovery:
            manifest.backend_options["recovery"] = {f: v for f, v in recovery.items() if f in publish}
        manifest.artifacts += [a for a in _report_files(stage, publish)]
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
    # The artifact may rename outputs (onnx2tf's TFLite): a kind's ``given`` names the artifact's flag.
    renamed = {names[i]: spec.name for i, spec in enumerate(specs) if spec.name not in kinds and i < len(names)}
    for i, spec in enumerate(specs):
        kind = kinds.get(spec.name) or (kinds.get(names[i]) if i < len(names) else None)
        if kind is not None and kind.given in renamed:
            kind = replace(kind, given=renamed[kind.given])
        spec.kind = kind
    return specs


def manifest_for(ctx: BuildContext, results: dict[str, FormatResult], stage: Path, warnings: list[str]) -> Manifest:
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
        source=SourceInfo(str(source.origin or source.path), source.format, source.sha256),
        artifacts=artifacts, inputs=primary.inputs, outputs=_with_kinds(primary.outputs, prep.kinds, source.outputs),
        preprocessing=Preprocessing(spec, pp.spec_hash(cs.preprocess), _baked(results)), tools=tools,
        accuracy={"gate": "pending"}, calibration=dict(cs.info), static_shapes=static,
        backend_options=backend_options, warnings=list(dict.fromkeys(warnings)),
        streams=[StreamSpec(o, i) for o, i in cs.streams],
        postprocess=PostprocessSpec(**ctx.options["postprocess"]) if ctx.options.get("postprocess") else PostprocessSpec())


def _baked(results: dict[str, FormatResult]) -> BakedPreprocessing | None:
    """``preprocessing.baked`` of the format whose graph holds the preprocessing, if one does."""
    baked = next((r.preprocess_baked for r in results.values() if r.preprocess_baked), None)
    return typed.parse(BakedPreprocessing, baked, where="baked preprocessing", error=ConversionError) if baked else None


def _record_recovery(ctx: BuildContext, manifest: Manifest, recs: dict[str, Recovery], stage: Path) -> None:
    """The recipe and the recovery log per format; the sensitivity report beside the artifact."""
    feed = ctx.prep.calib.holdout[0]
    record = {}
    for fmt, rec in recs.items():
        r = rec.chosen.recipe
        ran = len(rec.steps) > 1 or r.float_nodes or r.float_ops or r.calibration or rec.ranking
        if not ran:
            continue
        record[fmt] = rec.record(feed)
        if rec.ranking:
            write_report(stage, fmt, ctx.profile.name, rec)
        record_float_layers(manifest.backend_options, fmt, rec.chosen.recipe.float_nodes)
    if record:
        manifest.backend_options["recovery"] = record
        manifest.artifacts += _report_files(stage, list(recs))


def _report_files(stage: Path, formats: list[str]):
    out = []
    for fmt in formats:
        for suffix in (".json", ".md"):
            rel = f"{REPORT_STEM}.{fmt}{suffix}"
            if (stage / rel).is_file():
                out.append(file_entry(stage, rel, fmt=fmt, precision="n/a", role="log"))
    return out
