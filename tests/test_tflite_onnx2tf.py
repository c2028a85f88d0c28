"""onnx2tf route: offline (proved with the network blocked), quiet, and one clear error on failure."""

from __future__ import annotations

import socket

import pytest

import test_tflite_models as tm
from edge_sdk.converters import onnx2tf_route
from edge_sdk.errors import ConversionError

pytestmark = pytest.mark.slow

SHAPES = {"input": [1, 3, 16, 16]}


def _calib():
    return [{"input": a} for a in tm.images(4, SHAPES["input"])]


@pytest.fixture
def no_network(monkeypatch):
    """Any connection attempt from this process fails the test."""
    attempts = []

    def refuse(self, address, *a, **k):
        attempts.append(address)
        raise OSError(f"network blocked by the test (tried {address!r})")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    return attempts


def test_runs_offline_with_our_sample_data(tmp_path, no_network, capfd):
    model = tm.onnx_cnn(tmp_path / "cnn.onnx", dynamic_batch=False)
    # Static batch and NHWC mode: every input is [1, H, W, 3], which is onnx2tf's download path.
    res = onnx2tf_route.onnx_to_savedmodel(model, SHAPES, _calib(), tmp_path / "scratch", keep_layout=False)
    work = tmp_path / "scratch" / "onnx2tf"
    assert (res.saved_model / "saved_model.pb").is_file()
    assert (work / onnx2tf_route.SAMPLE_FILE).is_file(), "onnx2tf must find our data, not download its own"
    assert not (work / onnx2tf_route.NETWORK_LOG).exists(), "the child tried to reach the network"
    assert no_network == []
    assert res.input_perms == {"input": [0, 2, 3, 1]} and res.version
    # onnx2tf's console output goes to the log, not to the user's terminal.
    assert res.log.stat().st_size > 0
    assert "onnx2tf" not in capfd.readouterr().out.lower()


def test_the_child_guard_blocks_downloads(tmp_path, monkeypatch):
    """Without our sample file onnx2tf tries GitHub: the guard refuses and we say so, once."""
    monkeypatch.setattr(onnx2tf_route, "_write_sample_file", lambda *a, **k: None)
    model = tm.onnx_cnn(tmp_path / "cnn.onnx", dynamic_batch=False)
    with pytest.raises(ConversionError, match="tried to reach the network") as err:
        onnx2tf_route.onnx_to_savedmodel(model, SHAPES, _calib(), tmp_path / "scratch", keep_layout=False)
    assert "github.com" in str(err.value) and "report" in err.value.hint
    assert (tmp_path / "scratch" / "onnx2tf" / onnx2tf_route.NETWORK_LOG).is_file()


def test_unconvertible_model_is_one_message_naming_the_op(tmp_path, capfd):
    model = tm.onnx_cnn(tmp_path / "odd.onnx", unsupported_castlike=True)
    with pytest.raises(ConversionError) as err:
        onnx2tf_route.onnx_to_savedmodel(model, SHAPES, _calib(), tmp_path / "scratch")
    msg = str(err.value)
    assert "odd_castlike" in msg and "CastLike" in msg
    assert "--input-shape" in err.value.hint and "onnx-qdq" in err.value.hint
    assert len(msg.splitlines()) <= 3 and "Traceback" not in msg
    assert "Traceback" not in capfd.readouterr().err
    assert not (tmp_path / "scratch" / "onnx2tf" / "saved_model" / "saved_model.pb").exists()


def test_converter_leaves_no_model_when_onnx2tf_fails(tmp_path):
    from edge_sdk.converters.tflite_int8 import convert

    model = tm.onnx_cnn(tmp_path / "odd.onnx", unsupported_castlike=True)
    job = tm.onnx_job(model, "coral-edgetpu", tmp_path)
    with pytest.raises(ConversionError, match="CastLike"):
        convert(job)
    assert list(job.workdir.iterdir()) == []


def test_failure_parsing_from_a_log(tmp_path):
    """The parser reads onnx2tf's coloured error lines (unit test of our handling)."""
    model = tm.onnx_cnn(tmp_path / "cnn.onnx")
    log = tmp_path / "onnx2tf.log"
    log.write_text("\x1b[31mERROR:\x1b[0m The trace log is below.\nTraceback...\n"
                   "ValueError: Dimensions must be equal, but are 5 and 7\n"
                   "\x1b[31mERROR:\x1b[0m onnx_op_name: fc\n", encoding="utf-8")
    err = onnx2tf_route._failure(log, model, 1)
    assert "op 'fc' (Gemm)" in err.message and "Dimensions must be equal" in err.message


@pytest.mark.parametrize("input_name", ["onnx::Flatten_0", "input image[0]"])
def test_an_output_named_like_json_converts_and_keeps_its_name(tmp_path, input_name):
    """openWakeWord's timer model names its output with its labels as JSON ('{"1": "1_minute_timer", ...}');
    onnx2tf makes a Keras scope of every output name and TensorFlow refused that one, so both TFLite
    formats failed. An input named 'input image[0]' left onnx2tf without a SavedModel and without
    an error. Renamed for onnx2tf, found again by name: the artifact takes and answers with the
    model's own names."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    import edge_sdk

    name = '{"1": "1_minute_timer", "2": "5_minute_timer"}'
    rng = np.random.default_rng(0)
    w = helper.make_tensor("w", TensorProto.FLOAT, [96, 3], rng.normal(0, 0.3, (96, 3)).astype(np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("Flatten", [input_name], ["flat"], axis=1),
         helper.make_node("MatMul", ["flat", "w"], ["logits"]),
         helper.make_node("Softmax", ["logits"], [name], axis=-1)],
        "timer_like", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [1, 4, 24])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.save(model, str(tmp_path / "timer_like.onnx"))
    np.savez(tmp_path / "calib.npz", **{input_name: rng.normal(0, 1, (40, 4, 24)).astype(np.float32)})
    s = edge_sdk.convert(tmp_path / "timer_like.onnx", "arm-cpu", tmp_path / "out", calib=tmp_path / "calib.npz",
                         progress=None)
    outcome = {o.format: o for o in s.profiles[0].outcomes}["tflite-int8"]
    assert outcome.status == "published", outcome.reason
    x = rng.normal(0, 1, (1, 4, 24)).astype(np.float32)
    with edge_sdk.load(s.profiles[0].folder, backend="litert") as m:
        out = m.infer({input_name: x}).outputs
    assert list(out) == [name] and out[name].shape == (1, 3) and abs(float(out[name].sum()) - 1) < 0.05


def test_a_run_that_writes_nothing_says_so(tmp_path):
    log = tmp_path / "onnx2tf.log"
    log.write_text("W0000 computation placer already registered\n")
    err = onnx2tf_route._failure(log, tmp_path / "m.onnx", 0)
    assert "finished on m.onnx without writing a SavedModel" in err.message and "exit code 0" not in err.message
    assert "exit code 1" in onnx2tf_route._failure(log, tmp_path / "m.onnx", 1).message
