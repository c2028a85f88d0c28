"""The accuracy gate: compare the int8 artifact with the float source on held-back samples.

Per output we record cosine similarity, SQNR (dB), max absolute error and, where the output
looks like class scores, top-1 agreement. The profile's :class:`~edge_sdk.profiles.AccuracySpec`
sets the thresholds. The float side runs the *source* (ONNX Runtime on the static float ONNX;
TensorFlow for Keras/SavedModel; the LiteRT interpreter for float TFLite); the int8 side runs
through the public runtime facade, exactly as a user would load the artifact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import ConversionError
from edge_sdk.profiles import AccuracySpec, Profile, RuntimeStep
from edge_sdk.registry import Registry

from .base import Feed, SourceModel
from .console import import_tensorflow
from .sources import keras_output_names, load_keras, load_signature, tflite_interpreter

#: The runtime step used for the gate per format: one that runs on a workstation CPU.
CPU_ACCELERATORS = {"onnxruntime": "CPUExecutionProvider", "openvino": "CPU", "litert": "xnnpack"}


# ----------------------------------------------------------------------------- metrics
def is_class_scores(shape: tuple[int, ...]) -> bool:
    """True for ``[B, C]`` (or ``[C]``) outputs with more than one class: top-1 makes sense."""
    return len(shape) in (1, 2) and shape[-1] > 1


def output_metrics(ref: list[np.ndarray], test: list[np.ndarray]) -> dict[str, Any]:
    """Compare one output over all hold-out samples.

    Args:
        ref: Float outputs, one array per sample.
        test: Artifact outputs, same shapes.

    Returns:
        ``cosine``, ``sqnr_db``, ``max_abs_err``, ``samples`` and, for class scores, ``top1_agreement``.
    """
    r = np.concatenate([np.asarray(a, np.float64).ravel() for a in ref])
    t = np.concatenate([np.asarray(a, np.float64).ravel() for a in test])
    if r.shape != t.shape:
        raise ConversionError(f"Artifact output has {t.size} values, the float model {r.size}.")
    noise = float(np.sum((r - t) ** 2))
    signal = float(np.sum(r ** 2))
    denom = float(np.linalg.norm(r) * np.linalg.norm(t))
    if denom > 0:
        cosine = float(np.dot(r, t) / denom)
    else:  # both all-zero means identical; one all-zero means no agreement at all
        cosine = 1.0 if noise == 0 else 0.0
    sqnr = math.inf if noise == 0 else (10.0 * math.log10(signal / noise) if signal > 0 else -math.inf)
    out: dict[str, Any] = {"cosine": round(cosine, 6), "sqnr_db": round(sqnr, 3) if math.isfinite(sqnr) else sqnr,
                           "max_abs_err": float(np.max(np.abs(r - t))) if r.size else 0.0, "samples": len(ref)}
    shape = np.asarray(ref[0]).shape
    if is_class_scores(shape):
        agree = [np.argmax(np.reshape(a, (-1, shape[-1])), -1) == np.argmax(np.reshape(b, (-1, shape[-1])), -1)
                 for a, b in zip(ref, test)]
        out["top1_agreement"] = round(float(np.mean(np.concatenate(agree))), 6)
    return out


def judge(metrics: dict[str, dict[str, Any]], spec: AccuracySpec) -> list[str]:
    """Failures of each output against the thresholds (empty list: the gate passes)."""
    fails = []
    for name, m in metrics.items():
        if m["cosine"] < spec.min_cosine:
            fails.append(f"{name}: cosine {m['cosine']:.4f} < {spec.min_cosine}")
        if m["sqnr_db"] < spec.min_sqnr_db:
            fails.append(f"{name}: SQNR {m['sqnr_db']:.2f} dB < {spec.min_sqnr_db} dB")
        if "top1_agreement" in m and m["top1_agreement"] < spec.min_top1_agreement:
            fails.append(f"{name}: top-1 agreement {m['top1_agreement']:.3f} < {spec.min_top1_agreement}")
    return fails


def thresholds(spec: AccuracySpec) -> dict[str, float]:
    return {"min_cosine": spec.min_cosine, "min_sqnr_db": spec.min_sqnr_db, "min_top1_agreement": spec.min_top1_agreement}


def _json_safe(value: float) -> Any:
    return value if not isinstance(value, float) or math.isfinite(value) else ("inf" if value > 0 else "-inf")


def format_metrics(metrics: dict[str, dict[str, Any]]) -> str:
    """One line per output, for the CLI and error messages."""
    lines = []
    for name, m in metrics.items():
        top1 = f", top-1 {m['top1_agreement']:.3f}" if "top1_agreement" in m else ""
        lines.append(f"{name}: cosine {m['cosine']:.4f}, SQNR {float(m['sqnr_db']):.2f} dB, "
                     f"max |err| {m['max_abs_err']:.4g}{top1}")
    return "; ".join(lines)


# ----------------------------------------------------------------------------- float reference
@dataclass
class FloatReference:
    """Runs the float source model. ``runtime`` says what ran it (recorded in the manifest)."""

    run: Callable[[Feed], dict[str, np.ndarray]]
    runtime: str
    close: Callable[[], None] = field(default=lambda: None)


def _ref_onnx(source: SourceModel, static_onnx: Path) -> FloatReference:
    ort = require("onnxruntime", "the float reference")
    sess = ort.InferenceSession(str(static_onnx), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return FloatReference(lambda feed: dict(zip(names, sess.run(None, feed))), f"onnxruntime {ort.__version__} fp32 CPU")


def _ref_keras(source: SourceModel, static_onnx: Path) -> FloatReference:
    tf = import_tensorflow("the float reference")
    model = load_keras(source.path)
    names = keras_output_names(model)

    def run(feed: Feed) -> dict[str, np.ndarray]:
        x = feed if len(feed) > 1 else next(iter(feed.values()))
        y = model(x, training=False)
        ys = y if isinstance(y, (list, tuple)) else [y]
        return {n: np.asarray(v) for n, v in zip(names, ys)}

    return FloatReference(run, f"tensorflow {tf.__version__} (Keras) fp32")


def _ref_savedmodel(source: SourceModel, static_onnx: Path) -> FloatReference:
    tf = import_tensorflow("the float reference")
    loaded, sig = load_signature(source.path)

    def run(feed: Feed) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in sig(**{k: tf.constant(v) for k, v in feed.items()}).items()}

    run.keepalive = loaded  # type: ignore[attr-defined]  # the signature needs its module alive
    return FloatReference(run, f"tensorflow {tf.__version__} (SavedModel) fp32")


def _ref_tflite(source: SourceModel, static_onnx: Path) -> FloatReference:
    it = tflite_interpreter(source.path)
    ins = {d["name"]: d for d in it.get_input_details()}
    allocated: dict[str, Any] = {}

    def run(feed: Feed) -> dict[str, np.ndarray]:
        if not allocated:
            for name, arr in feed.items():
                if list(ins[name]["shape"]) != list(arr.shape):
                    it.resize_tensor_input(ins[name]["index"], list(arr.shape))
            it.allocate_tensors()
            allocated["ok"] = True
        for name, arr in feed.items():
            it.set_tensor(ins[name]["index"], arr)
        it.invoke()
        return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}

    return FloatReference(run, "ai-edge-litert interpreter fp32")


REFERENCES: Registry[Callable[[SourceModel, Path], FloatReference]] = Registry("source format", ConversionError)
REFERENCES.register("onnx", _ref_onnx)
REFERENCES.register("keras", _ref_keras)
REFERENCES.register("savedmodel", _ref_savedmodel)
REFERENCES.register("tflite", _ref_tflite)


def float_outputs(source: SourceModel, static_onnx: Path, holdout: list[Feed]) -> tuple[list[dict[str, np.ndarray]], str]:
    """Run the float source on every hold-out feed.

    Returns:
        (outputs per feed, description of the runtime that produced them).
    """
    ref = REFERENCES.get(source.format)(source, static_onnx)
    try:
        return [ref.run(feed) for feed in holdout], ref.runtime
    finally:
        ref.close()


# ----------------------------------------------------------------------------- int8 side
def gate_step(profile: Profile, fmt: str) -> RuntimeStep:
    """The CPU-capable step of ``fmt`` in the profile's chain (the gate runs here, on a workstation).

    Raises:
        ConversionError: the chain has no CPU step for that format.
    """
    for step in profile.runtime.chain:
        if step.format == fmt and CPU_ACCELERATORS.get(step.backend) == step.accelerator:
            return step
    for backend, accel in CPU_ACCELERATORS.items():
        if any(s.format == fmt and s.backend == backend for s in profile.runtime.chain):
            return RuntimeStep(backend=backend, accelerator=accel, format=fmt, native=False)  # type: ignore[arg-type]
    raise ConversionError(f"Profile '{profile.name}' has no CPU runtime for format '{fmt}' to check accuracy with.",
                          "Add a CPU step (onnxruntime/CPUExecutionProvider, openvino/CPU or litert/xnnpack) to its runtime.chain.")


def artifact_outputs(folder: Path, step: RuntimeStep, holdout: list[Feed]) -> tuple[list[dict[str, np.ndarray]], dict]:
    """Run the artifact in ``folder`` through the runtime facade on every hold-out feed.

    Returns:
        (outputs per feed, the facade's description of what ran).
    """
    from edge_sdk.runtimes.facade import load

    model = load(folder, backend=step.backend, device=step.accelerator, strict=False)
    try:
        outs = [{k: np.asarray(v) for k, v in model.infer(feed).outputs.items()} for feed in holdout]
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


def evaluate(folder: Path, step: RuntimeStep, holdout: list[Feed], reference: list[dict[str, np.ndarray]],
             spec: AccuracySpec) -> dict[str, Any]:
    """Run the artifact, compare with the float reference, and judge against ``spec``.

    Returns:
        ``{"backend", "device", "outputs": {name: metrics}, "failures": [...], "passed": bool, "ran": {...}}``.
    """
    test, ran = artifact_outputs(folder, step, holdout)
    names = match_outputs(reference[0], test[0])
    metrics = {t: output_metrics([r[f] for r in reference], [x[t] for x in test]) for t, f in names.items()}
    fails = judge(metrics, spec)
    safe = {k: {mk: _json_safe(mv) for mk, mv in m.items()} for k, m in metrics.items()}
    # ``native`` False says the gate ran on a CPU stand-in, not the profile's accelerator (e.g. the NPU).
    return {"backend": step.backend, "device": step.accelerator, "native": step.native, "outputs": safe, "failures": fails,
            "passed": not fails, "ran": {k: ran.get(k) for k in ("backend", "delegate", "fallback", "details")}}
