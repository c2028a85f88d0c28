"""A background thread that reads something at a fixed interval, timestamped on one clock.

The benchmark marks the start and end of its timed loop with :meth:`Sampler.mark`, which
takes a reading *synchronously* at that instant, so energy integrated between the two marks
covers exactly the measured window and not the sampler's nearest tick. All timestamps are
``time.perf_counter()``, the clock the benchmark times inferences with.

Power sources (watts) are point readings: a load that changes faster than the interval
aliases (a 50 Hz square wave sampled every 20 ms looks constant), so keep the interval short
relative to the load's changes. Energy counters (RAPL, hwmon ``energy*_input``) have no such
problem: the window's energy is a counter difference, whatever happened in between.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable


class Sampler:
    """Call ``read()`` every ``interval_s`` seconds on a daemon thread.

    Args:
        read: Returns one reading; exceptions stop sampling and are kept in :attr:`error`.
        interval_s: Sampling period (the thread sleeps to the next tick, so there is no drift).
        name: Thread name, for debugging.
        accept: Returns False for an impossible reading (a meter printing -5 W, NaN), which is
            then not kept but counted in :attr:`discarded`.
    """

    def __init__(self, read: Callable[[], Any], interval_s: float = 0.02, name: str = "edge-sdk-sampler",
                 accept: Callable[[Any], bool] | None = None):
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self._read = read
        self._accept = accept
        self.interval_s = interval_s
        self.samples: list[tuple[float, Any]] = []
        self.discarded = 0
        self.error: str | None = None
        self._lock = threading.Lock()  # sources are not required to be thread safe
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _sample(self) -> float:
        with self._lock:
            value = self._read()
            t = time.perf_counter()
            if self._accept is None or self._accept(value):
                self.samples.append((t, value))
            else:
                self.discarded += 1
        return t

    def _run(self) -> None:
        next_tick = time.perf_counter()
        while not self._stop.is_set():
            try:
                self._sample()
            except Exception as exc:  # noqa: BLE001 - any sensor failure ends sampling, reported later
                self.error = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
                return
            next_tick += self.interval_s
            self._stop.wait(max(0.0, next_tick - time.perf_counter()))

    def start(self) -> "Sampler":
        """Take a first reading synchronously (so errors surface now) and start the thread."""
        self._sample()
        self._thread.start()
        return self

    def mark(self) -> float:
        """Take a reading now and return its timestamp (a window boundary).

        Returns:
            The ``perf_counter`` time of the reading; the last good sample's time if it failed.
        """
        try:
            return self._sample()
        except Exception as exc:  # noqa: BLE001 - same policy as the thread
            self.error = self.error or getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            return time.perf_counter()

    def stop(self) -> None:
        """Stop the thread and wait for it (safe to call twice)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self.interval_s + 5)

    def between(self, start: float, end: float) -> list[tuple[float, Any]]:
        """All samples plus the nearest one on each side of ``[start, end]`` (for interpolation)."""
        with self._lock:
            snap = list(self.samples)
        lo = max([i for i, (t, _) in enumerate(snap) if t <= start], default=0)
        hi = min([i for i, (t, _) in enumerate(snap) if t >= end], default=len(snap) - 1)
        return snap[lo:hi + 1]

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
