"""ONNX Runtime runner: one execution provider per runtime step (TensorRT, CUDA, OpenVINO, CPU).

ONNX Runtime silently drops a provider it cannot initialise and runs on the CPU; this runner
checks ``session.get_providers()`` after creating the session and reports what is really in
use, so the facade can refuse (strict) or report the fallback (non-strict).
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

import numpy as np

from edge_sdk._deps import require
from edge_sdk.errors import DelegateUnavailableError

from .base import NativeTensor, Runner, corrupt, native_error, read_head

#: ONNX tensor type strings -> numpy dtypes (the ones an artifact may use at its boundary).
ORT_TYPES = {
    "tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
    "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(int16)": np.int16,
    "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_,
}


#: Protobuf tags of ModelProto fields (ir_version, producer_*, domain, model_version, doc_string,
#: graph, opset_import, metadata_props, training_info, functions).
MODELPROTO_FIRST_TAGS = frozenset({0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA})


#: On x86 ONNX Runtime turns int8 activations into uint8 (QDQS8ToU8Transformer) for its U8S8
#: kernels, whose 16-bit pairwise products (vpmaddubsw) saturate: measured here on the openWakeWord
#: embedding, cosine to float fell from 0.9965 to 0.9865. ARM and TensorRT compute int8 x int8
#: exactly, so on x86 the runner keeps the activations int8 (``session.qdqisint8allowed``) and
#: computes what the device computes. ``backend_options.onnxruntime.x86_u8_activations = true``
#: restores ORT's faster x86 default (3-4x here) where saturation has been checked to be harmless.
X86 = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686", "x86"}


def int8_arithmetic(so, provider: str, config) -> str | None:
    """Set the session's int8 activation handling on x86 CPU; returns what was chosen (for describe())."""
    if provider != "CPUExecutionProvider" or not X86:
        return None
    if (config.backend_options.get("onnxruntime") or {}).get("x86_u8_activations") is True:
        return "u8s8 (ONNX Runtime's x86 default; products may saturate)"
    so.add_session_config_entry("session.qdqisint8allowed", "1")
    return "s8s8 (as on ARM/TensorRT; x86 u8 conversion off)"


def provider_options(provider: str, config) -> dict:
    """Options for one execution provider (TensorRT: int8 and an engine cache outside the artifact)."""
    if provider == "TensorrtExecutionProvider":
        opts = {"trt_int8_enable": True, "trt_fp16_enable": True}
        if config.cache_dir is not None:
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(config.cache_dir),
                        trt_timing_cache_enable=True, trt_timing_cache_path=str(config.cache_dir))
        return opts
    return {}


def checked_onnx(config) -> bytes | str:
    """The checked bytes of an ONNX model file for a runtime (:meth:`RunnerConfig.read_checked`).

    A model whose tensors live in other files (``external_data``: refused at the door unless every
    such file is listed and hashed there) is given by path, since the runtime finds those files
    beside it; its own bytes were still checked here.
    """
    from edge_sdk.onnx_wire import WireError, external_refs

    data = config.read_checked()
    try:
        if external_refs(data):
            return str(config.model_path)
    except WireError:
        pass  # the runtime's own parser names the damage
    return data


class OnnxRuntimeRunner(Runner):
    """Runs a (QDQ) ``.onnx`` model with the execution provider of its runtime step."""

    backend = "onnxruntime"
    formats = ("onnx-qdq",)
    # InferenceSession.run is documented as thread-safe. Pipelines use the base runner's worker threads
    # (session.run releases the GIL): run_async was measured slower here (32-35 frames/s against
    # 61-63 for two worker threads on the 320 detector, 2 intra-op threads): it runs the graph on
    # an intra-op pool thread, leaving one thread fewer for the graph's own parallel work, and
    # ONNX Runtime refuses it with num_threads=1.
    thread_safe = True

    @classmethod
    def validate_container(cls, path: Path, files: dict[str, Path]) -> None:
        """An ONNX ModelProto: non-empty, starting with a protobuf field tag ONNX writers emit first.

        ``onnx`` is not a runtime dependency, so this is a cheap sanity check; ONNX Runtime's own
        protobuf parser rejects the rest with an exception (wrapped into ``ModelLoadError``).
        """
        head = read_head(path, 1)
        # Writers emit fields in number order, so the first byte is the tag of a ModelProto field.
        if not head or head[0] not in MODELPROTO_FIRST_TAGS:
            raise corrupt(path, "ONNX model (not a ModelProto)")

    def activate_impl(self) -> None:
        ort = require("onnxruntime", "running .onnx models")
        cfg = self.config
        provider = cfg.accelerator

        def options():
            so = ort.SessionOptions()
            if cfg.num_threads:
                so.intra_op_num_threads = int(cfg.num_threads)
            so.log_severity_level = 3  # errors only: provider chatter is not for device logs
            return so

        model = checked_onnx(cfg)
        so = options()
        arithmetic = int8_arithmetic(so, provider, cfg)
        providers = [(provider, provider_options(provider, cfg))]
        if provider != "CPUExecutionProvider":
            # ORT needs the CPU provider for nodes the accelerator does not take.
            providers.append(("CPUExecutionProvider", {}))
        try:
            try:
                sess = ort.InferenceSession(model, sess_options=so, providers=providers)
            except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types from native code
                # With s8 activations kept, ORT fuses DQ -> op -> Q into the op on int8 even where it has
                # no int8 kernel (DepthToSpace in BlazePose's head). The session then runs the QDQ graph
                # unfused: every op in float between the same quantize/dequantize steps, so the int8
                # rounding is the device's (slower). ORT's s8 -> u8 conversion loads too, but on
                # BlazePose it wrapped keypoints around (-489 came out +335; box/keypoint p99 error 37%
                # of the range against 10% unfused), which no int8 device computes.
                op = re.search(r"Failed to find kernel for (\w+)\(", str(exc))
                if not op:
                    raise
                so = options()
                so.add_session_config_entry("session.qdqisint8allowed", "1")
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
                sess = ort.InferenceSession(model, sess_options=so, providers=providers)
                arithmetic = (f"int8 steps simulated in float: ONNX Runtime has no int8 kernel for {op.group(1)} "
                              "here, so the QDQ graph runs unfused (slower; the same quantization steps)")
        except Exception as exc:  # noqa: BLE001 - ORT raises its own exception types from native code
            msg = str(exc)
            if provider != "CPUExecutionProvider" and provider.replace("ExecutionProvider", "") in msg:
                raise DelegateUnavailableError(f"ONNX Runtime could not start {provider}: {msg.splitlines()[0][:200]}",
                                               "Check the provider's libraries (CUDA/TensorRT) for this ONNX Runtime build.") from None
            raise native_error(cfg.model_path, "ONNX Runtime", exc) from None
        used = sess.get_providers()
        if provider not in used:
            raise DelegateUnavailableError(
                f"ONNX Runtime dropped {provider} while creating the session (in use: {', '.join(used)}).",
                "Install the ONNX Runtime build with this provider and its libraries (CUDA, cuDNN, TensorRT).")
        self._sess, self._ort = sess, ort
        self.details["providers"] = list(used)
        if arithmetic:
            self.details["int8_arithmetic"] = arithmetic
        self.input_metadata = [self._meta(i) for i in sess.get_inputs()]
        self.output_metadata = [self._meta(o) for o in sess.get_outputs()]
        self._in_names = [t.name for t in self.input_metadata]
        self._out_names = [t.name for t in self.output_metadata]
        self.delegate = provider

    @staticmethod
    def _meta(arg) -> NativeTensor:
        # A symbolic dimension (str/None) becomes -1: the facade refuses it against the static manifest.
        shape = tuple(d if isinstance(d, int) else -1 for d in arg.shape)
        return NativeTensor(arg.name, shape, np.dtype(ORT_TYPES.get(arg.type, np.float32)), arg.name)

    def infer_impl(self, feed: list[np.ndarray]) -> list[np.ndarray]:
        return self._sess.run(self._out_names, dict(zip(self._in_names, feed)))

    stoppable = True

    def infer_stoppable(self, feed, arm):
        """One run with its own ``RunOptions``, whose ``terminate`` flag the watchdog may set."""
        options = self._ort.RunOptions()
        arm(lambda: setattr(options, "terminate", True))
        return self._sess.run(self._out_names, dict(zip(self._in_names, feed)), options)

    def deactivate_impl(self) -> None:
        self._sess = None

