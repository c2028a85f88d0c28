"""Regression gates: ``--fail-if 'p99_ms>20'`` expressions and a profile's latency budget.

Expressions are parsed with one regular expression into (metric, operator, number); nothing
is ever evaluated as code. A gate *fails* when its condition is true for a result. A gate on
a figure that was not measured (power on a host without a sensor) fails closed, saying so:
a CI check must not pass because the number it guards went missing.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any, Callable

from edge_sdk.errors import InputValidationError

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt, "<": operator.lt,
}

#: Gate metric name -> where it lives in a result dict (dotted path).
METRICS: dict[str, str] = {
    **{f"{k}_ms": f"latency_ms.{k}" for k in ("p50", "p90", "p95", "p99", "mean", "std", "min", "max")},
    "load_ms": "load_ms",
    "first_inference_ms": "first_inference_ms",
    "throughput_ips": "throughput_ips",
    "peak_rss_mb": "peak_rss_mb",
    "rss_growth_mb": "rss_growth_mb",
    "cpu_time_s": "cpu_time_s",
    "avg_w": "power.avg_w",
    "energy_per_inference_mj": "power.energy_per_inference_mj",
    "energy_per_inference_above_idle_mj": "power.energy_per_inference_above_idle_mj",
}

_EXPR = re.compile(r"^\s*([a-z0-9_]+)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Gate:
    """One condition that fails the run when true (``metric op threshold``)."""

    metric: str
    op: str
    threshold: float
    text: str

    def check(self, result: dict[str, Any]) -> str | None:
        """None if the result passes; otherwise the failing figure, in one line."""
        value = lookup(result, METRICS[self.metric])
        name = result.get("name") or result.get("artifact", "?")
        if value is None:
            reason = (result.get("power") or {}).get("reason") if self.metric in _POWER else None
            return f"{name}: {self.metric} was not measured" + (f" ({reason})" if reason else "") + \
                f"; gate '{self.text}' cannot pass"
        if _OPS[self.op](float(value), self.threshold):
            return f"{name}: {self.metric} = {value:.4g} {self.op} {self.threshold:g} (gate '{self.text}')"
        return None


_POWER = {m for m, p in METRICS.items() if p.startswith("power.")}


def lookup(data: dict[str, Any], dotted: str) -> Any:
    """``data['a']['b']`` for ``'a.b'``; None if any part is missing."""
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)  # type: ignore[assignment]
    return data


def parse_gate(text: str) -> Gate:
    """Parse ``'p99_ms>20'``.

    Raises:
        InputValidationError: not ``METRIC OP NUMBER``, or an unknown metric.
    """
    m = _EXPR.match(text or "")
    if not m:
        raise InputValidationError(
            f"--fail-if {text!r} is not of the form METRIC OP NUMBER.",
            "Example: --fail-if 'p99_ms>20'. Operators: > >= < <= == !=. Metrics: " + ", ".join(METRICS))
    metric, op, num = m.groups()
    if metric not in METRICS:
        raise InputValidationError(f"--fail-if {text!r}: unknown metric '{metric}'.",
                                   "Metrics: " + ", ".join(METRICS))
    return Gate(metric, op, float(num), text.strip())


def budget_gates(profile: Any) -> list[Gate]:
    """Gates from a profile's ``[budget]`` table (latency must not exceed it)."""
    budget = getattr(profile, "budget", None)
    out = []
    for key in ("p50_ms", "p99_ms"):
        limit = getattr(budget, key, None)
        if limit is not None:
            out.append(Gate(key, ">", float(limit), f"{key}>{limit:g} (budget of profile '{profile.name}')"))
    return out


def evaluate(gates: list[Gate], result: dict[str, Any]) -> list[str]:
    """Every failing figure of ``result`` under ``gates``."""
    return [msg for g in gates if (msg := g.check(result)) is not None]
