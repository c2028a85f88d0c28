"""Facts about the host that shape how a model runs: CPU, architecture, accelerator hints.

All sysfs/procfs reads go through :func:`sysfs_path`, so the environment variable
``EDGE_SDK_SYSFS_ROOT`` can point them at a copied tree (tests, remote debugging).
"""

from __future__ import annotations

import glob
import os
import platform
import shutil
from pathlib import Path

SYSFS_ROOT_ENV = "EDGE_SDK_SYSFS_ROOT"


def sysfs_root() -> Path:
    """The root under which /sys, /proc, /dev and /etc are looked up (default ``/``)."""
    return Path(os.environ.get(SYSFS_ROOT_ENV) or "/")


def sysfs_path(path: str) -> Path:
    """Map an absolute host path (``/sys/...``) under :func:`sysfs_root`."""
    return sysfs_root() / path.lstrip("/")


def sysfs_glob(pattern: str) -> list[str]:
    """Glob an absolute host pattern under :func:`sysfs_root`; returns host-style paths."""
    root = str(sysfs_root()).rstrip("/")
    hits = sorted(glob.glob(str(sysfs_path(pattern))))
    return [h[len(root):] if root else h for h in hits]


def read_text(path: str, default: str | None = None) -> str | None:
    """Read a small host file (under the sysfs root), stripped; ``default`` if unreadable."""
    try:
        return sysfs_path(path).read_text(errors="replace").strip()
    except OSError:
        return default


def machine() -> str:
    return platform.machine()


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (x86 'model name', ARM 'Model'/'Hardware')."""
    text = read_text("/proc/cpuinfo", "") or ""
    for key in ("model name", "Model", "Hardware", "cpu model"):
        for line in text.splitlines():
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


#: Architecture family of a ``uname -m`` / kernel arch name. A 32-bit user space on its own 64-bit
#: kernel (armv7l on aarch64, i686 on x86_64) is the same family: native, not emulated.
ARCH_FAMILIES = {
    "x86_64": "x86", "amd64": "x86", "x86": "x86", "i386": "x86", "i486": "x86", "i586": "x86", "i686": "x86",
    "aarch64": "arm", "arm64": "arm", "aarch64_be": "arm", "arm": "arm", "armv6l": "arm", "armv7l": "arm",
    "armv8l": "arm", "riscv64": "riscv", "riscv": "riscv", "ppc64le": "ppc", "ppc64": "ppc", "powerpc": "ppc",
    "s390x": "s390", "s390": "s390", "mips64": "mips", "mips": "mips", "loongarch64": "loongarch",
}


def kernel_arch() -> str | None:
    """The running kernel's architecture, from the kernel itself.

    ``uname -m`` (``platform.machine()``) is answered by a user-mode emulator such as qemu-user
    with the *guest* architecture; ``/proc/sys/kernel/arch``, the CPU modalias
    (``cpu:type:x86,...`` / ``cpu:type:aarch64:...``) and ``/proc/cpuinfo``'s layout come from the
    host kernel. None when none of them is readable.
    """
    arch = read_text("/proc/sys/kernel/arch")
    if arch:
        return arch.split()[0]
    modalias = read_text("/sys/devices/system/cpu/modalias") or ""
    if modalias.startswith("cpu:type:"):
        kind = modalias[len("cpu:type:"):].split(":")[0].split(",")[0]
        if kind:
            return kind
    keys = {line.split(":")[0].strip() for line in (read_text("/proc/cpuinfo", "") or "").splitlines()}
    if "vendor_id" in keys and "flags" in keys:
        return "x86"
    if "CPU implementer" in keys:
        return "arm"
    return None


def emulation(machine_name: str | None = None) -> str | None:
    """Why this process runs under user-mode emulation (qemu-user, Rosetta...), or None when native.

    Args:
        machine_name: The architecture of the code running (default ``platform.machine()``).

    Returns:
        e.g. ``"aarch64 code emulated on the host's x86_64 kernel (user-mode emulation: qemu binfmt interpreter
        /usr/libexec/qemu-binfmt/aarch64-binfmt-P)"``; None when the families match or the
        kernel's architecture cannot be read (then nothing is claimed).
    """
    code = machine_name or machine()
    kernel = kernel_arch()
    if not kernel or not code:
        return None
    fam_code, fam_kernel = ARCH_FAMILIES.get(code.lower()), ARCH_FAMILIES.get(kernel.lower())
    if fam_code is None or fam_kernel is None or fam_code == fam_kernel:
        return None
    how = "user-mode emulation"
    entry = read_text(f"/proc/sys/fs/binfmt_misc/qemu-{code}")
    if entry and entry.splitlines()[0] == "enabled":
        interp = next((ln.split(None, 1)[1] for ln in entry.splitlines() if ln.startswith("interpreter ")), "")
        how += f": qemu binfmt interpreter {interp}".rstrip()
    return f"{code} code emulated on the host's {kernel} kernel ({how})"


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpu_flags() -> list[str]:
    text = read_text("/proc/cpuinfo", "") or ""
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return line.split(":", 1)[1].split()
    return []


def governor() -> str | None:
    return read_text("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def temperatures() -> dict[str, float]:
    """Thermal zone temperatures in degrees C where readable."""
    out: dict[str, float] = {}
    for zone in sysfs_glob("/sys/class/thermal/thermal_zone*"):
        raw = read_text(f"{zone}/temp")
        kind = read_text(f"{zone}/type") or Path(zone).name
        try:
            out[kind] = int(raw) / 1000.0  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
    return out


def jetson_release() -> str | None:
    """The first line of /etc/nv_tegra_release (L4T version) on a Jetson."""
    text = read_text("/etc/nv_tegra_release")
    return text.splitlines()[0] if text else None


def jetson_power_mode() -> str | None:
    """nvpmodel's current mode where the tool or its status file exists."""
    status = read_text("/var/lib/nvpmodel/status")
    if status:
        return status
    return None


def usb_ids() -> list[str]:
    """``vendor:product`` of every USB device under /sys/bus/usb/devices."""
    out = []
    for dev in sysfs_glob("/sys/bus/usb/devices/*"):
        v, p = read_text(f"{dev}/idVendor"), read_text(f"{dev}/idProduct")
        if v and p:
            out.append(f"{v.lower()}:{p.lower()}")
    return sorted(set(out))


def nvidia_gpu() -> str | None:
    """A hint that an NVIDIA GPU and driver are present (not proof that CUDA works)."""
    gpus = sysfs_glob("/proc/driver/nvidia/gpus/*")
    if gpus:
        info = read_text(f"{gpus[0]}/information", "") or ""
        for line in info.splitlines():
            if line.startswith("Model"):
                return line.split(":", 1)[1].strip()
        return "NVIDIA GPU (driver loaded)"
    if jetson_release():
        return "Jetson integrated GPU"
    if shutil.which("nvidia-smi"):
        return "nvidia-smi on PATH"
    return None


def device_hints_found(device_globs=(), usb=(), release_files=()) -> list[str]:
    """Which of a profile's ``[host]`` presence hints this host shows: device nodes matching
    ``device_globs``, attached USB ``vendor:product`` ids from ``usb``, existing ``release_files``.
    Nothing is opened but sysfs/dev listings and the release files' existence."""
    found = [hit for pattern in device_globs for hit in sysfs_glob(pattern)]
    wanted = {u.lower() for u in usb}
    found += [f"USB {i}" for i in usb_ids() if i in wanted] if wanted else []
    found += [f for f in release_files if sysfs_path(f).exists()]
    return found


def profile_device_hints() -> dict[str, list[str]]:
    """Per profile that declares presence hints in ``[host]``: the hints found on this host."""
    from .profiles import builtin_profiles

    return {name: device_hints_found(p.host.device_globs, p.host.usb_ids, p.host.release_files)
            for name, p in builtin_profiles().items()
            if p.host.device_globs or p.host.usb_ids or p.host.release_files}


def accelerator_hints() -> dict[str, object]:
    """Everything that hints at an accelerator, without loading any driver.

    ``devices``: per profile with ``[host]`` presence hints (device nodes, USB ids, release
    files), the ones found here; the hints themselves live in the profiles, not in code.
    """
    return {
        "jetson_release": jetson_release(),
        "devices": profile_device_hints(),
        "nvidia_gpu": nvidia_gpu(),
        "edgetpu_compiler": shutil.which("edgetpu_compiler"),
        "trtexec": shutil.which("trtexec") or (
            "/usr/src/tensorrt/bin/trtexec" if sysfs_path("/usr/src/tensorrt/bin/trtexec").exists() else None
        ),
    }


def summary() -> dict[str, object]:
    """A compact description of the host for reports and manifests."""
    return {
        "machine": machine(),
        "system": platform.system(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": cpu_count(),
        "governor": governor(),
        "emulation": emulation(),
    }
