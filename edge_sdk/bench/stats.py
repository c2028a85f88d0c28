"""Latency statistics: percentiles and moments of a list of measurements, in pure Python.

Percentiles use linear interpolation between closest ranks (NumPy's default ``linear``
method, Hyndman & Fan type 7), so our p99 is the number a user gets from
``numpy.percentile`` on the same samples. ``std`` is the sample standard deviation
(``ddof=1``): the runs are a sample of the device's behaviour, not the whole of it.
"""

from __future__ import annotations

import math

#: The percentiles every report carries.
PERCENTILES = (50, 90, 95, 99)


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, linear interpolation.

    Raises:
        ValueError: empty input or ``q`` outside [0, 100].
    """
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is outside [0, 100]")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def summarize(values: list[float]) -> dict[str, float]:
    """min, mean, std, p50, p90, p95, p99, max and count of ``values``.

    Args:
        values: Measurements (e.g. milliseconds); order does not matter.

    Returns:
        A dict with keys ``p50 p90 p95 p99 mean std min max count``.

    Raises:
        ValueError: ``values`` is empty or holds a NaN/inf.
    """
    if not values:
        raise ValueError("no measurements to summarize")
    if any(not math.isfinite(v) for v in values):
        raise ValueError("measurements contain NaN or infinity")
    s = sorted(values)
    n = len(s)
    mean = math.fsum(s) / n
    var = math.fsum((v - mean) ** 2 for v in s) / (n - 1) if n > 1 else 0.0
    out = {f"p{q}": percentile(s, q) for q in PERCENTILES}
    out.update(mean=mean, std=math.sqrt(var), min=s[0], max=s[-1], count=n)
    return out


def histogram(values: list[float], bins: int = 30) -> tuple[list[float], list[int]]:
    """Equal-width histogram: (bin edges, counts); a single value gets one bin.

    Raises:
        ValueError: empty input or ``bins < 1``.
    """
    if not values or bins < 1:
        raise ValueError("histogram needs values and at least one bin")
    lo, hi = min(values), max(values)
    if hi == lo:
        return [lo, hi], [len(values)]
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    return [lo + i * width for i in range(bins + 1)], counts
