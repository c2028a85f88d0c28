"""The crash guard: a model file is first loaded in a child process, so no input crashes the caller.

Native runtimes trust their input. The pure-Python container checks (``tflite_check``, the IR
and ONNX checks) catch damaged structure, but a flipped byte in a constant or an option can
still make LiteRT segfault or throw ``std::bad_alloc`` - outside what Python can catch. So before
a model file is loaded in this process, :meth:`CrashGuard.check` loads it in a child process
(:mod:`edge_sdk.runtimes.trial_server`): load, allocate, compare its I/O with the manifest, run
one inference on zeros, release it. A crash (any signal), a hang, ``MemoryError`` or any native
error there becomes a :class:`~edge_sdk.errors.ModelLoadError` here, naming what happened.

A trial that passed is remembered in the *verified-models cache* (default
``~/.cache/edge-sdk/verified``; ``EDGE_SDK_VERIFIED_CACHE`` or ``load(verified_cache=...)`` move
it), keyed by the sha256 of every file, the backend, accelerator and runtime version and the I/O
contract, so later loads of the same artifact skip the child and cost nothing extra. A model
loaded with ``verify=False`` (hashes not checked) is trialled every time and never cached.
``load(crash_guard=False)`` or ``EDGE_SDK_CRASH_GUARD=0`` opts out.

The trials run in one long-lived helper per process (a fork server: the runtime is imported once,
each trial is a fork), so a trial costs the model's own load time plus a few milliseconds.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from edge_sdk import errors
from edge_sdk._version import __version__
from edge_sdk.errors import DelegateUnavailableError, ModelLoadError

from .base import RunnerConfig
from .trial_server import DEFAULT_TIMEOUT_S

CACHE_ENV = "EDGE_SDK_VERIFIED_CACHE"
GUARD_ENV = "EDGE_SDK_CRASH_GUARD"
def default_cache_dir() -> Path:
    """``$EDGE_SDK_VERIFIED_CACHE``, else ``$XDG_CACHE_HOME/edge-sdk/verified`` (``~/.cache/...``)."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edge-sdk" / "verified"


def guard_disabled_by_env() -> bool:
    """True when ``EDGE_SDK_CRASH_GUARD`` is ``0``, ``off``, ``false`` or ``no``."""
    return os.environ.get(GUARD_ENV, "").strip().lower() in ("0", "off", "false", "no")


def plugin_module(backend: str) -> dict[str, str] | None:
    """Where the helper process finds a backend registered outside edge_sdk (a plugin): the module
    that registers it and the folder to put on ``sys.path`` for it; None for a built-in backend.

    The helper process is started once and may predate the registration (or ``EDGE_SDK_PLUGINS``).
    """
    import sys

    from edge_sdk.backends import backends

    desc = backends().get(backend)
    runner = desc.runner if desc is not None else None
    module = runner.partition(":")[0] if isinstance(runner, str) else getattr(runner, "__module__", "")
    if not module or module.startswith("edge_sdk."):
        return None
    file = getattr(sys.modules.get(module), "__file__", None)
    root = Path(file).resolve().parents[module.count(".")] if file else None
    return {"module": module, "path": str(root) if root else ""}


def runtime_version(backend: str) -> str:
    """``dist==version`` of the backend's installed runtime (keys the verified-models cache), or ``unknown``."""
    from edge_sdk.backends import backends

    desc = backends().get(backend)
    found = desc.installed() if desc is not None else None
    return f"{found[0]}=={found[1]}" if found else "unknown"


@dataclass(frozen=True)
class CrashGuard:
    """How :func:`edge_sdk.load` protects the caller from a model file that crashes native code.

    Attributes:
        cache_dir: The verified-models cache; None: trial every time, remember nothing.
        timeout_s: A trial taking longer is refused as a hang.
    """

    cache_dir: Path | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    def cache_key(self, backend: str, config: RunnerConfig, io: dict[str, Any]) -> str:
        """What a passed trial vouches for: every file's hash, runtime, accelerator, options, I/O."""
        blob = json.dumps({"v": 1, "sdk": __version__, "backend": backend, "runtime": runtime_version(backend),
                           "accelerator": config.accelerator, "model": config.model_sha256,
                           "files": config.file_sha256, "options": config.backend_options, "io": io},
                          sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def check(self, backend: str, config: RunnerConfig, io: dict[str, Any] | None = None) -> str:
        """Make sure loading ``config.model_path`` with ``backend`` cannot crash this process.

        Args:
            backend: The backend that will load the file.
            config: The runner config that will be used.
            io: ``{"inputs": [...], "outputs": [...]}`` TensorSpec dicts the model must match.

        Returns:
            ``"cached"`` (passed before) or ``"trial"`` (passed now).

        Raises:
            ModelLoadError: the trial crashed, hung, ran out of memory or the runtime refused the file.
            DelegateUnavailableError: the accelerator cannot be used (the chain walk goes on).
        """
        io = io or {}
        key = self.cache_key(backend, config, io) if self.cache_dir is not None and config.model_sha256 else None
        if key is not None and (self.cache_dir / f"{key}.json").is_file():  # type: ignore[operator]
            return "cached"
        req = {"backend": backend, "model_path": str(config.model_path), "accelerator": config.accelerator,
               "files": {k: str(v) for k, v in config.files.items()}, "backend_options": config.backend_options,
               "sha": config.model_sha256, "file_sha256": config.file_sha256, "check_sha256": config.check_sha256,
               "cache_dir": str(config.cache_dir) if config.cache_dir else None,
               "inputs": io.get("inputs"), "outputs": io.get("outputs"), "timeout_s": self.timeout_s,
               "plugin": plugin_module(backend)}
        raise_for(trial(req, self.timeout_s), backend, config.model_path)
        if key is not None:
            _remember(self.cache_dir, key, {"model": config.model_path.name, "backend": backend,  # type: ignore[arg-type]
                                            "accelerator": config.accelerator, "runtime": runtime_version(backend),
                                            "checked_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        return "trial"


def _remember(folder: Path, key: str, info: dict) -> None:
    """Record a passed trial; a cache that cannot be written only costs the next load a trial."""
    from edge_sdk.fsutil import atomic_write_bytes

    try:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / f"{key}.json", json.dumps(info).encode())
    except OSError:
        pass


def raise_for(result: dict[str, Any], backend: str, model_path: Path) -> None:
    """Turn a trial report into the error the caller gets (nothing when it passed)."""
    status = result.get("status")
    name = model_path.name
    if status == "ok":
        return
    if status == "crash":
        raise errors.RuntimeCrashError(
            f"{name} crashed the {backend} runtime in a trial load ({result.get('why')}): corrupt or tampered file, "
            "or a runtime bug; this process was not affected.",
            "Copy the artifact folder again from the source, or convert the model again.")
    if status == "hang":
        raise errors.RuntimeCrashError(f"{name} hung the {backend} runtime in a trial load (over {result.get('seconds', 0):.0f} s).",
                             "The file is likely corrupt: copy the artifact again, or convert the model again.")
    cls_name = str(result.get("cls") or "ModelLoadError")
    message = str(result.get("message") or f"{backend} refused {name} in a trial load")
    hint = result.get("hint")
    if cls_name == "MissingDependencyError":
        raise errors.MissingDependencyError(str(result.get("module")), str(result.get("extra")))
    if cls_name == "DelegateUnavailableError":
        raise DelegateUnavailableError(message, hint)
    cls = getattr(errors, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, ModelLoadError)):
        cls = ModelLoadError
    raise cls(message, hint)


# ----------------------------------------------------------------------------- the helper process
class _Client:
    """One trial server per process, started on first use, restarted once if it dies."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pid = os.getpid()
        self._buf = b""

    def _start(self) -> subprocess.Popen:
        if self._pid != os.getpid():  # forked from the process that started the helper (its pipes are
            self._proc, self._pid = None, os.getpid()  # the parent's): start this process's own
        if self._proc is None or self._proc.poll() is not None:
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
            self._proc = subprocess.Popen([*_CHILD, "edge_sdk.runtimes.trial_server"],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          env=env, close_fds=True)
            self._buf = b""
        return self._proc

    def _readline(self, proc: subprocess.Popen, timeout: float) -> bytes | None:
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            block = os.read(fd, 65536)
            if not block:
                return None
            self._buf += block
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()

    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            for _attempt in range(2):
                proc = self._start()
                try:
                    proc.stdin.write(json.dumps(req).encode() + b"\n")  # type: ignore[union-attr]
                    proc.stdin.flush()  # type: ignore[union-attr]
                    line = self._readline(proc, timeout + 30.0)
                except OSError:
                    line = None
                if line:
                    try:
                        return json.loads(line)
                    except ValueError:
                        pass
                proc.kill()  # no answer: the helper died (or hung); start a fresh one and try once more
                proc.wait()
                self._proc = None
            return {"status": "crash", "why": "the trial helper process died"}


_CLIENT = _Client()
atexit.register(_CLIENT.stop)
if hasattr(os, "register_at_fork"):  # an app that forks after loading gets its own helper (and an unheld lock)
    os.register_at_fork(after_in_child=lambda: _CLIENT.__init__())


#: ``python -m MODULE`` without the current folder on the import path: run from a folder holding
#: an ``edge_sdk/`` directory (an edge-sdk checkout), ``-m`` would import that instead of the
#: installed package and every trial would "crash".
_CHILD = [sys.executable, "-c",
          "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
          "sys.argv[:] = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"]


def _once(req: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One child process per trial (platforms without ``fork``)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        proc = subprocess.run([*_CHILD, "edge_sdk.runtimes.trial_server", "--once"],
                              input=json.dumps(req) + "\n", capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"status": "hang", "seconds": timeout}
    if proc.returncode != 0:
        return {"status": "crash", "why": f"exit status {proc.returncode}"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"status": "crash", "why": "no report"}


def trial(req: dict[str, Any], timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """Run one trial in a child process and return its report (see :mod:`.trial_server`)."""
    if hasattr(os, "fork") and sys.platform != "darwin":
        return _CLIENT.call(req, timeout)
    return _once(req, timeout)


def guard_for(manifest, *, enabled: bool | None = None, cache: str | Path | None = None, verify: bool = True):
    """The ``(step, config)`` hook :func:`~edge_sdk.runtimes.select.open_runner` runs before a load.

    Args:
        manifest: The checked manifest (its per-format I/O specs are the trial's contract).
        enabled: True/False from the caller; None: on unless ``EDGE_SDK_CRASH_GUARD=0`` or the user
            config file's ``[crash_guard] enabled = false``.
        cache: The verified-models cache folder (None: the config file's, else the default).
        verify: Whether the hashes were checked; without them nothing is cached (the sha256 in the
            manifest does not vouch for the file's bytes).

    Returns:
        The hook, or None when the guard is off.
    """
    from edge_sdk import typed
    from edge_sdk.manifest import format_io
    from edge_sdk.trust import user_config

    cfg = user_config().crash_guard
    if enabled is None:
        enabled = cfg.enabled and not guard_disabled_by_env()
    if not enabled:
        return None
    folder = Path(cache) if cache is not None else Path(cfg.cache_dir) if cfg.cache_dir else default_cache_dir()
    guard = CrashGuard(folder if verify else None)

    def hook(step, config: RunnerConfig) -> str:
        ins, outs = format_io(manifest, step.format)
        return guard.check(step.backend, config, {"inputs": typed.to_dict(ins), "outputs": typed.to_dict(outs)})

    return hook
