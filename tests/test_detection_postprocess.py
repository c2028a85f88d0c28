"""Float TFLite detectors ending in TensorFlow's ``TFLite_Detection_PostProcess`` (SSD MobileNet,
EfficientDet-Lite): the custom op's decoding becomes builtin ops, its NMS the ``boxes-scores`` head.

The model is built by code with the real op (TensorFlow's converter fuses it from an
``experimental_implements`` function; LiteRT runs it). Before this, every profile misjudged it:
OpenVINO refused its dynamic detection count, the ONNX route turned it into dynamic NMS, and the
gate compared post-NMS detection lists position by position (it read the class ids as an
"embedding" and the detection count as logits).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import edge_sdk
from edge_sdk.cli import main
from edge_sdk.detect import Head, as_head, boxes_scores_outputs, decode_boxes_scores, decode_outputs
from edge_sdk.errors import InputValidationError, ManifestError
from edge_sdk.manifest import read_manifest
from heads import SSD_PP_SIZE, SSD_PP_THRESHOLDS, coloured_squares, ssd_postprocess_tflite

LABELS = ["red", "green", "blue"]


def op_detections(model_path, frame: np.ndarray) -> list[tuple[int, float, np.ndarray]]:
    """What LiteRT's ``TFLite_Detection_PostProcess`` returns for an RGB frame: (class, score,
    box x1, y1, x2, y2 in input pixels) per detection, in its order."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(model_path))
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    it.set_tensor(inp["index"], frame[None] if inp["dtype"] == np.uint8 else (frame / 255.0).astype(np.float32)[None])
    it.invoke()
    out = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
    boxes, classes, scores, count = (out[f"PartitionedCall:{i}"] for i in range(4))
    n = int(count.reshape(-1)[0])
    return [(int(classes[0, i]), float(scores[0, i]), boxes[0, i][[1, 0, 3, 2]] * SSD_PP_SIZE) for i in range(n)]


def matched_f1(want: list[tuple[int, float, np.ndarray]], got: list) -> float:
    """F1 of ``got`` (detections) against ``want`` (op detections): same class, IoU >= 0.5, one-to-one."""
    from edge_sdk.detect import box_iou

    used: set[int] = set()
    hits = 0
    for cls, _, box in want:
        free = [j for j, d in enumerate(got) if j not in used and d.class_id == cls]
        if not free:
            continue
        ious = box_iou(np.asarray(box, np.float64), np.array([got[j].box for j in free], np.float64))
        if ious.max() >= 0.5:
            used.add(free[int(ious.argmax())])
            hits += 1
    return 1.0 if not want and not got else 2 * hits / (len(want) + len(got))


@pytest.fixture(scope="module")
def ssd(tmp_path_factory):
    root = tmp_path_factory.mktemp("ssd_pp")
    model = ssd_postprocess_tflite(root / "ssd_pp.tflite")
    frames, _ = coloured_squares(60, seed=1)
    (root / "calib").mkdir()
    for i, f in enumerate(frames):
        Image.fromarray(f).save(root / "calib" / f"{i:03d}.png")
    return root, model


def test_the_builtin_decoding_and_the_head_reproduce_the_op(ssd):
    """Real op, real LiteRT: the rewritten model's outputs through the boxes-scores head give the
    op's own detections (count, order, class, score, box), ties in score included."""
    from ai_edge_litert.interpreter import Interpreter

    from edge_sdk.converters.tflite_native import decode_detection_postprocess

    _, model = ssd
    rewritten, params = decode_detection_postprocess(model.read_bytes())
    assert params["anchors"] == 512 and params["classes"] == 3 and params["background"] == 1
    assert params["agnostic"] is True and params["max_det"] == SSD_PP_THRESHOLDS["max_det"]
    assert params["conf"] == pytest.approx(SSD_PP_THRESHOLDS["conf"]) and params["iou"] == pytest.approx(0.5)
    it = Interpreter(model_content=rewritten)
    it.allocate_tensors()
    assert [d["name"] for d in it.get_output_details()] == ["decoded_boxes", "class_scores"]
    assert [list(d["shape"]) for d in it.get_output_details()] == [[1, 512, 4], [1, 512, 3]]
    head = as_head("boxes-scores", options={k: params[k] for k in ("conf", "iou", "max_det", "agnostic")})
    frames, _ = coloured_squares(12, seed=9)
    compared = 0
    for frame in frames:
        want = op_detections(model, frame)
        it.set_tensor(it.get_input_details()[0]["index"], (frame / 255.0).astype(np.float32)[None])
        it.invoke()
        outs = {d["name"]: it.get_tensor(d["index"]) for d in it.get_output_details()}
        got = decode_outputs(outs, head)
        assert len(got) == len(want) > 0
        for (cls, score, box), d in zip(want, got):
            assert d.class_id == cls and d.score == pytest.approx(score, abs=1e-5)
            np.testing.assert_allclose(d.box, box, atol=1e-3)
        compared += len(got)
    assert compared >= 12 * 5


@pytest.fixture(scope="module")
def converted(ssd):
    root, model = ssd
    pre = {"size": [SSD_PP_SIZE, SSD_PP_SIZE], "layout": "NHWC", "color": "RGB", "scale": 1 / 255}
    summary = edge_sdk.convert(str(model), ["intel-cpu", "arm-cpu"], root / "out", calib=root / "calib",
                               preprocess=pre, labels=LABELS, progress=None)
    return root, model, summary


def test_every_profile_publishes_decoded_outputs_and_the_op_thresholds(converted):
    _, model, summary = converted
    published = {(p.profile, o.format) for p in summary.profiles for o in p.outcomes if o.status == "published"}
    assert published == {("intel-cpu", "openvino-ir"), ("arm-cpu", "tflite-int8"), ("arm-cpu", "onnx-qdq")}
    for prof in summary.profiles:
        m = read_manifest(prof.folder)
        assert m.source.path == str(model)  # the user's file, not the rewrite
        assert [(t.name, t.shape) for t in m.outputs] == [("decoded_boxes", [1, 512, 4]), ("class_scores", [1, 512, 3])]
        assert [t.kind.kind for t in m.outputs] == ["boxes", "scores"]
        post = m.postprocess
        assert (post.head, post.output, post.labels) == ("boxes-scores", "decoded_boxes", LABELS)
        assert post.options == {"conf": pytest.approx(0.4), "iou": 0.5, "max_det": SSD_PP_THRESHOLDS["max_det"],
                                "agnostic": True}


@pytest.mark.parametrize("profile, backend", [("intel-cpu", "openvino"), ("arm-cpu", "litert"),
                                              ("arm-cpu", "onnxruntime")])
def test_the_int8_artifacts_detect_what_the_float_op_detects(converted, profile, backend):
    """infer_image() on the int8 artifact against the float model's own TFLite_Detection_PostProcess."""
    root, model, _ = converted
    frames, _ = coloured_squares(10, seed=21)
    with edge_sdk.load(root / "out" / profile, backend=backend) as m:
        assert m.head.kind == "boxes-scores" and m.head.agnostic and m.head.max_det == SSD_PP_THRESHOLDS["max_det"]
        f1s = []
        for frame in frames:
            got = m.infer_image(frame).detections
            assert all(d.label == LABELS[d.class_id] for d in got)
            f1s.append(matched_f1(op_detections(model, frame), got))
    assert float(np.mean(f1s)) >= 0.9, f1s


def test_another_head_for_such_a_model_is_refused_before_anything_is_written(ssd, tmp_path, capsys):
    root, model = ssd
    rc = main(["convert", str(model), "--profile", "arm-cpu", "--out", str(tmp_path / "o"), "--calib", "random",
               "--head", "yolov8"])
    err = capsys.readouterr().err
    assert rc == 3, err
    assert "TFLite_Detection_PostProcess" in err and "boxes-scores" in err and "Traceback" not in err
    assert not (tmp_path / "o" / "arm-cpu").exists()


def test_tampered_head_options_are_refused(converted, tmp_path):
    root, _, _ = converted
    for change, match in [({"iou": 7}, "iou must be a number in 0..1"), ({"nms": 1}, "Unknown head option 'nms'"),
                          ({"agnostic": "yes"}, "agnostic must be true or false")]:
        copy = tmp_path / f"copy_{next(iter(change))}"
        shutil.copytree(root / "out" / "intel-cpu", copy)
        data = json.loads((copy / "manifest.json").read_text())
        data["postprocess"]["options"].update(change)
        (copy / "manifest.json").write_text(json.dumps(data))
        with pytest.raises(ManifestError, match=match):
            read_manifest(copy)


def test_boxes_scores_head_agnostic_and_per_class_nms():
    boxes = np.array([[[0, 0, 10, 10], [1, 1, 11, 11], [30, 30, 40, 40]]], np.float32)
    scores = np.array([[[0.9, 0.1], [0.2, 0.8], [0.05, 0.5]]], np.float32)
    per_class = decode_boxes_scores(boxes, scores, Head("boxes-scores", conf=0.3))
    agnostic = decode_boxes_scores(boxes, scores, Head("boxes-scores", conf=0.3, agnostic=True))
    assert [(d.class_id, round(d.score, 2)) for d in per_class] == [(0, 0.9), (1, 0.8), (1, 0.5)]
    assert [(d.class_id, round(d.score, 2)) for d in agnostic] == [(0, 0.9), (1, 0.5)]  # box 1 overlaps box 0
    assert boxes_scores_outputs({"s": scores, "b": boxes}, Head("boxes-scores")) == ("b", "s")
    with pytest.raises(InputValidationError, match="one boxes output"):
        boxes_scores_outputs({"a": boxes, "b": boxes}, Head("boxes-scores"))
    with pytest.raises(InputValidationError, match="do not pair"):
        decode_boxes_scores(boxes, scores[:, :2], Head("boxes-scores"))
    with pytest.raises(InputValidationError, match="max_det must be an integer"):
        as_head("boxes-scores", options={"max_det": 0})


def test_edge_sdk_run_lists_the_heads_detections(converted, tmp_path, capsys):
    root, _, _ = converted
    frame = coloured_squares(1, seed=33)[0][0]
    Image.fromarray(frame).save(tmp_path / "frame.png")
    folder = root / "out" / "intel-cpu"
    assert main(["run", str(folder), "--input", str(tmp_path / "frame.png"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    with edge_sdk.load(folder) as m:
        want = m.infer_image(frame).detections
    got = report["detections"]
    assert got["head"] == "boxes-scores" and got["count"] == len(want) > 0
    assert [(d["label"], d["score"]) for d in got["items"]] == [(d.label, round(d.score, 4)) for d in want]
    assert main(["run", str(folder), "--input", str(tmp_path / "frame.png")]) == 0
    text = capsys.readouterr().out
    assert f"detections (boxes-scores head, in the image's pixels): {len(want)}" in text


def test_a_uint8_input_model_takes_pixels_as_they_are(ssd, tmp_path, capsys):
    """EfficientDet-Lite-style: uint8 pixels cast inside. An image folder needs no --preprocess (the
    default 0..1 scaling would not fit a uint8 input); a mean/std is refused with what to do."""
    root, _ = ssd
    model = ssd_postprocess_tflite(tmp_path / "u8.tflite", uint8_input=True)
    summary = edge_sdk.convert(str(model), ["arm-cpu"], tmp_path / "out", calib=root / "calib", progress=None)
    assert {o.format for o in summary.profiles[0].outcomes if o.status == "published"} == {"tflite-int8", "onnx-qdq"}
    spec = read_manifest(summary.profiles[0].folder).preprocessing.spec
    assert spec["dtype"] == "uint8" and spec["scale"] == 1.0
    frames, _ = coloured_squares(6, seed=21)
    with edge_sdk.load(summary.profiles[0].folder, backend="litert") as m:
        f1s = [matched_f1(op_detections(model, f), m.infer_image(f).detections) for f in frames]
    assert float(np.mean(f1s)) >= 0.9, f1s
    rc = main(["convert", str(model), "--profile", "arm-cpu", "--out", str(tmp_path / "o2"), "--calib",
               str(root / "calib"), "--preprocess", "mean=127.5,std=127.5,scale=1,layout=NHWC"])
    err = capsys.readouterr().err
    assert rc != 0 and "is uint8 (pixels 0..255)" in err and "Drop mean/std" in err and "Traceback" not in err
    assert not (tmp_path / "o2" / "arm-cpu").exists()


def test_yolox_head_options_and_grid():
    """``yolox:strides=...;size=WxH`` and the manifest's options build the same head; the grid is
    YOLOX's (stride by stride, row-major), and a row count that does not fit is refused."""
    from edge_sdk.detect import decode_yolox, yolox_grid

    head = as_head("yolox:strides=8,16;size=64x32")
    assert (head.kind, head.strides, head.size) == ("yolox", (8, 16), (64, 32))
    assert as_head("yolox", options={"strides": [8, 16], "size": [64, 32]}) == head
    cells, steps = yolox_grid((64, 32), (8, 16))
    assert len(cells) == 8 * 4 + 4 * 2 and cells[:3].tolist() == [[0, 0], [1, 0], [2, 0]] and steps[-1, 0] == 16
    rows = np.zeros((len(cells), 6), np.float32)
    rows[9] = [0.5, 0.5, np.log(2), np.log(1), 0.9, 0.8]  # cell (1, 1) of stride 8: centre (12, 12), 16 x 8 px
    (d,) = decode_yolox(rows[None], head)
    assert d.box == pytest.approx((4.0, 8.0, 20.0, 16.0)) and d.score == pytest.approx(0.72)
    with pytest.raises(InputValidationError, match="make 40 cells, but the output has 41 rows"):
        decode_yolox(np.zeros((1, 41, 6), np.float32), head)
    with pytest.raises(InputValidationError, match="needs the input size"):
        decode_yolox(rows[None], Head("yolox"))
    for bad, match in [("yolox:stride=8", "unknown or malformed key"), ("yolox:strides=8,x", "strides must be"),
                       ("yolox:size=64", "size must be two integers")]:
        with pytest.raises(InputValidationError, match=match):
            as_head(bad)


def test_end2end_head_is_checked_and_declares_a_detection_list():
    from pathlib import Path

    from edge_sdk.converters.base import SourceModel, TensorSpec
    from edge_sdk.converters.heads import postprocess

    src = SourceModel(Path("m.onnx"), "onnx", "0" * 64, [TensorSpec("images", [1, 3, 320, 320], "float32")],
                      [TensorSpec("output0", [1, 300, 6], "float32")])
    declared: dict = {}
    post = postprocess("end2end", None, src, declared)
    assert post == {"head": "end2end", "output": "output0", "labels": []} and declared["output0"].kind == "detections"
    bad = SourceModel(Path("m.onnx"), "onnx", "0" * 64, src.inputs, [TensorSpec("output0", [1, 7, 2100], "float32")])
    with pytest.raises(InputValidationError, match="expected \\[1, K, 6\\+\\] rows"):
        postprocess("end2end", None, bad, {})


def test_a_uint8_input_model_maps_on_the_edge_tpu(ssd, tmp_path):
    """The Edge TPU has no CAST: a float model that casts uint8 pixels inside left everything after
    the cast on the CPU ("Ops left in float ... #0 CAST"). The cast goes and the input is quantized
    as the pixels themselves (uint8, scale 1, zero point 0): the same input contract, integer ops
    up to the box decoding's EXP, and the detections of the float op."""
    from ai_edge_litert.interpreter import Interpreter

    from edge_sdk.converters.tflite_native import used_ops

    root, _ = ssd
    model = ssd_postprocess_tflite(tmp_path / "u8.tflite", uint8_input=True)
    summary = edge_sdk.convert(str(model), ["coral-edgetpu"], tmp_path / "out", calib=root / "calib", progress=None)
    folder = summary.profiles[0].folder
    assert summary.profiles[0].published, summary.table()
    m = read_manifest(folder)
    q = m.inputs[0].quantization
    assert m.inputs[0].dtype == "uint8" and (q.scale, q.zero_point) == (1.0, 0)
    blob = (Path(folder) / "model.tflite").read_bytes()
    assert "CAST" not in used_ops(blob)
    it = Interpreter(model_content=blob)
    first = min(op["index"] for op in it._get_ops_details() if op["op_name"] in ("EXP", "DEQUANTIZE"))
    assert first >= 10, it._get_ops_details()[:first + 1]  # the convolutions before the decoding are integer
    frames, _ = coloured_squares(6, seed=21)
    with edge_sdk.load(folder) as loaded:
        f1s = [matched_f1(op_detections(model, f), loaded.infer_image(f).detections) for f in frames]
    assert float(np.mean(f1s)) >= 0.9, f1s
