"""`convert --head/--labels`: the decoding travels in the manifest, so the device app needs no
arguments to get labelled boxes; the head also declares the packed output for the gate."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.cli import main
from edge_sdk.errors import InputValidationError, ManifestError
from edge_sdk.manifest import read_manifest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import detector_model  # noqa: E402


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("head")
    onnx_path = detector_model.build_onnx(root / "det.onnx")
    rng = np.random.default_rng(0)
    np.savez(root / "calib.npz", images=rng.uniform(0, 1, (24, 1, 3, detector_model.SIZE, detector_model.SIZE)).astype(np.float32))
    labels = root / "labels.txt"
    labels.write_text("\n".join(detector_model.LABELS) + "\n", encoding="utf-8")
    pre = {"size": [detector_model.SIZE] * 2, "resize": "letterbox", "layout": "NCHW", "color": "RGB",
           "scale": 1 / 255, "pad_value": 114, "input": "images"}
    summary = edge_sdk.convert(str(onnx_path), ["intel-cpu"], root / "out", calib=root / "calib.npz", head="yolov8",
                               labels=labels, preprocess=pre, recover="off", allow_accuracy_drop=True, progress=None)
    return root, Path(summary.profiles[0].folder), summary


def test_manifest_records_head_labels_and_the_gate_judges_the_packed_output(converted):
    _, folder, summary = converted
    m = read_manifest(folder)
    assert (m.postprocess.head, m.postprocess.output, m.postprocess.labels) == ("yolov8", "output0", detector_model.LABELS)
    kind = next(k for k in summary.kinds if k["output"] == "output0")
    assert kind["source"] == "declared" and kind["kind"].startswith("packed"), kind


def test_load_decodes_with_the_recorded_head_and_labels(converted):
    _, folder, _ = converted
    frame = np.random.default_rng(3).integers(0, 256, (240, 320, 3), dtype=np.uint8)
    with edge_sdk.load(folder) as model:
        assert model.labels == detector_model.LABELS and model.head.kind == "yolov8"
        dets = model.infer_image(frame).detections
        assert all(d.label in detector_model.LABELS for d in dets)
        assert all(0 <= d.box[0] <= d.box[2] <= 320 and 0 <= d.box[1] <= d.box[3] <= 240 for d in dets)
    with edge_sdk.load(folder, labels=[f"c{i}" for i in range(6)]) as model:  # arguments still win
        assert model.labels[0] == "c0"


def test_label_count_and_head_must_match_the_output(converted, tmp_path, capsys):
    root, _, _ = converted
    bad = tmp_path / "five.txt"
    bad.write_text("a\nb\nc\nd\ne\n", encoding="utf-8")
    with pytest.raises(InputValidationError, match="5 names but output 'output0'"):
        edge_sdk.convert(str(root / "det.onnx"), ["intel-cpu"], tmp_path / "o1", calib=root / "calib.npz",
                         head="yolov8", labels=bad, progress=None)
    with pytest.raises(InputValidationError, match="--head yolov5"):
        edge_sdk.convert(str(root / "det.onnx"), ["intel-cpu"], tmp_path / "o2", calib=root / "calib.npz",
                         head="yolov5", progress=None)
    assert not (tmp_path / "o1").exists() and not (tmp_path / "o2").exists()
    code = main(["convert", str(root / "det.onnx"), "--profile", "intel-cpu", "--out", str(tmp_path / "o3"),
                 "--calib", str(root / "calib.npz"), "--head", "yolov8", "--labels", str(bad)])
    err = capsys.readouterr().err
    assert code == 3 and "5 names" in err and "Traceback" not in err


def test_a_tampered_head_is_refused(converted, tmp_path):
    import shutil

    _, folder, _ = converted
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    data = json.loads((copy / "manifest.json").read_text())
    data["postprocess"]["head"] = "evil"
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="unknown head 'evil'"):
        read_manifest(copy)
    data["postprocess"]["head"], data["postprocess"]["labels"] = "yolov8", ["ok", "bad\x1b[2J"]
    (copy / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="printable"):
        read_manifest(copy)


def test_head_is_checked_at_the_static_input_shape(converted, tmp_path):
    """An Ultralytics export with dynamic height/width says output0 [-1, 4 + C, -1]: --head yolov8 is
    checked against the output at the fixed --input-shape (it was refused before the input was fixed)."""
    import onnx

    root, _, _ = converted
    model = onnx.load(str(root / "det.onnx"))
    for i, name in ((0, "batch"), (2, "height"), (3, "width")):
        model.graph.input[0].type.tensor_type.shape.dim[i].dim_param = name
    for i, name in ((0, "batch"), (2, "anchors")):
        model.graph.output[0].type.tensor_type.shape.dim[i].dim_param = name
    onnx.save(model, str(tmp_path / "dynamic.onnx"))
    size = detector_model.SIZE
    summary = edge_sdk.convert(str(tmp_path / "dynamic.onnx"), ["intel-cpu"], tmp_path / "out", calib=root / "calib.npz",
                               input_shapes={"images": [1, 3, size, size]}, head="yolov8", labels=root / "labels.txt",
                               recover="off", allow_accuracy_drop=True, progress=None)
    m = read_manifest(Path(summary.profiles[0].folder))
    assert (m.postprocess.head, m.postprocess.labels) == ("yolov8", detector_model.LABELS)
    assert [o.shape for o in m.outputs] == [[1, 4 + len(detector_model.LABELS), m.outputs[0].shape[2]]]
    bad = tmp_path / "five.txt"
    bad.write_text("a\nb\nc\nd\ne\n", encoding="utf-8")
    with pytest.raises(InputValidationError, match="5 names but output 'output0'"):  # still checked, at the real shape
        edge_sdk.convert(str(tmp_path / "dynamic.onnx"), ["intel-cpu"], tmp_path / "o1", calib=root / "calib.npz",
                         input_shapes={"images": [1, 3, size, size]}, head="yolov8", labels=bad, progress=None)
    assert not (tmp_path / "o1").exists()
