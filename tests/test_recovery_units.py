"""Recovery's small parts, without converting anything: the ranking metric and its inputs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from edge_sdk.converters.base import Recipe
from edge_sdk.converters.recovery import Loop, RecoveryConfig, _fewest, user_recipe
from edge_sdk.converters.recovery.sensitivity import _fake_quant, _rank, _rel
from edge_sdk.errors import InputValidationError
from edge_sdk.profiles import builtin_profiles

RNG = np.random.default_rng(0)


def test_relative_error_is_per_channel_so_a_small_collapsed_group_shows():
    boxes = RNG.uniform(0, 320, (1, 4, 256))
    scores = RNG.uniform(0, 1, (1, 6, 256))
    f = np.concatenate([boxes, scores], axis=1)
    q = f.copy()
    q[:, 4:] = 0.0  # the scores collapsed
    whole = float(np.linalg.norm(f - q) / np.linalg.norm(f))
    assert whole < 0.01 and _rel(f, q, axis=1) == pytest.approx(1.0)


def test_near_dead_and_zero_padded_channels_do_not_rank():
    f = RNG.normal(0, 1, (1, 8, 16, 16))
    f[:, 0] *= 1e-4  # near dead
    f[:, 1] = 0.0  # zero padding
    q = f.copy()
    q[:, 0] = 0.0  # int8 erased the near-dead channel: no loss worth a float layer
    assert _rel(f, q, axis=1) == 0.0
    q[:, 3] += 0.5  # a real channel damaged
    assert _rel(f, q, axis=1) > 0.4


def test_pooled_vectors_are_judged_whole():
    f = np.array([[[[1e-3]], [[2.0]], [[3.0]]]])  # [1, 3, 1, 1]: one value per channel
    q = f + 0.01
    assert _rel(f, q, axis=1) < 0.01


def test_ranking_uses_each_tensors_own_int8_noise_and_keeps_readers_float():
    nodes = [("a", "Conv", ["x"], "ta"), ("b", "Conv", ["ta"], "tb"), ("c", "Conv", ["tb"], "tc")]
    accumulated = {"ta": 0.01, "tb": 0.2, "tc": 0.9}  # c looks worst only because b fed it noise
    local = {"ta": 0.01, "tb": 0.3, "tc": 0.02}
    ranked = _rank(nodes, accumulated, local)
    assert ranked[0].name == "b" and ranked[0].float_set == ["b", "c"]
    assert _rank(nodes, accumulated)[0].name == "c"  # what the accumulated error alone would say


def test_fake_quant_is_the_int8_step():
    v = np.array([-1.0, 0.0, 0.26, 10.0])
    assert np.allclose(_fake_quant(v, 0.25, 0, -128, 127), [-1.0, 0.0, 0.25, 10.0])
    assert np.allclose(_fake_quant(v, 0.05, -128, -128, 127), [0.0, 0.0, 0.25, 10.0])
    assert _fake_quant(np.array([20.0]), 0.05, -128, -128, 127)[0] == pytest.approx(12.75)  # clipped at the top


def test_user_recipe_matches_names_and_op_types():
    names = [("conv1", "Conv"), ("head/conv", "Conv"), ("head/sig", "Sigmoid")]
    r = user_recipe(RecoveryConfig(float_patterns=("head/*", "Sigmoid"), calib_method="percentile"), names)
    assert r.float_nodes == ("head/conv", "head/sig") and r.float_ops == ("Sigmoid",) and r.calibration == "percentile"
    assert dict(r.why) == {"head/conv": "--float-nodes", "head/sig": "--float-nodes"}
    assert user_recipe(RecoveryConfig(), names) == Recipe()


@pytest.mark.parametrize("bad", [dict(mode="sometimes"), dict(budget_s=-1.0), dict(calib_method="magic")])
def test_bad_recovery_options_are_clear_errors(bad):
    with pytest.raises(InputValidationError):
        RecoveryConfig(**bad)


def test_recipe_records_the_method_it_really_used():
    prof = builtin_profiles()["jetson-orin"]
    assert Recipe().method(prof) == "minmax" and Recipe(calibration="percentile").to_dict(prof)["calibration"] == "percentile"


class _Clock:
    """A budget loop whose clock is the number of candidates made (each costs one unit)."""

    def __init__(self, budget: float):
        self.steps = [{"recipe": "baseline", "seconds": 1.0}]
        self.budget = budget

    def time_left(self) -> float:
        return self.budget - (len(self.steps) - 1)

    key = "seconds"
    estimate, fits, cost = Loop.estimate, Loop.fits, Loop.cost


def _search(threshold: int | None, counts=(2, 3, 4, 6, 8, 12, 16, 24, 32, 48), budget: float = 100,
            broken: tuple[int, ...] = ()):
    """_fewest over a model that passes from ``threshold`` float layers on (None: never); the
    counts in ``broken`` cannot be converted."""
    loop, made = _Clock(budget), []

    def make(k):
        made.append(k)
        loop.steps.append({"recipe": f"mixed({k})", "seconds": 1.0})
        if k in broken:
            return None
        return SimpleNamespace(passed=threshold is not None and k >= threshold, score=k / 100, k=k)

    passing, failed, finished = _fewest(loop, list(counts), make)
    _search.finished = finished
    return (passing.k if passing else None), made, [c.k for c in failed]


def test_fewest_float_layers_by_bisection_largest_first():
    # passes from 5 layers on: the fewest ladder count that passes is 6, found in 4 candidates, not 5
    k, made, failed = _search(5)
    assert k == 6 and made[0] == 48 and len(made) <= 5 and 6 in made and 4 in failed
    assert _search(2)[0] == 2 and _search(48)[0] == 48
    # never passes: one candidate (the most layers float), then the search gives up
    k, made, failed = _search(None)
    assert k is None and made == [48] and failed == [48]
    assert _search(3, counts=())[0:2] == (None, [])
    # the largest count could not be converted (every ranked layer float): the next one down is tried
    k, made, failed = _search(3, counts=(2, 3, 4, 6), broken=(6,))
    assert made[:2] == [6, 4] and k == 3
    assert _search(None, counts=(2, 3, 4, 6), broken=(6,))[1] == [6, 4]


def test_a_search_step_starts_only_when_it_fits_the_budget():
    # 2.5 candidates of budget left: two run, the third would overrun and does not start
    k, made, _ = _search(5, budget=2.5)
    assert made == [48, 8] and k == 8 and not _search.finished
    assert _search(5)[0] == 6 and _search.finished
    loop = _Clock(0.5)
    assert not loop.fits() and loop.estimate() == 1.0  # the baseline's time until a candidate was timed


def _attention_onnx(path):
    """One self-attention block (and a weight matmul after it), built by code."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = {n: numpy_helper.from_array(RNG.normal(0, 0.2, (16, 16)).astype(np.float32), n) for n in ("wq", "wk", "wv", "wo")}
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="proj_q"),
             helper.make_node("MatMul", ["x", "wk"], ["k"], name="proj_k"),
             helper.make_node("MatMul", ["x", "wv"], ["v"], name="proj_v"),
             helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], name="probs", axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["o"], name="mix"),
             helper.make_node("MatMul", ["o", "wo"], ["y"], name="proj_o")]
    graph = helper.make_graph(nodes, "attn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], list(w.values()))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_attention_is_softmax_and_activation_matmuls_not_weight_matmuls(tmp_path):
    import openvino as ov

    from edge_sdk.converters.graph import from_onnx_file
    from edge_sdk.converters.recovery import attention_in

    path = _attention_onnx(tmp_path / "attn.onnx")
    assert attention_in(from_onnx_file(path)) == ["scores", "probs", "mix"]
    names = attention_in(ov.Core().read_model(str(path)))
    assert len(names) == 3 and not any(n.startswith("proj") for n in names), names


def test_smoothquant_only_where_there_is_attention(tmp_path):
    """NNCF's transformer mode (SmoothQuant) smooths the matmuls that feed attention: a CNN
    classifier, whose only softmax is its output, skips that candidate (it spent a third of a
    small detector's 20 s budget for nothing)."""
    import onnx
    import openvino as ov
    from onnx import TensorProto, helper, numpy_helper

    from edge_sdk.converters.graph import from_onnx_file
    from edge_sdk.converters.recovery import _transformer

    w = numpy_helper.from_array(RNG.normal(0, 0.2, (4, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(RNG.normal(0, 0.2, (4, 5)).astype(np.float32), "fc")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"], name="pool"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "fc"], ["l"], name="logits"),
             helper.make_node("Softmax", ["l"], ["y"], name="probs", axis=-1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [w, fc])
    cnn = tmp_path / "cnn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(cnn))
    attn = _attention_onnx(tmp_path / "attn.onnx")
    for path, expect in ((cnn, False), (attn, True)):
        for graph_of in (from_onnx_file, lambda p: ov.Core().read_model(str(p))):
            assert _transformer(SimpleNamespace(graph=lambda p=path, g=graph_of: g(p))) is expect, (path.name, expect)


def test_a_single_layer_leaves_room_for_the_head():
    loop = _Clock(1.5)
    assert loop.fits() and not loop.fits(2)  # one candidate fits, a single layer plus a head candidate does not


def test_openvino_head_is_every_scales_last_convolutions(tmp_path):
    """A two-scale detector built by code: both score convolutions come first (each feeds an
    output through reshape and concat alone), then the convolutions one compute op further, in
    OpenVINO and in ONNX alike."""
    import onnx
    import openvino as ov
    from onnx import TensorProto, helper, numpy_helper

    from edge_sdk.converters.recovery import head_layers

    def conv(name, src, cin, cout, stride=1):
        w = numpy_helper.from_array(RNG.normal(0, 0.3, (cout, cin, 3, 3)).astype(np.float32), f"{name}_w")
        return helper.make_node("Conv", [src, w.name], [name], name=name, pads=[1, 1, 1, 1], strides=[stride] * 2), w

    made = [conv("c1", "x", 3, 8), conv("c2", "c1", 8, 8, 2), conv("score_a", "c2", 8, 2),
            conv("c3", "c2", 8, 8, 2), conv("score_b", "c3", 8, 2)]
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "flat")
    nodes = [n for n, _ in made] + [helper.make_node("Reshape", ["score_a", "flat"], ["ra"], name="ra"),
                                    helper.make_node("Reshape", ["score_b", "flat"], ["rb"], name="rb"),
                                    helper.make_node("Concat", ["ra", "rb"], ["y"], name="cat", axis=1)]
    graph = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 160])], [w for _, w in made] + [shape])
    path = tmp_path / "det.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    from edge_sdk.converters.graph import from_onnx_file

    for graph in (ov.Core().read_model(str(path)), from_onnx_file(path)):
        compute = [name for name, _, _, is_compute in head_layers(graph) if is_compute]
        assert compute[4:] == ["c1"] and set(compute[:2]) == {"score_a", "score_b"} and set(compute[2:4]) == {"c2", "c3"}
    # ONNX (and TFLite): the ops between the last convolutions and the output come along, so that
    # keeping the head float leaves the packed output unquantized
    chain = [name for name, _, _, is_compute in head_layers(from_onnx_file(path)) if not is_compute]
    assert set(chain) == {"ra", "rb", "cat"}


def test_median_ranges_cut_a_few_samples_outliers():
    """The median over samples of each sample's min and max: one sample's spike does not set the
    range (minmax), a steady range is kept whole (unlike a per-sample quantile)."""
    from edge_sdk.converters.tflite_native import RangeStats

    acc = RangeStats()
    rng = np.random.default_rng(0)
    for i in range(9):
        a = rng.uniform(-1, 1, 1000).astype(np.float32)
        a[0], a[1] = -1.0, 1.0  # every sample spans [-1, 1]
        if i == 4:
            a[2] = 40.0  # one sample's spike
        acc.add(a)
    ranges = acc.ranges()
    assert ranges["minmax"] == (-1.0, 40.0)
    assert ranges["median"] == (-1.0, 1.0)
    lo, hi = ranges["percentile"]  # per-sample extremes averaged: the spike still pulls it
    assert lo == -1.0 and 1.0 < hi < 40.0


@pytest.mark.parametrize("kind", ["normal", "relu", "heavy", "constant", "few_distinct", "inf", "nan", "small"])
def test_percentile_tails_are_exactly_what_a_full_partition_gives(kind):
    """The percentile statistics select each sample's tail values without partitioning the whole
    tensor; the values must be the full partition's, bit for bit, whatever the distribution."""
    from edge_sdk.converters.tflite_native import PERCENTILE_TAIL, tail_values

    rng = np.random.default_rng(3)
    n = 300_000 if kind != "small" else 9_000
    x = rng.standard_normal(n).astype(np.float32)
    if kind == "relu":
        x = np.maximum(x, 0)
    elif kind == "heavy":
        x = rng.standard_cauchy(n).astype(np.float32)
    elif kind == "constant":
        x = np.full(n, 2.5, np.float32)
    elif kind == "few_distinct":
        x = rng.integers(0, 3, n).astype(np.float32)
    elif kind == "inf":
        x[rng.integers(0, n, 5)] = np.inf
        x[rng.integers(0, n, 5)] = -np.inf
    elif kind == "nan":
        x[rng.integers(0, n, 50)] = np.nan
    k = int(PERCENTILE_TAIL * n) or 1
    part = np.partition(x, (k, n - 1 - k))
    got = tail_values(x, k, nan=kind == "nan")
    assert np.array_equal(np.array(got), np.array([part[k], part[n - 1 - k]], np.float64), equal_nan=True), (got, part[k], part[n - 1 - k])


def test_remembered_weight_scales_quantize_exactly_as_onnx_runtime_does(tmp_path):
    """Recovery candidates reuse each initializer's scale and zero point (ORT computes them channel
    by channel in Python): the second candidate, with other layers float and other ranges, must be
    byte for byte what a fresh ONNX Runtime quantizer writes."""
    import onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import TensorData, TensorsData, CalibrationMethod
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from edge_sdk.converters.onnx_qdq import _memo_quantizer
    src = Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"
    prepped = tmp_path / "prepped.onnx"
    quant_pre_process(str(src), str(prepped))
    model = onnx.load(str(prepped))
    inits = {i.name for i in model.graph.initializer}
    acts = {t for n in model.graph.node for t in [*n.input, *n.output] if t and t not in inits}
    rng = np.random.default_rng(0)

    def ranges(scale):
        return TensorsData(CalibrationMethod.MinMax, {t: TensorData(lowest=np.float32(-scale * rng.uniform(0.5, 1)),
                                                                  highest=np.float32(scale * rng.uniform(0.5, 1)))
                                                      for t in sorted(acts)})

    convs = [n.name for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")]
    memo: dict = {}
    written = []
    for excluded, r in (([], ranges(4.0)), (convs[:1], ranges(6.0))):
        outs = []
        for cls in (QDQQuantizer, _memo_quantizer(QDQQuantizer, memo)):
            q = cls(load_model_with_shape_infer(prepped), True, False, QuantType.QInt8, QuantType.QInt8, r, [], excluded,
                    ["Conv", "Gemm", "MatMul", "Relu", "MaxPool", "Add"], {"ActivationSymmetric": True, "WeightSymmetric": True})
            q.quantize_model()
            outs.append(q.model.model.SerializeToString())
        assert outs[0] == outs[1]
        written.append(outs[1])
    assert memo and written[0] != written[1]  # the memo was used, and the candidates differ


def test_the_default_budget_counts_work_and_a_users_budget_counts_wall_time(tmp_path):
    """The default budget (twice the baseline's work) is counted in CPU seconds, so a machine busy
    with something else moves the baseline and the steps far less than in wall time; a
    --recover-budget is what the user asked: wall seconds."""
    import time

    from edge_sdk.converters.recovery import cpu_seconds

    ctx = SimpleNamespace(prep=SimpleNamespace(shared={}), scratch=tmp_path)
    default, given = Loop(ctx, "onnx-qdq", RecoveryConfig()), Loop(ctx, "onnx-qdq", RecoveryConfig(budget_s=60))
    assert default.clock is cpu_seconds and default.key == "cpu_s" and given.key == "seconds"
    c0, w0 = default.clock(), given.clock()
    time.sleep(0.3)  # waiting (a busy machine's other work) costs wall time, not this process's CPU
    assert default.clock() - c0 < 0.1 and given.clock() - w0 >= 0.3
    x = np.random.default_rng(0).standard_normal((400, 400))
    c0 = default.clock()
    while default.clock() - c0 < 0.2:  # work is counted
        x = x @ x.T / 400
    step = {"recipe": "r", "seconds": 5.0, "cpu_s": 2.0}
    assert default.cost(step) == 2.0 and given.cost(step) == 5.0


def test_a_failed_search_says_what_to_try_next_from_what_it_did():
    """When nothing passes, the advice follows the search: out of budget -> a larger budget; held
    to calibration -> mixed; held to the Edge TPU's tail -> the loss is earlier; a finished search
    that kept many layers float -> the loss is spread (QAT or float), never "try harder"."""
    from edge_sdk.converters.recovery import advice

    profiles = builtin_profiles()

    def said(fmt="onnx-qdq", profile="jetson-orin", mode="mixed", stopped="", steps=None):
        steps = steps or [{"recipe": "baseline", "seconds": 1.0},
                          {"recipe": "mixed(12)", "seconds": 1.0, "float_nodes": [f"n{i}" for i in range(12)]},
                          {"recipe": "sensitivity ranking", "seconds": 1.0, "ranking": True},
                          {"recipe": "x", "seconds": 0.0, "skipped": "too slow", "float_nodes": list("abcdefghijklmnopqrstuvwxyz")}]
        loop = SimpleNamespace(cfg=RecoveryConfig(mode=mode), steps=steps, fmt=fmt, unit="CPU s",
                               graph=lambda: (_ for _ in ()).throw(RuntimeError("no graph")))
        rec = SimpleNamespace(stopped=stopped, budget_s=40.0)
        return advice(SimpleNamespace(profile=profiles[profile]), loop, rec)

    assert "--recover-budget" in said(stopped="time budget") and "12 layer(s) float" in said(stopped="time budget")
    assert "--recover mixed" in said(mode="calibration")
    assert "--float-nodes" in said(stopped="no sensitivity ranking")
    assert "Edge TPU" in said(fmt="tflite-int8", profile="coral-edgetpu")
    spread = said()
    assert "spread through the network" in spread and "quantization-aware training" in spread and "12 layer(s)" in spread
    assert "Edge TPU" not in said(fmt="tflite-int8", profile="arm-cpu")
    # a finished search that had no layer to keep float does not claim the loss is spread over layers
    nothing = said(steps=[{"recipe": "baseline", "seconds": 1.0}, {"recipe": "percentile", "seconds": 1.0, "float_nodes": []}])
    assert "no layer's own int8 noise" in nothing and "spread" not in nothing


def test_the_budgets_floor_is_wall_seconds_at_the_baselines_parallelism(tmp_path):
    """At least 45 s of search: in CPU seconds that is 45 x the threads the baseline kept busy (a
    many-core workstation must not get a floor of a second or two), and never less than 45."""
    from edge_sdk.converters.recovery import MIN_BUDGET_S, min_budget

    ctx = SimpleNamespace(prep=SimpleNamespace(shared={}), scratch=tmp_path)
    loop = Loop(ctx, "onnx-qdq", RecoveryConfig())
    loop.steps = [{"recipe": "baseline", "seconds": 2.0, "cpu_s": 24.0}]  # 12 threads busy
    assert min_budget(loop) == 12 * MIN_BUDGET_S
    loop.steps = [{"recipe": "baseline", "seconds": 2.0, "cpu_s": 1.2}]  # less than a core
    assert min_budget(loop) == MIN_BUDGET_S
    # The same baseline on a machine busy with other work: it waited half its wall time for a CPU.
    # The floor is what the baseline's own threads ran at, not what the load left it.
    loop.steps = [{"recipe": "baseline", "seconds": 4.0, "cpu_s": 3.2, "wait_s": 2.0}]
    assert min_budget(loop) == pytest.approx(1.6 * MIN_BUDGET_S)
    loop.steps = [{"recipe": "baseline", "seconds": 4.0, "cpu_s": 3.2, "wait_s": 3.99}]  # never past 4x the plain ratio
    assert min_budget(loop) == pytest.approx(3.2 * MIN_BUDGET_S)
    wall = Loop(ctx, "onnx-qdq", RecoveryConfig(budget_s=5))
    wall.steps = [{"recipe": "baseline", "seconds": 2.0, "cpu_s": 24.0}]
    assert min_budget(wall) == MIN_BUDGET_S


@pytest.mark.skipif(not Path("/proc/self/schedstat").is_file(), reason="the kernel keeps no run-queue time here")
def test_waiting_for_a_cpu_is_measured_on_a_busy_machine():
    """What ``min_budget`` subtracts: the main thread's run-queue time grows while more busy
    processes than CPUs compete with it, and stays near zero while it sleeps."""
    import multiprocessing
    import os
    import time

    from edge_sdk.converters.base import waiting_seconds

    w0 = waiting_seconds()
    time.sleep(0.2)
    assert 0 <= waiting_seconds() - w0 < 0.1
    burners = [multiprocessing.get_context("fork").Process(target=_burn, args=(1.5,))
               for _ in range(2 * len(os.sched_getaffinity(0)))]  # twice the CPUs this process may use
    for b in burners:
        b.start()
    try:
        w0, t0 = waiting_seconds(), time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            sum(range(1000))
        waited = waiting_seconds() - w0
    finally:
        for b in burners:
            b.join()
    assert 0.1 < waited < 1.0, waited


def _burn(seconds: float) -> None:
    import time

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sum(range(1000))


def _quantized_digits(tmp_path, symmetric=True):
    """The bundled digits CNN, pre-processed, and ONNX Runtime's QDQ model of it with every layer
    quantized (ranges from the float model's own activations on a few inputs)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import CalibrationMethod, TensorData, TensorsData
    from onnxruntime.quantization.qdq_quantizer import QDQQuantizer
    from onnxruntime.quantization.quant_utils import load_model_with_shape_infer
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src = Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"
    prepped = tmp_path / "prepped.onnx"
    quant_pre_process(str(src), str(prepped))
    model = onnx.load(str(prepped))
    inits = {i.name for i in model.graph.initializer}
    name = model.graph.input[0].name
    shape = [d.dim_value or 1 for d in model.graph.input[0].type.tensor_type.shape.dim]
    acts = sorted({t for n in model.graph.node for t in [*n.input, *n.output] if t and t not in inits} - {name})
    probe = onnx.load(str(prepped))
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in acts if t not in have)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = [np.random.default_rng(i).uniform(0, 1, shape).astype(np.float32) for i in range(4)]
    outs = [dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {name: x}))) for x in xs]
    ranges = TensorsData(CalibrationMethod.MinMax, {
        t: TensorData(lowest=np.float32(min(o[t].min() for o in outs)), highest=np.float32(max(o[t].max() for o in outs)))
        for t in acts} | {name: TensorData(lowest=np.float32(0), highest=np.float32(1))})
    q = QDQQuantizer(load_model_with_shape_infer(prepped), True, False, QuantType.QInt8,
                     QuantType.QInt8 if symmetric else QuantType.QUInt8, ranges, [], [],
                     ["Conv", "Gemm", "MatMul", "Relu", "Clip", "MaxPool", "Add", "Softmax"],
                     {"ActivationSymmetric": symmetric, "WeightSymmetric": True})
    q.quantize_model()
    q.model.topological_sort()  # as ORT's save_model_to_file writes it
    return model, q.model.model, name, xs


@pytest.mark.parametrize("symmetric", [True, False], ids=["int8-symmetric", "uint8-asymmetric"])
def test_a_float_layer_is_cut_out_of_the_quantized_model_not_quantized_again(tmp_path, symmetric):
    """Mixed candidates edit the model quantized whole: a float layer reads its activation before
    its QuantizeLinear and the float model's own weights and bias, the Q/DQ nodes nothing reads any
    more go, the model checks and runs; every op type float gives the float model's outputs back
    (nothing was missed: with uint8 activations ORT removed the Relu6 Clips, letting the
    QuantizeLinear clamp, and they are put back); a quantization ORT does not write (an unknown
    weight name) declines."""
    import onnx
    import onnxruntime as ort

    from edge_sdk.converters.onnx_qdq import keep_float

    fmodel, qmodel, name, xs = _quantized_digits(tmp_path, symmetric)
    finits = {i.name: i for i in fmodel.graph.initializer}
    if not symmetric:  # the premise: ORT removed activations here
        assert sum(n.op_type == "Clip" for n in qmodel.graph.node) < sum(n.op_type == "Clip" for n in fmodel.graph.node)

    def run(m):
        s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return [s.run(None, {name: x})[0] for x in xs]

    def copy():
        m = onnx.ModelProto()
        m.CopyFrom(qmodel)
        return m

    if not symmetric:
        reader = next(n for n in qmodel.graph.node if n.op_type == "Conv" and n is not qmodel.graph.node[0]
                      and any(f.op_type == "Clip" for f in fmodel.graph.node
                              if f.output[0] in {i.replace("_DequantizeLinear_Output", "") for i in n.input}))
        once = keep_float(copy(), fmodel, {reader.name}, set())
        assert once is not None and once[1] == [reader.name]  # listed once, its Clip put back in front of it
        assert sum(n.op_type == "Clip" for n in once[0].graph.node) == sum(n.op_type == "Clip" for n in qmodel.graph.node) + 1

    conv = next(n for n in qmodel.graph.node if n.op_type == "Conv")
    got = keep_float(copy(), fmodel, {conv.name}, set())
    assert got is not None and got[1] == [conv.name]
    model = got[0]
    onnx.checker.check_model(model)
    node = next(n for n in model.graph.node if n.name == conv.name)
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    inits = {i.name: i for i in model.graph.initializer}
    assert all(producers.get(i) != "DequantizeLinear" for i in node.input if i)  # reads nothing dequantized
    weights = [i for i in node.input[1:] if i]
    assert weights and all(i in inits for i in weights)
    float_conv = next(n for n in fmodel.graph.node if n.name == conv.name)
    for mine, theirs in zip(weights, float_conv.input[1:]):
        assert np.array_equal(onnx.numpy_helper.to_array(inits[mine]), onnx.numpy_helper.to_array(finits[theirs]))
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    assert all(o in read for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear") for o in n.output)
    assert sum(n.op_type == "QuantizeLinear" for n in model.graph.node) < sum(n.op_type == "QuantizeLinear" for n in qmodel.graph.node)
    assert len(model.graph.initializer) < len(qmodel.graph.initializer) + len(weights)  # int8 copies dropped
    run(model)

    last = next(n for n in qmodel.graph.node if any(f"{o.name}_QuantizeLinear_Input" in n.output for o in qmodel.graph.output))
    out = keep_float(copy(), fmodel, {last.name}, set())[0]  # it writes the graph output float, not through a Q/DQ pair
    assert {p.op_type for p in out.graph.node if set(p.output) & {o.name for o in out.graph.output}} == {last.op_type}

    every = {n.op_type for n in qmodel.graph.node} - {"QuantizeLinear", "DequantizeLinear"}
    whole = keep_float(copy(), fmodel, set(), every)
    assert whole is not None and not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in whole[0].graph.node)
    for a, b in zip(run(whole[0]), run(fmodel)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

    odd = copy()
    w = next(i for i in odd.graph.initializer if i.name.endswith("_quantized"))
    for n in odd.graph.node:
        n.input[:] = ["renamed" if i == w.name else i for i in n.input]
    w.name = "renamed"
    reader = next(n for n in odd.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "renamed")
    user = next(n for n in odd.graph.node if reader.output[0] in n.input)
    assert keep_float(odd, fmodel, {user.name}, set()) is None



def test_openvino_float_layers_are_reverted_in_the_model_quantized_whole_as_nncf_does():
    """OpenVINO's mixed candidates revert layers in the model NNCF quantized whole, with NNCF's
    accuracy-control groups: a named convolution loses the FakeQuantize at its input and gets the
    float model's weights back (not the int8 ones); the model still runs; a layer named by its
    output (the sensitivity ranking names the op whose output NNCF quantizes) reverts its readers;
    every op reverted gives the float model's outputs; a name in no quantizer group declines (None:
    the recipe quantizes again with NNCF's IgnoredScope); the model handed in is not changed."""
    import nncf
    import openvino as ov
    from nncf.openvino.quantization.backend_parameters import BackendParameters
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters

    from edge_sdk.converters.openvino_ir import keep_float, stable_names

    src = Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"
    fmodel = ov.Core().read_model(str(src))
    shape = [d.get_length() if d.is_static else 1 for d in fmodel.inputs[0].get_partial_shape()]
    fmodel.reshape({fmodel.inputs[0].get_any_name(): shape})
    stable_names(fmodel)
    xs = [np.random.default_rng(i).uniform(0, 1, shape).astype(np.float32) for i in range(8)]
    qmodel = nncf.quantize(fmodel.clone(), nncf.Dataset(xs), subset_size=len(xs), advanced_parameters=
                           AdvancedQuantizationParameters(backend_params={BackendParameters.COMPRESS_WEIGHTS: False}))
    n_fq = sum(op.get_type_name() == "FakeQuantize" for op in qmodel.get_ops())

    def ops(model):
        return {op.get_friendly_name(): op for op in model.get_ops()}

    def run(model):
        compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return [compiled(x)[0] for x in xs]

    def source(port):  # the op feeding an input port, through Convert/decompression of a constant
        return port.get_source_output().get_node()

    convs = [op for op in fmodel.get_ordered_ops() if op.get_type_name() == "Convolution"]
    assert len(convs) >= 2
    conv = convs[1].get_friendly_name()
    got = keep_float(qmodel, fmodel, {conv})
    assert got is not None and conv in got[1]
    edited = ops(got[0])[conv]
    assert source(edited.input(0)).get_type_name() != "FakeQuantize"
    weight = source(edited.input(1))
    assert weight.get_type_name() == "Constant"  # float weights, no int8 constant and decompression
    np.testing.assert_array_equal(weight.get_data(), source(convs[1].input(1)).get_data())
    assert sum(op.get_type_name() == "FakeQuantize" for op in qmodel.get_ops()) == n_fq  # untouched
    run(got[0])

    producer = source(convs[1].input(0)).get_friendly_name()  # the op whose output the conv reads
    by_output = keep_float(qmodel, fmodel, {producer})
    assert by_output is not None and conv in by_output[1]

    every = {op.get_friendly_name() for op in fmodel.get_ordered_ops()
             if op.get_type_name() not in ("Parameter", "Result", "Constant")}
    whole = keep_float(qmodel, fmodel, every)
    assert whole is not None and not any(op.get_type_name() == "FakeQuantize" for op in whole[0].get_ops())
    for a, b in zip(run(whole[0]), run(fmodel)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

    assert keep_float(qmodel, fmodel, {"no such op"}) is None


def test_the_float_compute_record_counts_what_the_converter_made_float():
    """The compute share in the manifest counts the layers the converter reports float (an OpenVINO
    revert also makes float the ops sharing a removed quantizer), not only the recipe's names."""
    import openvino as ov

    from edge_sdk.converters.openvino_ir import stable_names
    from edge_sdk.converters.recovery import _compute_ops, float_compute

    model = ov.Core().read_model(str(Path(__file__).resolve().parents[1] / "examples" / "digits" / "digits_cnn.onnx"))
    stable_names(model)
    compute = [name for name, _ in _compute_ops(model)]
    assert len(compute) >= 3
    recipe = Recipe(float_nodes=(compute[0],), name="mixed(1)")
    assert float_compute(model, recipe)["float"] == 1
    got = float_compute(model, recipe, {compute[0], compute[1]})
    assert got["float"] == 2 and got["int8_share"] == round(1 - 2 / len(compute), 3)


def test_unnamed_onnx_nodes_get_unique_names_recovery_can_exclude():
    """ONNX Runtime keeps nodes float by name: unnamed nodes (a decomposed hard-swish) are named
    after their op type, never reusing a name the graph has."""
    from onnx import TensorProto, helper

    from edge_sdk.converters.sources import name_nodes

    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("HardSigmoid", ["x"], ["a"]), helper.make_node("Mul", ["x", "a"], ["b"], name="Mul_0"),
                           helper.make_node("Mul", ["b", "a"], ["c"])], "g",
                          [vi("x", TensorProto.FLOAT, [1, 4])], [vi("c", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(g)
    count = name_nodes(model)
    names = [n.name for n in model.graph.node]
    assert count == 2 and names == ["HardSigmoid_0", "Mul_0", "Mul_2"]
    assert name_nodes(model) == 0
