"""`bench --ops`: per-operator profiles from OpenVINO, ONNX Runtime and LiteRT, normalised into one
table, and the one-line explanation of where an int8 artifact's time goes."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import edge_sdk
from edge_sdk.bench import benchmark
from edge_sdk.bench.ops import INT8_PRECISIONS, OpProfile, OpRow, explain
from edge_sdk.cli import main
from edge_sdk.manifest import TensorSpec
from rt_artifacts import tflite_artifacts, write_artifact

#: Precision names the normaliser may give (per runtime spelling: I8, tensor(int8), numpy.int8...).
KNOWN = {"int8", "uint8", "fp32", "bf16", "fp16", "int32", "int64", "bool", None}


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return tflite_artifacts(tmp_path_factory)


def _ops(folder, backend, device):
    (r,) = benchmark(folder, runs=10, warmup=1, power="none", backend=backend, device=device, ops=True).results
    assert r.ops, "no op profile in the result"
    return r, r.ops


@pytest.mark.parametrize("profile,backend,device,compute", [
    ("intel-cpu", "openvino", "CPU", {"Convolution", "GroupConvolution", "FullyConnected", "MatMul"}),
    ("jetson-orin", "onnxruntime", "CPUExecutionProvider", {"QLinearConv", "Conv", "QLinearMatMul", "MatMul", "Gemm"}),
])
def test_timed_runtimes_give_a_normalised_table(arts, profile, backend, device, compute):
    r, ops = _ops(arts[profile], backend, device)
    assert ops["timed"] is True and ops["runtime"] == f"{backend}/{device}"
    rows = ops["rows"]
    assert rows and all(row["time_ms"] is not None and row["time_ms"] >= 0 for row in rows)
    assert all(row["precision"] in KNOWN for row in rows), {row["precision"] for row in rows}
    assert all(row["name"] and row["type"] for row in rows)
    # the model's convolution is there and ran in int8 (the artifact is int8 end to end)
    conv = [row for row in rows if row["type"] in compute]
    assert conv and all(row["precision"] in INT8_PRECISIONS for row in conv), conv
    assert ops["total_ms"] == pytest.approx(sum(row["time_ms"] for row in rows))
    assert abs(sum(row["share"] for row in rows) - 1.0) < 0.01
    assert ops["p50_ms"] == r.latency_ms["p50"] and ops["coverage"] > 0
    assert ops["explanation"]


def test_litert_lists_ops_and_says_it_has_no_times(arts):
    _, ops = _ops(arts["arm-cpu"], "litert", "xnnpack")
    assert ops["timed"] is False and all(row["time_ms"] is None for row in ops["rows"])
    types = {row["type"] for row in ops["rows"]}
    assert types & {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"}, types
    assert all(row["precision"] in KNOWN for row in ops["rows"])
    assert "no per-op timer" in ops["note"] and "partition" in ops["note"]


def _float_conv_in_int8_artifact(path, c=16, hw=32):
    """An 'int8' artifact whose convolution has no quantized output: ONNX Runtime cannot fuse it
    into an integer kernel (it needs DQ -> Conv -> Q), so it quantizes and dequantizes the input and
    then computes in fp32: slower than the plain float model."""
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.1, (c, c, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["input", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Conv", ["xd", "w"], ["out"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(np.float32(0.02), "s"), numpy_helper.from_array(np.int8(0), "z"),
             numpy_helper.from_array(w, "w")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, c, hw, hw])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return [TensorSpec("input", [1, c, hw, hw], "float32")], [TensorSpec("out", [1, c, hw, hw], "float32")]


def test_explanation_names_the_float_fallback_of_an_int8_artifact(tmp_path):
    ins, outs = _float_conv_in_int8_artifact(tmp_path / "m.onnx")
    folder = write_artifact(tmp_path / "art", "jetson-orin", [(tmp_path / "m.onnx", "model.onnx", "onnx-qdq", "model")],
                            ins, outs)
    _, ops = _ops(folder, "onnxruntime", "CPUExecutionProvider")
    conv = [row for row in ops["rows"] if row["type"] == "Conv"]
    assert conv and conv[0]["precision"] == "fp32" and "float fallback (fp32)" in conv[0]["flags"], conv
    assert any("reformat" in row["flags"] for row in ops["rows"] if row["type"].endswith("QuantizeLinear"))
    assert "ran in float" in ops["explanation"], ops["explanation"]


def test_explain_is_about_the_arithmetic_when_nothing_is_wrong():
    rows = [OpRow("c1", "Convolution", "int8", 0.8, 0.8), OpRow("p", "MaxPool", "int8", 0.2, 0.2)]
    p = OpProfile("openvino/CPU", True, rows, 10, total_ms=1.0, p50_ms=1.1)
    assert explain(p, True).startswith("time is in the arithmetic: Convolution 80%")
    tiny = OpProfile("openvino/CPU", True, rows, 10, total_ms=0.01, p50_ms=0.05)
    assert "tiny" in explain(tiny, True)


def test_cli_prints_top_ops_and_writes_them_to_json(arts, tmp_path, capsys):
    j, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["bench", str(arts["intel-cpu"]), "--runs", "5", "--warmup", "1", "--power", "none", "--ops",
                 "--json-out", str(j), "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == 0
    assert "Per-op profile" in out and "ops, openvino/CPU:" in out and "why:" in out
    (r,) = json.loads(j.read_text())["results"]
    assert r["ops"]["rows"] and r["ops"]["runtime"] == "openvino/CPU"
    assert png.read_bytes()[:4] == b"\x89PNG"  # with the per-op bar chart panel


def test_ops_profile_leaves_the_loaded_model_usable(arts):
    from edge_sdk.bench.ops import profile

    m = edge_sdk.load(arts["jetson-orin"], backend="onnxruntime", device="CPUExecutionProvider", strict=False)
    try:
        x = np.zeros(m.inputs[0].shape, np.float32)
        before = np.asarray(next(iter(m.infer(x).outputs.values())))
        profile(m, runs=3)
        after = np.asarray(next(iter(m.infer(x).outputs.values())))
        assert np.array_equal(before, after)
    finally:
        m.close()


@pytest.mark.parametrize("profile,backend,device", [("intel-cpu", "openvino", "CPU"),
                                                    ("jetson-orin", "onnxruntime", "CPUExecutionProvider"),
                                                    ("arm-cpu", "litert", "xnnpack")])
def test_backend_mode_times_the_runtime_call_alone_and_is_labelled(arts, profile, backend, device, tmp_path, capsys):
    j = tmp_path / "r.json"
    code = main(["bench", str(arts[profile]), "--backend", backend, "--device", device, "--mode", "backend",
                 "--runs", "20", "--warmup", "2", "--power", "none", "--json-out", str(j), "--markdown", str(tmp_path / "r.md")])
    assert code == 0, capsys.readouterr().err
    (r,) = json.loads(j.read_text())["results"]
    assert r["mode"] == "backend" and r["runs"] == 20 and r["latency_ms"]["p50"] > 0
    assert r["backend"].startswith(backend) and r["delegate"]
    assert r["inference_ms"] is None  # no facade timings: the facade is not in the loop
    assert "backend mode: the runtime call alone" in (tmp_path / "r.md").read_text()


def test_backend_mode_with_an_image_is_a_clear_error(arts, tmp_path, capsys):
    from PIL import Image

    img = tmp_path / "x.png"
    Image.new("RGB", (8, 8)).save(img)
    code = main(["bench", str(arts["intel-cpu"]), "--mode", "backend", "--image", str(img), "--power", "none"])
    err = capsys.readouterr().err
    assert code == 3 and "--mode backend" in err and "Traceback" not in err
