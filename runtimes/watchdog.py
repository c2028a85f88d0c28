"""Ends an inference that runs away, where the runtime can be told to stop.

A model can run far longer on some inputs than on the zeros its trial ran: an ONNX ``Loop`` whose
trip count comes from an input hangs ``infer`` (and ``run``, ``bench``) forever on a large value.
``Model.infer`` arms a deadline around each call on a runner that can be stopped
(:attr:`Runner.stoppable`: ONNX Runtime's ``RunOptions.terminate``); one daemon thread per model
wakes a few times a second, stops the calls past their deadline, and the call ends in an
``InputValidationError`` naming the limit. The limit is ``load(watchdog_s=...)``, else derived from
the model's own fastest call: ``max(AUTO_FLOOR_S, AUTO_FACTOR x fastest)`` (generous: a model that
takes 5 ms gets a minute). Arming is a dict store per call, so the hot path stays cheap.

OpenVINO's ``InferRequest.cancel`` does not stop a running ``Loop`` and LiteRT has no cancel in
Python: those calls cannot be stopped in-process (said in docs/security.md).
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

#: The automatic limit: at least this many seconds ...
AUTO_FLOOR_S = 60.0
#: ... or this many times the model's fastest call.
AUTO_FACTOR = 1000.0


class Watchdog:
    """Deadlines of the calls in flight (one per thread) and the thread that enforces them.

    Args:
        seconds: The limit per call; None: automatic (see the module doc).
    """

    def __init__(self, seconds: float | None = None):
        self.fixed = seconds
        self.fastest = math.inf
        self._armed: dict[int, tuple[float, Callable[[], None]]] = {}
        self._stopped: set[int] = set()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._start_lock = threading.Lock()

    def limit(self) -> float:
        """Seconds a call may run."""
        if self.fixed is not None:
            return self.fixed
        return max(AUTO_FLOOR_S, AUTO_FACTOR * self.fastest) if math.isfinite(self.fastest) else AUTO_FLOOR_S

    def arm(self, stop: Callable[[], None]) -> int:
        """Start the calling thread's deadline; ``stop`` ends its call. Returns the token."""
        token = threading.get_ident()
        self._stopped.discard(token)
        self._armed[token] = (time.monotonic() + self.limit(), stop)
        if self._thread is None:
            self._start()
        return token

    def disarm(self, token: int | None, seconds: float, ok: bool) -> bool:
        """End the deadline. Returns True when the watchdog stopped this call (and it failed)."""
        if token is None:
            return False
        self._armed.pop(token, None)
        stopped = token in self._stopped
        self._stopped.discard(token)
        if ok:
            self.fastest = min(self.fastest, seconds)
            return False
        return stopped

    def close(self) -> None:
        self._closed.set()

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="edge-sdk-watchdog", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed.wait(max(0.05, min(1.0, self.limit() / 8))):
            now = time.monotonic()
            for token, (deadline, stop) in list(self._armed.items()):
                if now >= deadline and self._armed.get(token, (None,))[0] == deadline:
                    self._stopped.add(token)
                    self._armed.pop(token, None)
                    try:
                        stop()
                    except Exception:  # noqa: BLE001 - a runtime that cannot be stopped now: the call goes on
                        pass


__all__ = ["AUTO_FACTOR", "AUTO_FLOOR_S", "Watchdog"]
