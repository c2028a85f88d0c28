"""``edge-sdk doctor``: what this host can actually run, and why.

Reports which runtimes import and their versions, which delegates / execution providers /
OpenVINO devices are really available, accelerator hints, power sensors, and for every
built-in profile whether it runs natively here, only with a fallback, or not at all.
TensorFlow is reported from package metadata only: doctor never imports it.
"""

from __future__ import annotations

from typing import Any

from . import hostinfo
from ._deps import version_of
from ._version import __version__
from .profiles import builtin_profile_errors, builtin_profiles

#: The runtimes doctor reports: import name -> distribution (for its version).
RUNTIME_MODULES = {
    "ai_edge_litert": "ai-edge-litert",
    "tflite_runtime": "tflite-runtime",
    "onnxruntime": "onnxruntime",
    "openvino": "openvino",
    "tensorrt": "tensorrt",
    "tensorflow": "tensorflow",
}


def _runtimes() -> dict[str, Any]:
    from edge_sdk.runtimes import probe

    out: dict[str, Any] = {}
    for mod, dist in RUNTIME_MODULES.items():
        version = version_of(dist)
        if mod == "onnxruntime" and version is None:
            version = version_of("onnxruntime-gpu") or version_of("onnxruntime-openvino")
        out[mod] = {"installed": version is not None, "version": version}
    lite = probe.litert_module()
    out["litert_interpreter"] = lite[0] if lite else None
    providers = probe.ort_providers()
    out["onnxruntime"]["execution_providers"] = list(providers) if providers is not None else None
    devices = probe.openvino_devices()
    out["openvino"]["devices"] = list(devices) if devices is not None else None
    lib, why = probe.edgetpu_library()
    out["edgetpu_delegate"] = {"available": lib is not None, "detail": why}
    return out


def _power_sensors() -> dict[str, Any]:
    try:
        from .power import discover
    except ImportError:  # the power module is optional in minimal builds
        return {}
    return discover()


def _profiles() -> list[dict[str, Any]]:
    from edge_sdk.runtimes.probe import native_status

    rows = []
    for name, prof in sorted(builtin_profiles().items()):
        ns = native_status(prof)  # the same answer load and bench use
        steps = [{"backend": step.backend, "accelerator": step.accelerator, "native": step.native,
                  "available": st.available, "reason": st.reason, "fix": st.fix} for step, st in ns.probes]
        rows.append({
            "profile": name,
            "status": ns.status,
            "would_run_on": ns.step and f"{ns.step.backend}/{ns.step.accelerator}",
            "host_arch_matches": ns.arch_matches,
            "chain": steps,
        })
    return rows


def _profile_errors() -> list[dict[str, str]]:
    """Built-in profile files that failed to load (the others are still reported)."""
    return [{"file": name, "error": exc.message, "hint": exc.hint or ""}
            for name, exc in sorted(builtin_profile_errors().items())]


def collect() -> dict[str, Any]:
    """Gather the whole doctor report as a JSON-ready dict."""
    return {
        "edge_sdk": __version__,
        "host": hostinfo.summary(),
        "runtimes": _runtimes(),
        "accelerators": hostinfo.accelerator_hints(),
        "power_sensors": _power_sensors(),
        "profiles": _profiles(),
        "profile_errors": _profile_errors(),
    }


STATUS_TEXT = {
    "native": "runs natively",
    "emulated": "runs with its own delegate, but this host is not that device (numbers not representative)",
    "fallback": "runs only with a fallback",
    "unavailable": "cannot run here",
}


def render(report: dict[str, Any]) -> str:
    """Human-readable doctor report."""
    lines = [f"edge-sdk {report['edge_sdk']} on {report['host']['machine']} ({report['host']['cpu_model']}, "
             f"{report['host']['cpu_count']} cores, Python {report['host']['python']})", "", "Runtimes:"]
    rt = report["runtimes"]
    for mod in RUNTIME_MODULES:
        info = rt[mod]
        lines.append(f"  {mod:16s} {info['version'] or 'not installed'}")
    if rt["onnxruntime"].get("execution_providers") is not None:
        lines.append(f"  onnxruntime providers: {', '.join(rt['onnxruntime']['execution_providers'])}")
    if rt["openvino"].get("devices") is not None:
        lines.append(f"  openvino devices: {', '.join(rt['openvino']['devices']) or 'none'}")
    lines.append(f"  Edge TPU delegate: {rt['edgetpu_delegate']['detail']}")
    lines += ["", "Accelerator hints:"]
    for key, val in report["accelerators"].items():
        lines.append(f"  {key:16s} {val if val else '-'}")
    lines += ["", "Power sensors:"]
    sensors = report["power_sensors"]
    if sensors:
        for key, val in sensors.items():
            lines.append(f"  {key:16s} {val}")
    else:
        lines.append("  none found")
    lines += ["", "Profiles:"]
    for row in report["profiles"]:
        where = f" -> {row['would_run_on']}" if row["would_run_on"] else ""
        lines.append(f"  {row['profile']:14s} {STATUS_TEXT[row['status']]}{where}")
        if row["status"] in ("fallback", "unavailable"):
            for step in row["chain"]:
                if step["native"] and not step["available"]:
                    lines.append(f"      {step['backend']}/{step['accelerator']}: {step['reason']}")
                    if step["fix"]:
                        lines.append(f"        fix: {step['fix']}")
    for err in report.get("profile_errors", []):
        lines.append(f"  {err['file']:14s} could not be loaded: {err['error']}" + (f" ({err['hint']})" if err["hint"] else ""))
    return "\n".join(lines)
