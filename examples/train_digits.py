"""Train the bundled example model: a small CNN on scikit-learn's handwritten digits (offline, seeded).

The digits (1,797 real 8x8 scans bundled with scikit-learn, no download) are upscaled to
32x32 grayscale PNGs. The script writes, under ``examples/digits/``:

- ``digits_cnn.keras``      the trained float Keras model (input [1, 32, 32, 1] NHWC, 0..1 floats)
- ``digits_cnn.onnx``       the same model as ONNX (tf2onnx), for the ONNX-based profiles
- ``calib/*.png``           calibration images (never used for training or validation)
- ``val/*.png`` + ``val_labels.json``  held-out validation images and their labels
- ``preprocess.json``       the preprocessing spec shared by calibration and the device

Run: ``python examples/train_digits.py`` (about a minute on 2 CPU cores). Prints test accuracy.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

HERE = Path(__file__).resolve().parent / "digits"
SIZE = 32
SEED = 1234
PREPROCESS = {"size": [SIZE, SIZE], "resize": "stretch", "layout": "NHWC", "color": "GRAY", "scale": 1 / 255,
              "mean": [0.0], "std": [1.0]}


def digit_images() -> tuple[np.ndarray, np.ndarray]:
    """All digits as uint8 32x32 images (0 = background, 255 = ink) and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    imgs = []
    for im in d.images:  # values 0..16
        small = Image.fromarray(np.clip(im * 16, 0, 255).astype(np.uint8), mode="L")
        imgs.append(np.asarray(small.resize((SIZE, SIZE), Image.BILINEAR)))
    return np.stack(imgs), d.target.astype(np.int64)


def build_model():
    import tensorflow as tf

    inp = tf.keras.Input((SIZE, SIZE, 1), batch_size=1, name="image")
    x = tf.keras.layers.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(inp)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.ReLU(6.0)(x)
    x = tf.keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.ReLU(6.0)(x)
    x = tf.keras.layers.Conv2D(32, 1, use_bias=False)(x)
    x = tf.keras.layers.BatchNormalization()(x)
    x = tf.keras.layers.ReLU(6.0)(x)
    x = tf.keras.layers.Conv2D(32, 3, strides=2, padding="same", activation="relu")(x)
    x = tf.keras.layers.MaxPooling2D(2)(x)
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(10)(x)
    out = tf.keras.layers.Softmax(name="probs")(x)
    return tf.keras.Model(inp, out, name="digits_cnn")


def main() -> int:
    random.seed(SEED)
    np.random.seed(SEED)
    import tensorflow as tf

    tf.keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()

    images, labels = digit_images()
    order = np.random.default_rng(SEED).permutation(len(images))
    images, labels = images[order], labels[order]
    n_calib, n_val = 200, 300
    calib, val, train = slice(0, n_calib), slice(n_calib, n_calib + n_val), slice(n_calib + n_val, None)
    x = images[..., None].astype(np.float32) / 255.0

    train_model = build_model()
    # Train with a free batch size, then copy the weights into the batch-1 model we ship.
    inp = tf.keras.Input((SIZE, SIZE, 1))
    trainable = tf.keras.Model(inp, _rebuild(train_model, inp))
    trainable.compile(optimizer=tf.keras.optimizers.Adam(3e-3),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    trainable.fit(x[train], labels[train], epochs=30, batch_size=32, verbose=0,
                  validation_data=(x[val], labels[val]))
    train_model.set_weights(trainable.get_weights())
    probs = train_model.predict(x[val], batch_size=1, verbose=0)
    acc = float((probs.argmax(1) == labels[val]).mean())

    if HERE.exists():
        import shutil

        for sub in ("calib", "val"):
            shutil.rmtree(HERE / sub, ignore_errors=True)
    (HERE / "calib").mkdir(parents=True, exist_ok=True)
    (HERE / "val").mkdir(parents=True, exist_ok=True)
    for i, idx in enumerate(range(len(images))[calib]):
        Image.fromarray(images[idx], mode="L").save(HERE / "calib" / f"{i:04d}.png", optimize=True)
    val_labels = {}
    for i, idx in enumerate(range(len(images))[val]):
        name = f"{i:04d}.png"
        Image.fromarray(images[idx], mode="L").save(HERE / "val" / name, optimize=True)
        val_labels[name] = int(labels[idx])
    (HERE / "val_labels.json").write_text(json.dumps(val_labels, indent=0, sort_keys=True) + "\n")
    (HERE / "preprocess.json").write_text(json.dumps(PREPROCESS, indent=2) + "\n")
    train_model.save(HERE / "digits_cnn.keras")
    export_onnx(train_model, HERE / "digits_cnn.onnx")
    print(f"float validation accuracy on {n_val} held-out digits: {acc * 100:.2f}%")
    print(f"wrote {HERE}")
    return 0


def _rebuild(model, inp):
    """Apply ``model``'s layers to a batch-free input (same weights objects)."""
    x = inp
    for layer in model.layers[1:]:
        x = layer(x)
    return x


def export_onnx(model, path: Path) -> None:
    import tensorflow as tf
    import tf2onnx

    spec = (tf.TensorSpec((1, SIZE, SIZE, 1), tf.float32, name="image"),)
    fn = tf.function(lambda image: model(image, training=False))
    proto, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
    import onnx

    # tf2onnx names the output "Identity:0"; give it the Keras name so every artifact agrees.
    old = proto.graph.output[0].name
    for node in proto.graph.node:
        node.output[:] = ["probs" if o == old else o for o in node.output]
    proto.graph.output[0].name = "probs"
    onnx.checker.check_model(proto)
    onnx.save(proto, str(path))


if __name__ == "__main__":
    sys.exit(main())
