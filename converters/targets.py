"""One target config per artifact format, made from the profile when a job starts.

A hardware target is plain data (after ONNX Runtime's ``get_qnn_qdq_config``): the functions here
read the profile once and say what the converters and the recovery search must do for it. The
converters take these records and never look at accelerator or backend names themselves, so a
profile for new hardware changes what these functions return, not the quantizers.

* :func:`qdq_config` (``onnx-qdq``): whether the device builds a TensorRT engine from the model
  (symmetric int8, the ``trtexec`` command recorded, layers kept float become precision constraints).
* :func:`nncf_config` (``openvino-ir``): NNCF's target device and preset.
* :func:`tflite_config` (``tflite-int8``): the accelerator's compiler (the Edge TPU step) and
  whether a float layer may only sit in the CPU tail.
"""

from __future__ import annotations

from dataclasses import dataclass

from edge_sdk.profiles import Profile


@dataclass(frozen=True)
class QDQConfig:
    """What an int8 QDQ ONNX artifact is for.

    Attributes:
        tensorrt_engine: The device builds a TensorRT engine from it (a TensorRT backend or
            ONNX Runtime's TensorRT execution provider is in the chain).
        symmetric_activations: Activations quantized symmetrically (TensorRT takes only that).
    """

    tensorrt_engine: bool
    symmetric_activations: bool


@dataclass(frozen=True)
class NNCFConfig:
    """How NNCF quantizes an OpenVINO IR artifact.

    Attributes:
        target_device: NNCF ``TargetDevice`` name (``CPU``, ``NPU``, ``GPU``; ``ANY`` otherwise).
        preset: ``PERFORMANCE`` (symmetric activations) or ``MIXED``.
        overflow_fix: NNCF ``OverflowFix`` name. On a CPU, ``ENABLE``: every Convolution and
            MatMul weight uses half the int8 range. x86 CPUs without VNNI (AVX2, AVX-512 before
            Cascade Lake; many edge boxes) multiply u8 x s8 pairs into saturating int16 sums, so
            with full-range weights the same IR computes different numbers there than on a VNNI
            CPU (BlazePalm full on an AVX2 host: gate score error 0.09 -> 0.19 with NNCF's
            default, which halves only the first layer). Half-range weights cannot saturate those
            sums, so a CPU without VNNI computes the IR without clipping, as a VNNI CPU does
            (measured only on an AVX2 host; no VNNI host was at hand to compare numbers). ``None`` elsewhere (NNCF's default for the device).
    """

    target_device: str
    preset: str
    overflow_fix: str | None = None


@dataclass(frozen=True)
class TFLiteConfig:
    """What an int8 TFLite artifact must satisfy.

    Attributes:
        compiler: The accelerator's compiler command run after conversion (``edgetpu_compiler``),
            or None for a CPU/GPU delegate target.
        float_only_in_cpu_tail: A layer kept float ends what the accelerator maps, so recovery may
            keep layers float only at the end of the graph (the Edge TPU).
    """

    compiler: str | None
    float_only_in_cpu_tail: bool


@dataclass(frozen=True)
class Targets:
    """The target config of every format for one profile (``ConvertJob.targets``)."""

    qdq: QDQConfig
    nncf: NNCFConfig
    tflite: TFLiteConfig


def targets_for(profile: Profile) -> Targets:
    """Every format's target config for ``profile``, made once per job."""
    return Targets(qdq_config(profile), nncf_config(profile), tflite_config(profile))


#: Where an ``onnx-qdq`` artifact records how the device builds its TensorRT engine (``backend_options``).
TENSORRT_OPTIONS = "tensorrt"


def record_float_layers(backend_options: dict, fmt: str, float_nodes) -> None:
    """After recovery: layers kept float become TensorRT precision constraints, recorded beside the
    engine build options (only for an ``onnx-qdq`` artifact a TensorRT engine is built from)."""
    if fmt != "onnx-qdq" or not float_nodes or TENSORRT_OPTIONS not in backend_options:
        return
    backend_options[TENSORRT_OPTIONS]["float_layers"] = list(float_nodes)
    backend_options[TENSORRT_OPTIONS]["float_layers_note"] = (
        "no Q/DQ around these layers: TensorRT runs them in FP16/FP32 (a precision constraint), the rest in int8")


#: NNCF target devices by OpenVINO device name.
_NNCF_DEVICES = ("CPU", "NPU", "GPU")


def qdq_config(profile: Profile) -> QDQConfig:
    """The ``onnx-qdq`` target of ``profile``."""
    trt = any(s.backend == TENSORRT_OPTIONS or s.accelerator == "TensorrtExecutionProvider" for s in profile.runtime.chain)
    return QDQConfig(tensorrt_engine=trt, symmetric_activations=profile.quantization.activation_symmetric)


def nncf_config(profile: Profile) -> NNCFConfig:
    """The ``openvino-ir`` target of ``profile``: the device of its first native OpenVINO step."""
    native = next((s.accelerator for s in profile.runtime.chain if s.format == "openvino-ir" and s.native), "CPU")
    device = native.split(".", 1)[0]
    target = device if device in _NNCF_DEVICES else "ANY"
    return NNCFConfig(target_device=target,
                      preset="PERFORMANCE" if profile.quantization.activation_symmetric else "MIXED",
                      overflow_fix="ENABLE" if target in ("CPU", "ANY") else None)


def tflite_config(profile: Profile) -> TFLiteConfig:
    """The ``tflite-int8`` target of ``profile``."""
    compiler = profile.operators.compiler or None
    return TFLiteConfig(compiler=compiler, float_only_in_cpu_tail=compiler == "edgetpu_compiler")


__all__ = ["TENSORRT_OPTIONS", "record_float_layers", "NNCFConfig", "QDQConfig", "TFLiteConfig", "Targets", "nncf_config", "qdq_config", "targets_for",
           "tflite_config"]
