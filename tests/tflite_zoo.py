"""Float TFLite models shaped like the ones model zoos ship (MediaPipe's), built by code.

What makes those files hard, reproduced on a small segmentation-style CNN trained on the digits:

* **no SignatureDef** (the flatbuffer's ``signature_defs`` removed);
* **sparse weights**: a conv kernel pruned to 1x4 blocks and stored sparse behind a ``DENSIFY``
  op (TFLite's ``EXPERIMENTAL_SPARSITY``), as in ``pose_detection.tflite``;
* **fp16 weights** behind ``DEQUANTIZE`` ops;
* **a custom op**: the decoder's transposed convolution rewritten as MediaPipe's
  ``Convolution2DTransposeBias`` (which LiteRT runs through XNNPACK and no other tool reads), as
  in ``selfie_segmentation.tflite``. Its options are MediaPipe's: padding, stride_w, stride_h (int32).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

ZOO_INPUT = "image"
ZOO_SHAPE = (1, 32, 32, 3)


def _model(sparse: bool):
    import tensorflow as tf

    from models import digit_images

    tf.keras.utils.set_random_seed(11)
    L = tf.keras.layers
    inp = tf.keras.Input(shape=ZOO_SHAPE[1:], batch_size=1, name=ZOO_INPUT)
    x = L.Conv2D(16, 3, strides=2, padding="same", activation="relu", name="enc1")(inp)
    x = L.Conv2D(32, 3, padding="same", activation="relu", name="enc2")(x)
    x = L.Conv2DTranspose(1, 2, strides=2, padding="same", name="decode")(x)
    out = L.Activation("sigmoid", name="mask")(x)
    model = tf.keras.Model(inp, out)
    images, _ = digit_images(300, 32, 21)
    xs = images.astype(np.float32) / 255.0
    ys = (xs.max(axis=-1, keepdims=True) > 0.45).astype(np.float32)  # the stroke as a mask
    model.compile(optimizer=tf.keras.optimizers.Adam(3e-3), loss="binary_crossentropy")
    model.fit(xs, ys, epochs=6, batch_size=32, verbose=0, shuffle=False)
    if sparse:  # prune enc2 to 1x4 blocks along the input channels: what EXPERIMENTAL_SPARSITY stores sparse
        w, b = model.get_layer("enc2").get_weights()
        kh, kw, cin, cout = w.shape
        blocks = w.reshape(kh, kw, cin // 4, 4, cout)
        keep = np.abs(blocks).mean(axis=3, keepdims=True) > np.percentile(np.abs(blocks).mean(axis=3), 60)
        model.get_layer("enc2").set_weights([(blocks * keep).reshape(w.shape), b])
    return model


def _convert(model, *, sparse: bool, fp16: bool) -> bytes:
    import tensorflow as tf

    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    opts = []
    if sparse:
        opts.append(tf.lite.Optimize.EXPERIMENTAL_SPARSITY)
    if fp16:
        opts.append(tf.lite.Optimize.DEFAULT)
        conv.target_spec.supported_types = [tf.float16]
    conv.optimizations = opts
    return conv.convert()


def _rewrite(model: bytes, *, custom_op: bool) -> bytes:
    """Drop the signature; optionally turn TRANSPOSE_CONV into MediaPipe's custom op."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as S

    m = S.ModelT.InitFromPackedBuf(bytearray(model), 0)
    m.signatureDefs = []
    if custom_op:
        names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
        sg = m.subgraphs[0]
        for op in sg.operators:
            code = m.operatorCodes[op.opcodeIndex]
            if names.get(max(code.builtinCode, code.deprecatedBuiltinCode)) == "TRANSPOSE_CONV":
                custom = S.OperatorCodeT()
                custom.builtinCode = custom.deprecatedBuiltinCode = S.BuiltinOperator.CUSTOM
                custom.customCode = b"Convolution2DTransposeBias"
                m.operatorCodes.append(custom)
                op.opcodeIndex = len(m.operatorCodes) - 1
                _shape, weights, data, bias = list(op.inputs)[:4]
                op.inputs = [data, weights, bias]
                sg.tensors[bias].shape = np.array([sg.tensors[weights].shape[0]], np.int32)  # MediaPipe's bias is 1-D
                sg.tensors[bias].shapeSignature = None
                op.builtinOptionsType, op.builtinOptions = 0, None
                # MediaPipe's TfLiteTransposeConvParams prefix: padding SAME (1), stride_w 2, stride_h 2.
                op.customOptions = np.array([1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0], np.uint8)
                op.customOptionsFormat = 0
    b = flatbuffers.Builder(len(model) + 1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def zoo_tflite(path: str | Path, *, sparse: bool = False, fp16: bool = False, custom_op: bool = False) -> Path:
    """Write a zoo-style float TFLite (never with a signature) and return its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(_rewrite(_convert(_model(sparse), sparse=sparse, fp16=fp16), custom_op=custom_op))
    return path


def zoo_feeds(n: int, seed: int = 5) -> np.ndarray:
    from models import digit_images

    images, _ = digit_images(n, 32, seed)
    return images.astype(np.float32) / 255.0


def op_names(path: str | Path) -> list[str]:
    """The model's op names, custom ops as ``CUSTOM:<name>``."""
    from ai_edge_litert import schema_py_generated as S

    m = S.ModelT.InitFromPackedBuf(bytearray(Path(path).read_bytes()), 0)
    names = {v: k for k, v in vars(S.BuiltinOperator).items() if not k.startswith("_")}
    out = []
    for op in m.subgraphs[0].operators:
        code = m.operatorCodes[op.opcodeIndex]
        name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode))
        out.append(f"CUSTOM:{code.customCode.decode()}" if name == "CUSTOM" else name)
    return out
