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

def runtime_modules() -> dict[str, tuple[str, ...]]:
    """The Python modules doctor reports: import name -> distributions (first installed gives the
    version), from every registered backend's descriptor, plus TensorFlow (from metadata only)."""
    from .backends import backends

    mods: dict[str, tuple[str, ...]] = {}
    for desc in backends().values():
        for mod, dist in desc.modules:
            mods[mod] = tuple(dict.fromkeys((*mods.get(mod, ()), dist)))
    mods.setdefault("tensorflow", ("tensorflow",))
    return mods


def _first_version(dists) -> str | None:
    return next((v for d in dists if (v := version_of(d))), None)


def _runtimes() -> dict[str, Any]:
    return {mod: {"installed": (v := _first_version(dists)) is not None, "version": v}
            for mod, dists in runtime_modules().items()}


def _backends() -> dict[str, Any]:
    """Per registered backend: its version, the formats it reads and its own details (providers, devices ...)."""
    from .backends import backends

    out: dict[str, Any] = {}
    for name, desc in backends().items():
        try:
            details = desc.doctor_details()
        except Exception as exc:  # noqa: BLE001 - a broken runtime must not take doctor down
            details = {"error": f"{type(exc).__name__}: {exc}"}
        found = desc.installed()
        out[name] = {"version": found[1] if found else None, "formats": list(desc.formats),
                     "install": desc.install_hint(), **details}
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
        "backends": _backends(),
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
    for mod, info in report["runtimes"].items():
        lines.append(f"  {mod:16s} {info['version'] or 'not installed'}")
    lines += ["", "Backends:"]
    for name, info in report["backends"].items():
        extra = {k: v for k, v in info.items() if k not in ("version", "formats", "install")}
        lines.append(f"  {name:16s} {info['version'] or 'not installed: ' + info['install']}; "
                     f"reads {', '.join(info['formats'])}")
        for key, val in extra.items():
            if isinstance(val, dict):
                val = val.get("detail", val)
            elif isinstance(val, list):
                val = ", ".join(map(str, val)) or "none"
            if val is not None:
                lines.append(f"    {key.replace('_', ' ')}: {val}")
    lines += ["", "Accelerator hints:"]
    for key, val in report["accelerators"].items():
        if key == "devices":  # per profile: its [host] presence hints found here
            for prof, found in val.items():
                lines.append(f"  {prof + ' device':16s} {', '.join(found) if found else 'not found'}")
            continue
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
