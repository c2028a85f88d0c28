"""--fail-if parsing (no eval, clear errors) and gate evaluation, including budgets and unmeasured power."""

import pytest

from edge_sdk.bench.gates import budget_gates, evaluate, parse_gate
from edge_sdk.errors import InputValidationError
from edge_sdk.profiles import BudgetSpec, resolve_profile

RESULT = {
    "name": "a", "latency_ms": {"p50": 4.0, "p90": 5.0, "p95": 6.0, "p99": 21.5, "mean": 4.5, "std": 1.0,
                                 "min": 3.0, "max": 30.0},
    "load_ms": 12.0, "first_inference_ms": 9.0, "throughput_ips": 220.0, "peak_rss_mb": 80.0,
    "rss_growth_mb": 0.1, "cpu_time_s": 0.5,
    "power": {"available": False, "reason": "no power sensor readable here", "avg_w": None,
              "energy_per_inference_mj": None},
}


@pytest.mark.parametrize("text,fails", [
    ("p99_ms>20", True), ("p99_ms > 25", False), ("p50_ms>=4", True), ("throughput_ips<100", False),
    ("throughput_ips<300", True), ("max_ms!=30", False), ("load_ms==12", True), ("rss_growth_mb>1e-2", True),
])
def test_gate_results(text, fails):
    failures = evaluate([parse_gate(text)], RESULT)
    assert bool(failures) is fails
    if fails:
        assert "a:" in failures[0] and text.split()[0][:3] in failures[0]


def test_failing_figure_is_printed():
    (msg,) = evaluate([parse_gate("p99_ms>20")], RESULT)
    assert "p99_ms = 21.5 > 20" in msg


@pytest.mark.parametrize("text", ["p99>20", "__import__('os').system('x')", "p99_ms > twenty", "p99_ms >> 2", "",
                                  "p99_ms>20; rm -rf /"])
def test_bad_expressions_are_input_errors(text):
    with pytest.raises(InputValidationError) as exc:
        parse_gate(text)
    assert exc.value.hint


def test_unmeasured_power_fails_closed_with_reason():
    (msg,) = evaluate([parse_gate("energy_per_inference_mj>5")], RESULT)
    assert "not measured" in msg and "no power sensor" in msg


def test_profile_budget_becomes_gates():
    prof = resolve_profile("intel-cpu")
    object.__setattr__(prof, "budget", BudgetSpec(p99_ms=20.0, p50_ms=10.0))
    try:
        gates = budget_gates(prof)
        assert {g.metric for g in gates} == {"p50_ms", "p99_ms"}
        (msg,) = evaluate(gates, RESULT)
        assert "p99_ms" in msg and "budget of profile 'intel-cpu'" in msg
    finally:
        object.__setattr__(prof, "budget", BudgetSpec())
