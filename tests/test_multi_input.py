"""Calibration data for any signature (#18): several inputs, a state whose batch axis is not the
first, an int64 scalar, token ids with a mask; integer inputs fed as they are, never quantized.

Models are built by code with onnx.helper: a GRU op with state ``[layers, batch, H]`` and an int64
sample rate, and an ids (int64) + mask (int64) model with an embedding Gather. Both convert for
intel-cpu, jetson-orin and arm-cpu; the Edge TPU refuses int64 inputs at conversion, with the
alternatives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.converters.calibration import load_calibration
from edge_sdk.errors import CalibrationError, ConversionError
from edge_sdk.manifest import TensorSpec, read_manifest

H, F, V, S = 16, 4, 50, 12
PROFILES = ("intel-cpu", "jetson-orin", "arm-cpu")
VAD = [TensorSpec("input", [-1, F], "float32"), TensorSpec("state", [2, -1, 128], "float32"),
       TensorSpec("sr", [], "int64")]
VAD_SHAPES = {"input": [1, F], "state": [2, 1, 128], "sr": []}


def gru_onnx(path: Path) -> Path:
    """A GRU op: ``input [batch, F]``, ``state [1, batch, H]``, ``sr []`` int64 -> ``prob``, ``stateN``."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.normal(0, .4, (1, 3 * H, F)).astype(np.float32), "W"),
             nh.from_array(rng.normal(0, .9 / np.sqrt(H), (1, 3 * H, H)).astype(np.float32), "R"),  # contractive, as trained RNNs are
             nh.from_array(rng.normal(0, .1, (1, 6 * H)).astype(np.float32), "B"),
             nh.from_array(rng.normal(0, .5, (H, 1)).astype(np.float32), "Wo"),
             nh.from_array(np.array(1 / 16000, np.float32), "srs"), nh.from_array(np.array([0], np.int64), "ax0"),
             nh.from_array(np.array([0, 1], np.int64), "ax01")]
    nodes = [h.make_node("Unsqueeze", ["input", "ax0"], ["x3"]),
             h.make_node("GRU", ["x3", "W", "R", "B", "", "state"], ["Y", "stateN"], hidden_size=H),
             h.make_node("Squeeze", ["Y", "ax01"], ["Y1"]), h.make_node("MatMul", ["Y1", "Wo"], ["logit"]),
             h.make_node("Cast", ["sr"], ["srf"], to=T.FLOAT), h.make_node("Mul", ["srf", "srs"], ["srk"]),
             h.make_node("Mul", ["logit", "srk"], ["logit2"]), h.make_node("Sigmoid", ["logit2"], ["prob"])]
    graph = h.make_graph(nodes, "gru", [h.make_tensor_value_info("input", T.FLOAT, ["batch", F]),
                                        h.make_tensor_value_info("state", T.FLOAT, [1, "batch", H]),
                                        h.make_tensor_value_info("sr", T.INT64, [])],
                         [h.make_tensor_value_info("prob", T.FLOAT, ["batch", 1]),
                          h.make_tensor_value_info("stateN", T.FLOAT, [1, "batch", H])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def ids_mask_onnx(path: Path) -> Path:
    """``ids [batch, S]`` int64 + ``mask [batch, S]`` int64 -> embedding Gather, masked mean -> ``logits [batch, 4]``."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(1)
    inits = [nh.from_array(rng.normal(0, 1, (V, 16)).astype(np.float32), "emb"),
             nh.from_array(rng.normal(0, .3, (16, 4)).astype(np.float32), "Wd"), nh.from_array(np.array([2], np.int64), "ax2")]
    nodes = [h.make_node("Gather", ["emb", "ids"], ["e"]), h.make_node("Cast", ["mask"], ["mf"], to=T.FLOAT),
             h.make_node("Unsqueeze", ["mf", "ax2"], ["m3"]), h.make_node("Mul", ["e", "m3"], ["em"]),
             h.make_node("ReduceMean", ["em"], ["pooled"], axes=[1], keepdims=0),
             h.make_node("MatMul", ["pooled", "Wd"], ["logits"])]
    graph = h.make_graph(nodes, "ids_mask", [h.make_tensor_value_info("ids", T.INT64, ["batch", S]),
                                             h.make_tensor_value_info("mask", T.INT64, ["batch", S])],
                         [h.make_tensor_value_info("logits", T.FLOAT, ["batch", 4])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def ids_arrays(n: int = 40, seed: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"ids": rng.integers(0, V, (n, 1, S)).astype(np.int64),
            "mask": (rng.uniform(size=(n, 1, S)) > 0.2).astype(np.int64)}


# ----------------------------------------------------------------------------- fast: the loader
def test_a_new_leading_sample_axis_whatever_the_model_axes_and_scalars_as_n(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "vad.npz"
    state = rng.normal(size=(12, 2, 1, 128)).astype(np.float32)
    np.savez(path, input=rng.normal(size=(12, 1, F)).astype(np.float32), state=state,
             sr=np.full(12, 16000, np.int64))
    cs = load_calibration(path, VAD, VAD_SHAPES, holdout_fraction=0.25)
    feeds = cs.calib + cs.holdout
    assert len(feeds) == 12 and cs.info["samples_used"] == 12
    assert feeds[0]["state"].shape == (2, 1, 128) and feeds[0]["input"].shape == (1, F)
    assert feeds[0]["sr"].shape == () and feeds[0]["sr"].dtype == np.int64 and int(feeds[0]["sr"]) == 16000
    assert any(np.array_equal(f["state"], state[0]) for f in feeds)
    # The batch-1 form [N, *shape[1:]] still works beside it.
    np.savez(path, input=rng.normal(size=(12, F)).astype(np.float32), state=state, sr=np.full(12, 8000, np.int64))
    cs = load_calibration(path, VAD, VAD_SHAPES, holdout_fraction=0.25)
    assert (cs.calib + cs.holdout)[0]["input"].shape == (1, F)


def test_the_issue_reports_now_name_the_input_the_shape_given_and_every_shape_accepted(tmp_path):
    path = tmp_path / "vad.npz"
    np.savez(path, input=np.zeros((120, F), np.float32), state=np.zeros((120, 1, 128), np.float32),
             sr=np.full(120, 16000, np.int64))
    with pytest.raises(CalibrationError) as err:
        load_calibration(path, VAD, VAD_SHAPES, holdout_fraction=0.2)
    msg = err.value.message
    # The state's first dim (2 layers) is static in the source: never taken for a batch axis.
    assert "'state' has shape [120, 1, 128]; expected [N, 2, 1, 128]" in msg and "N*2" not in msg
    assert "static shape is [2, 1, 128]" in msg
    np.savez(path, input=np.zeros((120, F), np.float32), state=np.zeros((120, 2, 1, 128), np.float32),
             sr=np.full((120, 1), 16000, np.int64))
    with pytest.raises(CalibrationError, match=r"'sr' has shape \[120, 1\]; expected \[N\] \(the input's static shape is \[\]\)"):
        load_calibration(path, VAD, VAD_SHAPES, holdout_fraction=0.2)
    np.savez(path, input=np.zeros((120, F), np.float32), state=np.zeros((120, 2, 1, 128), np.float32),
             sr=np.full(120, 16000.0, np.float32))
    with pytest.raises(CalibrationError, match="'sr' has dtype float32, the input wants int64"):
        load_calibration(path, VAD, VAD_SHAPES, holdout_fraction=0.2)


def test_a_folder_of_per_sample_npz_and_an_iterable_of_feed_dicts(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "samples"
    folder.mkdir()
    samples = [{"input": rng.normal(size=(1, F)).astype(np.float32), "state": rng.normal(size=(2, 1, 128)).astype(np.float32),
                "sr": np.int64(16000)} for _ in range(6)]
    for i, s in enumerate(samples):
        np.savez(folder / f"{i:03d}.npz", **s)
    cs = load_calibration(folder, VAD, VAD_SHAPES, holdout_fraction=0.2)
    assert cs.kind == "npz-folder" and len(cs.calib) + len(cs.holdout) == 6
    fed = load_calibration(iter(samples), VAD, VAD_SHAPES, holdout_fraction=0.2)
    assert fed.kind == "feeds" and fed.info["source"].startswith("<")
    for a, b in zip(cs.calib + cs.holdout, fed.calib + fed.holdout):
        assert all(np.array_equal(a[k], b[k]) and a[k].shape == b[k].shape for k in a)
    # A Python number for the scalar takes the input's dtype; a wrong shape names the sample.
    ok = load_calibration([{**s, "sr": 16000} for s in samples], VAD, VAD_SHAPES, holdout_fraction=0.2)
    assert ok.calib[0]["sr"].dtype == np.int64
    bad = [dict(s) for s in samples]
    bad[3]["state"] = np.zeros((2, 128), np.float32)
    with pytest.raises(CalibrationError, match=r"calibration sample 3: array 'state' has shape \[2, 128\]; expected \[2, 1, 128\]"):
        load_calibration(bad, VAD, VAD_SHAPES, holdout_fraction=0.2)
    with pytest.raises(CalibrationError, match="not a dict"):
        load_calibration([np.zeros(3)], VAD, VAD_SHAPES, holdout_fraction=0.2)


def test_integer_inputs_are_fed_as_they_are(tmp_path):
    ins = [TensorSpec("ids", [-1, S], "int64"), TensorSpec("mask", [-1, S], "int64")]
    path = tmp_path / "ids.npz"
    arrays = ids_arrays(10)
    np.savez(path, **arrays)
    cs = load_calibration(path, ins, {"ids": [1, S], "mask": [1, S]}, holdout_fraction=0.2)
    got = np.concatenate([f["ids"] for f in cs.calib + cs.holdout])
    assert got.dtype == np.int64 and sorted(map(tuple, got)) == sorted(map(tuple, arrays["ids"][:, 0]))


def test_a_state_axis_named_like_the_batch_is_fixed_to_the_batch(tmp_path):
    from edge_sdk.converters.shapes import fix_shapes
    from edge_sdk.converters.sources import read_source

    src = read_source(gru_onnx(tmp_path / "gru.onnx"))
    assert src.batch_axes == {"state": [1]}
    fixed = fix_shapes(src.inputs, 1, None, src.batch_axes)
    assert fixed.shapes == {"input": [1, F], "state": [1, 1, H], "sr": []}
    assert fix_shapes(src.inputs, 4, None, src.batch_axes).shapes["state"] == [1, 4, H]
    with pytest.raises(Exception, match=r"'state' \[1, -1, 16\] \(dynamic dims \[1\]\)"):
        fix_shapes(src.inputs, 1)  # without the names, the dim is open and the error says which


# ----------------------------------------------------------------------------- slow: conversion per target
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi_input")
    rng = np.random.default_rng(5)
    np.savez(root / "ids.npz", **ids_arrays(40))
    t = np.arange(20)[None, :, None]
    x = np.sin(0.3 * t + rng.uniform(0, 6, (30, 1, F))) + 0.1 * rng.normal(size=(30, 20, F))
    np.savez(root / "gru.npz", input=x.astype(np.float32)[:, :, None, :], sr=np.full(30, 16000, np.int64))
    return {"root": root, "ids": ids_mask_onnx(root / "ids.onnx"), "gru": gru_onnx(root / "gru.onnx")}


def _integer_inputs_untouched(folder: Path, fmt: str, names: set[str]) -> None:
    """No quantizer reads an integer input: ONNX QDQ, OpenVINO FakeQuantize, TFLite input types."""
    m = read_manifest(folder)
    assert {t.name for t in m.inputs if t.dtype == "int64" and t.quantization is None} >= names
    if fmt == "onnx-qdq":
        import onnx

        g = onnx.load(str(folder / m.artifact(fmt).path)).graph
        assert not [n.name for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] in names]
        assert {i.name: i.type.tensor_type.elem_type for i in g.input if i.name in names} == {n: 7 for n in names}
    elif fmt == "openvino-ir":
        import openvino as ov

        model = ov.Core().read_model(str(folder / m.artifact(fmt).path))
        for p in model.get_parameters():
            if p.get_friendly_name() in names:
                assert p.get_element_type() == ov.Type.i64
                readers = [t.get_node().get_type_name() for t in p.output(0).get_target_inputs()]
                assert "FakeQuantize" not in readers, readers
    elif fmt == "tflite-int8":
        from ai_edge_litert.interpreter import Interpreter

        it = Interpreter(model_path=str(folder / m.artifact(fmt).path))
        got = {d["name"]: (d["dtype"], d["quantization"]) for d in it.get_input_details()}
        ints = [v for k, v in got.items() if any(n in k for n in names)]
        assert len(ints) == len(names) and all(dt == np.int64 and q == (0.0, 0) for dt, q in ints), got


@pytest.mark.slow
def test_ids_and_mask_convert_for_each_target_with_integer_inputs_never_quantized(models):
    out = models["root"] / "out_ids"
    summary = edge_sdk.convert(models["ids"], list(PROFILES), out, calib=str(models["root"] / "ids.npz"), progress=None)
    formats = {(p.profile, o.format) for p in summary.profiles for o in p.outcomes if o.status == "published"}
    assert formats == {("intel-cpu", "openvino-ir"), ("jetson-orin", "onnx-qdq"), ("arm-cpu", "tflite-int8"),
                       ("arm-cpu", "onnx-qdq")}
    for prof, fmt in formats:
        _integer_inputs_untouched(out / prof, fmt, {"ids", "mask"})
        with edge_sdk.load(out / prof, backend={"onnx-qdq": "onnxruntime", "openvino-ir": "openvino",
                                                "tflite-int8": "litert"}[fmt]) as model:
            a = ids_arrays(1, seed=9)
            assert model.infer({k: v[0] for k, v in a.items()})["logits"].shape == (1, 4)


@pytest.mark.slow
def test_gru_op_with_a_state_and_an_int64_scalar_converts_for_each_target(models):
    # Sequences with the state carried (--stream): random states are not what a GRU sees (on them
    # OpenVINO's int8 GRU failed its gate here: state cosine 0.62 on the worst sample). Even on
    # carried states OpenVINO's int8 GRUSequence loses too much in one step (state cosine 0.95-0.98
    # per step with the float state fed in) and recovery does not rank the GRU itself, so it is
    # kept float by name, as a user would; ONNX Runtime's QDQ and the TFLite WHILE loop leave it float anyway.
    out = models["root"] / "out_gru"
    summary = edge_sdk.convert(models["gru"], list(PROFILES), out, calib=str(models["root"] / "gru.npz"),
                               input_shapes={"state": [1, 1, H]}, stream="stateN:state", float_nodes=["GRU*"],
                               progress=None)
    formats = {(p.profile, o.format) for p in summary.profiles for o in p.outcomes if o.status == "published"}
    assert formats == {("intel-cpu", "openvino-ir"), ("jetson-orin", "onnx-qdq"), ("arm-cpu", "tflite-int8"),
                       ("arm-cpu", "onnx-qdq")}
    for prof, fmt in formats:
        _integer_inputs_untouched(out / prof, fmt, {"sr"})
        m = read_manifest(out / prof)
        assert next(t for t in m.inputs if t.name == "sr").shape == []
        assert [(s.output, s.input) for s in m.streams] == [("stateN", "state")]
    # ONNX Runtime's QDQ quantizer leaves the GRU float: the manifest and warnings say so.
    jet = read_manifest(out / "jetson-orin")
    assert [o.split()[0] for o in jet.backend_options["onnx_qdq"]["float_ops"]] == ["GRU"]
    assert any("Ops left in float" in w and "GRU" in w for w in jet.warnings)
    ov = read_manifest(out / "intel-cpu").backend_options["recovery"]["openvino-ir"]["recipe"]
    assert ov["float_ops"] == ["GRUSequence"]


@pytest.mark.slow
def test_edge_tpu_refuses_int64_inputs_at_conversion_with_alternatives(models):
    out = models["root"] / "out_coral"
    with pytest.raises(ConversionError) as err:
        edge_sdk.convert(models["ids"], "coral-edgetpu", out, calib=str(models["root"] / "ids.npz"), progress=None)
    reason = err.value.summary.profiles[0].outcomes[0].reason
    assert "'ids' (int64), 'mask' (int64) cannot be fed to coral-edgetpu" in reason
    assert "int32" in reason and "arm-cpu" in reason
    assert not (out / "coral-edgetpu").exists()


@pytest.mark.slow
def test_a_generator_of_feeds_calibrates_every_profile_alike(models):
    # Read once: two profiles, one generator; both see all 40 samples.
    out = models["root"] / "out_gen"
    arrays = ids_arrays(40)
    gen = ({"ids": arrays["ids"][i], "mask": arrays["mask"][i]} for i in range(40))
    edge_sdk.convert(models["ids"], ["jetson-orin", "arm-cpu"], out, calib=gen, progress=None)
    for prof in ("jetson-orin", "arm-cpu"):
        cal = read_manifest(out / prof).calibration
        assert cal["kind"] == "feeds" and cal["samples_used"] == 40 and cal["source"] == "<list of feed dicts>"
    stacked = load_calibration(arrays, [TensorSpec("ids", [-1, S], "int64"), TensorSpec("mask", [-1, S], "int64")],
                               {"ids": [1, S], "mask": [1, S]}, holdout_fraction=0.2)
    assert stacked.kind == "arrays" and len(stacked.calib) + len(stacked.holdout) == 40


def test_bench_feeds_token_ids_that_index_any_table():
    from edge_sdk.bench.runner import make_feed

    feed = make_feed([TensorSpec("ids", [1, S], "int64"), TensorSpec("sr", [], "int64"), TensorSpec("x", [1, 4], "float32")])
    assert feed["ids"].dtype == np.int64 and not feed["ids"].any() and feed["sr"].shape == ()
    assert feed["x"].dtype == np.float32 and feed["x"].any()


@pytest.mark.slow
def test_bench_runs_an_ids_model(models, cli):
    out = models["root"] / "out_bench"
    edge_sdk.convert(models["ids"], "jetson-orin", out, calib=str(models["root"] / "ids.npz"), progress=None)
    res = cli("bench", str(out / "jetson-orin"), "--runs", "10", "--warmup", "1")
    assert res.returncode == 0, res.stderr[-2000:]


@pytest.mark.slow
def test_a_token_id_outside_the_table_is_an_input_error_not_a_traceback(models, cli, tmp_path):
    from edge_sdk.errors import InputValidationError

    out = models["root"] / "out_bench"  # made by test_bench_runs_an_ids_model, or here
    if not (out / "jetson-orin").exists():
        edge_sdk.convert(models["ids"], "jetson-orin", out, calib=str(models["root"] / "ids.npz"), progress=None)
    bad = {"ids": np.full((1, S), V + 652, np.int64), "mask": np.ones((1, S), np.int64)}
    with edge_sdk.load(out / "jetson-orin", backend="onnxruntime") as model, \
            pytest.raises(InputValidationError, match="failed on these inputs") as err:
        model.infer(bad)
    assert "ids, mask" in err.value.hint and "vocabulary" in err.value.hint
    np.savez(tmp_path / "bad.npz", **bad)
    res = cli("run", str(out / "jetson-orin"), "--input", str(tmp_path / "bad.npz"))
    assert res.returncode != 0 and "failed on these inputs" in res.stderr and "Traceback" not in res.stderr


def test_unnamed_onnx_nodes_get_unique_names_for_recovery():
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h

    from edge_sdk.converters.sources import name_nodes

    g = h.make_graph([h.make_node("Relu", ["x"], ["a"]), h.make_node("Relu", ["a"], ["b"], name="Relu_1"),
                      h.make_node("Relu", ["b"], ["y"])], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [1])], [h.make_tensor_value_info("y", T.FLOAT, [1])])
    model = h.make_model(g)
    assert name_nodes(model) == 2
    names = [n.name for n in model.graph.node]
    assert names[1] == "Relu_1" and len(set(names)) == 3 and all(names)
    onnx.checker.check_model(model)
