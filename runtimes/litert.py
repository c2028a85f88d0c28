"""LiteRT (TFLite) runner: XNNPACK on CPU, the Edge TPU, the GPU delegate or an external delegate.

The interpreter comes from ``ai_edge_litert`` first, then ``tflite_runtime``, and only as a
last resort from ``tensorflow.lite`` (a device install never has TensorFlow, and importing it
costs seconds and hundreds of MB).
"""

from __future__ import annotations

import importlib
import os
import threading
import types
from pathlib import Path

import numpy as np

from edge_sdk.errors import DelegateUnavailableError, MissingDependencyError

from .base import InferQueue, NativeTensor, Runner, ThreadInferQueue, corrupt, native_error, read_head
from .probe import EDGETPU_LIBS, LITERT_MODULES, edgetpu_library
from .tflite_check import verify_tflite

#: Interpreter modules in the order we try them (one list, shared with the availability probe).
INTERPRETER_MODULES = tuple(name for name, _dist in LITERT_MODULES)
GPU_DELEGATE_LIB = "libtensorflowlite_gpu_delegate.so"
#: The custom op edgetpu_compiler puts in place of the ops it mapped to the Edge TPU.
EDGETPU_OP = "edgetpu-custom-op"


def numpy_abi_problem(tflite_runtime_version: str, numpy_version: str) -> str | None:
    """Why this tflite-runtime cannot run with this numpy, or None.

    tflite-runtime wheels stop at 2.14 (2023) and were built against numpy 1: under numpy 2 the
    import works and every interpreter call fails inside ``CreateWrapperFromFile`` with a bare
    ``SystemError``. Found by the aarch64 check once the core allowed numpy 2.
    """
    def major_minor(v: str) -> tuple[int, int]:
        parts = [int(x) for x in v.split(".")[:2] if x.isdigit()]
        return (parts + [0, 0])[0], (parts + [0, 0])[1]

    if major_minor(numpy_version)[0] >= 2 and major_minor(tflite_runtime_version) < (2, 15):
        return (f"tflite-runtime {tflite_runtime_version} was built against numpy 1 and cannot run with numpy "
                f"{numpy_version} (its interpreter fails to load any model).")
    return None


def interpreter_module():
    """The first importable module providing ``Interpreter`` and ``load_delegate``.

    Raises:
        MissingDependencyError: none of them imports.
    """
    for name in INTERPRETER_MODULES:
        try:
            # The source package ``tensorflow.lite`` has no Interpreter; the public API is ``tf.lite``.
            mod = importlib.import_module("tensorflow").lite if name == "tensorflow.lite" else importlib.import_module(name)
        except ImportError:
            continue
        if name.startswith("tflite_runtime"):
            from edge_sdk._deps import version_of

            problem = numpy_abi_problem(version_of("tflite-runtime") or "0", np.__version__)
            if problem:
                raise MissingDependencyError("numpy<2", "litert", message=problem,
                                             hint='pip install "numpy<2" next to tflite-runtime, or use LiteRT '
                                                  'instead: pip install "edge-sdk[litert]"')
        if name == "tensorflow.lite":
            # tf.lite keeps load_delegate under experimental.
            return types.SimpleNamespace(Interpreter=mod.Interpreter,
                                         load_delegate=mod.experimental.load_delegate, __name__=name)
        return mod
    raise MissingDependencyError("ai_edge_litert", "litert", "running .tflite models")


def _invoke(interp, in_idx: list[int], out_idx: list[int], feed: list[np.ndarray]) -> list[np.ndarray]:
    """One inference on an allocated interpreter: set the inputs, invoke, read the outputs."""
    for idx, arr in zip(in_idx, feed):
        interp.set_tensor(idx, arr)
    interp.invoke()
    return [interp.get_tensor(idx) for idx in out_idx]


class LiteRTRunner(Runner):
    """Runs a ``.tflite`` flatbuffer with the delegate its runtime step names."""

    backend = "litert"
    formats = ("tflite-int8",)

    # The interpreter holds its tensors in place: one invoke at a time.
    thread_safe = False

    @classmethod
    def model_artifact(cls, manifest, step):
        """The Edge TPU step runs the ``*_edgetpu.tflite`` the compiler made, the others the int8 model.

        The Edge TPU delegate only runs the compiler's custom op: handing it the plain int8 model would
        "succeed" while every op runs on the host CPU, so an uncompiled artifact skips this step instead.

        Raises:
            DelegateUnavailableError: the Edge TPU step of an artifact not compiled for it.
        """
        if step.accelerator != "edgetpu":
            return manifest.artifact(step.format, "model")
        for art in manifest.artifacts:
            if art.role == "engine" and art.format == step.format and art.path.endswith("_edgetpu.tflite"):
                return art
        raise DelegateUnavailableError(
            "the artifact was not compiled for the Edge TPU (no *_edgetpu.tflite in the manifest)",
            "compile it with edgetpu_compiler (the command is in the manifest's warnings) and convert again "
            "on a host that has edgetpu_compiler on PATH")

    @staticmethod
    def preload() -> None:
        """Import the interpreter module (the crash guard's helper process does it once, before forking trials)."""
        interpreter_module()

    @classmethod
    def validate_container(cls, path: Path, files: dict[str, Path]) -> None:
        """A TFLite flatbuffer (``TFL3`` at bytes 4..8) whose every offset and index is in bounds."""
        head = read_head(path, 8)
        if len(head) < 8 or head[4:8] != b"TFL3":
            raise corrupt(path, "TFLite flatbuffer (no TFL3 identifier)")
        verify_tflite(path)

    def _delegates(self, lite) -> list:
        acc = self.config.accelerator
        if acc in ("xnnpack", "cpu"):
            return []  # XNNPACK is the interpreter's built-in default delegate
        # Delegate options recorded by the converter, e.g. {"backends": "CpuAcc,GpuAcc"} for Arm NN,
        # {"device": "usb:0"} for one of several Edge TPUs.
        opts = {str(k): str(v) for k, v in
                (self.config.backend_options.get("litert", {}).get("delegate_options", {}).get(acc, {})).items()}
        if acc == "edgetpu":
            lib, _ = edgetpu_library()
            target = lib or EDGETPU_LIBS.get("Linux")
        elif acc == "gpu":
            target = GPU_DELEGATE_LIB
        elif acc.startswith("external:"):
            target = acc.split(":", 1)[1]
        else:
            raise DelegateUnavailableError(f"Unknown LiteRT delegate '{acc}'.", "Use edgetpu, xnnpack, gpu or external:/path.so.")
        try:
            return [lite.load_delegate(target, opts)]
        except (ValueError, OSError, RuntimeError, AttributeError) as exc:  # AttributeError: not a delegate library
            raise DelegateUnavailableError(f"LiteRT delegate '{acc}' ({target}) failed to load: {exc}",
                                           "Install the delegate library for this device and check device permissions.") from None

    def activate_impl(self) -> None:
        lite = interpreter_module()
        delegates = self._delegates(lite)
        data = self.config.read_checked()  # the bytes the manifest hashed, never the path again
        try:
            interp = lite.Interpreter(model_content=data, experimental_delegates=delegates or None,
                                      num_threads=self.config.num_threads)
            interp.allocate_tensors()
        except (ValueError, RuntimeError) as exc:
            if delegates:
                raise DelegateUnavailableError(f"LiteRT could not apply delegate '{self.config.accelerator}': {exc}",
                                               "Check that the model was compiled for this delegate.") from None
            raise native_error(self.config.model_path, "LiteRT", exc) from None
        self._interp = interp
        self._content = data  # the interpreter holds it anyway; a pipeline's interpreters share it
        self.details["interpreter"] = getattr(lite, "__name__", "litert")
        self.input_metadata = [self._meta(d) for d in interp.get_input_details()]
        self.output_metadata = [self._meta(d) for d in interp.get_output_details()]
        self._in_idx = [t.handle for t in self.input_metadata]
        self._out_idx = [t.handle for t in self.output_metadata]
        self.delegate = self.config.accelerator if self.config.accelerator != "cpu" else "xnnpack"
        self._count_delegated_ops()

    @staticmethod
    def _meta(d: dict) -> NativeTensor:
        scale, zp = d.get("quantization", (0.0, 0))
        return NativeTensor(str(d["name"]), tuple(int(s) for s in d["shape"]), np.dtype(d["dtype"]), int(d["index"]),
                            (float(scale), int(zp)) if scale else None)

    def _count_delegated_ops(self) -> None:
        """For the Edge TPU, count ops the compiler mapped vs ops left on the CPU."""
        if self.config.accelerator != "edgetpu":
            return
        try:
            ops = [o.get("op_name", "") for o in self._interp._get_ops_details()]
        except Exception:  # noqa: BLE001 - a private API; absent on old runtimes
            return
        on_tpu = sum(1 for o in ops if o == EDGETPU_OP)
        self.details["ops_total"] = len(ops)
        self.details["ops_delegated"] = on_tpu
        if on_tpu == 0:
            raise DelegateUnavailableError(
                f"{self.config.model_path.name} has no Edge TPU ops: it was not compiled with edgetpu_compiler.",
                "Run edgetpu_compiler on the int8 model (edge-sdk convert does this when the compiler is installed).")
        if on_tpu < len(ops):
            self.delegate = f"edgetpu (partial: {len(ops) - on_tpu} of {len(ops)} ops on CPU)"

    def infer_impl(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        return _invoke(self._interp, self._in_idx, self._out_idx, feed)

    def open_queue(self, jobs: int, lock=None) -> InferQueue:
        """One interpreter per worker on the CPU (XNNPACK), so inferences truly overlap.

        Each is made from the very bytes this runner loaded (checked against the manifest's sha256
        at load; never the path again, which may have changed since), with the runner's thread budget split between them
        (``num_threads`` or the core count, divided by ``jobs``, at least one each). A hardware
        delegate (Edge TPU, GPU, external) keeps the runner's one interpreter, one call at a time:
        a second interpreter would contend for the same device.
        """
        if self.config.accelerator not in ("xnnpack", "cpu"):
            return super().open_queue(jobs, lock)
        data = self._content
        lite = interpreter_module()
        threads = max(1, (self.config.num_threads or os.cpu_count() or 1) // jobs)
        free: list = []
        for _ in range(jobs):
            interp = lite.Interpreter(model_content=data, num_threads=threads)
            interp.allocate_tensors()
            free.append(interp)
        local = threading.local()
        in_idx, out_idx = list(self._in_idx), list(self._out_idx)

        def bind() -> None:  # each worker thread takes one interpreter for its life
            local.interp = free.pop()

        def call(feed: list[np.ndarray]) -> list[np.ndarray]:
            return _invoke(local.interp, in_idx, out_idx, feed)

        # The workers' thread-locals die with the workers; the ones never bound are dropped here.
        return ThreadInferQueue(call, jobs, f"litert {jobs} interpreter(s) x {threads} thread(s)", made=jobs,
                                initializer=bind, release=free.clear)

    def deactivate_impl(self) -> None:
        self._interp = None
        self._content = b""
