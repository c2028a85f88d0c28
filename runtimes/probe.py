"""Can this host run a given runtime step (backend + accelerator)? Cheap and side-effect free.

Used by ``edge-sdk doctor``, by ``load`` to walk a profile's runtime chain, and by ``bench``
to decide which profiles run natively here. Importing a runtime module (onnxruntime,
openvino, ai_edge_litert) is allowed; TensorFlow is never imported here. A library named by a
profile (``external:/path.so``) is never opened by a probe: only looked for.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
from dataclasses import dataclass
from functools import lru_cache

from edge_sdk import hostinfo

#: Edge TPU runtime library names per platform (libedgetpu).
EDGETPU_LIBS = {
    "Linux": "libedgetpu.so.1",
    "Darwin": "libedgetpu.1.dylib",
    "Windows": "edgetpu.dll",
}


@dataclass(frozen=True)
class StepStatus:
    """Whether a runtime step can run here, and why (not)."""

    available: bool
    reason: str
    fix: str = ""


#: LiteRT interpreter modules in the order the runtime tries them: (import name, distribution).
#: ``tensorflow.lite`` is the last resort, for hosts that have only TensorFlow.
LITERT_MODULES = (
    ("ai_edge_litert.interpreter", "ai-edge-litert"),
    ("tflite_runtime.interpreter", "tflite-runtime"),
    ("tensorflow.lite", "tensorflow"),
)


@lru_cache(maxsize=None)
def litert_module() -> tuple[str, str] | None:
    """(module name, version) of the interpreter the LiteRT runner would use, or None.

    TensorFlow is only looked up, never imported: probing (doctor, load's chain walk) stays light.
    """
    from edge_sdk._deps import available, version_of

    for mod, dist in LITERT_MODULES:
        if mod == "tensorflow.lite":
            if available("tensorflow"):
                return mod, version_of(dist) or "unknown"
            continue
        try:
            importlib.import_module(mod)
        except ImportError:
            continue
        return mod, version_of(dist) or "unknown"
    return None


@lru_cache(maxsize=None)
def edgetpu_library() -> tuple[str | None, str]:
    """(loadable library name or None, reason)."""
    name = EDGETPU_LIBS.get(platform.system(), "libedgetpu.so.1")
    try:
        ctypes.CDLL(name)
    except OSError as exc:
        return None, f"{name} cannot be loaded ({exc})"
    return name, f"{name} loads"


@lru_cache(maxsize=None)
def ort_providers() -> tuple[str, ...] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    return tuple(ort.get_available_providers())


@lru_cache(maxsize=None)
def openvino_devices() -> tuple[str, ...] | None:
    from edge_sdk._deps import require
    from edge_sdk.errors import MissingDependencyError

    try:
        ov = require("openvino")
    except MissingDependencyError:
        return None
    try:
        return tuple(ov.Core().available_devices)
    except Exception:  # noqa: BLE001 - a broken driver must not crash doctor
        return ()


def tensorrt_version() -> str | None:
    try:
        import tensorrt as trt  # type: ignore[import-not-found]
    except ImportError:
        return None
    return getattr(trt, "__version__", "unknown")


def probe_step(backend: str, accelerator: str) -> StepStatus:
    """Check one runtime step of a profile chain, through the backend's descriptor probe.

    Args:
        backend: A registered backend name (:func:`edge_sdk.backends.backend_names`).
        accelerator: delegate / execution provider / device name.

    Returns:
        A :class:`StepStatus` saying whether it can run here, why not, and how to fix it.
    """
    from edge_sdk.backends import backend_names, backends

    desc = backends().get(backend)
    if desc is None:
        return StepStatus(False, f"unknown backend '{backend}'", f"use {', '.join(backend_names())}")
    return desc.probe_step(accelerator)


def probe_litert(accelerator: str) -> StepStatus:
    """LiteRT: an interpreter module, and the delegate (XNNPACK built in; Edge TPU, GPU, external)."""
    lite = litert_module()
    if lite is None:
        return StepStatus(False, "no LiteRT interpreter (ai_edge_litert or tflite_runtime) is installed",
                          'pip install "edge-sdk[litert]"')
    if accelerator in ("xnnpack", "cpu"):
        return StepStatus(True, f"{lite[0]} {lite[1]} (XNNPACK is built in)")
    if accelerator == "edgetpu":
        lib, why = edgetpu_library()
        if lib is None:
            return StepStatus(False, f"Edge TPU runtime missing: {why}",
                              "install libedgetpu1-std from the Coral apt repository")
        looked, found = accelerator_presence("litert", "edgetpu")
        if looked and not found:
            return StepStatus(False, f"libedgetpu loads but no Edge TPU is attached ({' or '.join(looked)})",
                              "plug in the Coral USB accelerator, or install the gasket/apex driver for PCIe/M.2 and "
                              "check the permissions of its device node")
        return StepStatus(True, f"{why}; device present" + (f" ({', '.join(found)})" if found else ""))
    if accelerator == "gpu":
        try:
            ctypes.CDLL("libtensorflowlite_gpu_delegate.so")
        except OSError as exc:
            return StepStatus(False, f"LiteRT GPU delegate library cannot be loaded ({exc})",
                              "build or install libtensorflowlite_gpu_delegate.so for this device")
        return StepStatus(True, "GPU delegate library loads")
    if accelerator.startswith("external:"):
        # Never opened here: loading a library runs its code, and the path came from a profile.
        # Whether it may be loaded at all is the caller's decision (edge_sdk.trust), checked first.
        path = accelerator.split(":", 1)[1]
        if not os.path.isfile(path):
            return StepStatus(False, f"external delegate {path} is not installed here", "check the delegate path")
        return StepStatus(True, f"external delegate {path} is present")
    return StepStatus(False, f"unknown LiteRT delegate '{accelerator}'", "use edgetpu, xnnpack, gpu or external:/path.so")


def accelerator_presence(backend: str, accelerator: str) -> tuple[list[str], list[str]]:
    """(hints looked for, hints found) for an accelerator, from the ``[host]`` presence hints
    (``device_globs``, ``usb_ids``, ``release_files``) of every profile whose chain runs it natively."""
    from edge_sdk.profiles import builtin_profiles

    globs: list[str] = []
    usb: list[str] = []
    files: list[str] = []
    for prof in builtin_profiles().values():
        if any(s.backend == backend and s.accelerator == accelerator and s.native for s in prof.runtime.chain):
            globs += prof.host.device_globs
            usb += prof.host.usb_ids
            files += prof.host.release_files
    looked = list(dict.fromkeys(globs + [f"USB {u}" for u in usb] + files))
    return looked, hostinfo.device_hints_found(dict.fromkeys(globs), dict.fromkeys(usb), dict.fromkeys(files))


def probe_onnxruntime(accelerator: str) -> StepStatus:
    """ONNX Runtime: the build lists the execution provider."""
    providers = ort_providers()
    if providers is None:
        return StepStatus(False, "onnxruntime is not installed", 'pip install "edge-sdk[onnxruntime]"')
    if accelerator in providers:
        return StepStatus(True, f"onnxruntime lists {accelerator}")
    fix = {
        "TensorrtExecutionProvider": "install the ONNX Runtime build with TensorRT (on Jetson: the JetPack wheel from NVIDIA's Jetson Zoo)",
        "CUDAExecutionProvider": "install onnxruntime-gpu matching the CUDA version",
        "OpenVINOExecutionProvider": "pip install onnxruntime-openvino",
    }.get(accelerator, "install an ONNX Runtime build with this execution provider")
    return StepStatus(False, f"this onnxruntime build has no {accelerator} (has: {', '.join(providers)})", fix)


def probe_openvino(accelerator: str) -> StepStatus:
    """OpenVINO: the device (CPU, GPU, NPU ...) is among the Core's available devices."""
    devices = openvino_devices()
    if devices is None:
        return StepStatus(False, "openvino is not installed", 'pip install "edge-sdk[openvino]"')
    if any(d == accelerator or d.startswith(accelerator + ".") for d in devices):
        return StepStatus(True, f"OpenVINO device {accelerator} is available")
    fix = {
        "NPU": "install the Intel NPU driver (linux-npu-driver) and make sure /dev/accel/accel0 is accessible",
        "GPU": "install the Intel GPU compute runtime (intel-opencl-icd, level-zero)",
    }.get(accelerator, "check the OpenVINO device name")
    return StepStatus(False, f"OpenVINO device {accelerator} not available (has: {', '.join(devices) or 'none'})", fix)


def probe_tensorrt(accelerator: str) -> StepStatus:
    """TensorRT: the Python module imports and an NVIDIA GPU is visible."""
    version = tensorrt_version()
    if version is None:
        return StepStatus(False, "the tensorrt Python module is not installed",
                          "on Jetson it comes with JetPack (python3-libnvinfer); elsewhere pip install tensorrt")
    if hostinfo.nvidia_gpu() is None:
        return StepStatus(False, f"tensorrt {version} imports but no NVIDIA GPU is visible", "check the NVIDIA driver")
    return StepStatus(True, f"tensorrt {version}")


def litert_details() -> dict:
    """``doctor``: which interpreter module LiteRT would use, and whether the Edge TPU library loads."""
    lite = litert_module()
    lib, why = edgetpu_library()
    return {"interpreter": lite[0] if lite else None, "edgetpu_delegate": {"available": lib is not None, "detail": why}}


def onnxruntime_details() -> dict:
    """``doctor``: the execution providers of the installed ONNX Runtime build."""
    providers = ort_providers()
    return {"execution_providers": list(providers) if providers is not None else None}


def openvino_details() -> dict:
    """``doctor``: the OpenVINO devices this host has."""
    devices = openvino_devices()
    return {"devices": list(devices) if devices is not None else None}


def host_matches(profile) -> bool:
    """True when the host architecture is one the profile is for (empty list: any)."""
    arch = profile.host.arch
    return not arch or hostinfo.machine() in arch


@dataclass(frozen=True)
class NativeStatus:
    """Whether this host runs a profile natively: the one answer ``load``, ``bench`` and ``doctor`` share.

    Attributes:
        profile: The profile's name.
        status: ``native`` (its first step that runs here is a native one and the host
            architecture matches), ``emulated`` (native step, other architecture: numbers not
            representative), ``fallback`` (only a non-native step runs) or ``unavailable``.
        step: The first step of the chain that runs here (what ``load`` would pick), or None.
        probes: ``(step, StepStatus)`` for every step of the chain, in chain order.
        arch_matches: :func:`host_matches`.
        arch: The profile's ``host.arch``.
    """

    profile: str
    status: str
    step: object | None
    probes: tuple
    arch_matches: bool
    arch: tuple[str, ...] = ()

    @property
    def native(self) -> bool:
        return self.status == "native"

    def why_not(self) -> str | None:
        """None when native; otherwise why not, in one line (bench's skip list)."""
        if self.status == "native":
            return None
        step = self.step
        if self.status == "emulated":
            return (f"{step.backend}/{step.accelerator} runs here, but this host ({hostinfo.machine()}) is not a "
                    f"'{self.profile}' device (arch {', '.join(self.arch)}); numbers would not be "
                    "representative: pass this profile folder itself to benchmark it anyway")
        # every step before the first that runs is unavailable (all of them when none runs)
        upto = next((i for i, (s, _) in enumerate(self.probes) if s is step), len(self.probes))
        reasons = [f"{s.backend}/{s.accelerator}: {st.reason}" for s, st in self.probes[:upto]]
        if self.status == "fallback":
            return (f"only the fallback {step.backend}/{step.accelerator} runs here "
                    f"({'; '.join(reasons) or 'native steps unavailable'})")
        return "nothing in its runtime chain runs here (" + "; ".join(reasons) + ")"


def native_status(profile) -> NativeStatus:
    """Probe every step of ``profile``'s runtime chain (:func:`probe_step`) and say whether it runs natively here.

    The first step that is available is the one ``load`` runs (``strict`` stops at the first
    non-native step), so the profile is native only when that step is a native one.
    """
    probes = tuple((step, probe_step(step.backend, step.accelerator)) for step in profile.runtime.chain)
    first = next((step for step, st in probes if st.available), None)
    arch_ok = host_matches(profile)
    if first is None:
        status = "unavailable"
    elif not first.native:
        status = "fallback"
    else:
        status = "native" if arch_ok else "emulated"
    return NativeStatus(profile.name, status, first, probes, arch_ok, tuple(profile.host.arch))
