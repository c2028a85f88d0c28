"""The child side of the crash guard: trial-load a model where a crash cannot hurt the caller.

Run as ``python -m edge_sdk.runtimes.trial_server`` by :mod:`edge_sdk.runtimes.sandbox`. It reads
one JSON request per line on stdin and answers one JSON line on stdout. On POSIX it is a small
fork server: it imports the runtime once (on the first request for that backend), then forks a
fresh process for every trial, so a trial costs a fork plus the model's own load time rather
than a Python start and a runtime import. The forked process loads the model, checks the I/O
contract against the manifest, runs one inference on zeros, releases the model and reports; if
it dies from a signal (SIGSEGV, SIGBUS, SIGABRT ...) or hangs, the server says so. With
``--once`` (platforms without ``fork``) the trial runs in this process and the parent reads a
crash from the exit status.

Native libraries print to fd 1 and 2; both are pointed at ``/dev/null`` here, and the protocol
uses a private duplicate of the original stdout, so their chatter cannot corrupt a reply.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any

#: A trial that takes longer than this (load + one inference) is reported as a hang.
DEFAULT_TIMEOUT_S = 300.0


def run_trial(req: dict[str, Any]) -> dict[str, Any]:
    """Load the model of ``req``, check its I/O against the manifest specs, infer zeros once.

    Args:
        req: ``backend``, ``model_path``, ``accelerator``, ``files``, ``backend_options``, ``sha``,
            ``file_sha256``, ``check_sha256`` (the child reads and checks the bytes as the parent will),
            and optionally ``inputs`` / ``outputs`` (manifest TensorSpec dicts of the format).

    Returns:
        ``{"status": "ok"}`` or ``{"status": "error", "cls", "message", "hint"}``.
    """
    from pathlib import Path

    import numpy as np

    from edge_sdk import typed
    from edge_sdk.errors import EdgeSDKError, MissingDependencyError, ModelLoadError
    from edge_sdk.manifest import TensorSpec

    from .base import RunnerConfig
    from .select import BACKENDS
    from .tensors import plan_inputs, plan_outputs

    name = Path(req["model_path"]).name
    try:
        cache = Path(req["cache_dir"]) if req.get("cache_dir") else None
        cfg = RunnerConfig(model_path=Path(req["model_path"]), accelerator=req["accelerator"], num_threads=1,
                           files={k: Path(v) for k, v in req["files"].items()},
                           backend_options=req["backend_options"], cache_dir=cache, model_sha256=req["sha"],
                           file_sha256=dict(req.get("file_sha256") or {}), check_sha256=bool(req.get("check_sha256", True)))
        _import_plugin(req.get("plugin"))
        runner = BACKENDS.get(req["backend"])(cfg)
        runner.activate()
        try:
            if req.get("inputs") is not None:
                def parse(items):
                    return [typed.parse(TensorSpec, d, where="trial", error=ModelLoadError) for d in items]

                plan_inputs(parse(req["inputs"]), runner.input_metadata, False)
                plan_outputs(parse(req["outputs"]), runner.output_metadata)
            feed = [np.zeros([d if d > 0 else 1 for d in t.shape], t.dtype) for t in runner.input_metadata]
            runner.infer_impl(feed)
        finally:
            runner.deactivate()
    except MissingDependencyError as exc:
        return {"status": "error", "cls": "MissingDependencyError", "module": exc.module, "extra": exc.extra,
                "message": exc.message, "hint": exc.hint}
    except EdgeSDKError as exc:
        return {"status": "error", "cls": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    except MemoryError:
        return {"status": "error", "cls": "ModelLoadError",
                "message": f"{req['backend']} ran out of memory on {name} (std::bad_alloc): a damaged size field, "
                           "or a model too large for this device.", "hint": None}
    except BaseException as exc:  # noqa: BLE001 - whatever the native runtime raised, the caller gets one error
        from .base import native_message

        text = native_message(str(exc))
        return {"status": "error", "cls": "ModelLoadError",
                "message": f"{req['backend']} failed on {name} in the trial run: {type(exc).__name__}: {text}",
                "hint": None}
    return {"status": "ok"}


def _preload(backend: str) -> None:
    """Import the runtime of ``backend`` here once, so each forked trial starts with it loaded."""
    try:
        from edge_sdk._deps import available, require
        from edge_sdk.backends import get_backend

        desc = get_backend(backend)
        runner = desc.runner_class()
        preload = getattr(runner, "preload", None)  # a runner may name what to import (LiteRT's interpreter)
        if callable(preload):
            preload()
            return
        # else the first installed runtime module of the backend (as its runner would pick it)
        mod = next((m for m, _ in desc.modules if m != "tensorflow" and available(m)), None)
        if mod is not None:
            require(mod)
    except Exception:  # noqa: BLE001 - the trial itself reports a missing runtime properly
        pass


def _import_plugin(plugin: dict | None) -> None:
    """Import the module that registers a plugin backend (see ``sandbox.plugin_module``)."""
    if not plugin:
        return
    import importlib
    import sys

    if plugin.get("path") and plugin["path"] not in sys.path:
        sys.path.insert(0, plugin["path"])
    importlib.import_module(plugin["module"])


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def serve_one(req: dict[str, Any]) -> dict[str, Any]:
    """Run one trial in a forked child and report how it ended.

    Returns:
        The child's own report, or ``{"status": "crash", "why": "SIGSEGV"}`` /
        ``{"status": "hang", "seconds": t}``.
    """
    _preload(req["backend"])
    timeout = float(req.get("timeout_s") or DEFAULT_TIMEOUT_S)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the trial process
        os.close(r)
        try:
            result = run_trial(req)
        except BaseException as exc:  # noqa: BLE001
            result = {"status": "error", "cls": "ModelLoadError", "message": f"trial failed: {exc!r}"[:300], "hint": None}
        os.write(w, json.dumps(result).encode())
        os._exit(0)  # no interpreter teardown: the report is written
    os.close(w)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    hung = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hung = True
                break
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            block = os.read(r, 65536)
            if not block:
                break
            chunks.append(block)
    finally:
        os.close(r)
    if hung:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if hung:
        return {"status": "hang", "seconds": timeout}
    if os.WIFSIGNALED(status):
        return {"status": "crash", "why": _signal_name(os.WTERMSIG(status))}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"status": "crash", "why": f"exit status {os.WEXITSTATUS(status)} without a report"}


def main(argv: list[str] | None = None) -> int:
    """Serve trial requests from stdin until it closes (``--once``: one request, in this process).

    Returns:
        The exit status (0).
    """
    argv = sys.argv[1:] if argv is None else argv
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    once = "--once" in argv or not hasattr(os, "fork")
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        result = run_trial(req) if once else serve_one(req)
        proto.write(json.dumps(result) + "\n")
        proto.flush()
        if once:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main())
