"""Energy over exactly a measured window, from power samples or from energy counters.

Power samples (watts at times ``t``) are treated as a piecewise-linear signal and
integrated with the trapezoid rule between the window's start and end, the ends being
interpolated from the neighbouring samples. Energy counters (joules, cumulative) are first
unwrapped per channel (a counter that goes down wrapped at its range, RAPL's
``max_energy_range_uj``) and then read at the window's ends by interpolation: the energy is
the difference. Pure functions on plain lists, so they are tested on known sequences.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass


@dataclass
class WindowEnergy:
    """Energy integrated over one window.

    Attributes:
        joules: Energy over the window.
        seconds: Window length.
        samples: Samples that fall inside the window (ends included).
        series: (seconds since window start, watts) points inside the window, for plots.
        wraps: Counter wrap-arounds that were corrected.
    """

    joules: float
    seconds: float
    samples: int
    series: list[tuple[float, float]]
    wraps: int = 0

    @property
    def avg_w(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else 0.0


def _interp(ts: list[float], vs: list[float], t: float) -> float:
    """Linear interpolation, flat beyond the ends."""
    if t <= ts[0]:
        return vs[0]
    if t >= ts[-1]:
        return vs[-1]
    i = bisect_left(ts, t)
    if ts[i] == t:
        return vs[i]
    t0, t1, v0, v1 = ts[i - 1], ts[i], vs[i - 1], vs[i]
    return v0 + (v1 - v0) * (t - t0) / (t1 - t0)


def _check(samples, start: float, end: float) -> None:
    if end <= start:
        raise ValueError(f"empty window [{start}, {end}]")
    if len(samples) < 2:
        raise ValueError("at least two samples are needed to integrate")


def integrate_power(samples: list[tuple[float, float]], start: float, end: float) -> WindowEnergy:
    """Trapezoid integral of power samples over ``[start, end]``.

    Args:
        samples: (time s, watts), in time order.
        start: Window start (same clock as the samples).
        end: Window end.

    Returns:
        The energy in the window.

    Raises:
        ValueError: fewer than two samples, or an empty window.
    """
    _check(samples, start, end)
    ts = [t for t, _ in samples]
    ws = [w for _, w in samples]
    pts = [(start, _interp(ts, ws, start))]
    pts += [(t, w) for t, w in samples if start < t < end]
    pts.append((end, _interp(ts, ws, end)))
    joules = sum((t1 - t0) * (w0 + w1) / 2.0 for (t0, w0), (t1, w1) in zip(pts, pts[1:]))
    inside = sum(1 for t in ts if start <= t <= end)
    return WindowEnergy(joules, end - start, inside, [(t - start, w) for t, w in pts])


def unwrap(values: list[float], span: float | None) -> tuple[list[float], int]:
    """Make a wrapping counter monotonic.

    Args:
        values: Raw counter readings in time order.
        span: The counter's range (it wraps from ``span`` back to 0); None if unknown.

    Returns:
        (unwrapped readings, number of wraps corrected).

    Raises:
        ValueError: the counter went backwards and its range is unknown (a reset, not a wrap).
    """
    out, offset, wraps = [values[0]], 0.0, 0
    for prev, cur in zip(values, values[1:]):
        if cur < prev:
            if not span:
                raise ValueError("an energy counter went backwards and its range is unknown")
            offset += span
            wraps += 1
        out.append(cur + offset)
    return out, wraps


def integrate_counters(samples: list[tuple[float, list[float]]], ranges: list[float | None],
                       start: float, end: float) -> WindowEnergy:
    """Energy over ``[start, end]`` from cumulative counters (one or more channels, summed).

    Args:
        samples: (time s, [joules per channel]), in time order.
        ranges: Wrap-around range per channel in joules (None: no wrap expected).
        start: Window start.
        end: Window end.

    Returns:
        The energy in the window, with a power series from consecutive differences.

    Raises:
        ValueError: fewer than two samples, an empty window, or a counter reset.
    """
    _check(samples, start, end)
    ts = [t for t, _ in samples]
    channels = len(samples[0][1])
    total = [0.0] * len(samples)
    wraps = 0
    for c in range(channels):
        series, w = unwrap([v[c] for _, v in samples], ranges[c] if c < len(ranges) else None)
        wraps += w
        total = [a + b for a, b in zip(total, series)]
    e0, e1 = _interp(ts, total, start), _interp(ts, total, end)
    pts = [(start, e0)] + [(t, e) for t, e in zip(ts, total) if start < t < end] + [(end, e1)]
    series = [((ta + tb) / 2.0 - start, (eb - ea) / (tb - ta)) for (ta, ea), (tb, eb) in zip(pts, pts[1:]) if tb > ta]
    inside = sum(1 for t in ts if start <= t <= end)
    return WindowEnergy(e1 - e0, end - start, inside, series, wraps)
