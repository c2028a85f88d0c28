"""Pipelined inference for :meth:`Model.submit` / :meth:`Model.pipeline` (issue #19).

A frame goes through three stages; each frame's stages run in order, different frames' stages
overlap:

1. **prepare** (a Python worker thread): :meth:`Model.preprocess_with_transform`, then the
   manifest's input contract and quantization (the same ``InputPlan`` as ``infer``);
2. **infer** (a :class:`~edge_sdk.runtimes.base.InferQueue` the runner opens: one OpenVINO infer
   request or one LiteRT interpreter per worker, ONNX Runtime ``session.run`` on worker threads;
   each native call releases the GIL); the prepare thread is free as soon as the inference is queued;
3. **finish** (on the queue's worker that ran the inference): dequantize, build the ``InferenceResult``, decode
   the head.

So preprocessing and decoding of some frames run while the runtime infers others, and the
results are exactly those of :meth:`Model.infer_image` (same checks, same arrays, same
``detections``). ``timings["inference"]`` is the native call alone; ``timings["total"]`` is the
frame's wall time from prepare to finish, queueing included.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING, Any

import numpy as np

from edge_sdk.errors import ModelLoadError

if TYPE_CHECKING:
    from .base import InferQueue, Native
    from .facade import InferenceResult, Model

_perf = time.perf_counter


def _closed() -> ModelLoadError:
    return ModelLoadError("This model was closed before the frame was inferred.",
                          "Do not close a model while frames are in flight; load it again with edge_sdk.load().")


class FramePipeline:
    """Frames in, ``Future[InferenceResult]`` out, over one :class:`InferQueue` of the model's runner.

    Args:
        model: The loaded model (its runner must be active).
        jobs: Inferences in flight on the runtime (1..64).
        color: The frames' colour format.
        fast: The faster resize.
        name: Prefix of the worker threads' names.

    Raises:
        ModelLoadError: the model is closed.
    """

    def __init__(self, model: "Model", jobs: int, *, color: str = "rgb", fast: bool | float = False,
                 name: str = "edge_sdk-pipeline"):
        self.model, self.color, self.fast = model, color, fast
        self.queue: InferQueue = model._runner.open_queue(jobs, model._lock)
        # Pre/post-processing threads: enough to keep every core busy, never more than the frames in flight.
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(jobs, os.cpu_count() or 1)),
                                        thread_name_prefix=name)
        self._outstanding: set[Future] = set()
        self._state = threading.Lock()
        self.closed = False

    def describe(self) -> dict[str, Any]:
        """What runs the inferences: ``{"kind", "jobs", "made"}`` of the runtime's queue."""
        return self.queue.describe()

    def submit(self, frame: Any) -> "Future[InferenceResult]":
        """Start one frame; its future raises what :meth:`Model.infer_image` would.

        Raises:
            ModelLoadError: the pipeline (or its model) is closed.
        """
        out: Future = Future()
        with self._state:
            if self.closed:
                from .facade import model_closed

                raise model_closed()
            self._outstanding.add(out)
            out.add_done_callback(self._forget)
            self._pool.submit(self._prepare, frame, out)
        return out

    def _forget(self, fut: Future) -> None:
        with self._state:
            self._outstanding.discard(fut)

    def _prepare(self, frame: Any, out: Future) -> None:
        if not out.set_running_or_notify_cancel():  # the caller cancelled it before it started
            return
        t0, model = _perf(), self.model
        try:
            x, transform = model.preprocess_with_transform(frame, color=self.color, fast=self.fast)
            t1 = _perf()
            feed, t_quant = model._in.convert(model._image_feed(x), False)
            native = self.queue.submit(feed)
        except BaseException as exc:  # noqa: BLE001 - the frame's error, raised at its turn
            out.set_exception(exc)
            return
        # Finish where the inference completed (the queue's own worker: one thread hop less per frame).
        native.add_done_callback(lambda f: self._finish(f, out, (t0, t1, t_quant, transform)))

    def _finish(self, native: "Future[Native]", out: Future, prepared: tuple) -> None:
        model = self.model
        t0, t1, t_quant, transform = prepared
        try:
            outs, ms = native.result()
        except Exception as exc:  # noqa: BLE001
            out.set_exception(_closed() if not model._runner.is_active else model._refused(exc))
            return
        try:
            out.set_result(self._result(outs, ms, t0, t1, t_quant, transform))
        except BaseException as exc:  # noqa: BLE001
            out.set_exception(exc)

    def _result(self, outs: list[np.ndarray], ms: float, t0: float, t1: float, t_quant: float,
                transform: Any) -> "InferenceResult":
        from .facade import InferenceResult

        model = self.model
        t2 = _perf()
        outputs = model._out.convert(outs, False)
        t3 = _perf()
        result = InferenceResult(outputs, {"preprocess": (t1 - t0) * 1e3, "quantize": t_quant * 1e3, "inference": ms,
                                           "dequantize": (t3 - t2) * 1e3, "total": 0.0},
                                 *model._facts, transform, model.labels)
        from edge_sdk.detect import apply_head

        if apply_head(result, model.head, transform=transform, labels=model.labels):  # as infer_image decodes
            result.timings["postprocess"] = (_perf() - t3) * 1e3
        result.timings["total"] = (_perf() - t0) * 1e3
        return result

    def close(self) -> None:
        """Let the frames in flight finish, then stop the workers and release the runtime's queue
        (its requests / interpreters); safe to call twice."""
        with self._state:
            if self.closed:
                return
            self.closed = True
            pending = list(self._outstanding)
        wait(pending)
        self._pool.shutdown(wait=True)
        self.queue.close()
