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


#: ``ssd_postprocess_tflite``: input size, classes, anchors per cell on its 16x16 grid.
SSD_PP_SIZE, SSD_PP_CLASSES, SSD_PP_PER_CELL = 64, 3, 2
SSD_PP_THRESHOLDS = {"conf": 0.4, "iou": 0.5, "max_det": 20}


def ssd_postprocess_tflite(path: str | Path, seed: int = 3, uint8_input: bool = False) -> Path:
    """A float SSD-style TFLite ending in TensorFlow's ``TFLite_Detection_PostProcess`` custom op
    (what SSD MobileNet and EfficientDet-Lite TFLite files end in), built by code.

    Input ``[1, 64, 64, 3]`` RGB in 0..1. A conv backbone (stride 4) gives box encodings
    ``[1, 512, 4]`` (ty, tx, th, tw against two anchors per cell of a 16x16 grid) and sigmoid class
    predictions ``[1, 512, 4]`` whose column 0 is the background the op skips. Class c fires
    where the local mean of colour channel c is high and the others low (a red, green or blue
    square on a dark background), so detections are sparse and their class is known. The
    post-processing is the op itself (fused by TensorFlow's converter from an
    ``experimental_implements`` function), with fast (class-agnostic) NMS. ``uint8_input``: the
    input is uint8 pixels cast and scaled inside, as EfficientDet-Lite exports take them.
    """
    import tempfile

    import tensorflow as tf

    size, c, per = SSD_PP_SIZE, SSD_PP_CLASSES, SSD_PP_PER_CELL
    grid = size // 4
    n = grid * grid * per
    centres = (np.arange(grid) + 0.5) / grid
    anchors = np.array([[y, x, s, s] for y in centres for x in centres for s in (0.2, 0.35)], np.float32)
    rng = np.random.default_rng(seed)

    def w(*shape, s=0.3):
        return tf.constant(rng.normal(0, s, shape).astype(np.float32))

    w1, w2, wb = w(3, 3, 3, 16, s=0.5), w(3, 3, 16, 16, s=0.2), w(3, 3, 16, per * 4, s=0.03)
    # colour evidence: +9 for the class's own channel mean, -5 for each other channel, bias -4
    colour = np.full((3, c), -5.0, np.float32)
    np.fill_diagonal(colour, 9.0)
    wc = np.concatenate([np.zeros((3, 1), np.float32), colour], axis=1)  # background column: logit 0
    wc = tf.constant(np.tile(wc, (1, per))[None, None])  # [1, 1, 3, per * (c + 1)]
    bc = tf.constant(np.tile(np.array([0.0] + [-4.0] * c, np.float32), per))
    attrs = {"max_detections": ("i", SSD_PP_THRESHOLDS["max_det"]), "max_classes_per_detection": ("i", 1),
             "use_regular_nms": ("b", "false"), "nms_score_threshold": ("f", SSD_PP_THRESHOLDS["conf"]),
             "nms_iou_threshold": ("f", SSD_PP_THRESHOLDS["iou"]), "y_scale": ("f", 10.0), "x_scale": ("f", 10.0),
             "h_scale": ("f", 5.0), "w_scale": ("f", 5.0), "num_classes": ("i", c)}
    implements = " ".join(['name: "TFLite_Detection_PostProcess"']
                          + [f'attr {{ key: "{k}" value {{ {t}: {v} }} }}' for k, (t, v) in attrs.items()])

    @tf.function(experimental_implements=implements)
    def postprocess(box_encodings, class_predictions, anchor_boxes):  # the converter puts the op here
        return (tf.zeros([1, 10, 4]), tf.zeros([1, 10]), tf.zeros([1, 10]), tf.zeros([1]))

    @tf.function(input_signature=[tf.TensorSpec([1, size, size, 3], tf.uint8 if uint8_input else tf.float32,
                                                 name="image")])
    def serve(image):
        if uint8_input:
            image = tf.cast(image, tf.float32) / 255.0
        x = tf.nn.relu(tf.nn.conv2d(image, w1, 2, "SAME"))
        x = tf.nn.relu(tf.nn.conv2d(x, w2, 2, "SAME"))
        boxes = tf.reshape(tf.nn.conv2d(x, wb, 1, "SAME"), [1, n, 4])
        means = tf.nn.avg_pool2d(image, 4, 4, "SAME")
        scores = tf.sigmoid(tf.reshape(tf.nn.conv2d(means, wc, 1, "SAME") + bc, [1, n, c + 1]))
        return postprocess(boxes, scores, tf.constant(anchors))

    module = tf.Module()
    module.serve = serve
    with tempfile.TemporaryDirectory() as tmp:
        tf.saved_model.save(module, tmp, signatures={"serving_default": serve.get_concrete_function()})
        converter = tf.lite.TFLiteConverter.from_saved_model(tmp)
        converter.allow_custom_ops = True
        data = converter.convert()
    path = Path(path)
    path.write_bytes(data)
    return path


def coloured_squares(count: int, seed: int = 0) -> tuple[np.ndarray, list[list[tuple[int, int, int, int, int]]]]:
    """``count`` RGB uint8 frames ``[64, 64, 3]``: dark noise with one to three pure red, green or
    blue squares (12-24 px); and per frame the squares as ``(class, x1, y1, x2, y2)``."""
    rng = np.random.default_rng(seed)
    frames = rng.integers(0, 40, (count, SSD_PP_SIZE, SSD_PP_SIZE, 3)).astype(np.uint8)
    truth = []
    for f in frames:
        squares = []
        for _ in range(int(rng.integers(1, 4))):
            cls, side = int(rng.integers(0, 3)), int(rng.integers(12, 25))
            x, y = (int(v) for v in rng.integers(0, SSD_PP_SIZE - side, 2))
            f[y:y + side, x:x + side] = 0
            f[y:y + side, x:x + side, cls] = 255
            squares.append((cls, x, y, x + side, y + side))
        truth.append(squares)
    return frames, truth
