"""Small real models with the output heads that fool whole-tensor metrics, built by code.

* :func:`yolo_like_onnx`: a YOLOv8-style packed head ``[1, 4 + C, N]``: box coordinates in
  pixels (0..320) concatenated with sigmoid class scores (0..1), as Ultralytics exports it.
  Quantized with one int8 scale for the whole tensor (TensorRT's symmetric per-tensor QDQ, or
  TFLite's per-tensor concat), the class scores all round to zero: the detector never fires.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

YOLO_CLASSES = 6
YOLO_INPUT = "images"
YOLO_SHAPE = (1, 3, 64, 64)


def yolo_like_onnx(path: str | Path, seed: int = 7) -> Path:
    """Conv backbone -> (box branch: sigmoid * 320) ++ (class branch: sigmoid) along axis 1.

    Output ``output0 [1, 4 + C, 256]`` (a 16x16 grid of positions), like YOLOv8's ``[1, 84, 8400]``.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    c = YOLO_CLASSES

    def w(*shape, s=0.3):
        return rng.normal(0, s, shape).astype(np.float32)

    inits = {
        "w1": w(16, 3, 3, 3, s=0.5), "b1": w(16, s=0.1), "w2": w(24, 16, 3, 3, s=0.2), "b2": w(24, s=0.1),
        "wb": w(4, 24, 1, 1, s=0.3), "bb": w(4, s=0.2), "wc": w(c, 24, 1, 1, s=0.6),
        "bc": np.full(c, -3.5, np.float32), "k": np.array(320.0, np.float32),
        "shape_b": np.array([1, 4, -1], np.int64), "shape_c": np.array([1, c, -1], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["feat"], name="relu2"),
        helper.make_node("Conv", ["feat", "wb", "bb"], ["box_raw"], name="box_conv"),
        helper.make_node("Sigmoid", ["box_raw"], ["box_sig"], name="box_sigmoid"),
        helper.make_node("Mul", ["box_sig", "k"], ["box_px"], name="box_scale"),
        helper.make_node("Reshape", ["box_px", "shape_b"], ["boxes"], name="box_reshape"),
        helper.make_node("Conv", ["feat", "wc", "bc"], ["cls_raw"], name="cls_conv"),
        helper.make_node("Reshape", ["cls_raw", "shape_c"], ["cls_flat"], name="cls_reshape"),
        helper.make_node("Sigmoid", ["cls_flat"], ["scores"], name="cls_sigmoid"),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1, name="concat"),
    ]
    graph = helper.make_graph(nodes, "yolo_like", [helper.make_tensor_value_info(YOLO_INPUT, TensorProto.FLOAT, list(YOLO_SHAPE))],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + c, 256])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def yolo_feeds(n: int, seed: int = 3) -> np.ndarray:
    """Coloured digit images, NCHW 64x64 in 0..1 (the detector's 'scenes')."""
    from models import digit_images

    images, _ = digit_images(n, 64, seed)
    return (images.astype(np.float32) / 255.0).transpose(0, 3, 1, 2).copy()


OUTLIER_INPUT = "x"
OUTLIER_SHAPE = (1, 4, 16, 16)


def outlier_onnx(path: str | Path, seed: int = 3) -> Path:
    """One layer whose output has a channel ~400x larger than the others, undone by the next layer.

    ``conv_a -> relu -> conv_outlier -> conv_mix -> GAP -> Softmax(classes)``. The outlier
    channel is dense (every value large), so no clipping calibration (percentile, entropy) can
    save the small channels that share its int8 scale: only keeping ``conv_outlier`` (and the
    layer reading its output) float does.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    wa = rng.normal(0, 0.5, (8, 4, 3, 3)).astype(np.float32)
    wo = rng.normal(0, 0.3, (8, 8, 1, 1)).astype(np.float32)
    bo = np.zeros(8, np.float32)
    wo[0] *= 0.0
    bo[0] = 400.0  # channel 0: a dense, near-constant 400 (plus a little signal)
    wo[0, :, 0, 0] = rng.normal(0, 2.0, 8)
    wm = rng.normal(0, 0.5, (6, 8, 1, 1)).astype(np.float32)
    wm[:, 0] = 1.0 / 400.0  # the mix reads channel 0 at 1/400 scale: it barely matters to the output
    inits = [numpy_helper.from_array(a, n) for a, n in ((wa, "wa"), (wo, "wo"), (bo, "bo"), (wm, "wm"))]
    inits.append(numpy_helper.from_array(np.array([1, 6], np.int64), "flat"))
    nodes = [
        helper.make_node("Conv", ["x", "wa"], ["a"], pads=[1, 1, 1, 1], name="conv_a"),
        helper.make_node("Relu", ["a"], ["a_r"], name="relu_a"),
        helper.make_node("Conv", ["a_r", "wo", "bo"], ["o"], name="conv_outlier"),
        helper.make_node("Conv", ["o", "wm"], ["m"], name="conv_mix"),
        helper.make_node("GlobalAveragePool", ["m"], ["g"], name="gap"),
        helper.make_node("Reshape", ["g", "flat"], ["logits"], name="flatten"),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="softmax"),
    ]
    graph = helper.make_graph(nodes, "outlier", [helper.make_tensor_value_info(OUTLIER_INPUT, TensorProto.FLOAT, list(OUTLIER_SHAPE))],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def outlier_feeds(n: int, seed: int = 1) -> np.ndarray:
    """Noise images with a per-sample offset per channel (so the classes the model predicts vary)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, *OUTLIER_SHAPE[1:])) + rng.normal(0, 2.0, (n, OUTLIER_SHAPE[1], 1, 1))
    return x.astype(np.float32)
