"""Native TensorRT runner: a serialized engine, or an engine built on the device from the QDQ ONNX.

TensorRT engines do not travel across TensorRT versions or GPU architectures. A
``tensorrt-engine`` artifact records both in ``backend_options["tensorrt"]``
(``version``, ``compute_capability``) and is refused here when either differs. For an
``onnx-qdq`` artifact, the engine the converter shipped beside it (role ``engine``) is used when
it fits; otherwise the engine is built once on the device (explicit int8 from the Q/DQ nodes)
and cached under the cache folder, keyed by model hash, TensorRT version and GPU.

Device buffers are managed with ``cuda-python`` (``cuda.bindings.runtime`` or ``cuda.cudart``),
which JetPack images ship. Not exercised on the CI host (no NVIDIA GPU); the compatibility
check is a pure function and is tested.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import DelegateUnavailableError, ModelLoadError

from .base import Runner, NativeTensor, corrupt, native_error, read_head


def check_engine_compat(recorded: dict, trt_version: str, compute_capability: str) -> None:
    """Refuse an engine built by another TensorRT version or for another GPU architecture.

    Args:
        recorded: ``backend_options["tensorrt"]`` from the manifest (``version``, ``compute_capability``).
        trt_version: The TensorRT version installed here.
        compute_capability: This GPU's compute capability, e.g. ``"8.7"``.

    Raises:
        ModelLoadError: the manifest does not record them, or they differ.
    """
    want_v, want_cc = recorded.get("version"), recorded.get("compute_capability")
    if not want_v or not want_cc:
        raise ModelLoadError("The manifest does not record the TensorRT version and compute capability of this engine.",
                             "Ship the QDQ ONNX instead and let the device build its own engine.")
    problems = []
    if str(want_v) != str(trt_version):
        problems.append(f"built with TensorRT {want_v}, this device has {trt_version}")
    if str(want_cc) != str(compute_capability):
        problems.append(f"built for compute capability {want_cc}, this GPU is {compute_capability}")
    if problems:
        raise ModelLoadError("TensorRT engine does not fit this device: " + "; ".join(problems) + ".",
                             "Rebuild the engine on this device from the QDQ ONNX (trtexec or edge_sdk.load of the onnx-qdq artifact).")


def _cudart():
    for name in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise DelegateUnavailableError("Native TensorRT needs cuda-python for device buffers; it is not installed.",
                                   "pip install cuda-python (JetPack images ship it), or use the onnxruntime TensorRT provider.")


#: Builder flags wherever an engine is built from the QDQ ONNX (on the workstation by the converter,
#: on the device here): int8 where the Q/DQ nodes say so, fp16 for the rest. One list, so an engine
#: shipped with the artifact is the engine the device would have built.
BUILD_FLAGS = ("INT8", "FP16")


def build_engine(trt, onnx_bytes: bytes) -> bytes:
    """Build a serialized TensorRT engine from QDQ ONNX bytes.

    Args:
        trt: The imported ``tensorrt`` module.
        onnx_bytes: The int8 QDQ ONNX model.

    Returns:
        The serialized engine.

    Raises:
        ValueError: the ONNX parser rejected the model (its errors, joined).
        RuntimeError: the builder produced no engine.
        Callers turn both into their own error classes.
    """
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(onnx_bytes):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ValueError(errors or "ONNX parse failed")
    config = builder.create_builder_config()
    for flag in BUILD_FLAGS:
        config.set_flag(getattr(trt.BuilderFlag, flag))
    blob = builder.build_serialized_network(network, config)
    if blob is None:
        raise RuntimeError("TensorRT could not build an engine from the QDQ ONNX")
    return bytes(blob)


def compute_capability() -> str | None:
    """``major.minor`` of GPU 0 via cuda-python (what engines are checked against); None if unknown."""
    try:
        cudart = _cudart()
    except DelegateUnavailableError:
        return None
    err, props = cudart.cudaGetDeviceProperties(0)
    return f"{props.major}.{props.minor}" if int(err) == 0 else None


def _check(result):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise DelegateUnavailableError(f"CUDA call failed with error {int(err)}.", "Check the NVIDIA driver and GPU memory.")
    return rest[0] if len(rest) == 1 else rest


class TensorRTRunner(Runner):
    """Runs a TensorRT engine on the GPU (one execution context; calls are serialized)."""

    backend = "tensorrt"
    formats = ("tensorrt-engine", "onnx-qdq")
    thread_safe = False

    @classmethod
    def validate_container(cls, path: Path, files: dict[str, Path]) -> None:
        if path.suffix.lower() == ".onnx":
            from .onnxruntime import OnnxRuntimeRunner

            return OnnxRuntimeRunner.validate_container(path, files)
        if len(read_head(path, 32)) < 32:
            raise corrupt(path, "TensorRT engine")

    def activate_impl(self) -> None:
        trt = require("tensorrt", "running TensorRT engines")
        cudart = _cudart()
        self._cudart = cudart
        props = _check(cudart.cudaGetDeviceProperties(0))
        cc = f"{props.major}.{props.minor}"
        logger = trt.Logger(trt.Logger.WARNING)
        path = self.config.model_path
        if path.suffix.lower() == ".onnx":
            blob = self._shipped_engine(trt, cc) or self._build_or_load(trt, logger, cc)
        else:
            check_engine_compat(self.config.backend_options.get("tensorrt", {}), trt.__version__, cc)
            blob = self.config.read_checked()
        engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
        if engine is None:
            raise corrupt(path, "TensorRT engine (deserialization failed)")
        inputs: list[NativeTensor] = []
        outputs: list[NativeTensor] = []
        self._bufs, self._stream = {}, None
        try:
            self._engine, self._ctx = engine, engine.create_execution_context()
            self._stream = _check(cudart.cudaStreamCreate())
            for i in range(engine.num_io_tensors):
                name = engine.get_tensor_name(i)
                shape = tuple(int(d) for d in engine.get_tensor_shape(name))
                meta = NativeTensor(name, shape, np.dtype(trt.nptype(engine.get_tensor_dtype(name))), name)
                nbytes = int(np.prod(shape)) * meta.dtype.itemsize
                ptr = _check(cudart.cudaMalloc(nbytes))
                self._bufs[name] = (ptr, nbytes)
                self._ctx.set_tensor_address(name, ptr)
                is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
                (inputs if is_input else outputs).append(meta)
        except BaseException:
            self._release()  # a failed activation leaves nothing behind (deactivate is not called for it)
            raise
        # Assigned, not appended: activate after deactivate gives the same metadata.
        self.input_metadata, self.output_metadata = inputs, outputs
        self.delegate = f"gpu (sm {cc}, TensorRT {trt.__version__})"

    def _shipped_engine(self, trt, cc: str) -> bytes | None:
        """The engine the converter built next to the ONNX, if it fits this TensorRT and GPU."""
        engine = self.config.files.get("engine")
        if engine is None or not engine.is_file():
            return None
        try:
            check_engine_compat(self.config.backend_options.get("tensorrt", {}), trt.__version__, cc)
        except ModelLoadError as exc:
            # The QDQ ONNX is here: rebuild for this device instead of refusing.
            self.details["engine_rebuilt_because"] = exc.message
            return None
        return self.config.read_checked(engine)

    def _build_or_load(self, trt, logger, cc: str) -> bytes:
        """Build an int8 engine from the QDQ ONNX, or reuse the cached one for this TRT + GPU."""
        cache = self.config.cache_dir
        key = f"{self.config.model_sha256[:16] or self.config.model_path.stem}-trt{trt.__version__}-sm{cc}.engine"
        if cache is not None and (cache / key).is_file():
            return (cache / key).read_bytes()
        try:
            blob = build_engine(trt, self.config.read_checked())
        except ValueError as exc:
            raise native_error(self.config.model_path, "TensorRT", exc) from None
        except RuntimeError as exc:
            raise DelegateUnavailableError(f"TensorRT could not build an engine from the QDQ ONNX: {exc}.",
                                           "Run trtexec --onnx=model.onnx --int8 --fp16 --verbose on the device "
                                           "to see which layer fails.") from None
        if cache is not None:
            from edge_sdk.fsutil import atomic_write_bytes

            cache.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(cache / key, blob)
        return blob

    def infer_impl(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        rt = self._cudart
        h2d, d2h = rt.cudaMemcpyKind.cudaMemcpyHostToDevice, rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for meta, arr in zip(self.input_metadata, feed):
            ptr, nbytes = self._bufs[meta.name]
            _check(rt.cudaMemcpyAsync(ptr, np.ascontiguousarray(arr).ctypes.data, nbytes, h2d, self._stream))
        if not self._ctx.execute_async_v3(self._stream):
            raise DelegateUnavailableError("TensorRT execution failed.", "Check the device log (dmesg) and GPU memory.")
        outs = []
        for meta in self.output_metadata:
            out = np.empty(meta.shape, meta.dtype)
            ptr, nbytes = self._bufs[meta.name]
            _check(rt.cudaMemcpyAsync(out.ctypes.data, ptr, nbytes, d2h, self._stream))
            outs.append(out)
        _check(rt.cudaStreamSynchronize(self._stream))
        return outs

    def deactivate_impl(self) -> None:
        self._release()

    def _release(self) -> None:
        """Free everything activate made, each once: context, engine, device buffers, stream.

        The context goes first (it holds the buffer addresses and needs its engine). Errors from
        the CUDA frees are ignored: cleanup must not raise over the error that caused it.
        """
        rt = getattr(self, "_cudart", None)
        self._ctx = None
        self._engine = None
        bufs, self._bufs = getattr(self, "_bufs", {}), {}
        stream, self._stream = getattr(self, "_stream", None), None
        if rt is None:
            return
        for ptr, _ in bufs.values():
            rt.cudaFree(ptr)
        if stream is not None:
            rt.cudaStreamDestroy(stream)
