"""The arm64 harness's judgement, without emulation: it passes honest results and fails broken ones.

The results are synthetic digits-like class scores on the int8 step grid (1/256); the tampered
ones are what a wrong ARM kernel or a damaged artifact produces. The verdicts come from the
project's real accuracy gate (``gate.verdicts``) with the arm-cpu profile's thresholds. The
harness's own preflight (binfmt) is checked on fake /proc/sys/fs/binfmt_misc trees.
"""

from __future__ import annotations

import numpy as np
import pytest

from arm64 import compare, gate, host
from edge_sdk.outputs import OutputKind
from edge_sdk.profiles import resolve_profile

STEP = 1 / 256
N, C = 300, 10
SPEC = resolve_profile("arm-cpu").accuracy
KINDS = {"probs": OutputKind(kind="scores")}
CASE = {"id": "litert__arm-cpu__tflite-int8",
        "expect": {"backend": "litert/xnnpack", "fallback": False, "interpreter": "ai_edge_litert.interpreter"}}


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, C, N)
    logits = rng.normal(0, 1, (N, 1, C))
    logits[np.arange(N), 0, labels] += 6.0
    fl = _softmax(logits).astype(np.float32)
    x86 = np.round(fl / STEP) * STEP                                  # the int8 artifact on x86: on the grid
    jitter = rng.integers(-2, 3, x86.shape) * STEP                     # ARM kernels round differently: ±2 steps
    arm = np.clip(x86 + jitter, 0, 255 * STEP)
    return {"labels": labels, "float": fl, "x86": x86, "arm": arm}


def _eval(data, arm, kinds=KINDS):
    outs = {"arm": {"probs": arm}, "x86": {"probs": data["x86"]}, "float": {"probs": data["float"]}}
    verdicts = {}
    for key, ref in (("vs_float", "float"), ("vs_x86", "x86")):
        try:
            verdicts[key] = {"outputs": gate.verdicts(outs[ref], outs["arm"], kinds, SPEC)}
        except Exception as exc:  # what gate.py records for a job it cannot judge
            verdicts[key] = {"error": f"{type(exc).__name__}: {exc}"}
    return compare.evaluate_case(CASE, outs["arm"], outs["x86"], outs["float"], {"probs": STEP}, data["labels"], verdicts)


def test_honest_arm_results_pass_with_their_step_difference(data):
    rows, fails = _eval(data, data["arm"])
    assert fails == []
    (row,) = rows
    assert row["diff"]["max_steps"] == 2.0 and row["diff"]["on_grid"]
    assert 0 < row["diff"]["differing"] < row["diff"]["values"] == N * C
    assert row["top1"]["float"] > 0.95 and row["vs_float"]["top1_agreement"] > 0.95


def test_identical_results_are_zero_steps_apart(data):
    rows, fails = _eval(data, data["x86"].copy())
    assert fails == [] and rows[0]["diff"]["max_steps"] == 0.0 and rows[0]["diff"]["differing"] == 0
    assert rows[0]["vs_x86"]["sqnr_db"] == float("inf")


def test_tampered_arm_result_fails_the_gate(data):
    """What the self-test's tampered artifact produces: every answer moved to the next class."""
    rows, fails = _eval(data, np.roll(data["arm"], 1, axis=-1))
    assert any("arm64 vs float probs: top-1 agreement" in f for f in fails), fails
    assert any("arm64 vs float probs: score error" in f for f in fails)
    assert any("arm64 vs x86 probs: top-1 agreement" in f for f in fails)
    assert rows[0]["top1"]["arm64"] < 0.2 and rows[0]["gate_vs_float"]["passed"] is False


def test_scores_drifting_beyond_the_score_error_fail(data):
    drift = np.clip(data["arm"] - 40 * STEP, 0, 1)  # every score 40 steps (0.16) lower: same top-1
    _, fails = _eval(data, drift)
    assert any("score error" in f for f in fails) and not any("top-1" in f for f in fails), fails


def test_an_unknown_kind_output_is_judged_by_cosine_and_sqnr(data):
    noisy = data["arm"] + np.random.default_rng(1).normal(0, 0.08, data["arm"].shape)
    _, fails = _eval(data, noisy, kinds={"probs": OutputKind(kind="tensor")})
    assert any("SQNR" in f for f in fails), fails


def test_off_grid_outputs_mean_the_step_is_wrong(data):
    _, fails = _eval(data, data["arm"] + STEP / 3)
    assert any("step grid" in f for f in fails)


@pytest.mark.parametrize("bad, msg", [
    (lambda a: np.where(np.arange(C) == 3, np.nan, a), "non-finite"),
    (lambda a: a[:, :, :5], "shape"),
])
def test_broken_outputs_fail_not_crash(data, bad, msg):
    _, fails = _eval(data, bad(data["arm"]))
    assert any(msg in f for f in fails), fails


def test_missing_output_fails(data):
    _, fails = compare.evaluate_case(CASE, {}, {"probs": data["x86"]}, {"probs": data["float"]}, {}, data["labels"], {})
    assert fails == [f"{CASE['id']}: output 'probs' missing from the arm64 run"]


def test_a_missing_or_failed_gate_verdict_is_a_failure(data):
    outs = ({"probs": data["arm"]}, {"probs": data["x86"]}, {"probs": data["float"]})
    _, fails = compare.evaluate_case(CASE, *outs, {"probs": STEP}, data["labels"],
                                     {"vs_float": {"error": "TypeError: compare() changed"}})
    assert f"{CASE['id']} arm64 vs float: the gate could not judge it: TypeError: compare() changed" in fails
    assert f"{CASE['id']} arm64 vs x86: no gate verdict" in fails


def _rec(**kw):
    rec = {"case": CASE["id"], "backend": "litert/xnnpack", "delegate": "xnnpack", "fallback": False,
           "result_fallback": False, "load_warnings": [], "details": {"interpreter": "ai_edge_litert.interpreter"},
           "model_sha256": "abc"}
    rec.update(kw)
    return rec


@pytest.mark.parametrize("arm, msg", [
    (_rec(), None),
    (_rec(backend="onnxruntime/CPUExecutionProvider"), "ran on onnxruntime"),
    (_rec(fallback=True, result_fallback=True, load_warnings=["FallbackWarning: x"]), "fallback reported True"),
    (_rec(details={"interpreter": "tflite_runtime.interpreter"}), "interpreter tflite_runtime"),
    (_rec(model_sha256="other"), "different model files"),
    ({"case": CASE["id"], "error": {"type": "ModelLoadError", "message": "boom"}}, "ModelLoadError: boom"),
])
def test_case_expectations(arm, msg):
    fails = compare.check_case(CASE, arm, _rec())
    assert (fails == []) if msg is None else any(msg in f for f in fails), fails


def test_a_fallback_that_is_expected_must_also_be_warned_and_refused_in_strict():
    case = {"id": "c", "expect": {"backend": "litert/xnnpack", "fallback": True, "strict_refusal": True}}
    ok = _rec(fallback=True, result_fallback=True, load_warnings=["FallbackWarning: no Edge TPU"],
              strict={"refused": True, "message": "strict: ..."})
    assert compare.check_case(case, ok, _rec()) == []
    silent = {**ok, "load_warnings": [], "strict": {"refused": False}}
    fails = compare.check_case(case, silent, _rec())
    assert any("not warned" in f for f in fails) and any("did not refuse" in f for f in fails)


def _venv_result(machine, emulation, **kw):
    res = {"machine": machine, "emulation": emulation, "errors": [], "versions": {"onnxruntime": "1.2", "edge-sdk": "0.1.0"},
           "hygiene": {"attempted": [], "loaded": []},
           "doctor": {"returncode": 0, "host": {"machine": machine}, "profiles": {"arm-cpu": {"status": "native"}}},
           "bench": {"returncode": 0, "warnings": [], "host": {"emulation": emulation}, "markdown_emulated_line": None}}
    if emulation:
        res["bench"]["warnings"] = ["warning: timings are not the device's: aarch64 code emulated ..."]
        res["bench"]["markdown_emulated_line"] = "**Emulated: timings are not the device's** (...)"
    res.update(kw)
    return res


EXPECT = {"doctor": {"arm-cpu": "native"}, "dist": "onnxruntime"}


def test_venv_checks_pass_and_each_break_is_caught():
    arm, x86 = _venv_result("aarch64", "aarch64 code emulated ..."), _venv_result("x86_64", None)
    assert compare.check_venv("onnxruntime", arm, x86, EXPECT) == []
    broken = [
        ({**arm, "hygiene": {"attempted": ["tensorflow"], "loaded": []}}, "import hygiene"),
        ({**arm, "emulation": None}, "did not detect qemu"),
        ({**arm, "bench": {**arm["bench"], "warnings": []}}, "did not say its timings"),
        ({**arm, "doctor": {**arm["doctor"], "profiles": {"arm-cpu": {"status": "unavailable"}}}}, "arm-cpu is 'unavailable'"),
        ({**arm, "versions": {"onnxruntime": "1.3", "edge-sdk": "0.1.0"}}, "like for like"),
        ({**arm, "machine": "x86_64"}, "expected aarch64"),
    ]
    for bad, msg in broken:
        fails = compare.check_venv("onnxruntime", bad, x86, EXPECT)
        assert any(msg in f for f in fails), (msg, fails)


def test_report_renders_every_case_and_failure(data):
    rows, fails = _eval(data, np.roll(data["arm"], 1, axis=-1))
    arm = _venv_result("aarch64", "aarch64 code emulated ...")
    report = {"date": "2026-01-01", "host": "x86_64 test", "qemu": "qemu-aarch64 version 7.2", "qemu_cpus": ["cortex-a72"],
              "root": host.ROOT_RECIPE, "root_python": "3.11.2", "wheel": "edge_sdk-0.1.0-py3-none-any.whl",
              "source": "commit abc", "converter_versions": {"onnxruntime": "1.23.0"}, "timing": "1 min",
              "venvs": [{"name": "onnxruntime @ cortex-a72", "install": "edge_sdk-*.whl[onnxruntime]", "dist": "onnxruntime",
                         "doctor_profiles": ["arm-cpu"], "arm": arm, "x86": _venv_result("x86_64", None)}],
              "cases": [{"id": CASE["id"], "venv": "onnxruntime @ cortex-a72", "profile": "arm-cpu", "format": "onnx-qdq",
                         "arm": _rec(), "x86": _rec(), "rows": rows, "failures": fails,
                         "thresholds": {"min_top1_agreement": 0.9, "scores": {"max_score_error": 0.1}}}],
              "failures": fails, "selftest": {"venv": "onnxruntime @ cortex-a72", "what": "rotated", "caught": True,
                                              "failures": ["x: top-1 agreement 0.000 < 0.9"]}}
    md = compare.render(report)
    assert "{report" not in md and "Debian bookworm arm64 root" in md and "Result: **FAILED**" in md
    assert "| onnxruntime @ cortex-a72 | arm-cpu / onnx-qdq | litert/xnnpack [xnnpack], ai_edge_litert | probs | " in md
    assert "top-1 ≥ 0.9, score error ≤ 0.1" in md and "**FAIL**" in md and "failed as it must" in md
    assert all(f"- {f}" in md for f in fails)


def test_binfmt_preflight_names_the_reason(tmp_path):
    assert host.binfmt_status(tmp_path) == (False, f"binfmt_misc is not mounted at {tmp_path}")
    (tmp_path / "status").write_text("enabled\n")
    assert "no qemu-aarch64 entry" in host.binfmt_status(tmp_path)[1]
    entry = tmp_path / "qemu-aarch64"
    entry.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: P\noffset 0\n")
    ok, why = host.binfmt_status(tmp_path)
    assert not ok and "F (fix-binary) flag" in why
    entry.write_text("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\noffset 0\n")
    assert host.binfmt_status(tmp_path) == (True, "qemu-aarch64 registered (flags PF)")
    entry.write_text("disabled\nflags: PF\n")
    assert host.binfmt_status(tmp_path) == (False, "the qemu-aarch64 binfmt entry is disabled")
