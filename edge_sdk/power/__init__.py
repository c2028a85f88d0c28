"""Power and energy from the sensors a device has: RAPL, Jetson INA3221 (hwmon and iio),
tegrastats, NVML / nvidia-smi, generic hwmon, or an external meter command.

:func:`discover` lists what is readable here (``edge-sdk doctor``); :class:`PowerMonitor`
opens one source, samples it on a thread, and turns the samples of a measured window into
the report's ``power`` block. With no readable sensor the block says ``available: false``
and why: a missing measurement is never reported as zero watts.
"""

from __future__ import annotations

import math
from typing import Any

from edge_sdk.errors import InputValidationError

from .energy import WindowEnergy, integrate_counters, integrate_power
from .sampler import Sampler
from .sources import AUTO_ORDER, SOURCES, CommandSource, PowerSource, SensorUnavailable

#: What ``--power`` accepts besides ``cmd:COMMAND``.
SPECS = ("auto", "none", *AUTO_ORDER)


def discover() -> dict[str, Any]:
    """Every power source readable on this host (honours ``EDGE_SDK_SYSFS_ROOT``).

    Returns:
        Source name -> {"available": bool, "kind"/"description" or "reason"}; JSON-ready.
    """
    out: dict[str, Any] = {}
    for name in AUTO_ORDER:
        try:
            src = SOURCES.get(name).find()
        except SensorUnavailable as exc:
            out[name] = {"available": False, "reason": exc.message}
            continue
        out[name] = {"available": True, **src.info()}
        src.close()
    return out


def open_source(spec: str = "auto", preferred: list[str] | tuple[str, ...] = ()) -> tuple[PowerSource | None, str]:
    """Open the power source that ``spec`` asks for.

    Args:
        spec: ``auto``, ``none``, a source name, or ``cmd:COMMAND``.
        preferred: For ``auto``, sources to try first (the profile's ``power.sensors``).

    Returns:
        (source, "") or (None, the reason no source is used).

    Raises:
        InputValidationError: ``spec`` is not one of the accepted values.
    """
    spec = (spec or "auto").strip()
    if spec == "none":
        return None, "power measurement disabled (--power none)"
    if spec.startswith("cmd:"):
        src = CommandSource(spec[4:].strip())
        try:
            src.read()
        except SensorUnavailable as exc:
            return None, exc.message
        return src, ""
    if spec != "auto" and spec not in SOURCES:
        raise InputValidationError(f"Unknown power source '{spec}'.",
                                   f"Use one of: {', '.join(SPECS)}, or cmd:\"COMMAND\" (prints watts).")
    order = [spec] if spec != "auto" else list(dict.fromkeys([*preferred, *AUTO_ORDER]))
    reasons = []
    for name in order:
        try:
            return SOURCES.get(name).find(), ""
        except SensorUnavailable as exc:
            reasons.append(f"{name}: {exc.message}")
    return None, "no power sensor readable here (" + "; ".join(reasons) + ")"


def plausible(value: Any) -> bool:
    """A reading a sensor can really give: watts, or energy counters, finite and not negative."""
    values = value if isinstance(value, (list, tuple)) else [value]
    try:
        return all(math.isfinite(float(v)) and float(v) >= 0.0 for v in values) and bool(values)
    except (TypeError, ValueError):
        return False


class PowerMonitor:
    """One power source sampled on a thread, reduced to the report's ``power`` block.

    Args:
        spec: What ``--power`` said (see :func:`open_source`).
        preferred: Sources the profile names, tried first under ``auto``.
        interval_s: Sampling period.
    """

    def __init__(self, spec: str = "auto", preferred: list[str] | tuple[str, ...] = (), interval_s: float = 0.02):
        self.source, self.reason = open_source(spec, preferred)
        self.interval_s = interval_s
        self.idle_w: float | None = None
        self.idle_discarded = 0
        self._sampler: Sampler | None = None

    @property
    def available(self) -> bool:
        return self.source is not None

    def _window(self, sampler: Sampler, start: float, end: float) -> WindowEnergy:
        pts = sampler.between(start, end)
        if self.source.kind == "energy":  # type: ignore[union-attr]
            return integrate_counters(pts, self.source.ranges, start, end)  # type: ignore[union-attr]
        return integrate_power(pts, start, end)

    def measure_idle(self, seconds: float) -> float | None:
        """Average watts over ``seconds`` of doing nothing (the idle baseline); None if unreadable."""
        if not self.available or seconds <= 0:
            return None
        import time

        sampler = Sampler(self.source.read, self.interval_s, "edge-sdk-idle", plausible).start()  # type: ignore[union-attr]
        try:
            t0 = sampler.mark()
            time.sleep(seconds)
            t1 = sampler.mark()
        finally:
            sampler.stop()
        if sampler.error:
            self.reason = f"idle baseline failed: {sampler.error}"
            return None
        self.idle_discarded = sampler.discarded
        try:
            self.idle_w = self._window(sampler, t0, t1).avg_w
        except ValueError:  # fewer than two plausible readings
            self.reason = f"idle baseline failed: {sampler.discarded} reading(s) were negative or not finite"
            return None
        return self.idle_w

    def start(self) -> None:
        """Start sampling (call before the timed loop, then :meth:`mark` at its ends)."""
        if self.available:
            try:
                self._sampler = Sampler(self.source.read, self.interval_s, "edge-sdk-power",  # type: ignore[union-attr]
                                        plausible).start()
            except Exception as exc:  # noqa: BLE001 - a sensor that fails now is reported, not fatal
                self.reason = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                self.source = None

    def mark(self) -> float | None:
        """A synchronous sample now; returns its timestamp (None when not sampling)."""
        return self._sampler.mark() if self._sampler else None

    def stop(self) -> None:
        if self._sampler:
            self._sampler.stop()

    def close(self) -> None:
        self.stop()
        if self.source is not None:
            self.source.close()

    def result(self, start: float | None, end: float | None, inferences: int) -> dict[str, Any]:
        """The report's ``power`` block for the window ``[start, end]`` holding ``inferences`` runs."""
        block: dict[str, Any] = {
            "source": self.source.name if self.source else None,
            "available": False, "reason": self.reason or None,
            "description": self.source.description if self.source else None,
            "avg_w": None, "energy_j": None, "energy_per_inference_mj": None,
            "idle_w": self.idle_w, "above_idle_w": None, "energy_per_inference_above_idle_mj": None,
            "samples": 0, "interval_ms": self.interval_s * 1000.0, "series": [],
        }
        sampler = self._sampler
        if sampler is None or start is None or end is None:
            return block
        discarded = sampler.discarded + self.idle_discarded
        block["discarded_readings"] = discarded
        if discarded:
            block["warning_discarded"] = (f"{discarded} reading(s) were negative or not finite and were discarded "
                                          f"(source: {self.source.description if self.source else '?'})")
        if sampler.error:
            block["reason"] = f"sampling failed: {sampler.error}"
            return block
        try:
            win = self._window(sampler, start, end)
        except ValueError as exc:
            block["reason"] = (f"no plausible readings: {discarded} were negative or not finite" if discarded
                               and len(sampler.samples) < 2 else f"cannot integrate energy: {exc}")
            return block
        block.update(available=True, reason=None, avg_w=win.avg_w, energy_j=win.joules, samples=win.samples,
                     energy_per_inference_mj=win.joules * 1000.0 / max(inferences, 1),
                     series=[[round(t, 6), round(w, 6)] for t, w in win.series], counter_wraps=win.wraps)
        if win.samples < 10:
            block["warning"] = (f"only {win.samples} power samples in a {win.seconds:.3g} s window: "
                                "use --duration for a longer run (energy is still integrated over the exact window)")
        if self.idle_w is not None:
            above = win.avg_w - self.idle_w
            block["above_idle_w"] = above
            block["energy_per_inference_above_idle_mj"] = above * win.seconds * 1000.0 / max(inferences, 1)
        return block


__all__ = ["PowerMonitor", "PowerSource", "SOURCES", "SPECS", "SensorUnavailable", "discover", "open_source"]
