"""One candidate artifact: a format converted under a recipe into its own folder, then judged.

The recovery loop asks for candidates and compares them; the build publishes the chosen one by
copying its files into the profile's staging folder. Every candidate is a complete, loadable
artifact (model files + manifest), judged by the gate through the runtime facade exactly as the
published one will be.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.errors import ConversionError, EdgeSDKError, RuntimeCrashError
from edge_sdk.manifest import write_manifest

from .. import accuracy as acc
from ..accuracy.metrics import score as gate_score
from ..base import FORMATS, ConvertJob, FormatResult, Recipe, cpu_seconds
from ..emitted import crash_bug, invalid_graph
from ..int8_compute import INT8_FORMATS, int8_share

if TYPE_CHECKING:
    from ..build import BuildContext


@dataclass
class Candidate:
    """A converted and judged candidate.

    Attributes:
        fmt: Artifact format.
        recipe: How it was quantized.
        folder: Its own artifact folder (files + manifest).
        result: What the format converter returned.
        report: The gate's report for it.
        seconds: Conversion + gate time.
    """

    fmt: str
    recipe: Recipe
    folder: Path
    result: FormatResult
    report: dict[str, Any]
    seconds: float
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(self.report["passed"])

    @property
    def score(self) -> float:
        return float(self.report.get("score", 0.0))

    @property
    def collapsed(self) -> bool:
        """Whether int8 collapsed an output or a group of one (a few values left where float has
        many): its ranges, not its layers, are what failed."""
        return any(part.get("collapsed") for m in acc.judged_outputs(self.report).values()
                   for part in [m, *m.get("groups", {}).values()])

    @property
    def rank(self) -> tuple[bool, float]:
        """What the search keeps as its best so far: a candidate with no collapsed output before one
        with, then by score. A collapse scores only -1 while an unbounded error scores far lower:
        Silero VAD's median ranges collapsed its probability to two values and still outscored
        min/max (its long-stream state error dominating both), and the layer search built on those
        ranges found nothing below every convolution float."""
        return (not self.collapsed, self.score)

    def files(self) -> list[str]:
        return [self.result.model_file] + [rel for rel, _ in self.result.extra_files]

    def size(self) -> int:
        return sum((self.folder / f).stat().st_size for f in self.files() if (self.folder / f).is_file())

    def step(self) -> dict[str, Any]:
        """One line of the recovery log."""
        gate = self.facts.get("gate", {})
        return {"recipe": self.recipe.name, "calibration": self.recipe.method(self.facts["job"].profile),
                "float_nodes": list(self.recipe.float_nodes),
                "seconds": round(self.seconds, 2), "passed": self.passed, "score": round(self.score, 4),
                "figures": acc.report_figures(self.report),
                **{f"gate_{k}": round(v, 2) for k, v in gate.items()},
                **({"edited": True} if self.edited else {})}

    @property
    def edited(self) -> bool:
        """Whether its float layers were cut out of the model quantized whole (not quantized again)."""
        return reported_float_layers(self.result.backend_options) is not None


def reported_float_layers(backend_options: dict[str, Any]) -> set[str] | None:
    """The layers a converter reports it made float by editing the model quantized whole
    (``backend_options.<format>.float_layers``: ``how`` and ``layers``; an OpenVINO revert lists the
    ops sharing a removed quantizer too), or None where the candidate was quantized again. A
    result's and a manifest's ``backend_options`` alike."""
    found = [opts["float_layers"] for opts in backend_options.values() if isinstance(opts, dict)
             and isinstance(opts.get("float_layers"), dict) and "how" in opts["float_layers"]]
    return {n for f in found for n in f.get("layers", [])} if found else None


def make_candidate(ctx: "BuildContext", fmt: str, recipe: Recipe, folder: Path, cache: dict) -> Candidate:
    """Convert ``fmt`` under ``recipe`` into ``folder``, write its manifest, run the gate.

    Raises:
        ConversionError: the converter failed under this recipe.
    """
    from ..build import manifest_for  # the one place manifests are assembled

    t0 = time.perf_counter()
    cs = ctx.prep.calib
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(cache["dir"]) / f"work-{folder.name}"
    scratch.mkdir(parents=True, exist_ok=True)
    job = ConvertJob(source=ctx.source, profile=ctx.profile, input_shapes=ctx.prep.shapes.shapes, calib=cs.calib,
                     holdout=cs.holdout, calibrated=cs.calibrated, preprocess=cs.preprocess, workdir=folder,
                     scratch=scratch, log=lambda m: ctx.say(f"{fmt}: {m}"), options=dict(ctx.options),
                     onnx_provider=ctx.prep.onnx, tflite_provider=ctx.prep.tflite, recipe=recipe, cache=cache)
    result = FORMATS.get(fmt)(job)
    write_manifest(folder, manifest_for(ctx, {fmt: result}, folder, []))
    step = acc.gate_step(ctx.profile, fmt)
    g0, gc0 = time.perf_counter(), cpu_seconds()
    try:
        report = acc.evaluate(folder, step, cs.holdout, ctx.prep.reference, ctx.profile.accuracy, ctx.prep.kinds,
                              ctx.task, (cs.streams, cs.holdout_lengths) if cs.streams else None,
                              cs.long_stream, cs.long_stream_note, ctx.options.get("postprocess"))
    except ConversionError:
        raise
    except RuntimeCrashError as exc:  # a file we just made and hashed here crashed the runtime: our bug
        raise crash_bug(exc.message, fmt, step.backend, folder / result.model_file, scratch / "bisect") from None
    except EdgeSDKError as exc:  # the artifact does not load or run in the gate's runtime: this format failed
        bug = invalid_graph(exc.message, fmt, step.backend)
        if bug is not None:  # the runtime refuses the graph itself, not an op: ours to fix
            raise bug from None
        raise ConversionError(f"the {fmt} artifact does not run in {step.backend} ({step.accelerator}) here: {exc.message}",
                              "The int8 graph needs something this runtime cannot do here (an op kernel, a type); "
                              "the other formats and profiles were still converted.") from None
    report["score"] = gate_score(acc.judged_outputs(report)) if "task" not in report or report["task"]["passed"] else -1.0
    if fmt in INT8_FORMATS:  # "int8 means int8": read from the file, recorded (not yet a decision)
        report["int8_compute"] = int8_share(folder / result.model_file, fmt)
    gate = {"seconds": time.perf_counter() - g0, "cpu_s": cpu_seconds() - gc0}  # what judging it took
    return Candidate(fmt, recipe, folder, result, report, time.perf_counter() - t0, {"step": step, "job": job, "gate": gate})


def copy_into(candidate: Candidate, stage: Path) -> None:
    """Put the candidate's files into the profile's staging folder."""
    for rel in candidate.files():
        dest = stage / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(candidate.folder / rel, dest)


def local_p50_ms(candidate: Candidate, feed: dict[str, np.ndarray], runs: int = 30) -> float | None:
    """Median latency of the candidate here (through the facade, CPU step), for the cost record."""
    import warnings

    from edge_sdk.runtimes.facade import load

    step = candidate.facts["step"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with load(candidate.folder, backend=step.backend, device=step.accelerator, allow_unpublished=True,
                      accept_failed_gate=True) as model:
                for _ in range(3):
                    model.infer(feed)
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    model.infer(feed)
                    times.append((time.perf_counter() - t0) * 1e3)
        return round(float(np.median(times)), 4)
    except Exception:  # noqa: BLE001 - a cost figure must never fail a conversion
        return None
