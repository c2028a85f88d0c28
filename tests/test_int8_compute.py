""""int8 means int8": the share of an artifact's compute ops that really run in int8, read from the
file (ONNX QDQ, OpenVINO IR, TFLite), recorded in the gate report, the manifest, the summary table
and ``--json``, by op count and weighed by multiply-accumulates; an int8 artifact under the
profile's floor (``--min-int8-share``), or with none of its compute in int8, is not published as int8.

Small real models built by code: the outlier CNN of tests/heads.py (three convolutions) quantized
by ONNX Runtime's ``quantize_static`` and by NNCF, whole and with a convolution excluded; a TFLite
flatbuffer written with LiteRT's schema (int8 convolution, float fully connected layer); and the
pipeline's own artifacts (slow).
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import edge_sdk
from edge_sdk.converters.int8_compute import floor_failure, int8_share, label, model_path
from edge_sdk.converters.summary import ConvertSummary, FormatOutcome, ProfileSummary
from edge_sdk.manifest import read_manifest
from heads import OUTLIER_INPUT, outlier_feeds, outlier_onnx


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8_compute")
    return {"root": root, "float": outlier_onnx(root / "float.onnx"), "feeds": outlier_feeds(16, seed=2).astype(np.float32)}


def _reader(feeds):
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{OUTLIER_INPUT: f[None]} for f in feeds])

        def get_next(self):
            return next(self.it, None)

    return Reader()


def _qdq(src, dst, feeds, exclude=()):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    quantize_static(str(src), str(dst), _reader(feeds), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, nodes_to_exclude=list(exclude))
    return dst


def _ir(src, dst, feeds, ignored=()):
    import nncf
    import openvino as ov

    model = ov.convert_model(str(src))
    kw = {"ignored_scope": nncf.IgnoredScope(names=list(ignored))} if ignored else {}
    q = nncf.quantize(model, nncf.Dataset([f[None] for f in feeds]), subset_size=len(feeds), **kw)
    ov.save_model(q, str(dst))
    return dst


#: The outlier CNN's multiply-accumulates, by hand: output elements x each one's reduction.
#: conv_a 3x3 over 4 channels into 8x16x16; conv_outlier and conv_mix 1x1 over 8 into 8 and 6 x16x16.
MACS = {"conv_a": 8 * 16 * 16 * 4 * 3 * 3, "conv_outlier": 8 * 16 * 16 * 8, "conv_mix": 6 * 16 * 16 * 8}
ALL = sum(MACS.values())  # 102,400


def test_onnx_float_qdq_and_partly_excluded(models):
    root, feeds = models["root"], models["feeds"]
    assert int8_share(models["float"], "onnx-qdq") == {"compute_ops": 3, "int8_ops": 0, "share": 0.0, "macs": ALL,
                                                       "int8_macs": 0, "mac_share": 0.0, "float_ops": ["Conv"]}
    whole = int8_share(_qdq(models["float"], root / "qdq.onnx", feeds), "onnx-qdq")
    assert whole == {"compute_ops": 3, "int8_ops": 3, "share": 1.0, "macs": ALL, "int8_macs": ALL, "mac_share": 1.0,
                     "float_ops": []}
    part = int8_share(_qdq(models["float"], root / "part.onnx", feeds, exclude=["conv_outlier"]), "onnx-qdq")
    assert part["compute_ops"] == 3 and part["int8_ops"] == 2 and part["share"] == 0.667 and part["float_ops"] == ["Conv"]
    # one op in three kept float, but the small one: most of the work is still int8
    assert part["macs"] == ALL and part["int8_macs"] == ALL - MACS["conv_outlier"] and part["mac_share"] == 0.84, part


def test_onnx_integer_ops_and_16bit_qdq(models):
    """QLinearConv (the QOperator format) counts int8; int16 Q/DQ is not int8 compute."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    root, feeds = models["root"], models["feeds"]
    quantize_static(str(models["float"]), str(root / "qop.onnx"), _reader(feeds), quant_format=QuantFormat.QOperator)
    assert int8_share(root / "qop.onnx", "onnx-qdq")["share"] == 1.0
    quantize_static(str(models["float"]), str(root / "a16.onnx"), _reader(feeds), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt16, weight_type=QuantType.QInt8)
    a16 = int8_share(root / "a16.onnx", "onnx-qdq")
    assert a16["compute_ops"] == 3 and a16["int8_ops"] == 0, a16


def test_openvino_ir_nncf_whole_partly_and_float(models):
    import openvino as ov

    root, feeds = models["root"], models["feeds"]
    ov.save_model(ov.convert_model(str(models["float"])), str(root / "fp.xml"))
    assert int8_share(root / "fp.xml", "openvino-ir") == {"compute_ops": 3, "int8_ops": 0, "share": 0.0, "macs": ALL,
                                                          "int8_macs": 0, "mac_share": 0.0, "float_ops": ["Convolution"]}
    whole = int8_share(_ir(models["float"], root / "q.xml", feeds), "openvino-ir")
    assert whole["share"] == 1.0 and whole["mac_share"] == 1.0 and whole["macs"] == ALL, whole
    part = int8_share(_ir(models["float"], root / "p.xml", feeds, ignored=["conv_mix"]), "openvino-ir")
    assert part == {"compute_ops": 3, "int8_ops": 2, "share": 0.667, "macs": ALL, "int8_macs": ALL - MACS["conv_mix"],
                    "mac_share": 0.88, "float_ops": ["Convolution"]}, part


def _tflite(path, conv_type: str, fc_type: str):
    """CONV_2D then FULLY_CONNECTED, each with its tensors of the given types (weights alike)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    types = {"int8": s.TensorType.INT8, "float32": s.TensorType.FLOAT32, "int16": s.TensorType.INT16}
    m = s.ModelT()
    m.version = 3
    m.buffers = [s.BufferT()]
    sg = s.SubGraphT()
    sg.tensors = []

    def tensor(name, shape, kind, const=False):
        t = s.TensorT()
        t.name, t.shape, t.type, t.buffer = name.encode(), shape, kind, 0
        if const:
            b = s.BufferT()
            b.data = list(np.zeros(int(np.prod(shape)) * (4 if kind == s.TensorType.FLOAT32 else 1), np.uint8))
            m.buffers.append(b)
            t.buffer = len(m.buffers) - 1
        sg.tensors.append(t)
        return len(sg.tensors) - 1

    a = types[conv_type]
    x = tensor("x", [1, 4, 4, 1], a)
    w = tensor("w", [1, 1, 1, 1], types["int8"] if conv_type == "int16" else a, const=True)
    y = tensor("y", [1, 4, 4, 1], a)
    f = types[fc_type]
    fw = tensor("fw", [2, 16], f, const=True)
    z = tensor("z", [1, 2], f)
    codes = []
    for code in (s.BuiltinOperator.CONV_2D, s.BuiltinOperator.FULLY_CONNECTED):
        oc = s.OperatorCodeT()
        oc.builtinCode, oc.deprecatedBuiltinCode, oc.version = code, code, 1
        codes.append(oc)
    m.operatorCodes = codes
    ops = []
    for idx, (ins, outs) in enumerate((([x, w, -1], [y]), ([y, fw, -1], [z]))):
        op = s.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = idx, ins, outs
        ops.append(op)
    sg.operators, sg.inputs, sg.outputs = ops, [x], [z]
    m.subgraphs = [sg]
    builder = flatbuffers.Builder(1024)
    builder.Finish(m.Pack(builder), file_identifier=b"TFL3")
    path.write_bytes(bytes(builder.Output()))
    return path


def _if_model(path, quantized_stem: bool):
    """x (1x8) -> MatMul (8x16; int8 through Q/DQ when ``quantized_stem``) -> If(sum > 0): then a
    float MatMul (16x4, on the outer scope's tensor), else the first four values."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(0, 1, (8, 16)).astype(np.float32), rng.normal(0, 1, (16, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.array([0, 0], np.int64), "starts"),
             numpy_helper.from_array(np.array([1, 4], np.int64), "ends"), numpy_helper.from_array(np.float32(0), "zero")]
    nodes = []
    if quantized_stem:
        inits += [numpy_helper.from_array(np.round(w1 / 0.02).clip(-127, 127).astype(np.int8), "w1_q"),
                  numpy_helper.from_array(np.float32(0.02), "w_s"), numpy_helper.from_array(np.int8(0), "zp"),
                  numpy_helper.from_array(np.float32(0.05), "x_s")]
        nodes += [helper.make_node("DequantizeLinear", ["w1_q", "w_s", "zp"], ["w1"]),
                  helper.make_node("QuantizeLinear", ["x", "x_s", "zp"], ["x_q"]),
                  helper.make_node("DequantizeLinear", ["x_q", "x_s", "zp"], ["x_dq"]),
                  helper.make_node("MatMul", ["x_dq", "w1"], ["h"], name="stem")]
    else:
        inits.append(numpy_helper.from_array(w1, "w1"))
        nodes.append(helper.make_node("MatMul", ["x", "w1"], ["h"], name="stem"))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    then = helper.make_graph([helper.make_node("MatMul", ["h", "w2"], ["y_then"], name="verifier")], "then", [],
                             [helper.make_tensor_value_info("y_then", TensorProto.FLOAT, [1, 4])])
    other = helper.make_graph([helper.make_node("Slice", ["h", "starts", "ends"], ["y_else"])], "else", [],
                              [helper.make_tensor_value_info("y_else", TensorProto.FLOAT, [1, 4])])
    nodes += [helper.make_node("ReduceSum", ["h"], ["total"], keepdims=0),
              helper.make_node("Greater", ["total", "zero"], ["cond"]),
              helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(nodes, "if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])], [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def test_if_branches_are_read_and_told_apart(tmp_path):
    """An If's branch holds compute too (hey_jarvis's verifier: three float Gemms, most of the
    work): every reader walks the branches, each in its own scope (an IR body has its own layer
    ids), and reports the part that runs only on the condition on its own."""
    import openvino as ov

    stem, verifier = 1 * 16 * 8, 1 * 4 * 16
    q = int8_share(_if_model(tmp_path / "q.onnx", True), "onnx-qdq")
    assert q == {"compute_ops": 2, "int8_ops": 1, "share": 0.5, "macs": stem + verifier, "int8_macs": stem,
                 "mac_share": round(stem / (stem + verifier), 3), "float_ops": ["MatMul"],
                 "conditional": {"compute_ops": 1, "int8_ops": 0, "share": 0.0, "macs": verifier, "int8_macs": 0,
                                 "mac_share": 0.0}}, q
    assert label(q) == "67% of MACs (1/2 ops; float: MatMul; If branches 0%)"
    ov.save_model(ov.convert_model(str(_if_model(tmp_path / "f.onnx", False))), str(tmp_path / "f.xml"))
    f = int8_share(tmp_path / "f.xml", "openvino-ir")
    assert f["compute_ops"] == 2 and f["int8_ops"] == 0 and f["macs"] == stem + verifier, f
    assert f["conditional"] == {"compute_ops": 1, "int8_ops": 0, "share": 0.0, "macs": verifier, "int8_macs": 0,
                                "mac_share": 0.0}, f


def test_tflite_tensor_types(tmp_path):
    assert int8_share(_tflite(tmp_path / "a.tflite", "int8", "int8"), "tflite-int8")["share"] == 1.0
    half = int8_share(_tflite(tmp_path / "b.tflite", "int8", "float32"), "tflite-int8")
    # the 1x1 convolution: 16 outputs x 1; the fully connected layer: 2 outputs x 16 inputs
    assert half == {"compute_ops": 2, "int8_ops": 1, "share": 0.5, "macs": 16 + 32, "int8_macs": 16, "mac_share": 0.333,
                    "float_ops": ["FULLY_CONNECTED"]}
    # 16x8 (int16 activations, int8 weights) is not int8 compute
    none = int8_share(_tflite(tmp_path / "c.tflite", "int16", "float32"), "tflite-int8")
    assert none["int8_ops"] == 0 and none["float_ops"] == ["CONV_2D", "FULLY_CONNECTED"]


def test_folder_lookup_and_unreadable_files(models, tmp_path):
    folder = tmp_path / "art"
    folder.mkdir()
    (folder / "net.onnx").write_bytes(models["float"].read_bytes())
    assert model_path(folder, "onnx-qdq") == folder / "net.onnx"
    (folder / "other.onnx").write_bytes(b"")
    (folder / "manifest.json").write_text(json.dumps({"artifacts": [{"path": "net.onnx", "format": "onnx-qdq", "role": "model"}]}))
    assert int8_share(folder, "onnx-qdq")["compute_ops"] == 3
    for path, fmt in ((tmp_path / "missing.xml", "openvino-ir"), (folder / "other.onnx", "tflite-int8"),
                      (folder / "manifest.json", "openvino-ir"), (folder, "tensorrt")):
        r = int8_share(path, fmt)
        assert r["compute_ops"] == 0 and r["share"] is None and r["mac_share"] is None and r["error"], (path, fmt, r)


def test_summary_table_shows_the_int8_share_and_the_float_ops():
    c = {"compute_ops": 8, "int8_ops": 7, "share": 0.875, "macs": 1000, "int8_macs": 990, "mac_share": 0.99,
         "float_ops": ["MatMul"]}
    p = ProfileSummary("arm-cpu", "out/arm-cpu", True, ["onnx-qdq"], [], "passed", {},
                       outcomes=[FormatOutcome("onnx-qdq", "published", figures="cos 0.99", int8_compute=c),
                                 FormatOutcome("tflite-int8", "conversion_failed", "no converter")])
    lines = ConvertSummary("m.onnx", "onnx", "out", [p]).table()
    assert re.split(r"\s{2,}", lines[0]) == ["profile", "format", "result", "int8 compute", "why / figures"]
    assert re.split(r"\s{2,}", lines[1])[3:] == ["99% of MACs (7/8 ops; float: MatMul)", "cos 0.99"]
    assert re.split(r"\s{2,}", lines[2])[3] == "-"  # not known: a conversion failed
    assert label({"compute_ops": 0, "int8_ops": 0, "share": None, "error": "x"}) == "-"
    # MACs not known (an Edge TPU custom op, a dynamic dimension): the count, and it says so
    assert label(dict(c, macs=None, int8_macs=None, mac_share=None)) == "88% of ops (7/8; float: MatMul)"
    assert ConvertSummary("m.onnx", "onnx", "out", [p]).to_dict()["profiles"][0]["outcomes"][0]["int8_compute"] == c


@pytest.mark.slow
def test_pipeline_records_the_share_everywhere(models, tmp_path, cli):
    """The gate report of every candidate carries ``int8_compute``, the manifest and ``--json`` too;
    an ONNX artifact with every convolution kept float says 0% in the table (recorded, not yet refused)."""
    root = models["root"]
    np.savez(root / "calib.npz", x=outlier_feeds(40, seed=2))
    np.savez(root / "val.npz", x=outlier_feeds(30, seed=1))
    kw = dict(calib=root / "calib.npz", validation=root / "val.npz", progress=None, recover="off")
    s = edge_sdk.convert(models["float"], ["arm-cpu", "intel-cpu"], tmp_path / "out", allow_accuracy_drop=True, **kw)
    seen = {}
    for p in s.profiles:
        m = read_manifest(p.folder)
        for fmt in m.formats:
            c = m.accuracy["formats"][fmt]["int8_compute"]
            seen[(p.profile, fmt)] = c
            # the same work read from every format's file (NCHW ONNX and IR, NHWC TFLite)
            assert c["compute_ops"] == 3 and c["share"] == 1.0 and c["macs"] == ALL and c["mac_share"] == 1.0, (p.profile, fmt, c)
            assert int8_share(p.folder, fmt) == {k: v for k, v in c.items() if k != "floor"}
            assert c["floor"]["min_share"] == 0.0 and c["floor"]["passed"] is True, c  # the profiles' floor
        assert all(o.int8_compute["share"] == 1.0 for o in p.outcomes if o.status != "conversion_failed")
    assert {fmt for _, fmt in seen} >= {"onnx-qdq", "tflite-int8", "openvino-ir"}, seen
    r = cli("convert", str(models["float"]), "--profile", "jetson-orin", "--out", str(tmp_path / "float"), "--calib",
            str(root / "calib.npz"), "--val", str(root / "val.npz"), "--recover", "off", "--float-nodes", "Conv", "--json")
    assert r.returncode == 7, r.stderr[-2000:]  # the gate's exit code: this artifact is not int8
    (o,) = json.loads(r.stdout)["profiles"][0]["outcomes"]
    assert o["status"] == "gate_failed" and o["int8_compute"] == {
        "compute_ops": 3, "int8_ops": 0, "share": 0.0, "macs": ALL, "int8_macs": 0, "mac_share": 0.0, "float_ops": ["Conv"],
        "floor": {"min_share": 0.0, "by": "MACs", "passed": False, "accuracy_passed": True}}, o
    assert o["reason"].startswith("not an int8 artifact: none of its 3 compute ops runs in int8 (Conv float); "
                                  "the float model runs on jetson-orin as it is; keep fewer layers float"), o["reason"]
    assert not o["advice"]  # the accuracy gate passed: recovery advice would mislead
    table = [line for line in r.stderr.splitlines() if line.startswith("jetson-orin  onnx-qdq")]
    assert table and "gate FAILED  0% of MACs (0/3 ops; float: Conv)  not an int8 artifact" in table[0], r.stderr[-3000:]
    assert not (tmp_path / "float" / "jetson-orin").exists()


@pytest.mark.slow
@pytest.mark.parametrize("floor, published", [(0.9, False), (0.85, True)])
def test_the_floor_is_on_the_share_of_the_work(models, tmp_path, cli, floor, published):
    """conv_mix (the layer reading the outlier channel) kept float: 2 of 3 ops, but 88% of the
    multiply-accumulates run in int8. A floor of 90% refuses it and says by how much; 85% publishes
    it, and the manifest records the floor."""
    root = models["root"]
    np.savez(root / "calib.npz", x=outlier_feeds(40, seed=2))
    np.savez(root / "val.npz", x=outlier_feeds(30, seed=1))
    out = tmp_path / "out"
    r = cli("convert", str(models["float"]), "--profile", "jetson-orin", "--out", str(out), "--calib",
            str(root / "calib.npz"), "--val", str(root / "val.npz"), "--recover", "off", "--float-nodes", "conv_mix",
            "--min-int8-share", str(floor), "--json")
    (o,) = json.loads(r.stdout)["profiles"][0]["outcomes"]
    assert o["int8_compute"]["floor"] == {"min_share": floor, "by": "MACs", "passed": published, "accuracy_passed": True}, o
    if published:
        assert r.returncode == 0 and o["status"] == "published", r.stderr[-2000:]
        c = read_manifest(out / "jetson-orin").accuracy["formats"]["onnx-qdq"]["int8_compute"]
        assert c["mac_share"] == 0.88 and c["floor"]["passed"] is True, c
    else:
        assert r.returncode == 7 and o["status"] == "gate_failed", r.stderr[-2000:]
        assert o["reason"].startswith("not an int8 artifact: 88.0% of its multiply-accumulates run in int8 "
                                      "(2 of 3 ops; Conv float), under the floor of 90%"), o["reason"]
        assert not (out / "jetson-orin").exists()


def test_floor_failure_by_macs_by_ops_and_not_judged():
    c = {"compute_ops": 7, "int8_ops": 4, "share": 0.571, "macs": 1000, "int8_macs": 127, "mac_share": 0.127,
         "float_ops": ["Conv", "LSTM"]}
    assert floor_failure(c, 0.1) == ""
    assert floor_failure(c, 0.5, "arm-cpu") == (
        "not an int8 artifact: 12.7% of its multiply-accumulates run in int8 (4 of 7 ops; Conv, LSTM float), under the "
        "floor of 50%; the float model runs on arm-cpu as it is; keep fewer layers float (--float-nodes, or calibration "
        "data that covers them), or set the floor with --min-int8-share")
    # the MACs not known (a dynamic dimension, an Edge TPU custom op): the op count decides, and says so
    by_ops = dict(c, macs=None, int8_macs=None, mac_share=None)
    assert floor_failure(by_ops, 0.5) == "" and "57.1% of its compute ops run in int8" in floor_failure(by_ops, 0.6)
    # none in int8 is never int8, whatever the floor
    none = dict(c, int8_ops=0, share=0.0, int8_macs=0, mac_share=0.0)
    assert floor_failure(none, 0.0).startswith("not an int8 artifact: none of its 7 compute ops runs in int8")
    # nothing to weigh: an unreadable file, a model without compute ops
    assert floor_failure({"compute_ops": 0, "int8_ops": 0, "share": None, "error": "x"}, 0.5) == ""
    assert floor_failure({"compute_ops": 0, "int8_ops": 0, "share": None, "mac_share": None}, 0.5) == ""
    assert floor_failure(dict(c, mac_share=0.5), 0.5) == ""  # at the floor is not under it


def test_a_floor_outside_0_to_1_is_refused(models, tmp_path, cli):
    from edge_sdk.errors import InputValidationError, ProfileError
    from edge_sdk.profiles import load_profile_file

    r = cli("convert", str(models["float"]), "--profile", "jetson-orin", "--out", str(tmp_path / "o"), "--calib", "random",
            "--min-int8-share", "1.5")
    assert r.returncode == 2 and "--min-int8-share" in r.stderr and "Traceback" not in r.stderr, r.stderr
    with pytest.raises(InputValidationError, match="min-int8-share must be a share between 0 and 1"):
        edge_sdk.convert(models["float"], "jetson-orin", tmp_path / "o", calib="random", min_int8_share=-0.1, progress=None)
    assert not (tmp_path / "o").exists()
    from pathlib import Path

    text = (Path(__file__).parents[1] / "device_profiles" / "jetson-orin.toml").read_text()
    assert "[quantization]\n" in text
    for value, ok in (("2", False), ("-0.5", False), ("0.5", True)):
        f = tmp_path / f"floor{value}.toml"
        f.write_text(text.replace("[quantization]\n", f"[quantization]\nmin_int8_share = {value}\n", 1))
        if ok:
            assert load_profile_file(f).quantization.min_int8_share == 0.5
        else:
            with pytest.raises(ProfileError, match="quantization.min_int8_share': must be between 0 and 1"):
                load_profile_file(f)
