"""Tiny real models for the TFLite / Edge TPU tests, built by code (never downloaded).

The shared builders in ``tests/models.py`` cover the conversion matrix; these are the extra
shapes the TFLite tests need (an ONNX classifier built op by op, a model onnx2tf cannot convert,
a Keras model with an op the Edge TPU cannot run) plus hand-made ``ConvertJob``s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edge_sdk.fsutil import sha256_file
from edge_sdk.manifest import TensorSpec
from edge_sdk.profiles import resolve_profile

RNG_SEED = 7
NUM_CLASSES = 5


def images(n: int, shape: list[int], seed: int = RNG_SEED) -> list[np.ndarray]:
    """Smooth random 'images' in 0..1 (smooth so that a conv net's outputs vary meaningfully)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        base = rng.random(shape).astype(np.float32)
        out.append(((base + np.roll(base, 1, axis=-2) + np.roll(base, 1, axis=-1)) / 3.0).astype(np.float32))
    return out


def onnx_cnn(path: Path, *, hw: int = 16, unsupported_castlike: bool = False, dynamic_batch: bool = True) -> Path:
    """A small NCHW ONNX classifier: Conv-Relu-Conv-Relu-GlobalAveragePool-Flatten-Gemm-Softmax.

    Args:
        path: Where to write the model.
        hw: Input height and width.
        unsupported_castlike: Insert a ``CastLike`` node (valid ONNX, run by ONNX Runtime, but
            not implemented by onnx2tf) so that onnx2tf fails on a known op.
        dynamic_batch: Make the batch dimension symbolic.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(RNG_SEED)
    w1 = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(8) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    wf = (rng.standard_normal((16, NUM_CLASSES)) * 0.5).astype(np.float32)
    bf = (rng.standard_normal(NUM_CLASSES) * 0.1).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (wf, "wf"), (bf, "bf")]]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
        helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "wf", "bf"], ["logits"], name="fc"),
    ]
    last = "logits"
    if unsupported_castlike:
        nodes.append(helper.make_node("CastLike", ["logits", "flat"], ["logits_cl"], name="odd_castlike"))
        last = "logits_cl"
    nodes.append(helper.make_node("Softmax", [last], ["probs"], name="softmax", axis=1))
    batch = "N" if dynamic_batch else 1
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, hw, hw])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [batch, NUM_CLASSES])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def keras_cnn(path: Path, *, hw: int = 16, extra: str = "") -> Path:
    """A small NHWC Keras classifier saved as ``.keras``.

    Args:
        path: Where to save it.
        hw: Input height and width.
        extra: ``"leaky"`` adds a LeakyReLU (int8 in TFLite, but not in the Edge TPU's op set).
    """
    import tensorflow as tf

    tf.keras.utils.set_random_seed(RNG_SEED)
    inp = tf.keras.Input((hw, hw, 3), name="image")
    x = tf.keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    if extra == "leaky":
        x = tf.keras.layers.LeakyReLU(negative_slope=0.1, name="leaky")(x)
    x = tf.keras.layers.Conv2D(16, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    x = tf.keras.layers.Dense(NUM_CLASSES)(x)
    out = tf.keras.layers.Softmax(name="probs")(x)
    model = tf.keras.Model(inp, out)
    model.save(str(path))
    return path


def savedmodel_sin(path: Path, *, hw: int = 16) -> Path:
    """A SavedModel classifier (``serving_default``: image -> probs) with a SIN op mid-graph.

    TFLite has no int8 kernel for SIN, so it stays float: the Edge TPU cannot run it.
    """
    import tensorflow as tf

    rng = np.random.default_rng(RNG_SEED)

    class Net(tf.Module):
        def __init__(self):
            super().__init__()
            self.w1 = tf.Variable(rng.standard_normal((3, 3, 3, 8)).astype(np.float32) * 0.3)
            self.w2 = tf.Variable(rng.standard_normal((3, 3, 8, 16)).astype(np.float32) * 0.2)
            self.wf = tf.Variable(rng.standard_normal((16, NUM_CLASSES)).astype(np.float32) * 0.5)

        @tf.function(input_signature=[tf.TensorSpec([None, hw, hw, 3], tf.float32, name="image")])
        def __call__(self, image):
            x = tf.nn.relu(tf.nn.conv2d(image, self.w1, 1, "SAME"))
            x = tf.math.sin(x)
            x = tf.nn.relu(tf.nn.conv2d(x, self.w2, 2, "SAME"))
            x = tf.reduce_mean(x, axis=[1, 2])
            return {"probs": tf.nn.softmax(tf.matmul(x, self.wf))}

    net = Net()
    tf.saved_model.save(net, str(path), signatures={"serving_default": net.__call__})
    return path


def keras_job(path: Path, profile: str, tmp: Path, hw: int = 16, fmt: str = "keras"):
    """A hand-built job for a model made by :func:`keras_cnn` (or :func:`savedmodel_sin`)."""
    shape = [1, hw, hw, 3]
    return make_job(path, fmt, profile, [TensorSpec("image", [-1, hw, hw, 3], "float32", layout="NHWC")],
                    [TensorSpec("probs", [-1, NUM_CLASSES], "float32")], {"image": shape}, tmp)


def onnx_job(path: Path, profile: str, tmp: Path, hw: int = 16):
    """A hand-built job for a model made by :func:`onnx_cnn`."""
    shape = [1, 3, hw, hw]
    return make_job(path, "onnx", profile, [TensorSpec("input", [-1, 3, hw, hw], "float32", layout="NCHW")],
                    [TensorSpec("probs", [-1, NUM_CLASSES], "float32")], {"input": shape}, tmp)


def keras_tflite(build, shape, seed: int, adjust=None) -> bytes:
    """A float TFLite of a small Keras network built by code: ``build(tf, layers, image)`` returns
    its output for the batch-1 input ``image`` of ``shape``; ``adjust(model)`` may set weights first."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(seed)
    image = tf.keras.Input(shape=tuple(shape[1:]), batch_size=1, name="image")
    model = tf.keras.Model(image, build(tf, tf.keras.layers, image))
    if adjust is not None:
        adjust(model)
    return tf.lite.TFLiteConverter.from_keras_model(model).convert()


def run_tflite(model: Path | bytes, feed: np.ndarray) -> np.ndarray:
    """Run a one-input TFLite model (a file or its bytes) in LiteRT on a float feed; (de)quantizes integer I/O."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model, num_threads=1) if isinstance(model, bytes) else Interpreter(model_path=str(model))
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    x = feed
    if inp["dtype"] != np.float32:
        scale, zero = inp["quantization"]
        info = np.iinfo(inp["dtype"])
        x = np.clip(np.round(feed / scale + zero), info.min, info.max).astype(inp["dtype"])
    it.set_tensor(inp["index"], x)
    it.invoke()
    y = it.get_tensor(out["index"]).astype(np.float32)
    if out["dtype"] != np.float32:
        scale, zero = out["quantization"]
        y = (y - zero) * scale
    return y


def make_job(source_path: Path, fmt: str, profile: str, inputs: list[TensorSpec], outputs: list[TensorSpec],
             input_shapes: dict[str, list[int]], tmp: Path, n_calib: int = 24, n_hold: int = 8):
    """A ``ConvertJob`` built by hand, the way the pipeline builds one."""
    from edge_sdk.converters.base import ConvertJob, SourceModel

    name, shape = next(iter(input_shapes.items()))
    data = images(n_calib + n_hold, shape)
    feeds = [{name: a} for a in data]
    workdir = tmp / "stage"
    scratch = tmp / "scratch"
    workdir.mkdir(parents=True, exist_ok=True)
    scratch.mkdir(parents=True, exist_ok=True)
    src = SourceModel(path=source_path, format=fmt, sha256=sha256_file(source_path) if source_path.is_file() else "",
                      inputs=inputs, outputs=outputs)
    return ConvertJob(source=src, profile=resolve_profile(profile), input_shapes=input_shapes,
                      calib=feeds[:n_calib], holdout=feeds[n_calib:], calibrated=True, preprocess=None,
                      workdir=workdir, scratch=scratch, log=lambda _line: None)
