"""The environment that shapes benchmark numbers, recorded next to them.

CPU model and cores, governor and current clocks, temperatures, Jetson L4T release and
nvpmodel power mode, GPU devfreq clocks, and the versions of the runtimes installed. Reads
go through :mod:`edge_sdk.hostinfo` (so ``EDGE_SDK_SYSFS_ROOT`` applies) and never fail:
an unreadable fact is recorded as missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import PurePosixPath
from typing import Any

from edge_sdk import hostinfo
from edge_sdk._deps import version_of
from edge_sdk._version import __version__


def _clocks_mhz(pattern: str, leaf: str, per_mhz: float) -> dict[str, float]:
    """``{device: MHz}`` from integer frequency files ``<match>/<leaf>`` (``per_mhz`` units per MHz)."""
    out = {}
    for dev in hostinfo.sysfs_glob(pattern):
        raw = hostinfo.read_text(f"{dev}/{leaf}")
        if raw and raw.isdigit():
            out[PurePosixPath(dev).name] = int(raw) / per_mhz
    return out


def cpu_clocks_mhz() -> dict[str, float]:
    """Current frequency of each CPU with cpufreq (kHz in sysfs), in MHz."""
    return _clocks_mhz("/sys/devices/system/cpu/cpu[0-9]*", "cpufreq/scaling_cur_freq", 1000.0)


def devfreq_clocks_mhz() -> dict[str, float]:
    """Current devfreq clocks (Hz in sysfs; on Jetson: the GPU, e.g. ``17000000.ga10b``), in MHz."""
    return _clocks_mhz("/sys/class/devfreq/*", "cur_freq", 1e6)


def nvpmodel_mode() -> str | None:
    """Jetson power mode: the nvpmodel status file, else ``nvpmodel -q`` (a short query)."""
    mode = hostinfo.jetson_power_mode()
    if mode or shutil.which("nvpmodel") is None:
        return mode
    try:
        r = subprocess.run(["nvpmodel", "-q"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
    return " / ".join(lines) or None


def runtime_versions() -> dict[str, str]:
    """Installed versions of every registered backend's distributions, and numpy."""
    from edge_sdk.backends import backends

    dists = [d for desc in backends().values() for d in desc.distributions() if d != "tensorflow"] + ["numpy"]
    return {d: v for d in dict.fromkeys(dists) if (v := version_of(d))}


def collect() -> dict[str, Any]:
    """Everything above as a JSON-ready dict (the report's ``environment``)."""
    return {
        "edge_sdk": __version__,
        "host": hostinfo.summary(),
        "governor": hostinfo.governor(),
        "cpu_clocks_mhz": cpu_clocks_mhz(),
        "devfreq_clocks_mhz": devfreq_clocks_mhz(),
        "temperatures_c": hostinfo.temperatures(),
        "jetson_release": hostinfo.jetson_release(),
        "jetson_power_mode": nvpmodel_mode(),
        "runtime_versions": runtime_versions(),
    }
