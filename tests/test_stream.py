"""Streams (#18): recurrent state fed back from step to step, in calibration, the gate and ``Model.stream()``.

The model is built by code: a two-layer GRU cell written in primitive ops (MatMul, Sigmoid, Tanh,
Mul, so every toolchain quantizes the recurrence itself), a state ``[layers, batch, H]`` whose
batch axis is not the first, and an int64 scalar sample rate. It converts for intel-cpu,
jetson-orin and arm-cpu with ``--stream stateN:state``; over a 50-step sequence the int8 artifact,
carrying its own state through ``Model.stream()``, stays within the gate against the float model
carrying its own.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

import edge_sdk
from edge_sdk.converters.calibration import load_calibration, run_sequence
from edge_sdk.converters.pipeline import parse_streams
from edge_sdk.errors import CalibrationError, InputValidationError, ManifestError
from edge_sdk.manifest import TensorSpec, read_manifest

LAYERS, H, F = 2, 16, 4
PROFILES = ("intel-cpu", "jetson-orin", "arm-cpu")
SHAPES = {"input": [1, F], "state": [LAYERS, 1, H], "sr": []}
INPUTS = [TensorSpec("input", [-1, F], "float32"), TensorSpec("state", [LAYERS, -1, H], "float32"),
          TensorSpec("sr", [], "int64")]


def gru_cell_onnx(path: Path) -> Path:
    """``input [batch, F]``, ``state [2, batch, H]``, ``sr []`` int64 -> ``prob [batch, 1]``, ``stateN [2, batch, H]``."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(3)
    inits = [nh.from_array(np.array([0], np.int64), "ax0"), nh.from_array(np.array(1 / 16000, np.float32), "sr_scale"),
             nh.from_array(np.array(1.0, np.float32), "one"),
             nh.from_array(rng.normal(0, 0.6, (H, 1)).astype(np.float32), "w_out")]
    nodes = [h.make_node("Split", ["state"], ["s0", "s1"], axis=0),
             h.make_node("Cast", ["sr"], ["sr_f"], to=T.FLOAT), h.make_node("Mul", ["sr_f", "sr_scale"], ["gain"])]
    x = "input"
    outs = []
    for layer, fan_in in ((0, F), (1, H)):
        p = f"l{layer}_"
        for g in "zrn":
            inits += [nh.from_array(rng.normal(0, 0.5, (fan_in, H)).astype(np.float32), f"{p}W{g}"),
                      nh.from_array(rng.normal(0, 0.5, (H, H)).astype(np.float32), f"{p}U{g}"),
                      nh.from_array(rng.normal(0, 0.1, (H,)).astype(np.float32), f"{p}b{g}")]
        nodes += [h.make_node("Squeeze", [f"s{layer}", "ax0"], [f"{p}h"])]
        for g in "zr":
            nodes += [h.make_node("MatMul", [x, f"{p}W{g}"], [f"{p}xw{g}"]),
                      h.make_node("MatMul", [f"{p}h", f"{p}U{g}"], [f"{p}hu{g}"]),
                      h.make_node("Add", [f"{p}xw{g}", f"{p}hu{g}"], [f"{p}s{g}"]),
                      h.make_node("Add", [f"{p}s{g}", f"{p}b{g}"], [f"{p}a{g}"]),
                      h.make_node("Sigmoid", [f"{p}a{g}"], [f"{p}{g}"])]
        nodes += [h.make_node("MatMul", [x, f"{p}Wn"], [f"{p}xwn"]),
                  h.make_node("Mul", [f"{p}r", f"{p}h"], [f"{p}rh"]),
                  h.make_node("MatMul", [f"{p}rh", f"{p}Un"], [f"{p}hun"]),
                  h.make_node("Add", [f"{p}xwn", f"{p}hun"], [f"{p}sn"]),
                  h.make_node("Add", [f"{p}sn", f"{p}bn"], [f"{p}an"]),
                  h.make_node("Tanh", [f"{p}an"], [f"{p}n"]),
                  h.make_node("Sub", ["one", f"{p}z"], [f"{p}1mz"]),
                  h.make_node("Mul", [f"{p}1mz", f"{p}n"], [f"{p}a"]),
                  h.make_node("Mul", [f"{p}z", f"{p}h"], [f"{p}b"]),
                  h.make_node("Add", [f"{p}a", f"{p}b"], [f"{p}new"]),
                  h.make_node("Unsqueeze", [f"{p}new", "ax0"], [f"{p}out"])]
        x = f"{p}new"
        outs.append(f"{p}out")
    nodes += [h.make_node("Concat", outs, ["stateN"], axis=0),
              h.make_node("MatMul", [x, "w_out"], ["logit"]), h.make_node("Mul", ["logit", "gain"], ["logit_sr"]),
              h.make_node("Sigmoid", ["logit_sr"], ["prob"])]
    graph = h.make_graph(nodes, "gru_cell_stream", [
        h.make_tensor_value_info("input", T.FLOAT, ["batch", F]),
        h.make_tensor_value_info("state", T.FLOAT, [LAYERS, "batch", H]),
        h.make_tensor_value_info("sr", T.INT64, [])],
        [h.make_tensor_value_info("prob", T.FLOAT, ["batch", 1]),
         h.make_tensor_value_info("stateN", T.FLOAT, [LAYERS, "batch", H])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 13)], producer_name="edge-sdk-tests")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def signal(n: int, steps: int, seed: int = 0) -> np.ndarray:
    """``[n, steps, 1, F]`` float32: noisy sines of random phase (a stand-in for audio features)."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps)[None, :, None]
    x = np.sin(0.25 * t * rng.uniform(0.5, 1.5, (n, 1, F)) + rng.uniform(0, 6, (n, 1, F)))
    return (x + 0.15 * rng.normal(size=(n, steps, F))).astype(np.float32)[:, :, None, :]


# ----------------------------------------------------------------------------- fast: data and declarations
def test_sequences_are_cut_per_sample_and_the_state_is_carried_from_the_previous_output(tmp_path):
    path = tmp_path / "seq.npz"
    np.savez(path, input=signal(10, 7), sr=np.full(10, 16000, np.int64))  # no state: zeros at step 0
    cs = load_calibration(path, INPUTS, SHAPES, holdout_fraction=0.2, streams=[("stateN", "state")])
    assert len(cs.calib_sequences) == 8 and len(cs.holdout_sequences) == 2 and cs.holdout_lengths == [7, 7]
    assert cs.info["sequences"]["calibration_steps"] == 56 and cs.info["holdout_samples"] == 2
    first = cs.calib_sequences[0][0]
    assert first["state"].shape == (LAYERS, 1, H) and not first["state"].any()
    assert first["sr"].shape == () and first["sr"].dtype == np.int64 and first["input"].shape == (1, F)

    def run(feed):  # a toy recurrence: the state counts steps
        return {"stateN": feed["state"] + 1.0, "prob": np.zeros((1, 1), np.float32)}

    ref = cs.carry(run)
    assert len(cs.calib) == 56 and len(cs.holdout) == 14 and len(ref) == 14
    assert [float(f["state"].mean()) for f in cs.holdout[:7]] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert float(ref[6]["stateN"].mean()) == 7.0


def test_a_given_initial_state_a_missing_time_axis_and_ragged_lengths_are_checked(tmp_path):
    streams = [("stateN", "state")]
    ok = {"input": signal(4, 5), "sr": np.full(4, 8000, np.int64),
          "state": np.full((4, LAYERS, 1, H), 0.5, np.float32)}
    cs = load_calibration(iter([{k: v[i] for k, v in ok.items()} for i in range(4)]), INPUTS, SHAPES,
                          holdout_fraction=0.25, streams=streams)
    assert cs.kind == "feeds" and float(cs.calib_sequences[0][0]["state"].mean()) == 0.5
    with pytest.raises(CalibrationError, match="no array has a time axis"):
        load_calibration(iter([{"input": signal(1, 1)[0, 0], "sr": 1}] * 3), INPUTS, SHAPES, holdout_fraction=0.2,
                         streams=streams)
    with pytest.raises(CalibrationError, match=r"'state' has shape \[4, 5, 2, 1, 16\]; expected \[N, 2, 1, 16\] \(initial state\)"):
        np.savez(tmp_path / "bad.npz", input=signal(4, 5), sr=np.full(4, 1, np.int64),
                 state=np.zeros((4, 5, LAYERS, 1, H), np.float32))
        load_calibration(tmp_path / "bad.npz", INPUTS, SHAPES, holdout_fraction=0.2, streams=streams)
    folder = tmp_path / "seqs"
    folder.mkdir()
    for i, steps in enumerate((5, 9, 3)):  # per-sequence files may have their own lengths
        np.savez(folder / f"{i:03d}.npz", input=signal(1, steps, seed=i)[0], sr=np.int64(16000))
    cs = load_calibration(folder, INPUTS, SHAPES, holdout_fraction=0.34, streams=streams)
    assert cs.kind == "npz-folder" and sorted(len(s) for s in cs.calib_sequences + cs.holdout_sequences) == [3, 5, 9]


def test_separate_validation_sequences_feed_the_gate(tmp_path):
    np.savez(tmp_path / "cal.npz", input=signal(6, 5), sr=np.full(6, 16000, np.int64))
    np.savez(tmp_path / "val.npz", input=signal(3, 9, seed=4), sr=np.full(3, 8000, np.int64))
    cs = load_calibration(tmp_path / "cal.npz", INPUTS, SHAPES, holdout_fraction=0.2, streams=[("stateN", "state")],
                          validation=tmp_path / "val.npz")
    assert len(cs.calib_sequences) == 6 and cs.holdout_lengths == [9, 9, 9]
    assert int(cs.holdout_sequences[0][0]["sr"]) == 8000 and cs.info["holdout_source"].endswith("val.npz")


def test_stream_declarations_parse_and_bad_ones_say_what_is_expected():
    assert parse_streams("stateN:state") == [("stateN", "state")]
    assert parse_streams(["h:h0,c:c0"]) == [("h", "h0"), ("c", "c0")]
    assert parse_streams({"a:0": "b"}) == [("a:0", "b")]
    with pytest.raises(InputValidationError, match="is not OUTPUT:INPUT"):
        parse_streams("stateN")
    with pytest.raises(InputValidationError, match="feeds an input twice"):
        parse_streams("a:s,b:s")


# ----------------------------------------------------------------------------- slow: convert, gate, Model.stream
@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    model = gru_cell_onnx(root / "gru_cell.onnx")
    np.savez(root / "calib.npz", input=signal(24, 25), sr=np.full(24, 16000, np.int64))
    summary = edge_sdk.convert(model, list(PROFILES), root / "out", calib=str(root / "calib.npz"),
                               stream="stateN:state", progress=None)  # state's dim 1 is named "batch": fixed
    return root, model, summary


def float_steps(model: Path, xs: np.ndarray, sr: int) -> list[dict[str, np.ndarray]]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    run = lambda feed: dict(zip(names, sess.run(None, feed)))  # noqa: E731
    seq = [{"input": x, "state": np.zeros((LAYERS, 1, H), np.float32), "sr": np.array(sr, np.int64)} for x in xs]
    return [o for _, o in run_sequence(run, seq, [("stateN", "state")])]


@pytest.mark.slow
def test_streamed_model_converts_records_the_stream_and_the_gate_ran_sequences(converted):
    root, _, summary = converted
    published = {(p.profile, o.format) for p in summary.profiles for o in p.outcomes if o.status == "published"}
    assert published == {("intel-cpu", "openvino-ir"), ("jetson-orin", "onnx-qdq"), ("arm-cpu", "tflite-int8"),
                         ("arm-cpu", "onnx-qdq")}
    for prof in PROFILES:
        m = read_manifest(root / "out" / prof)
        assert [(s.output, s.input) for s in m.streams] == [("stateN", "state")]
        assert m.calibration["sequences"]["calibration_steps"] == 19 * 25
        for fmt, report in m.accuracy["formats"].items():
            assert report["sequences"] == {"count": 5, "steps": 125, "state": "the artifact's own, carried from step to step"}
        assert m.static_shapes["inputs"]["state"] == [LAYERS, 1, H]
        assert any("'state': dim 1 is named like the batch" in n for n in m.static_shapes["notes"])
        sr = next(t for t in m.inputs if t.name == "sr")
        assert sr.dtype == "int64" and sr.shape == [] and sr.quantization is None


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_model_stream_over_50_steps_stays_within_the_gate(converted, profile):
    from edge_sdk.converters.accuracy import compare

    root, model_path, _ = converted
    xs = signal(1, 50, seed=99)[0]
    ref = float_steps(model_path, xs, 16000)
    folder = root / "out" / profile
    m = read_manifest(folder)
    kinds = {t.name: t.kind for t in m.outputs}
    spec = edge_sdk.resolve_profile(profile).accuracy
    for fmt in m.formats:
        with edge_sdk.load(folder, backend={"onnx-qdq": "onnxruntime", "openvino-ir": "openvino",
                                            "tflite-int8": "litert"}[fmt]) as model:
            st = model.stream()
            test = [{k: np.asarray(v) for k, v in st.step({"input": x, "sr": np.array(16000, np.int64)}).items()}
                    for x in xs]
            assert st.steps == 50
            verdict = compare(ref, test, kinds, spec)
            assert all(not v["failures"] for v in verdict.values()), (profile, fmt, verdict)
            # The state really is carried: the same 50 steps from a zero state each time differ.
            stateless = [np.asarray(model.infer({"input": x, "state": np.zeros((LAYERS, 1, H), np.float32),
                                                 "sr": np.array(16000, np.int64)})["prob"]) for x in xs]
            assert max(abs(float(a["prob"].ravel()[0]) - float(b.ravel()[0])) for a, b in zip(test, stateless)) > 0.02
            # reset() starts over: the first step repeats exactly.
            st.reset()
            again = st.step({"input": xs[0], "sr": np.array(16000, np.int64)})
            np.testing.assert_array_equal(np.asarray(again["prob"]), test[0]["prob"])


@pytest.mark.slow
def test_stream_api_refuses_misuse(converted):
    root, _, _ = converted
    with edge_sdk.load(root / "out" / "jetson-orin") as model:
        st = model.stream()
        with pytest.raises(InputValidationError, match="carried by the stream"):
            st.step({"input": np.zeros((1, F), np.float32), "sr": np.array(1, np.int64),
                     "state": np.zeros((LAYERS, 1, H), np.float32)})
        with pytest.raises(InputValidationError, match="pass a dict"):
            st.step(np.zeros((1, F), np.float32))
        with pytest.raises(InputValidationError, match=r"Initial state 'state' has shape \[1, 16\]"):
            model.stream(initial={"state": np.zeros((1, H), np.float32)})
        errors = []

        def other():
            try:
                st.step({"input": np.zeros((1, F), np.float32), "sr": np.array(1, np.int64)})
            except InputValidationError as exc:
                errors.append(str(exc))

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert errors and "another thread" in errors[0]
        start = np.full((LAYERS, 1, H), 0.25, np.float32)
        st.reset(initial={"state": start})
        np.testing.assert_array_equal(st.state["state"], start)


@pytest.mark.slow
def test_a_manifest_stream_naming_a_missing_output_is_refused(converted, tmp_path):
    import shutil

    root, _, _ = converted
    folder = tmp_path / "copy"
    shutil.copytree(root / "out" / "jetson-orin", folder)
    data = json.loads((folder / "manifest.json").read_text())
    data["streams"] = [{"output": "nope", "input": "state"}]
    (folder / "manifest.json").write_text(json.dumps(data))
    with pytest.raises(ManifestError, match="no such output"):
        read_manifest(folder)


def test_a_model_without_a_stream_says_how_to_declare_one(tmp_path):
    from models import two_io_feeds, two_io_onnx, write_npz

    # The cheapest artifact: a two-input ONNX graph for jetson-orin (ONNX QDQ, no TensorFlow).
    out = tmp_path / "out"
    edge_sdk.convert(two_io_onnx(tmp_path / "two.onnx"), "jetson-orin", out, input_shapes={"image": [1, 3, 24, 16]},
                     calib=str(write_npz(tmp_path / "c.npz", two_io_feeds(30))), recover="off", progress=None)
    with edge_sdk.load(out / "jetson-orin") as model, pytest.raises(InputValidationError, match="declares no stream") as err:
        model.stream()
    assert "--stream" in err.value.hint


@pytest.mark.slow
def test_run_takes_a_sequence_file_and_reports_each_step(converted, cli, tmp_path):
    root, model_path, _ = converted
    xs = signal(1, 12, seed=7)[0]
    np.savez(tmp_path / "seq.npz", input=xs, sr=np.array(16000, np.int64))
    res = cli("run", str(root / "out" / "jetson-orin"), "--input", str(tmp_path / "seq.npz"), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["stream"]["steps"] == 12 and report["stream"]["state"] == ["stateN -> state"]
    assert report["stream"]["step_ms"]["p50"] > 0
    probs = [v[0] for v in report["stream"]["outputs_per_step"]["prob"]]
    ref = [float(o["prob"].ravel()[0]) for o in float_steps(model_path, xs, 16000)]
    assert max(abs(a - b) for a, b in zip(probs, ref)) < 0.05
    text = cli("run", str(root / "out" / "jetson-orin"), "--input", str(tmp_path / "seq.npz"))
    assert text.returncode == 0 and "stream: 12 steps, state carried (stateN -> state)" in text.stdout
    np.savez(tmp_path / "bad.npz", input=np.zeros((12, 3), np.float32), sr=np.array(16000, np.int64))
    bad = cli("run", str(root / "out" / "jetson-orin"), "--input", str(tmp_path / "bad.npz"))
    assert bad.returncode != 0 and "Array 'input' has shape [12, 3]" in bad.stderr and "Traceback" not in bad.stderr


def test_convert_refuses_a_bad_stream_before_writing_anything(tmp_path, cli):
    model = gru_cell_onnx(tmp_path / "cell.onnx")
    np.savez(tmp_path / "c.npz", input=signal(4, 3), sr=np.full(4, 16000, np.int64))
    cases = {"stateN": "is not OUTPUT:INPUT", "nope:state": "the model has no output 'nope'",
             "stateN:sr": "output 'stateN' is float32 but input 'sr' is int64",
             "prob:input": "output 'prob' has shape [-1, 1], input 'input' [-1, 4]"}
    for flag, message in cases.items():
        res = cli("convert", str(model), "--profile", "jetson-orin", "--calib", str(tmp_path / "c.npz"),
                  "--stream", flag, "--out", str(tmp_path / "out"))
        assert res.returncode == 3 and message in res.stderr and "Traceback" not in res.stderr, (flag, res.stderr)
        assert not (tmp_path / "out").exists()
    res = cli("convert", str(model), "--profile", "jetson-orin", "--calib", str(tmp_path / "c.npz"),
              "--stream", "stateN:state", "--out", str(tmp_path / "out"), "--fleet", "tcp://127.0.0.1:9")
    assert res.returncode == 3 and "--stream is not sent over the fleet yet" in res.stderr


@pytest.mark.slow
def test_bench_times_one_step_of_the_stream(converted):
    from edge_sdk.bench.report import to_markdown

    root, _, _ = converted
    res = edge_sdk.benchmark(root / "out" / "jetson-orin", runs=20, warmup=2, power="none")
    r = res.results[0]
    assert r.runtime["stream"]["state"] == ["stateN -> state"] and r.latency_ms["count"] == 20
    assert r.latency_ms["p50"] > 0
    assert "per step of a stream, state carried: stateN -> state" in to_markdown(res)
