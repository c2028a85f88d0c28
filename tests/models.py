"""Small real test models and calibration data, built by code (deterministic, seeded).

Shared by the conversion, TFLite and runtime tests (``from models import ...``; tests/ is on
``sys.path`` through pytest's ``pythonpath``). Every builder writes into the path it is given
and returns that path. TensorFlow is imported inside the builders only, so importing this
module stays light.

The CNN is trained for a few epochs on scikit-learn's bundled ``load_digits`` (8x8 digits,
upscaled to 32x32 and coloured), so its outputs are real class scores, and the calibration
images carry real structure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: The CNN's input: NHWC, batch 1 (Keras/SavedModel/TFLite/ONNX forms all share it).
CNN_INPUT = "image"
CNN_SHAPE = (1, 32, 32, 3)
CNN_CLASSES = 10
SEED = 1234

#: The two-input, two-output ONNX graph: dynamic batch "N" and dynamic height "H".
TWO_IO_INPUTS = {"image": ["N", 3, "H", 16], "aux": ["N", 4]}
TWO_IO_OUTPUTS = ("logits", "features")


# ----------------------------------------------------------------------------- data
def digit_images(n: int = 64, size: int = 32, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Real-structure RGB images from scikit-learn's bundled digits.

    Args:
        n: Number of images (cycles through the 1797 digits).
        size: Output height and width.
        seed: Seed for the per-image colour tint and the order.

    Returns:
        ``(images, labels)``: uint8 ``[n, size, size, 3]`` and int ``[n]``.
    """
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(digits.images))
    out = np.empty((n, size, size, 3), dtype=np.uint8)
    labels = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = order[i % len(order)]
        gray = (digits.images[k] / 16.0 * 255.0).astype(np.uint8)
        big = np.asarray(Image.fromarray(gray).resize((size, size), Image.BILINEAR), dtype=np.float32) / 255.0
        # A random foreground and background colour per image: three channels that differ.
        fg = rng.uniform(0.5, 1.0, 3)
        bg = rng.uniform(0.0, 0.3, 3)
        rgb = big[..., None] * fg + (1.0 - big[..., None]) * bg
        out[i] = np.clip(rgb * 255.0, 0, 255).astype(np.uint8)
        labels[i] = digits.target[k]
    return out, labels


def write_image_folder(folder: str | Path, n: int = 40, size: int = 32, seed: int = SEED) -> Path:
    """Write ``n`` digit PNGs (``img_000.png``...) into ``folder``; returns the folder."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images, _ = digit_images(n, size, seed)
    for i, img in enumerate(images):
        Image.fromarray(img).save(folder / f"img_{i:03d}.png")
    return folder


def write_constant_images(folder: str | Path, n: int = 40, size: int = 32, value: int = 0) -> Path:
    """Write ``n`` constant (all ``value``) PNGs: a deliberately useless calibration set."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(np.full((size, size, 3), value, dtype=np.uint8)).save(folder / f"const_{i:03d}.png")
    return folder


def write_dim_images(folder: str | Path, n: int = 40, size: int = 32, top: int = 6, seed: int = SEED) -> Path:
    """Write ``n`` distinct noise PNGs with every pixel in ``0..top``: data the checks accept (it
    varies, no two alike) whose int8 ranges still fit no real image, so the gate must fail."""
    from PIL import Image

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        Image.fromarray(rng.integers(0, top + 1, (size, size, 3), dtype=np.uint8)).save(folder / f"dim_{i:03d}.png")
    return folder


def cnn_feeds(n: int = 40, seed: int = SEED) -> np.ndarray:
    """Float inputs for the CNN: ``[n, 32, 32, 3]`` in 0..1 (same scaling as ``scale=1/255``)."""
    images, _ = digit_images(n, CNN_SHAPE[1], seed)
    return images.astype(np.float32) / 255.0


def two_io_feeds(n: int = 40, height: int = 24, seed: int = SEED) -> dict[str, np.ndarray]:
    """Inputs for :func:`two_io_onnx` with a fixed height: ``image [n,3,height,16]``, ``aux [n,4]``."""
    images, labels = digit_images(n, 16, seed)
    from PIL import Image

    img = np.stack([np.asarray(Image.fromarray(im).resize((16, height), Image.BILINEAR)) for im in images])
    image = (img.astype(np.float32) / 255.0).transpose(0, 3, 1, 2).copy()
    rng = np.random.default_rng(seed)
    aux = np.stack([labels / 9.0, rng.uniform(0, 1, n), np.sin(labels), rng.normal(0, 0.5, n)], axis=1)
    return {"image": image, "aux": aux.astype(np.float32)}


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write calibration arrays (input name -> ``[N, ...]`` stacked samples) as one ``.npz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return path


# ----------------------------------------------------------------------------- Keras CNN
def _keras_model():
    import tensorflow as tf

    tf.keras.utils.set_random_seed(SEED)
    L = tf.keras.layers
    inp = tf.keras.Input(shape=CNN_SHAPE[1:], batch_size=None, name=CNN_INPUT)
    x = L.Conv2D(16, 3, strides=2, padding="same", use_bias=False, name="conv")(inp)
    x = L.BatchNormalization(name="bn1")(x)
    x = L.ReLU(max_value=6.0, name="relu6_1")(x)
    x = L.DepthwiseConv2D(3, strides=2, padding="same", use_bias=False, name="dwconv")(x)
    x = L.BatchNormalization(name="bn2")(x)
    x = L.ReLU(max_value=6.0, name="relu6_2")(x)
    x = L.Conv2D(24, 1, name="pwconv")(x)
    x = L.ReLU(max_value=6.0, name="relu6_3")(x)
    x = L.AveragePooling2D(2, name="pool")(x)
    x = L.Flatten(name="flatten")(x)
    x = L.Dense(CNN_CLASSES, name="dense")(x)
    out = L.Softmax(name="probs")(x)
    return tf.keras.Model(inp, out, name="tiny_cnn")


_TRAINED: dict[str, object] = {}


def trained_cnn():
    """The CNN, trained for a few epochs on the digits (cached per process; deterministic)."""
    if "model" not in _TRAINED:
        import tensorflow as tf

        model = _keras_model()
        images, y = digit_images(800, CNN_SHAPE[1], SEED + 1)
        x = images.astype(np.float32) / 255.0
        model.compile(optimizer=tf.keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        model.fit(x, y, epochs=12, batch_size=32, verbose=0, shuffle=False)
        _TRAINED["model"] = model
    return _TRAINED["model"]


def keras_cnn(path: str | Path) -> Path:
    """Save the trained CNN as a ``.keras`` file (``path`` should end in ``.keras``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    trained_cnn().save(path)
    return path


def _concrete_fn():
    import tensorflow as tf

    model = trained_cnn()
    spec = tf.TensorSpec([None, *CNN_SHAPE[1:]], tf.float32, name=CNN_INPUT)

    @tf.function(input_signature=[spec])
    def serve(image):
        return {"probs": model(image, training=False)}

    return serve


def savedmodel(path: str | Path) -> Path:
    """Export the trained CNN as a TF SavedModel folder (signature ``serving_default``)."""
    import tensorflow as tf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fn = _concrete_fn()
    module = tf.Module()
    module.model = trained_cnn()  # track the variables the function captures
    module.serve = fn
    tf.saved_model.save(module, str(path), signatures={"serving_default": fn.get_concrete_function()})
    return path


def onnx_cnn(path: str | Path, opset: int = 13) -> Path:
    """The CNN's ONNX form via tf2onnx (NHWC input ``image [N,32,32,3]``, output ``probs``)."""
    import tensorflow as tf
    import tf2onnx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = trained_cnn()

    @tf.function
    def serve(image):
        return {"probs": model(image, training=False)}

    spec = (tf.TensorSpec([None, *CNN_SHAPE[1:]], tf.float32, name=CNN_INPUT),)
    tf2onnx.convert.from_function(serve, input_signature=spec, opset=opset, output_path=str(path))
    return path


def float_tflite(path: str | Path) -> Path:
    """A float32 TFLite flatbuffer of the trained CNN (input ``[-1,32,32,3]``, batch dynamic).

    ``from_keras_model`` folds batch norm and freezes the weights (a concrete function of a
    Keras 3 model keeps resource variables, i.e. VAR_HANDLE ops, which no other tool reads).
    """
    import tensorflow as tf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(trained_cnn()).convert())
    return path


# ----------------------------------------------------------------------------- two-I/O ONNX
def two_io_onnx(path: str | Path, opset: int = 12) -> Path:
    """A two-input, two-output ONNX graph with a dynamic batch ``N`` and a dynamic height ``H``.

    ``image [N,3,H,16]`` -> Conv(3->8) -> Relu -> ``features [N,8,H,16]``;
    GlobalAveragePool(features) ++ ``aux [N,4]`` -> Gemm -> ``logits [N,5]``.
    Opset 12 on purpose: per-channel QDQ needs opset >= 13, so converters must upgrade it.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    w_conv = rng.normal(0, 0.4, (8, 3, 3, 3)).astype(np.float32)
    b_conv = rng.normal(0, 0.1, 8).astype(np.float32)
    w_fc = rng.normal(0, 0.5, (12, 5)).astype(np.float32)
    b_fc = rng.normal(0, 0.1, 5).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w_conv, "w_conv"), (b_conv, "b_conv"), (w_fc, "w_fc"), (b_fc, "b_fc"),
              (np.array([0, -1], dtype=np.int64), "flat_shape"))]
    nodes = [
        helper.make_node("Conv", ["image", "w_conv", "b_conv"], ["conv_out"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["conv_out"], ["features"], name="relu"),
        helper.make_node("GlobalAveragePool", ["features"], ["pooled"], name="gap"),
        helper.make_node("Reshape", ["pooled", "flat_shape"], ["flat"], name="flatten"),
        helper.make_node("Concat", ["flat", "aux"], ["joined"], axis=1, name="concat"),
        helper.make_node("Gemm", ["joined", "w_fc", "b_fc"], ["logits"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes, "two_io",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, TWO_IO_INPUTS["image"]),
         helper.make_tensor_value_info("aux", TensorProto.FLOAT, TWO_IO_INPUTS["aux"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5]),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, ["N", 8, "H", 16])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="edge-sdk-tests")
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


__all__ = [
    "CNN_CLASSES", "CNN_INPUT", "CNN_SHAPE", "TWO_IO_INPUTS", "TWO_IO_OUTPUTS",
    "cnn_feeds", "digit_images", "float_tflite", "keras_cnn", "onnx_cnn", "savedmodel",
    "trained_cnn", "two_io_feeds", "two_io_onnx", "write_constant_images", "write_image_folder", "write_npz",
]
