"""The float reference: run the *source* model on the held-back samples.

ONNX Runtime runs the static float ONNX (ONNX sources); TensorFlow runs Keras and SavedModel
sources; the LiteRT interpreter runs float TFLite sources (custom ops and sparse weights
included, which is why no ONNX detour is needed for them). What ran is recorded in the manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import ConversionError
from edge_sdk.registry import Registry

from ..base import Feed, SourceModel
from ..console import import_tensorflow
from ..sources import keras_output_names, load_keras, load_signature, tflite_interpreter


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


def carried_float_outputs(source: SourceModel, static_onnx: Path, cs) -> tuple[list[dict[str, np.ndarray]], str]:
    """Run the float source over every sequence of a streamed :class:`CalibrationSet`, state carried.

    Fills ``cs.calib`` and ``cs.holdout`` with the steps as the float model saw them (see
    :meth:`CalibrationSet.carry`).

    Returns:
        (float outputs per hold-out step, description of the runtime that produced them).
    """
    ref = REFERENCES.get(source.format)(source, static_onnx)
    try:
        return cs.carry(ref.run), ref.runtime
    finally:
        ref.close()
