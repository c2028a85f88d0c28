"""The x86-64 host side of the arm64 check: tools, binfmt, the cached Debian arm64 root, chroot runs.

Everything that can go wrong here raises :class:`HarnessError` with the reason and what to do;
nothing is skipped. Every command inside the root runs in a private mount namespace
(``unshare --mount``) that mounts /proc, /sys and /dev for that command only, so no mount ever
outlives it (a killed run leaves nothing mounted in the cache).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: Debian packages the host needs (installed with apt-get when missing).
HOST_PACKAGES = {"debootstrap": "debootstrap", "qemu-aarch64-static": "qemu-user-static",
                 "update-binfmts": "binfmt-support", "unshare": "util-linux", "chroot": "coreutils"}

#: The arm64 root. Any change here is a new cache key, hence a new root.
ROOT_RECIPE = {
    "suite": "bookworm",  # Python 3.11, glibc 2.36 (tflite-runtime 2.14.0 needs manylinux_2_34)
    "arch": "arm64",
    "variant": "minbase",
    "include": ["python3", "python3-venv", "python3-pip", "ca-certificates"],
    "mirror": "http://deb.debian.org/debian",
    "recipe_version": 1,
}

#: The emulated CPUs, each with the /proc/cpuinfo block it shows (see CPUINFO below):
#: Cortex-A72 = Raspberry Pi 4 (ARMv8.0-A: NEON, no dotprod, no fp16 arithmetic);
#: Cortex-A76 = Raspberry Pi 5 (ARMv8.2-A: dotprod and fp16 arithmetic, so runtimes pick other kernels
#: and OpenVINO infers in f16). Concrete cores, not qemu's "max", so the features are a real board's.
CPUS = {
    "cortex-a72": ("0xd08", "fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid"),
    "cortex-a76": ("0xd0b", "fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm "
                            "lrcpc dcpop asimddp"),
}
QEMU_CPU = "cortex-a72"  # the default: installs, doctor and the self-test run on it

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")


class HarnessError(RuntimeError):
    """The harness cannot do its job here; the message says why and what to do."""


def log(msg: str) -> None:
    print(f"[arm64 {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd: list[str], *, what: str, timeout: float = 1800, env: dict | None = None, capture: bool = True,
       check: bool = True) -> subprocess.CompletedProcess:
    """Run a host command; a failure raises HarnessError with the command's last output lines."""
    try:
        r = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        raise HarnessError(f"{what}: {cmd[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise HarnessError(f"{what}: timed out after {timeout:.0f} s ({' '.join(cmd[:6])} ...)") from None
    if check and r.returncode != 0:
        tail = "\n".join(((r.stdout or "") + (r.stderr or "")).strip().splitlines()[-15:])
        raise HarnessError(f"{what} failed (exit {r.returncode}): {' '.join(cmd[:8])}\n{tail}")
    return r


def key_of(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- host tools
def ensure_root_user() -> None:
    if os.geteuid() != 0:
        raise HarnessError("the arm64 check needs root (apt-get, mount binfmt_misc, debootstrap, chroot): "
                           "run `sudo make test-arm64` (CI runs as root)")


def ensure_host_tools() -> None:
    """Install debootstrap, qemu-user-static and binfmt-support with apt-get where missing."""
    if os.uname().machine != "x86_64":
        raise HarnessError(f"this harness emulates aarch64 on an x86-64 host; this host is {os.uname().machine}")
    missing = sorted({pkg for tool, pkg in HOST_PACKAGES.items() if shutil.which(tool) is None})
    if not missing:
        return
    if shutil.which("apt-get") is None:
        raise HarnessError(f"missing {', '.join(missing)} and there is no apt-get to install them with")
    log(f"installing {' '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    sh(["apt-get", "update", "-q"], what="apt-get update", env=env, timeout=600)
    sh(["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing], what="apt-get install", env=env,
       timeout=900)
    still = sorted(tool for tool in HOST_PACKAGES if shutil.which(tool) is None)
    if still:
        raise HarnessError(f"apt-get installed {' '.join(missing)} but {', '.join(still)} is still not on PATH")


def binfmt_status(binfmt_dir: Path = BINFMT_DIR) -> tuple[bool, str]:
    """(usable, reason) for running aarch64 binaries in a chroot through binfmt_misc."""
    if not (binfmt_dir / "status").is_file():
        return False, f"binfmt_misc is not mounted at {binfmt_dir}"
    if (binfmt_dir / "status").read_text().strip() != "enabled":
        return False, "binfmt_misc is disabled (echo 1 > /proc/sys/fs/binfmt_misc/status)"
    entry = binfmt_dir / "qemu-aarch64"
    if not entry.is_file():
        return False, "no qemu-aarch64 entry is registered in binfmt_misc"
    lines = entry.read_text().splitlines()
    if not lines or lines[0] != "enabled":
        return False, "the qemu-aarch64 binfmt entry is disabled"
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    if "F" not in flags:
        return False, (f"the qemu-aarch64 binfmt entry lacks the F (fix-binary) flag (flags: {flags or 'none'}), so "
                       "the interpreter cannot be found inside a chroot; reinstall qemu-user-static from Debian")
    return True, "qemu-aarch64 registered (flags " + flags + ")"


def ensure_binfmt() -> str:
    """Mount binfmt_misc and enable qemu-aarch64 where needed; the reason when it cannot be done."""
    ok, why = binfmt_status()
    if ok:
        return why
    if not (BINFMT_DIR / "status").is_file():
        r = sh(["mount", "-t", "binfmt_misc", "binfmt_misc", str(BINFMT_DIR)], what="mount binfmt_misc", check=False)
        if r.returncode != 0 and not (BINFMT_DIR / "status").is_file():
            raise HarnessError("cannot mount binfmt_misc (" + (r.stderr.strip() or f"exit {r.returncode}") + "): "
                               "aarch64 emulation needs a VM or a privileged container")
    ok, why = binfmt_status()
    if not ok:
        sh(["update-binfmts", "--enable", "qemu-aarch64"], what="update-binfmts --enable qemu-aarch64", check=False)
        ok, why = binfmt_status()
    if not ok:
        raise HarnessError(f"aarch64 emulation is not available: {why}")
    return why


def qemu_version() -> str:
    r = sh(["qemu-aarch64-static", "--version"], what="qemu-aarch64-static --version")
    return r.stdout.splitlines()[0].strip()


# ----------------------------------------------------------------------------- the arm64 root
def root_key() -> str:
    return key_of(ROOT_RECIPE)


def ensure_root(cache: Path) -> Path:
    """The cached arm64 root for :data:`ROOT_RECIPE` (debootstrap on a miss, ~2-4 min)."""
    root = cache / f"root-{root_key()}"
    ready = root / ".edge-sdk-root-ready"
    if ready.is_file():
        return root
    for stale in [*cache.glob("root-*"), *cache.glob("tmp-root-*")]:  # other recipes, half-built roots: the cache keeps one root
        log(f"removing {stale}")
        _rmtree(stale)
    tmp = cache / f"tmp-root-{root_key()}-{os.getpid()}"
    r = ROOT_RECIPE
    log(f"debootstrap {r['suite']} {r['arch']} ({r['variant']}, {', '.join(r['include'])}) -> {root}")
    t0 = time.monotonic()
    cmd = ["unshare", "--mount", "--propagation", "private", "debootstrap", f"--arch={r['arch']}",
           f"--variant={r['variant']}", "--include=" + ",".join(r["include"]), r["suite"], str(tmp), r["mirror"]]
    try:
        sh(cmd, what="debootstrap of the arm64 root", timeout=1800)
        (tmp / ".edge-sdk-root-ready").write_text(json.dumps(ROOT_RECIPE, indent=1) + "\n")
        os.rename(tmp, root)
    except BaseException:
        _rmtree(tmp)
        raise
    log(f"arm64 root ready in {time.monotonic() - t0:.0f} s")
    return root


def _rmtree(path: Path) -> None:
    if path.exists():
        subprocess.run(["rm", "-rf", "--one-file-system", str(path)], check=False)


def refresh_root_config(root: Path) -> None:
    """DNS and the host's CA bundle for pip inside the root (re-copied each run: they may change)."""
    resolv = Path("/etc/resolv.conf")
    if resolv.exists():
        shutil.copyfile(resolv.resolve(), root / "etc/resolv.conf")
    (root / "etc/edge-sdk").mkdir(exist_ok=True)
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.is_file():
        raise HarnessError(f"{bundle} is missing on the host: pip inside the arm64 root needs the host's CA bundle")
    shutil.copyfile(bundle, root / "etc/edge-sdk/host-ca.crt")
    cpus = len(os.sched_getaffinity(0))  # the /sys the root sees lists the host's CPUs
    for name, (part, features) in CPUS.items():
        text = "".join(CPUINFO.format(i=i, part=part, features=features) for i in range(cpus))
        (root / cpuinfo_file(name).lstrip("/")).write_text(text)


def chroot_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a command in the root (nothing of the host's leaks in but proxies)."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "QEMU_CPU": QEMU_CPU,
           "PIP_CERT": "/etc/edge-sdk/host-ca.crt", "PIP_CONFIG_FILE": "/dev/null",
           "PIP_INDEX_URL": "https://pypi.org/simple", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_CACHE_DIR": "/var/cache/edge-sdk-pip", "PIP_DEFAULT_TIMEOUT": "120", "PYTHONDONTWRITEBYTECODE": "1"}
    for k in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        if os.environ.get(k):
            env[k] = os.environ[k]
    env.update(extra or {})
    return env


#: /proc/cpuinfo as the emulated CPU shows it (qemu 7.2's user mode passes the host's x86 text
#: through; qemu 8.1+ emulates this file itself). With the x86 text and the host's /sys both in
#: view, the cpuinfo library in ai-edge-litert 2.3.0 segfaults creating an interpreter; without
#: /sys, OpenVINO's ARM CPU plugin segfaults (it needs the sysfs CPU topology). A real board has
#: both, consistent: so the root gets the host's /sys and this text for /proc/cpuinfo.
CPUINFO = ("processor\t: {i}\nBogoMIPS\t: 108.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
           "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part}\nCPU revision\t: 0\n\n")


def cpuinfo_file(cpu: str) -> str:
    return f"/etc/edge-sdk/cpuinfo-{cpu}"


MOUNT_SCRIPT = ('set -e; R="$1"; C="$2"; shift 2; mount -t proc proc "$R/proc"; '
                'mount --bind "$R$C" "$R/proc/cpuinfo"; mount -t sysfs sysfs "$R/sys"; '
                'mount --rbind /dev "$R/dev"; exec chroot "$R" /usr/bin/env -i "$@"')


def in_root(root: Path, argv: list[str], *, what: str, timeout: float = 1800, env: dict | None = None,
            check: bool = True, cpu: str = QEMU_CPU) -> subprocess.CompletedProcess:
    """Run ``argv`` inside the root (aarch64 under qemu as ``cpu``), in a private mount namespace."""
    if cpu not in CPUS:
        raise HarnessError(f"no /proc/cpuinfo is written for {cpu}; add it to CPUS")
    assigns = [f"{k}={v}" for k, v in chroot_env({**(env or {}), "QEMU_CPU": cpu}).items()]
    cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", MOUNT_SCRIPT, "sh", str(root),
           cpuinfo_file(cpu), *assigns, *argv]
    return sh(cmd, what=what, timeout=timeout, check=check)


def check_root_runs(root: Path) -> str:
    """Prove aarch64 code runs in the root: uname inside must say aarch64."""
    r = in_root(root, ["/usr/bin/python3", "-c", "import platform; print(platform.machine(), platform.python_version())"],
                what="running python3 inside the arm64 root", timeout=300)
    got = r.stdout.strip()
    if not got.startswith("aarch64 "):
        raise HarnessError(f"the arm64 root does not run aarch64 code (python3 says {got!r})")
    return got
