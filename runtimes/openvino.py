"""OpenVINO runner: an IR (``.xml`` + ``.bin``) compiled for the profile's device (NPU, GPU, CPU).

Reports the device that really executes (``EXECUTION_DEVICES``) and the inference precision
the plugin chose (``INFERENCE_PRECISION_HINT``), plus how many layers run in int8.
"""

from __future__ import annotations

import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import DelegateUnavailableError

from .base import InferQueue, NativeTensor, Runner, ThreadInferQueue, corrupt, native_error, native_message

#: IR files larger than this are not parsed in Python for the pre-check (the plugin still checks).
MAX_XML_CHECK_BYTES = 64 * 1024 * 1024


def weights_path(path: Path, files: dict[str, Path]) -> Path:
    """The ``.bin`` beside an IR ``.xml`` (the manifest's ``weights`` file when it lists one)."""
    return files.get("weights") or path.with_suffix(".bin")


def compile_config(cfg) -> dict:
    """The ``compile_model`` properties for a :class:`RunnerConfig` (threads; the recorded precision).

    The converter pins f32 where it kept layers float on purpose: the CPU plugin would otherwise
    run them in bf16 on CPUs that have it, undoing what recovery measured.
    """
    config: dict = {}
    if cfg.num_threads and cfg.accelerator == "CPU":
        config["INFERENCE_NUM_THREADS"] = int(cfg.num_threads)
    precision = (cfg.backend_options.get("openvino") or {}).get("inference_precision")
    if precision in ("f32", "bf16", "f16") and cfg.accelerator == "CPU":
        config["INFERENCE_PRECISION_HINT"] = precision
    return config


class OpenVINORunner(Runner):
    """Runs an OpenVINO IR (or ONNX file) on one OpenVINO device."""

    backend = "openvino"
    formats = ("openvino-ir", "onnx-qdq")
    # One InferRequest per thread (thread-local) over a shared CompiledModel, which is thread-safe.
    thread_safe = True

    @classmethod
    def validate_container(cls, path: Path, files: dict[str, Path]) -> None:
        """The ``.xml`` is an IR ``<net>``, and every constant it references lies inside the ``.bin``."""
        if path.suffix.lower() == ".onnx":
            from .onnxruntime import OnnxRuntimeRunner

            return OnnxRuntimeRunner.validate_container(path, files)
        if path.stat().st_size > MAX_XML_CHECK_BYTES:
            return
        try:
            root = ET.parse(path).getroot()
        except (ET.ParseError, OSError):
            raise corrupt(path, "OpenVINO IR (.xml does not parse)") from None
        if root.tag != "net":
            raise corrupt(path, f"OpenVINO IR (root element is <{root.tag}>, expected <net>)")
        end = 0
        for data in root.iter("data"):
            off, size = data.get("offset"), data.get("size")
            if off is not None and size is not None:
                try:
                    end = max(end, int(off) + int(size))
                except ValueError:
                    raise corrupt(path, "OpenVINO IR (bad constant offset)") from None
        if end:
            bin_path = weights_path(path, files)
            if not bin_path.is_file():
                raise corrupt(path, f"OpenVINO IR (weights file {bin_path.name} is missing)")
            if bin_path.stat().st_size < end:
                raise corrupt(bin_path, f"OpenVINO IR weights file (needs {end} bytes, has {bin_path.stat().st_size})")

    def activate_impl(self) -> None:
        ov = require("openvino", "running OpenVINO IR models")
        cfg = self.config
        core = ov.Core()
        config = compile_config(cfg)
        # The checked bytes, never the paths again (RunnerConfig.read_checked): the manifest's hashes
        # cover exactly what OpenVINO reads.
        if cfg.model_path.suffix.lower() == ".xml":
            args = [cfg.read_checked(), cfg.read_checked(weights_path(cfg.model_path, cfg.files))]
        else:
            from .onnxruntime import checked_onnx

            args = [checked_onnx(cfg)]
        try:
            model = core.read_model(*args)
        except Exception as exc:  # noqa: BLE001 - OpenVINO raises RuntimeError subclasses from C++
            raise native_error(cfg.model_path, "OpenVINO", exc) from None
        try:
            compiled = core.compile_model(model, cfg.accelerator, config)
        except Exception as exc:  # noqa: BLE001
            if cfg.accelerator == "CPU":  # the CPU plugin is always there: a model it cannot compile is the model's fault
                raise native_error(cfg.model_path, "OpenVINO", exc) from None
            raise DelegateUnavailableError(
                f"OpenVINO could not compile {cfg.model_path.name} for device {cfg.accelerator}: "
                f"{native_message(str(exc)) or type(exc).__name__}",
                "Check the device driver (NPU: linux-npu-driver; GPU: intel-opencl-icd) and that shapes are static.",
            ) from None
        self._compiled = compiled
        self._tls = threading.local()
        self.input_metadata = [self._meta(p, i) for i, p in enumerate(compiled.inputs)]
        self.output_metadata = [self._meta(p, i) for i, p in enumerate(compiled.outputs)]
        self._n_out = len(self.output_metadata)
        self._describe(compiled)

    def _describe(self, compiled) -> None:
        """Record the device and precision the plugin really uses."""
        try:
            devices = list(compiled.get_property("EXECUTION_DEVICES"))
        except Exception:  # noqa: BLE001 - older plugins lack the property
            devices = [self.config.accelerator]
        self.delegate = ",".join(devices) or self.config.accelerator
        try:
            prec = compiled.get_property("INFERENCE_PRECISION_HINT")
            self.details["inference_precision"] = prec.to_string() if hasattr(prec, "to_string") else str(prec)
        except Exception:  # noqa: BLE001
            pass
        try:
            prec = [op.get_rt_info()["runtimePrecision"].astype(str) for op in compiled.get_runtime_model().get_ops()
                    if "runtimePrecision" in op.get_rt_info()]
            self.details["layers_int8"] = sum(1 for p in prec if p.lower() in ("i8", "u8"))
            self.details["layers_total"] = len(prec)
        except Exception:  # noqa: BLE001 - informational only
            pass

    @staticmethod
    def _meta(port, i: int) -> NativeTensor:
        ps = port.get_partial_shape()
        shape = tuple(d.get_length() if d.is_static else -1 for d in ps)
        try:
            name = port.get_any_name()
        except RuntimeError:
            name = f"#{i}"
        return NativeTensor(name, shape, np.dtype(port.get_element_type().to_dtype()), i)

    def infer_impl(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        req = getattr(self._tls, "req", None)
        if req is None:
            req = self._tls.req = self._compiled.create_infer_request()
        res = req.infer(feed, share_inputs=True)
        return list(res.to_tuple())

    def open_queue(self, jobs: int, lock=None) -> InferQueue:
        """``jobs`` infer requests of the compiled model, each owned by one worker thread.

        ``InferRequest.infer`` releases the GIL while the plugin runs. OpenVINO's
        ``AsyncInferQueue`` with a Python callback was tried first and hung in about half of the
        test runs when the model was released afterwards (the main thread, freeing the compiled
        model, waited for a plugin thread that waited for the GIL), so no Python code runs on the
        plugin's own threads.
        """
        local = threading.local()
        free = [self._compiled.create_infer_request() for _ in range(jobs)]

        def bind() -> None:  # each worker thread takes one request for its life
            local.req = free.pop()

        def call(feed: list[np.ndarray]) -> list[np.ndarray]:
            return list(local.req.infer(feed, share_inputs=True).to_tuple())

        return ThreadInferQueue(call, jobs, f"openvino {jobs} infer request(s) on worker threads", made=jobs,
                                initializer=bind, release=free.clear)

    def deactivate_impl(self) -> None:
        self._compiled = None
        self._tls = threading.local()

