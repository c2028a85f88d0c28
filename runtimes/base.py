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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

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
        file_sha256: Hash of every file of the artifact by role (``model`` included), from the
            verified manifest; keys the crash guard's verified-models cache.
    """

    model_path: Path
    accelerator: str
    num_threads: int | None = None
    files: dict[str, Path] = field(default_factory=dict)
    backend_options: dict[str, Any] = field(default_factory=dict)
    cache_dir: Path | None = None
    model_sha256: str = ""
    file_sha256: dict[str, str] = field(default_factory=dict)


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

    def activate_impl(self) -> None:
        raise NotImplementedError

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

    def deactivate(self) -> None:
        """Release the model; safe to call twice."""
        if self.is_active:
            self.is_active = False
            self.deactivate_impl()


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


def native_error(path: Path, backend: str, exc: BaseException) -> ModelLoadError:
    """Wrap an exception raised by a native loader into a :class:`ModelLoadError`."""
    msg = str(exc).strip()
    text = msg.splitlines()[0][:300] if msg else type(exc).__name__
    if msg and type(exc) not in (RuntimeError, ValueError):  # name unusual types (UnicodeDecodeError ...)
        text = f"{type(exc).__name__}: {text}"
    return ModelLoadError(
        f"{backend} could not load {path.name}: {text}",
        "The file may be corrupt or made for another runtime version; convert the model again.",
    )
