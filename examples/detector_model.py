"""A small YOLOv8-shaped detector artifact built by code, offline, for examples/camera_app.py and tests.

The model is a stand-in for a real YOLOv8 export (no training, no download): two strided convs,
then a box branch (``sigmoid * input size``: ``cx, cy, w, h`` in input pixels) concatenated
with a class branch (sigmoid scores) into one output ``output0 [1, 4 + C, N]``, exactly the
layout Ultralytics exports. Its boxes respond to image content, not to objects.

The artifact folder holds the float ONNX file and a manifest for the ``arm-cpu`` profile, whose
chain runs ONNX files on ONNX Runtime's CPU provider (so it runs on any host), with letterbox
preprocessing (RGB, 0..1, NCHW). Needs ``onnx`` (the ``[convert]`` extra) to build, and
``onnxruntime`` to run.

    python examples/detector_model.py OUT_FOLDER
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np

LABELS = ["person", "bicycle", "car", "dog", "cat", "bottle"]
SIZE = 128  # model input side (pixels)


def build_onnx(path: Path, *, size: int = SIZE, classes: int = len(LABELS), seed: int = 11, width: int = 1) -> Path:
    """Write the YOLOv8-shaped float ONNX model: ``images [1, 3, size, size]`` -> ``output0 [1, 4 + C, (size/4)^2]``.

    ``width`` multiplies the conv channels (16, 24): a heavier model with the same I/O, for
    benchmarks where inference should dominate the frame."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def w(*shape, s=0.3):
        return rng.normal(0, s, shape).astype(np.float32)

    c1, c2 = 16 * width, 24 * width
    inits = {"w1": w(c1, 3, 3, 3, s=0.5), "b1": w(c1, s=0.1), "w2": w(c2, c1, 3, 3, s=0.2 / width ** 0.5),
             "b2": w(c2, s=0.1), "wb": w(4, c2, 1, 1, s=0.3 / width ** 0.5), "bb": w(4, s=0.2),
             "wc": w(classes, c2, 1, 1, s=0.8 / width ** 0.5),
             "bc": np.full(classes, -2.0, np.float32), "k": np.array(float(size), np.float32),
             "shape_b": np.array([1, 4, -1], np.int64), "shape_c": np.array([1, classes, -1], np.int64)}
    n = (size // 4) ** 2
    nodes = [
        helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["feat"]),
        helper.make_node("Conv", ["feat", "wb", "bb"], ["box_raw"]),
        helper.make_node("Sigmoid", ["box_raw"], ["box_sig"]),
        helper.make_node("Mul", ["box_sig", "k"], ["box_px"]),
        helper.make_node("Reshape", ["box_px", "shape_b"], ["boxes"]),
        helper.make_node("Conv", ["feat", "wc", "bc"], ["cls_raw"]),
        helper.make_node("Reshape", ["cls_raw", "shape_c"], ["cls_flat"]),
        helper.make_node("Sigmoid", ["cls_flat"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["output0"], axis=1),
    ]
    graph = helper.make_graph(nodes, "yolov8_like",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [1, 4 + classes, n])],
                              [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="edge-sdk-examples")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def build_artifact(folder: str | Path, *, size: int = SIZE) -> Path:
    """Build the model and its artifact folder (manifest for ``arm-cpu``, letterbox preprocessing).

    Returns:
        The artifact folder, loadable with ``edge_sdk.load``.
    """
    from edge_sdk.manifest import (Manifest, Preprocessing, ProfileRef, SourceInfo, TensorSpec, file_entry,
                                   preprocessing_hash, write_manifest)
    from edge_sdk.profiles import resolve_profile

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = build_onnx(Path(tmp) / "detector.onnx", size=size)
        (folder / "model.onnx").write_bytes(src.read_bytes())
    n = (size // 4) ** 2
    pre = {"size": [size, size], "resize": "letterbox", "layout": "NCHW", "color": "RGB", "scale": 1 / 255,
           "mean": [0.0], "std": [1.0], "pad_value": 114, "dtype": "float32", "input": "images"}
    prof = resolve_profile("arm-cpu")
    manifest = Manifest(
        profile=ProfileRef(prof.name, prof.sha256, prof.to_dict()),
        source=SourceInfo("detector.onnx", "onnx", hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()),
        artifacts=[file_entry(folder, "model.onnx", fmt="onnx-qdq", precision="float32", role="model")],
        inputs=[TensorSpec("images", [1, 3, size, size], "float32", None, "NCHW")],
        outputs=[TensorSpec("output0", [1, 4 + len(LABELS), n], "float32")],
        preprocessing=Preprocessing(pre, preprocessing_hash(pre)))
    write_manifest(folder, manifest)
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/detector_model.py OUT_FOLDER")
    print(build_artifact(sys.argv[1]))
