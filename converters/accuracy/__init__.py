"""The accuracy gate: judge each int8 artifact against the float source, output by output, by kind.

The float side runs the *source* (:mod:`.reference`); the int8 side runs through the public
runtime facade, exactly as a user would load the artifact. Each output is judged by the
metrics of its kind (:mod:`.kinds` infers the kinds, :mod:`.metrics` measures and judges);
an optional user task metric (``--metric``) adds its own figures and verdict.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from edge_sdk.errors import ConversionError
from edge_sdk.outputs import OutputKind, sigmoid
from edge_sdk.profiles import AccuracySpec, Profile, RuntimeStep
from edge_sdk import typed

from ..base import Feed
from .kinds import infer_kinds, kinds_table
from .evidence import format_verdict
from .metrics import OutputMismatch, evaluate_output, one_line
from .reference import REFERENCES, FloatReference, carried_float_outputs, float_outputs

if TYPE_CHECKING:
    from ..calibration import LongStream

def gate_step(profile: Profile, fmt: str) -> RuntimeStep:
    """The CPU-capable step of ``fmt`` in the profile's chain (the gate runs here, on a workstation).

    A step is CPU-capable when its accelerator is one its backend's descriptor calls the CPU
    (:mod:`edge_sdk.backends`); without one, the first backend in the chain that reads ``fmt`` and
    has a CPU accelerator runs it there.

    Raises:
        ConversionError: the chain has no CPU step for that format.
    """
    from edge_sdk.backends import backends, backends_for_format

    known = backends()
    for step in profile.runtime.chain:
        desc = known.get(step.backend)
        if step.format == fmt and desc is not None and step.accelerator in desc.cpu_accelerators:
            return step
    for desc in backends_for_format(fmt):
        if desc.cpu_accelerators and any(s.format == fmt and s.backend == desc.name for s in profile.runtime.chain):
            return RuntimeStep(backend=desc.name, accelerator=desc.cpu_accelerators[0], format=fmt, native=False)
    cpu = [f"{d.name}/{d.cpu_accelerators[0]}" for d in backends_for_format(fmt) if d.cpu_accelerators]
    raise ConversionError(f"Profile '{profile.name}' has no CPU runtime for format '{fmt}' to check accuracy with.",
                          f"Add a CPU step ({' or '.join(cpu) or 'none reads this format'}) to its runtime.chain.")


def artifact_outputs(folder: Path, step: RuntimeStep, holdout: list[Feed],
                     sequences: tuple[list[tuple[str, str]], list[int]] | None = None,
                     long_stream: list[Feed] | None = None) -> tuple[list[dict[str, np.ndarray]], dict]:
    """Run the artifact in ``folder`` through the runtime facade on every hold-out feed.

    Args:
        sequences: ``(streams, lengths)`` for a streamed model: ``holdout`` is the concatenation
            of sequences of these lengths, and the artifact carries its *own* state from step to
            step (``Model.stream()``), the state inputs of ``holdout`` being used at step 0 only.
        long_stream: With ``sequences``: the feeds of one long stream, run after them in the same
            loaded model, the state carried through all of it; its outputs follow the hold-out's.

    Returns:
        (outputs per feed, then per long-stream step; the facade's description of what ran).
    """
    from edge_sdk.runtimes.facade import load

    model = load(folder, backend=step.backend, device=step.accelerator, strict=False, allow_unpublished=True)
    try:
        if not sequences or not sequences[0]:
            outs = [{k: np.asarray(v) for k, v in model.infer(feed).outputs.items()} for feed in holdout]
            return outs, model.describe()
        streams, lengths = sequences
        states = {i for _, i in streams}
        outs, runs, at = [], [], 0
        for n in lengths:
            runs.append(holdout[at:at + n])
            at += n
        for feeds in runs + ([long_stream] if long_stream else []):
            st = model.stream(initial={i: feeds[0][i] for i in states})
            for feed in feeds:
                outs.append({k: np.asarray(v) for k, v in st.step({k: v for k, v in feed.items() if k not in states}).outputs.items()})
        return outs, model.describe()
    finally:
        model.close()


def match_outputs(ref: dict[str, np.ndarray], test: dict[str, np.ndarray]) -> dict[str, str]:
    """Map artifact output names to float output names: by name, else by position if counts agree.

    Raises:
        ConversionError: the outputs cannot be matched.
    """
    if set(ref) == set(test):
        return {k: k for k in test}
    if len(ref) == len(test):
        return dict(zip(test, ref))
    raise ConversionError(f"The artifact's outputs {sorted(test)} do not match the float model's {sorted(ref)}.")


def _link_masks(kinds: dict[str, OutputKind], shapes: dict[str, list[int]]) -> dict[str, str]:
    """Regression output -> the scores output whose confident positions it is judged at."""
    links = {}
    scored = [n for n, k in kinds.items() if k.kind in ("scores", "logits")]
    for name, kind in kinds.items():
        if kind.kind in ("boxes", "landmarks", "regression"):
            s = shapes[name]
            match = [n for n in scored if len(shapes[n]) == len(s) and shapes[n][:-1] == s[:-1]]
            if match:
                links[name] = match[0]
    return links


def compare(reference: list[dict[str, np.ndarray]], test: list[dict[str, np.ndarray]], kinds: dict[str, OutputKind],
            spec: AccuracySpec, state_judge: str = "all") -> dict[str, dict[str, Any]]:
    """Per-output verdicts of ``test`` against ``reference`` (artifact output names as keys);
    ``state_judge``: how ``state`` outputs are judged (``end`` of a long stream, ``all`` steps, ``none``).

    Raises:
        ConversionError: outputs that cannot be matched or differ in shape.
    """
    names = match_outputs(reference[0], test[0])
    shapes = {f: list(np.asarray(reference[0][f]).shape) for f in names.values()}
    kinds = {f: kinds.get(f) or OutputKind() for f in names.values()}
    links = _link_masks(kinds, shapes)
    # Scores first (they give the masks), outputs read only where a presence flag says yes last.
    order = sorted(names.items(), key=lambda tf: (bool(kinds[tf[1]].given), tf[1] in links))
    results: dict[str, dict[str, Any]] = {}
    masks: dict[str, Any] = {}
    present_at: dict[str, np.ndarray] = {}  # presence flag -> its float yes per sample, made once
    for t, f in order:
        ref, got = [r[f] for r in reference], [x[t] for x in test]
        flag, index = kinds[f].given, None
        if flag:
            if flag not in present_at:
                present_at[flag] = presence(reference, flag, kinds.get(flag) or OutputKind())
            present = present_at[flag]
            if not present.any():
                results[t] = {"kind": kinds[f].label(), "samples": 0, "failures": [], "passed": True,
                              "not_judged": f"float's '{flag}' says no on every held-back sample: nothing reads it"}
                continue
            index = np.flatnonzero(present)
            ref, got = [ref[i] for i in index], [got[i] for i in index]
        try:
            m = evaluate_output(ref, got, kinds[f], spec, None if flag else masks.get(links.get(f, "")), state_judge, index)
        except OutputMismatch as exc:
            raise ConversionError(f"Output '{t}': {exc}") from None
        masks[f] = m.pop("_mask", None)
        if flag:
            m["judged_at"] = f"the {index.size} of {len(reference)} samples where float's '{flag}' says yes"
        elif f in links:
            m["judged_at"] = f"'{links[f]}': {results[links[f]].get('regressions_at', 'its confident positions')}"
        results[t] = m
    return {t: results[t] for t in names}


def head_objects(reference: list[dict[str, np.ndarray]], test: list[dict[str, np.ndarray]],
                 post: dict[str, Any] | None, spec: AccuracySpec) -> tuple[str, dict[str, Any], list[str]] | None:
    """The objects a declared ``ssd-anchors`` head draws, float against int8: both models' box
    regressions and score logits decoded against the anchors (:func:`edge_sdk.detect.decode_ssd`,
    the device's own decoder and NMS) and matched sample by sample (:func:`.metrics.object_figures`)
    at the head's score threshold, what the device draws.

    Anchor by anchor, the gate can only say how many anchors int8 turns positive or negative and
    how far their boxes move; several anchors fire on one face, so it passed a BlazeFace candidate
    (back camera, jetson-orin) at a positive F1 of 0.94 whose decoded faces matched float's at F1
    0.88. With the anchors declared, the gate judges what the user sees, as it does for YOLO heads.

    Returns:
        (the artifact's score output, the figures, failures), or None without an ssd-anchors head
        or where float draws nothing on any held-back sample.
    """
    if not post or post.get("head") != "ssd-anchors" or not post.get("anchors"):
        return None
    import dataclasses

    from edge_sdk.detect import as_head, decode_ssd

    from .metrics import object_figures

    head = as_head(post["head"], post.get("anchors") or None, post.get("options") or None)  # as the device reads it
    a = head.anchors
    art = {f: t for t, f in match_outputs(reference[0], test[0]).items()}  # source -> artifact
    if a is None or a.boxes not in art or a.scores not in art:
        return None
    finder = dataclasses.replace(head, conf=head.conf * (1 - spec.scores.object_margin))

    def rows(outs: list[dict[str, np.ndarray]], boxes: str, scores: str) -> list[np.ndarray]:
        return [np.array([[*d.box, d.score, d.class_id] for d in decode_ssd(o[boxes], o[scores], finder)],
                         np.float64).reshape(-1, 6) for o in outs]

    ref = rows(reference, a.boxes, a.scores)
    if not any(bool((r[:, 4] >= head.conf).any()) for r in ref):
        return None
    got = rows(test, art[a.boxes], art[a.scores])
    figures, fails = object_figures(ref, got, head.conf, spec,
                                    f"the ssd-anchors head: {a.count} anchors, NMS at IoU {head.iou}, "
                                    f"score >= {head.conf}")
    return art[a.scores], figures, fails


def presence(reference: list[dict[str, np.ndarray]], flag: str, kind: OutputKind) -> np.ndarray:
    """Per sample: does the float model's one-value ``flag`` output say yes (>= 0.5, after a
    sigmoid where it is a logit)?"""
    x = np.array([float(np.asarray(r[flag], np.float64).reshape(-1)[0]) for r in reference])
    if kind.kind == "logits" or kind.activation == "sigmoid":  # one logit: a softmax over it is always 1
        x = sigmoid(x)
    return x >= 0.5


def evaluate(folder: Path, step: RuntimeStep, holdout: list[Feed], reference: list[dict[str, np.ndarray]],
             spec: AccuracySpec, kinds: dict[str, OutputKind] | None = None,
             task_metric: Callable | None = None,
             sequences: tuple[list[tuple[str, str]], list[int]] | None = None,
             long_stream: "LongStream | None" = None, long_stream_note: str = "",
             head: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the artifact in ``folder``, compare with the float reference, judge against ``spec``.

    With ``sequences`` (a streamed model, see :func:`artifact_outputs`) the artifact carries its
    own state, so every step is judged after the int8 error of all the steps before it. With
    ``long_stream`` (a :class:`..calibration.LongStream`) the held-back sequences chained into one
    stream are judged too: every output by its kind, a ``state`` by its error at the stream's end
    (without one, the state is judged over every step of the sequences, ``long_stream_note`` says why).
    With ``head`` (the manifest's ``postprocess``: an ``ssd-anchors`` head) the objects it draws are
    judged too, beside its score output's figures (:func:`head_objects`).

    Returns:
        ``{"backend", "device", "native", "outputs": {name: metrics}, "failures", "passed", "ran",
        "task"?, "sequences"?, "long_stream"?}``.
    """
    streamed = bool(sequences and sequences[0])
    long_feeds = long_stream.feeds if streamed and long_stream is not None else None
    test, ran = artifact_outputs(folder, step, holdout, sequences, long_feeds)
    test, test_long = test[:len(holdout)], test[len(holdout):]
    outputs = compare(reference, test, kinds or {}, spec, "none" if long_feeds else "all")
    objects = head_objects(reference, test, head, spec)
    if objects is not None:
        name, figures, found = objects
        m = outputs[name]
        m.setdefault("margins", {}).update(figures.pop("margins", {}))
        m["objects"] = figures
        m["failures"] = [*m["failures"], *(f"the head's {x}" for x in found)]
        m["passed"] = not m["failures"]
    fails = [f"{name}: {f}" for name, m in outputs.items() for f in m["failures"]]
    report: dict[str, Any] = {"backend": step.backend, "device": step.accelerator, "native": step.native,
                              "outputs": outputs, "failures": fails,
                              "ran": {k: ran.get(k) for k in ("backend", "delegate", "fallback", "details")}}
    if task_metric is not None:
        from .task import run_task_metric

        report["task"] = run_task_metric(task_metric, reference, test, holdout)
        if not report["task"]["passed"]:
            fails.append(f"task metric: {report['task'].get('reason') or 'failed'}")
    if streamed:
        report["sequences"] = {"count": len(sequences[1]), "steps": sum(sequences[1]),
                               "state": "the artifact's own, carried from step to step"}
        if long_feeds:
            long_outputs = compare(long_stream.reference, test_long, kinds or {}, spec, "end")
            steps = len(long_feeds)
            fails += [f"long stream ({steps} steps), {name}: {f}" for name, m in long_outputs.items() for f in m["failures"]]
            report["long_stream"] = {**long_stream.describe(), "outputs": long_outputs}
        elif long_stream_note:
            report["long_stream"] = {"not_run": long_stream_note}
    # what the bounds say (issue 54, step a): recorded beside the decision, which it does not change yet
    report["evidence"] = format_verdict(judged_outputs(report))
    odd = finite_figures(report)
    if odd:  # a figure no threshold can judge: the candidate failed, and its report stays writable
        fails.append(f"figures that are not finite numbers: {', '.join(odd[:4])}" + (" ..." if len(odd) > 4 else ""))
    report["passed"] = not fails
    return report


def finite_figures(data: Any, where: str = "") -> list[str]:
    """Replace every non-finite float in a report (nested dicts and lists) by its name (``"nan"``,
    ``"inf"``, ``"-inf"``), in place; return where each was. A manifest holds no NaN (strict JSON),
    and a NaN figure compares false with every threshold: it must never read as a pass."""
    from .metrics import _r

    found: list[str] = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in list(items):
        at = f"{where}.{key}" if where else str(key)
        if isinstance(value, (float, np.floating)) and not np.isfinite(value):
            data[key] = _r(float(value))
            found.append(at)
        elif isinstance(value, (dict, list)):
            found += finite_figures(value, at)
    return found


def thresholds(spec: AccuracySpec) -> dict[str, Any]:
    """The thresholds the gate applied (recorded in the manifest)."""
    d = typed.to_dict(spec)
    d.pop("holdout_fraction", None)
    return d


def format_metrics(outputs: dict[str, dict[str, Any]]) -> str:
    """One line per output with the figures that judge it (CLI and error messages)."""
    return "; ".join(one_line(name, m) for name, m in outputs.items())


def judged_outputs(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every output verdict of a gate report: the held-back samples' and, where it ran, the long
    stream's (keyed ``long stream: NAME``)."""
    long_outputs = report.get("long_stream", {}).get("outputs", {})
    return {**report["outputs"], **{f"long stream: {k}": v for k, v in long_outputs.items()}}


def report_figures(report: dict[str, Any]) -> str:
    """:func:`format_metrics` of a gate report, with its long stream's figures where it ran one."""
    text = format_metrics(report["outputs"])
    long_outputs = report.get("long_stream", {}).get("outputs")
    if long_outputs:
        text += f"; over a {report['long_stream']['steps']}-step stream: {format_metrics(long_outputs)}"
    return text


__all__ = ["FloatReference", "REFERENCES", "artifact_outputs", "compare", "evaluate",
           "carried_float_outputs", "float_outputs", "format_metrics", "judged_outputs", "report_figures", "gate_step", "infer_kinds", "kinds_table", "match_outputs", "thresholds"]
