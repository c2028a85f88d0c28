"""The runner contract every backend follows (after Polygraphy's runners).

A runner owns one loaded model on one backend and accelerator. The facade
(:mod:`edge_sdk.runtimes.facade`) does all checking and conversion; a runner only does what
its native runtime needs:

* :meth:`Runner.activate` loads the model (``activate_impl``) and fills
  :attr:`Runner.input_metadata` / :attr:`Runner.output_metadata` and :attr:`Runner.delegate`.
* :meth:`Runner.infer_impl` takes arrays in the runner's *native input order*, already of the
  native dtype and shape, and returns arrays in native output order. It is the hot path: no
  validation, no dict building.
* :meth:`Runner.deactivate` releases native resources.

Runners import their runtime lazily (in ``activate_impl``), so importing a runner module is
cheap and never imports TensorFlow.
"""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from edge_sdk.errors import EdgeSDKError, ModelLoadError


class FallbackWarning(UserWarning):
    """Issued once per :func:`edge_sdk.load` when the profile's preferred accelerator was skipped."""


@dataclass(frozen=True)
class NativeTensor:
    """An input or output as the native runtime sees it.

    Attributes:
        name: The runtime's tensor name (may differ from the manifest's, e.g. in TFLite).
        shape: Static shape.
        dtype: Numpy dtype the runtime expects or returns.
        handle: Backend-specific handle (tensor index, port, ...), used on the hot path.
        quant: ``(scale, zero_point)`` the model file itself records, when the runtime exposes it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    handle: Any = None
    quant: tuple[float, int] | None = None


@dataclass
class RunnerConfig:
    """What a runner needs to load one artifact file.

    Attributes:
        model_path: The model file (``.tflite``, ``.onnx``, ``.xml``, ``.engine``).
        accelerator: Delegate / execution provider / device from the runtime step.
        num_threads: CPU threads for the runtime (None: the runtime's default).
        files: Other files of the artifact by role (e.g. ``{"weights": Path(".bin")}``).
        backend_options: The manifest's ``backend_options`` (e.g. the TensorRT version it was built for).
        cache_dir: A writable folder for runtime caches (TensorRT engines); never the artifact folder.
        model_sha256: Hash of the model file, used to key caches.
        file_sha256: Hash of every file of the artifact by its path in the artifact (the model's
            included), from the verified manifest; keys the crash guard's verified-models cache.
        check_sha256: :meth:`read_checked` refuses bytes whose sha256 differs from the manifest's
            (False only for ``load(verify=False)``, development).
    """

    model_path: Path
    accelerator: str
    num_threads: int | None = None
    files: dict[str, Path] = field(default_factory=dict)
    backend_options: dict[str, Any] = field(default_factory=dict)
    cache_dir: Path | None = None
    model_sha256: str = ""
    file_sha256: dict[str, str] = field(default_factory=dict)
    check_sha256: bool = True

    def expected_sha256(self, path: Path) -> str:
        """The manifest's sha256 of ``path`` (the model file, or one of ``files``); "" when unknown."""
        if path == self.model_path:
            return self.model_sha256
        text = path.as_posix()
        keys = [k for k in self.file_sha256 if text == k or text.endswith("/" + k)]
        return self.file_sha256[max(keys, key=len)] if keys else ""

    def read_checked(self, path: Path | None = None) -> bytes:
        """The bytes of ``path`` (default: the model file), read once, checked against the manifest.

        Runtimes are handed these bytes, never the path: the manifest's hash (and the signature
        over it) then covers exactly what runs, even if the file is replaced after the artifact
        was checked at the door.

        Raises:
            ModelLoadError: the file is a link, not a regular file, unreadable, or no longer the
                bytes the manifest hashed.
        """
        import hashlib

        from edge_sdk.strictjson import read_regular_file

        path = self.model_path if path is None else path
        data = read_regular_file(path, limit=MAX_FILE_BYTES, what=f"artifact file {path.name}", error=ModelLoadError)
        want = self.expected_sha256(path) if self.check_sha256 else ""
        if self.check_sha256 and self.model_sha256 and not want:  # a config from a manifest knows every file
            raise ModelLoadError(f"{path.name} is not listed in the manifest, so no hash covers it; it was not loaded.",
                                 "Copy the artifact folder again from the source, or convert the model again.")
        if want and hashlib.sha256(data).hexdigest() != want:
            raise ModelLoadError(
                f"{path.name} changed after the artifact was checked: its bytes no longer match the sha256 in the "
                "manifest, so they were not loaded (something is writing into the artifact folder).",
                "Do not write into an artifact folder that is in use; copy it again from the source and load again.")
        return data


#: Largest artifact file read into memory for a runtime (ONNX and TFLite stop at 2 GiB; IR weights
#: and engines may be larger).
MAX_FILE_BYTES = 1 << 36


class Runner:
    """Base class of all backend runners.

    Subclasses set :attr:`backend`, :attr:`formats`, :attr:`thread_safe` and implement
    ``validate_container``, ``activate_impl``, ``infer_impl`` and ``deactivate_impl``.

    Args:
        config: What to load and how.
    """

    #: Backend name as used in profiles (``litert``, ``onnxruntime``, ...).
    backend: ClassVar[str] = ""
    #: Artifact formats this backend can read.
    formats: ClassVar[tuple[str, ...]] = ()
    #: True when ``infer_impl`` may be called from several threads at once; otherwise the
    #: facade serializes calls with a lock.
    thread_safe: ClassVar[bool] = False

    def __init__(self, config: RunnerConfig):
        self.config = config
        self.is_active = False
        self.input_metadata: list[NativeTensor] = []
        self.output_metadata: list[NativeTensor] = []
        #: What actually runs, e.g. ``xnnpack``, ``CPUExecutionProvider``, ``CPU``.
        self.delegate = config.accelerator
        #: Extra facts about the run (precision actually used, ops delegated, ...).
        self.details: dict[str, Any] = {}

    # -- contract -------------------------------------------------------------------------
    @classmethod
    def validate_container(cls, path: Path, files: dict[str, Path]) -> None:
        """Check the file's container format before native code parses it.

        Raises:
            ModelLoadError: the file is not a well-formed container of this format.
        """

    @classmethod
    def model_artifact(cls, manifest: Any, step: Any) -> Any:
        """The manifest entry of the file this backend loads for ``step`` (default: the format's model).

        Raises:
            DelegateUnavailableError: the artifact has no file this step can run (the chain goes on).
        """
        return manifest.artifact(step.format, "model")

    def activate_impl(self) -> None:
        raise NotImplementedError

    #: True when :meth:`infer_stoppable` can end a call from another thread (the watchdog).
    stoppable: ClassVar[bool] = False

    def infer_stoppable(self, feed: list[np.ndarray], arm: Callable[[Callable[[], None]], None]) -> list[np.ndarray]:
        """:meth:`infer_impl`, first handing ``arm`` a function that stops this call (where ``stoppable``)."""
        return self.infer_impl(feed)

    def infer_impl(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        raise NotImplementedError

    def deactivate_impl(self) -> None:
        """Release native resources (default: nothing to do)."""

    # -- public wrappers ------------------------------------------------------------------
    def activate(self) -> "Runner":
        """Validate the container and load the model; idempotent.

        Raises:
            ModelLoadError: corrupt file or the runtime refused it; any other exception a native
                runtime raises while loading (``MemoryError`` from ``std::bad_alloc``, a
                ``UnicodeDecodeError`` on a damaged tensor name ...) is wrapped into one too.
            DelegateUnavailableError: the accelerator cannot actually be used.
        """
        if not self.is_active:
            self.validate_container(self.config.model_path, self.config.files)
            try:
                self.activate_impl()
            except EdgeSDKError:
                raise
            except MemoryError:
                raise ModelLoadError(
                    f"{self.backend} ran out of memory loading {self.config.model_path.name} (std::bad_alloc): "
                    "a damaged size field, or a model too large for this device.",
                    "Copy the artifact folder again from the source, or convert the model again.") from None
            except Exception as exc:  # noqa: BLE001 - native loaders raise arbitrary types
                raise native_error(self.config.model_path, self.backend, exc) from None
            self.is_active = True
        return self

    def infer(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        """Run once (checked wrapper around :meth:`infer_impl`, for direct runner use).

        Raises:
            ModelLoadError: the runner is not active.
        """
        if not self.is_active:
            raise ModelLoadError(f"{self.backend} runner is not active (closed or never loaded).",
                                 "Load the model again with edge_sdk.load().")
        return self.infer_impl(feed)

    def open_queue(self, jobs: int, lock: "threading.Lock | None" = None) -> "InferQueue":
        """An :class:`InferQueue` running up to ``jobs`` inferences on the runtime's own async machinery.

        The default runs :meth:`infer_impl` on worker threads: ``jobs`` of them when the runner
        is thread-safe, else one, holding ``lock`` (the facade's per-model lock) around each call.
        Backends override it (one OpenVINO infer request or LiteRT interpreter per worker).

        Args:
            jobs: Inferences that may be in progress at once (1..64).
            lock: Held around each native call when the runner is not thread-safe.
        """
        if self.thread_safe:
            return ThreadInferQueue(self.infer_impl, jobs, f"{self.backend} worker threads")
        return ThreadInferQueue(self.infer_impl, 1, f"{self.backend} one call at a time (not thread-safe)", lock=lock)

    def deactivate(self) -> None:
        """Release the model; safe to call twice."""
        if self.is_active:
            self.is_active = False
            self.deactivate_impl()


#: What a queued inference resolves to: native outputs (fresh arrays) and the native call's milliseconds.
Native = tuple[list[np.ndarray], float]


class InferQueue:
    """Inferences started by one thread and run on the runtime's own threads (for pipelining).

    :meth:`submit` returns at once (or when a free slot opens) with a ``Future`` of
    :data:`Native`; the caller pre- and post-processes other frames meanwhile.

    Attributes:
        jobs: Inferences that can run at once.
        kind: What runs them, e.g. ``litert 2 interpreter(s) x 1 thread(s)``.
        made: Native objects made for this queue (infer requests, interpreters); 0 when it
            reuses the runner's own.
    """

    def __init__(self, jobs: int, kind: str, made: int = 0):
        self.jobs, self.kind, self.made = jobs, kind, made
        self.closed = False
        self.running = self.peak = 0
        self._count = threading.Lock()

    def _enter(self) -> None:
        with self._count:
            self.running += 1
            self.peak = max(self.peak, self.running)

    def _leave(self) -> None:
        with self._count:
            self.running -= 1

    def submit(self, feed: list[np.ndarray]) -> "Future[Native]":
        """Start one inference on native-order inputs; the arrays must not change until it is done.

        Raises:
            ModelLoadError: the queue is closed.
        """
        raise NotImplementedError

    def close(self) -> None:
        """Wait for inferences in flight, then release what the queue made; safe to call twice."""
        self.closed = True

    def describe(self) -> dict[str, Any]:
        """``{"kind", "jobs", "made", "peak"}``: what the queue runs on, and the most inferences that
        were in progress at once (inside the native call, or started and not yet completed)."""
        return {"kind": self.kind, "jobs": self.jobs, "made": self.made, "peak": self.peak}

    def _refuse_closed(self) -> None:
        if self.closed:
            raise ModelLoadError("This model's inference queue is closed.", "Load the model again with edge_sdk.load().")


class ThreadInferQueue(InferQueue):
    """Inference on ``jobs`` worker threads calling ``call(feed)`` (runtimes whose call releases the GIL).

    Args:
        call: Native-order inputs -> native outputs.
        jobs: Worker threads.
        kind: Description.
        lock: Held around each call (a runner that is not thread-safe).
        made: Native objects made for the queue.
        initializer: Run once in each worker thread (binds a per-thread interpreter).
        release: Called by :meth:`close` after the workers stopped.
    """

    def __init__(self, call: Callable[[list[np.ndarray]], list[np.ndarray]], jobs: int, kind: str, *,
                 lock: "threading.Lock | None" = None, made: int = 0, initializer: Callable[[], None] | None = None,
                 release: Callable[[], None] | None = None):
        super().__init__(jobs, kind, made)
        self._call, self._lock, self._release = call, lock, release
        self._pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="edge_sdk-native", initializer=initializer)
        self._state = threading.Lock()

    def _run(self, feed: list[np.ndarray]) -> Native:
        if self._lock is None:
            return self._timed(feed)
        with self._lock:
            return self._timed(feed)

    def _timed(self, feed: list[np.ndarray]) -> Native:
        self._enter()
        try:
            t0 = time.perf_counter()
            outs = self._call(feed)
            return list(outs), (time.perf_counter() - t0) * 1e3
        finally:
            self._leave()

    def submit(self, feed: list[np.ndarray]) -> "Future[Native]":
        with self._state:
            self._refuse_closed()
            return self._pool.submit(self._run, feed)

    def close(self) -> None:
        with self._state:
            if self.closed:
                return
            self.closed = True
        self._pool.shutdown(wait=True)
        if self._release is not None:
            self._release()


def read_head(path: Path, n: int) -> bytes:
    """First ``n`` bytes of ``path``.

    Raises:
        ModelLoadError: unreadable file.
    """
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read model file {path}: {exc.strerror}") from None


def corrupt(path: Path, what: str) -> ModelLoadError:
    """The one error for a file whose container is damaged."""
    return ModelLoadError(
        f"{path.name} is not a valid {what} (truncated, corrupt or the wrong file).",
        "Copy the artifact folder again from the source, or convert the model again.",
    )


#: Lines of a native message that only say where in the runtime's C++ it was raised (OpenVINO puts
#: "Exception from src/inference/src/cpp/core.cpp:105:" and "Check 'false' failed at ...:" first).
_SOURCE_LINE = re.compile(r"^(Exception from \S+:\d+:|Check '.*' failed at \S+:\d+:)$")


def native_message(msg: str) -> str:
    """The first line of a native error message that says what is wrong (at most 300 characters)."""
    lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
    said = [ln for ln in lines if not _SOURCE_LINE.match(ln)]
    return " / ".join(said[:2])[:300] if said else (lines[0][:300] if lines else "")


def native_error(path: Path, backend: str, exc: BaseException) -> ModelLoadError:
    """Wrap an exception raised by a native loader into a :class:`ModelLoadError`."""
    msg = str(exc).strip()
    text = native_message(msg) if msg else type(exc).__name__
    if msg and type(exc) not in (RuntimeError, ValueError):  # name unusual types (UnicodeDecodeError ...)
        text = f"{type(exc).__name__}: {text}"
    return ModelLoadError(
        f"{backend} could not load {path.name}: {text}",
        "The file may be corrupt or made for another runtime version; convert the model again.",
    )
