"""The accuracy gate end to end on models built by code: kinds, per-format publication, rejected
candidates, declarations, task metrics and the verdict travelling to load / run / verify.

Recovery is off here (``recover="off"``): these tests are about the verdict itself; what recovery
does with a failing format is in test_recovery.py.

One conversion matrix per module (the slow part), shared by the tests below.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import edge_sdk
from edge_sdk.errors import AccuracyGateError, ConversionError, ManifestError, ModelLoadError
from edge_sdk.manifest import read_manifest

from conftest import run_cli
from heads import YOLO_CLASSES, yolo_feeds, yolo_like_onnx

pytestmark = pytest.mark.slow

#: x86 with two runtimes: OpenVINO IR (NNCF leaves the packed concat in float) and TensorRT-style
#: symmetric per-tensor QDQ ONNX (one scale for boxes and scores together).
TWO_FORMATS = """
name = "x86-both"
description = "OpenVINO IR first, symmetric int8 ONNX as the alternative"
[artifact]
formats = ["openvino-ir", "onnx-qdq"]
[quantization]
activation_dtype = "int8"
activation_symmetric = true
[[runtime.chain]]
backend = "openvino"
accelerator = "CPU"
format = "openvino-ir"
[[runtime.chain]]
backend = "onnxruntime"
accelerator = "CPUExecutionProvider"
format = "onnx-qdq"
"""

METRIC = '''
import numpy as np

def detections(float_outputs, int8_outputs, inputs):
    f = sum(int((o["output0"][0, 4:] >= 0.5).sum()) for o in float_outputs)
    q = sum(int((o["output0"][0, 4:] >= 0.5).sum()) for o in int8_outputs)
    return {"passed": q >= 0.5 * f, "float_positives": f, "int8_positives": q, "samples": len(inputs)}
'''


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate_e2e")
    model = yolo_like_onnx(root / "yolo_like.onnx")
    np.savez(root / "calib.npz", images=yolo_feeds(60, seed=5))
    np.savez(root / "val.npz", images=yolo_feeds(30, seed=3))
    (root / "x86-both.toml").write_text(TWO_FORMATS)
    (root / "metric.py").write_text(METRIC)
    out = root / "out"
    with pytest.raises(AccuracyGateError) as err:
        edge_sdk.convert(model, [str(root / "x86-both.toml"), "jetson-orin"], out, calib=root / "calib.npz",
                         validation=root / "val.npz", metric=f"{root / 'metric.py'}:detections", recover="off",
                         progress=None)
    return {"root": root, "model": model, "out": out, "error": err.value, "summary": err.value.summary}


def test_packed_head_is_recognised_from_the_graph(yolo):
    kinds = {k["output"]: k for k in yolo["summary"].kinds}
    assert kinds["output0"]["kind"] == "packed(boxes 0:4, scores 4:10 @axis -2)" and kinds["output0"]["source"] == "graph"


def test_collapsed_scores_fail_the_per_tensor_format_and_the_other_format_is_published(yolo):
    prof = {p.profile: p for p in yolo["summary"].profiles}
    both = prof["x86-both"]
    assert both.published and both.formats == ["openvino-ir"]
    status = {o.format: o.status for o in both.outcomes}
    assert status == {"openvino-ir": "published", "onnx-qdq": "gate_failed"}
    failed = next(o for o in both.outcomes if o.format == "onnx-qdq")
    assert "scores: collapsed" in failed.reason and "int8 0" in failed.reason
    m = read_manifest(both.folder)
    assert m.formats == ["openvino-ir"] and m.accuracy["gate"] == "passed"
    assert m.accuracy["rejected"]["onnx-qdq"]["status"] == "gate_failed"
    assert m.outputs[0].kind.kind == "packed" and [g.name for g in m.outputs[0].kind.groups] == ["boxes", "scores"]
    scores = m.accuracy["formats"]["openvino-ir"]["outputs"]["output0"]["groups"]["scores"]
    assert scores["passed"] and scores["positive_f1"] >= 0.9
    # jetson-orin has no other format: nothing published, the candidate kept aside
    assert not prof["jetson-orin"].published and not (yolo["out"] / "jetson-orin").exists()


def test_whole_tensor_cosine_alone_would_have_passed_the_collapsed_format(yolo):
    rejected = read_manifest(yolo["out"] / ".rejected" / "jetson-orin", allow_unpublished=True)
    out = rejected.accuracy["formats"]["onnx-qdq"]["outputs"]["output0"]
    assert float(out["cosine"]) > 0.99 and not out["passed"] and out["worst"] == "scores"


def test_rejected_candidate_is_kept_but_never_loads_as_published(yolo):
    folder = yolo["out"] / ".rejected" / "jetson-orin"
    assert (folder / "REJECTED.txt").is_file() and (folder / "model.onnx").is_file()
    with pytest.raises(ManifestError, match="not a published artifact"):
        edge_sdk.load(folder)
    assert run_cli("verify", str(folder)).returncode == 4
    with pytest.warns(edge_sdk.AccuracyWarning, match="rejected candidate"):
        with edge_sdk.load(folder, allow_unpublished=True) as model:
            assert model.infer(yolo_feeds(1)).outputs["output0"].shape == (1, 4 + YOLO_CLASSES, 256)
    # a convert output folder never offers the rejected candidates as profiles
    with edge_sdk.load(yolo["out"], profile="x86-both") as model:
        assert model.step.format == "openvino-ir"


def test_task_metric_figures_are_recorded_per_format(yolo):
    m = read_manifest(yolo["out"] / "x86-both")
    task = m.accuracy["formats"]["openvino-ir"]["task"]
    assert task["metric"] == "detections" and task["passed"] is True and task["samples"] == 30.0
    assert task["int8_positives"] >= 0.5 * task["float_positives"] > 0
    rejected = read_manifest(yolo["out"] / ".rejected" / "jetson-orin", allow_unpublished=True)
    assert rejected.accuracy["formats"]["onnx-qdq"]["task"]["passed"] is False  # the metric agrees with the gate


def test_cli_exit_code_table_and_json_report(yolo, tmp_path):
    out = tmp_path / "out"
    proc = run_cli("convert", str(yolo["model"]), "--profile", str(yolo["root"] / "x86-both.toml"), "--out", str(out),
                   "--calib", str(yolo["root"] / "calib.npz"), "--val", str(yolo["root"] / "val.npz"), "--json",
                   "--recover", "off")
    assert proc.returncode == 7, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    table = proc.stderr[proc.stderr.index("profile "):]
    assert "x86-both  openvino-ir  published" in table and "x86-both  onnx-qdq     gate FAILED" in table
    report = json.loads(proc.stdout)
    assert not report["ok"] and report["profiles"][0]["published"] and report["profiles"][0]["formats"] == ["openvino-ir"]
    assert "[openvino-ir]" not in proc.stderr and "onnx-qdq gate: FAILED" in proc.stderr  # every gate line names its format


def test_declared_kind_is_used_and_recorded(yolo, tmp_path):
    """Declared as a plain tensor, the collapsed ONNX passes on cosine (the user's call, recorded)."""
    s = edge_sdk.convert(yolo["model"], "jetson-orin", tmp_path / "out", calib=yolo["root"] / "calib.npz",
                         validation=yolo["root"] / "val.npz", outputs=["output0:tensor"], progress=None)
    m = read_manifest(s.profiles[0].folder)
    assert m.outputs[0].kind.kind == "tensor" and m.outputs[0].kind.source == "declared"
    assert s.kinds[0]["source"] == "declared"


def test_allow_accuracy_drop_verdict_travels_to_load_run_and_verify(yolo, tmp_path):
    out = tmp_path / "out"
    s = edge_sdk.convert(yolo["model"], "jetson-orin", out, calib=yolo["root"] / "calib.npz",
                         validation=yolo["root"] / "val.npz", allow_accuracy_drop=True, recover="off", progress=None)
    assert s.profiles[0].published and s.profiles[0].gate == "failed"
    assert s.profiles[0].outcomes[0].status == "kept"
    folder = out / "jetson-orin"
    with pytest.warns(edge_sdk.AccuracyWarning, match="FAILED its accuracy gate"):
        edge_sdk.load(folder).close()
    with pytest.raises(ModelLoadError, match="FAILED its accuracy gate"):
        edge_sdk.load(folder, strict=True, device="CPUExecutionProvider", backend="onnxruntime")
    with warnings.catch_warnings():
        warnings.simplefilter("error", edge_sdk.AccuracyWarning)
        with pytest.raises(edge_sdk.AccuracyWarning):
            edge_sdk.load(folder)
    edge_sdk.load(folder, strict=True, accept_failed_gate=True, backend="onnxruntime",
                  device="CPUExecutionProvider").close()
    np.save(tmp_path / "x.npy", yolo_feeds(1))
    run = run_cli("run", str(folder), "--input", str(tmp_path / "x.npy"))
    assert run.returncode == 0 and "FAILED its accuracy gate" in run.stderr
    assert "output0: packed" in run.stdout and "scores" in run.stdout
    ver = run_cli("verify", str(folder))
    assert ver.returncode == 0 and "accuracy gate failed" in ver.stdout and "FAILED" in ver.stderr
    bench = run_cli("bench", str(folder), "--runs", "5", "--warmup", "1")
    assert bench.returncode == 0 and "FAILED its accuracy gate" in bench.stderr, bench.stderr[-1500:]


def test_one_profiles_conversion_failure_never_stops_the_others(tmp_path):
    """The Edge TPU takes integer ops only: a Sin has no int8 kernel, so coral fails; intel-cpu is still made."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32), "w")
    w2 = numpy_helper.from_array(rng.normal(0, 0.3, (4, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Sin", ["c"], ["s"]),
             helper.make_node("Conv", ["s", "w2"], ["y"])]
    g = helper.make_graph(nodes, "sin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], [w, w2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "sin.onnx"))
    np.savez(tmp_path / "calib.npz", x=rng.uniform(0, 1, (24, 3, 16, 16)).astype(np.float32))
    with pytest.raises(ConversionError) as err:
        edge_sdk.convert(tmp_path / "sin.onnx", ["coral-edgetpu", "intel-cpu"], tmp_path / "out",
                         calib=tmp_path / "calib.npz", progress=None)
    assert err.value.exit_code == 6 and "coral-edgetpu" in err.value.message and "Published: intel-cpu" in err.value.message
    s = err.value.summary
    coral, intel = s.profiles
    assert coral.conversion_failed and coral.outcomes[0].status == "conversion_failed"
    assert "SIN" in coral.outcomes[0].reason.upper()
    assert intel.published and (tmp_path / "out" / "intel-cpu" / "manifest.json").is_file()
    assert not (tmp_path / "out" / "coral-edgetpu").exists()
    assert not any(p.name.startswith(".coral") for p in (tmp_path / "out").iterdir())  # no staging left
