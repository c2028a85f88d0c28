"""Every format ends in a verdict (issue 61, part 1): a non-finite figure fails its candidate instead
of passing every threshold or ending the run; an exception in one format or profile is that row's
verdict (an edge-sdk bug, exit 70) while the others are still converted; the table and the ``--json``
summary are printed however the run ends, a refusal at read time included."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper as nh

from edge_sdk.cli import main
from edge_sdk.manifest import read_manifest

from edge_sdk.converters.accuracy import finite_figures
from edge_sdk.converters.accuracy.metrics import NON_FINITE_MARGIN, _check, non_finite

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture(scope="module")
def log_model(tmp_path_factory):
    """Conv (bias 1e-4) then Log, on inputs with exact zeros: float gives log(1e-4) = -9.2 there, an
    int8 activation of the convolution rounds 1e-4 to 0 and Log makes it -inf (on every ISA: Q/DQ
    rounding, not a kernel)."""
    d = tmp_path_factory.mktemp("log")
    g = h.make_graph([h.make_node("Conv", ["x", "W", "B"], ["c"]), h.make_node("Log", ["c"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 1, 8, 8])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])],
                     [nh.from_array(np.ones((4, 1, 1, 1), np.float32), "W"),
                      nh.from_array(np.full((4,), 1e-4, np.float32), "B")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, d / "log.onnx")
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, (120, 1, 1, 8, 8)).astype(np.float32)
    x[rng.uniform(size=x.shape) < 0.1] = 0
    np.save(d / "calib.npy", x[:, 0])
    return d


def _convert(capsys, *args: str) -> tuple[int, dict, str]:
    code = main(["convert", *args, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_a_nan_figure_fails_every_threshold_and_stays_writable():
    out: dict = {}
    fails: list[str] = []
    _check(out, fails, "cosine", math.nan, 0.98, True, "cosine below")
    _check(out, fails, "score_error", math.inf, 0.1, False, "error above")
    assert fails == ["cosine is nan, not a finite number", "score error is inf, not a finite number"]
    assert out["margins"] == {"cosine": NON_FINITE_MARGIN, "score_error": NON_FINITE_MARGIN}
    report = {"outputs": {"y": {"cosine": np.float32("nan"), "groups": [{"err": -math.inf}, {"err": 0.5}]}}}
    assert finite_figures(report) == ["outputs.y.cosine", "outputs.y.groups.0.err"]
    assert report["outputs"]["y"] == {"cosine": "nan", "groups": [{"err": "-inf"}, {"err": 0.5}]}
    json.dumps(report, allow_nan=False)


def test_non_finite_values_count_only_where_float_and_int8_disagree():
    r = np.array([[1.0, -np.inf, np.nan, 2.0]])
    assert non_finite(r, r.copy()) is None  # the same infinities and NaNs on both sides
    bad = non_finite(r, np.array([[np.nan, -np.inf, np.nan, np.inf]]))
    assert (bad["elements"], bad["of"], bad["samples"], bad["int8"]) == (2, 4, 1, ["inf", "nan"])
    assert bad["message"].startswith("int8 gives non-finite values (inf, nan) at 2 of 4 elements")
    assert "float gives non-finite" in non_finite(np.array([[np.inf, 1.0]]), np.array([[3.0, 1.0]]))["message"]


def test_an_int8_output_turned_infinite_fails_its_candidate_and_recovery_finds_one(log_model, tmp_path, capsys):
    """Before: the -inf reached the figures, a NaN cosine passed its threshold, and 'math domain
    error' (a Python error in the SQNR) was reported as the format's conversion failure."""
    code, summary, err = _convert(capsys, str(log_model / "log.onnx"), "--profile", "arm-cpu",
                                  "--calib", str(log_model / "calib.npy"), "--out", str(tmp_path / "out"))
    assert code == summary["exit_code"] == 0, err
    assert summary["error"] is None
    assert "y [heatmap]: non-finite (-inf) at" in err  # the baseline candidate's failure, named
    assert "math domain error" not in err
    [p] = summary["profiles"]
    assert {o["format"]: o["status"] for o in p["outcomes"]} == {"tflite-int8": "published", "onnx-qdq": "published"}
    manifest = read_manifest(tmp_path / "out" / "arm-cpu")
    steps = manifest.backend_options["recovery"]["onnx-qdq"]["steps"]
    assert steps[0]["passed"] is False and steps[0]["score"] == NON_FINITE_MARGIN
    import edge_sdk

    zeros = {"x": np.zeros((1, 1, 8, 8), np.float32)}
    with edge_sdk.load(tmp_path / "out" / "arm-cpu", backend="onnxruntime") as model:
        assert np.isfinite(model.infer(zeros).outputs["y"]).all()


def test_a_bug_in_one_format_is_that_formats_row_and_the_others_publish(log_model, tmp_path, capsys, monkeypatch):
    from edge_sdk.converters import base

    real = base.FORMATS.get

    def get(name):
        if name != "onnx-qdq":
            return real(name)

        def broken(job):
            return {}["a key our code forgot"]
        return broken

    monkeypatch.setattr(base.FORMATS, "get", get)
    code, summary, err = _convert(capsys, str(log_model / "log.onnx"), "--profile", "arm-cpu",
                                  "--calib", str(log_model / "calib.npy"), "--out", str(tmp_path / "out"))
    assert code == summary["exit_code"] == 70
    assert summary["error"]["type"] == "ConversionBugError"
    outcomes = {o["format"]: o for o in summary["profiles"][0]["outcomes"]}
    assert outcomes["tflite-int8"]["status"] == "published" and not outcomes["tflite-int8"]["bug"]
    bug = outcomes["onnx-qdq"]
    assert bug["status"] == "conversion_failed" and bug["bug"] is True
    assert bug["reason"].startswith("edge-sdk bug while converting onnx-qdq: KeyError: 'a key our code forgot'")
    assert "FAILED (edge-sdk bug)" in err  # the table
    assert (tmp_path / "out" / "arm-cpu" / "manifest.json").is_file()
    assert read_manifest(tmp_path / "out" / "arm-cpu").formats == ["tflite-int8"]


def test_a_bug_in_one_profile_leaves_the_next_profile_converted(log_model, tmp_path, capsys, monkeypatch):
    from edge_sdk.converters import build

    real = build.bake_formats

    def bake(ctx, *args):
        if ctx.profile.name == "arm-cpu":
            raise ZeroDivisionError("division by zero")
        return real(ctx, *args)

    monkeypatch.setattr(build, "bake_formats", bake)
    code, summary, err = _convert(capsys, str(log_model / "log.onnx"), "--profile", "arm-cpu", "--profile",
                                  "intel-cpu", "--calib", str(log_model / "calib.npy"), "--out", str(tmp_path / "out"))
    assert code == 70
    rows = {p["profile"]: p for p in summary["profiles"]}
    assert rows["arm-cpu"]["bug"] is True and not rows["arm-cpu"]["published"]
    assert rows["arm-cpu"]["error"].startswith("edge-sdk bug while building the arm-cpu artifact: ZeroDivisionError")
    assert "test_verdicts.py" not in rows["arm-cpu"]["error"]  # only edge-sdk's own frames are named
    assert not (tmp_path / "out" / "arm-cpu").exists()  # nothing half-written
    assert rows["intel-cpu"]["published"] and (tmp_path / "out" / "intel-cpu" / "manifest.json").is_file()


def test_json_summary_is_printed_for_a_refusal_at_read_time(tmp_path, capsys):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a protobuf at all")
    np.save(tmp_path / "calib.npy", np.zeros((4, 3), np.float32))
    code, summary, _ = _convert(capsys, str(bad), "--profile", "arm-cpu", "--calib", str(tmp_path / "calib.npy"),
                                "--out", str(tmp_path / "out"))
    assert code == summary["exit_code"] == 4
    assert summary["profiles"] == [] and summary["ok"] is False
    assert summary["error"]["type"] == "ModelLoadError" and "model.onnx" in summary["error"]["message"]
    assert summary["error"]["hint"]
    assert not (tmp_path / "out").exists()


def test_an_invalid_graph_we_emit_is_our_bug_naming_the_node(log_model, tmp_path, capsys, monkeypatch):
    """The QDQ quantizer's output is made invalid on purpose (the Conv's kernel_shape no longer
    matches its 1x1 weights): exit 70 naming the step, op and node, never a hint about kernels;
    the TFLite format of the same profile is still published."""
    from edge_sdk.converters import onnx_qdq

    real = onnx_qdq._quantize

    def quantize(job, prepped, method, excluded, op_types, per_channel, out):
        real(job, prepped, method, excluded, op_types, per_channel, out)
        model = onnx.load(str(out))
        conv = next(n for n in model.graph.node if n.op_type == "Conv")
        conv.name = "the_conv"
        del conv.attribute[:]
        conv.attribute.append(h.make_attribute("kernel_shape", [3, 3]))
        onnx.save(model, str(out))

    monkeypatch.setattr(onnx_qdq, "_quantize", quantize)
    code, summary, err = _convert(capsys, str(log_model / "log.onnx"), "--profile", "arm-cpu",
                                  "--calib", str(log_model / "calib.npy"), "--out", str(tmp_path / "out"),
                                  "--recover", "off")
    assert code == summary["exit_code"] == 70
    outcomes = {o["format"]: o for o in summary["profiles"][0]["outcomes"]}
    bad = outcomes["onnx-qdq"]
    assert bad["bug"] is True and bad["status"] == "conversion_failed"
    assert bad["reason"].startswith("edge-sdk emitted an invalid onnx-qdq graph at its QDQ quantizer step, "
                                    "node 'the_conv' (Conv):")
    assert "kernel" not in bad["reason"].split("(hint:")[1].lower()
    assert outcomes["tflite-int8"]["status"] == "published"


def test_a_runtime_refusing_the_graph_itself_is_told_from_a_missing_kernel():
    from edge_sdk.converters.emitted import invalid_graph

    ort = ('[ONNXRuntimeError] : 10 : INVALID_GRAPH : Load model failed:This is an invalid model. In Node, '
           '("/Concat_3", Concat, "", -1) : ("a": tensor(float),) -> ("b": tensor(float),) , Error Node (/Concat_3) '
           'Op (Concat) [ShapeInferenceError] All inputs to Concat must have same rank. Input 1 has rank 1 != 4')
    bug = invalid_graph(ort, "onnx-qdq", "onnxruntime")
    assert bug is not None and bug.exit_code == 70
    assert "onnxruntime refuses it at node '/Concat_3' (Concat)" in bug.message
    kernel = ("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for "
              "ConvInteger(10) node with name 'c'")
    assert invalid_graph(kernel, "onnx-qdq", "onnxruntime") is None


@pytest.mark.slow
def test_convert_leaves_the_working_directory_alone(tmp_path, cli):
    """ONNX Runtime's symbolic shape inference, where it stops short (this float TFLite with RFFT2D,
    made ONNX by tf2onnx), saved "sym_shape_infer_temp.onnx" into the user's working directory."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    w = tf.constant(rng.normal(0, .3, (1, 8, 5)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 8, 8], tf.float32, name="x")])
    def f(x):
        return tf.reduce_sum(tf.abs(tf.signal.rfft2d(x)) * w, axis=-1)

    model = tmp_path / "rfft.tflite"
    model.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f).convert())
    np.save(tmp_path / "calib.npy", rng.normal(0, 1, (120, 8, 8)).astype(np.float32))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    res = cli("convert", str(model), "--profile", "jetson-orin", "--calib", str(tmp_path / "calib.npy"),
              "--out", str(tmp_path / "out"), "--json", cwd=str(cwd))
    assert "symbolic shapes failed" in res.stderr  # the path that wrote the file was taken
    assert json.loads(res.stdout)["exit_code"] == res.returncode
    assert sorted(p.name for p in cwd.iterdir()) == []


@pytest.mark.slow
def test_a_tflite_we_make_that_crashes_litert_is_our_bug_with_the_op_named(tmp_path, capsys, monkeypatch):
    """The quantizer's output is made to segfault LiteRT (a Conv2D with VALID padding and a dilation of
    2**20, test_hardening_crash's file): the gate's trial load used to refuse it as "corrupt or tampered
    file, or a runtime bug". A file made and hashed here is no damage: exit 70, the op found by bisection."""
    import hardening_corpus as hc
    import tensorflow as tf

    from edge_sdk.converters import tflite_native

    rng = np.random.default_rng(0)
    k = tf.constant(rng.normal(0, .3, (3, 3, 1, 4)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 1], tf.float32, name="x")])
    def f(x):
        return tf.reduce_mean(tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME")), axis=[1, 2])

    model = tmp_path / "conv.tflite"
    model.write_bytes(tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f).convert())
    np.save(tmp_path / "calib.npy", rng.uniform(0, 1, (120, 1, 8, 8, 1)).astype(np.float32)[:, 0])
    real = tflite_native.quantize

    def quantize(*args, **kwargs):
        return hc.crash_conv2d(real(*args, **kwargs))

    monkeypatch.setattr(tflite_native, "quantize", quantize)
    monkeypatch.delenv("EDGE_SDK_CRASH_GUARD", raising=False)
    code, summary, err = _convert(capsys, str(model), "--profile", "arm-cpu", "--calib", str(tmp_path / "calib.npy"),
                                  "--out", str(tmp_path / "out"), "--recover", "off")
    assert code == summary["exit_code"] == 70, err
    rows = {o["format"]: o for o in summary["profiles"][0]["outcomes"]}
    bad = rows["tflite-int8"]
    assert bad["bug"] is True and "tampered" not in bad["reason"], bad
    assert "the tflite-int8 artifact edge-sdk just made crashes litert in a trial load (SIG" in bad["reason"], bad
    assert "the first op it crashes on (bisection): CONV_2D (operator" in bad["reason"], bad
    assert rows["onnx-qdq"]["status"] == "published"
