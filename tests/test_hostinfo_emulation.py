"""User-mode emulation (qemu-user) is detected from fake /proc and /sys trees, and `edge-sdk bench`
says its timings are not the device's when it is — like a fallback — and stays quiet when native.

Under qemu-user, ``uname -m`` answers with the guest's architecture while the kernel's own files
(/proc/sys/kernel/arch, the CPU modalias, /proc/cpuinfo) still describe the host; the trees below
copy what an aarch64 chroot on an x86-64 host and a real aarch64 board show.
"""

from __future__ import annotations

import json

import pytest

from edge_sdk import hostinfo
from edge_sdk.cli import main
from fixtures.power import fakesysfs as fs
from rt_artifacts import onnx_artifacts

X86_CPUINFO = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel name\t: Intel(R) Xeon(R) Processor\n"
               "flags\t\t: fpu vme sse sse2 avx2\n")
ARM_CPUINFO = ("processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\n"
               "CPU architecture: 8\nCPU part\t: 0xd08\n")
QEMU_BINFMT = ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\noffset 0\n"
               "magic 7f454c460201010000000000000000000200b700\n")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("files, expect", [
    ({"/proc/sys/kernel/arch": "x86_64"}, "x86_64"),
    ({"/sys/devices/system/cpu/modalias": "cpu:type:x86,ven0000fam0006mod00A7:feature:,0000,0001"}, "x86"),
    ({"/sys/devices/system/cpu/modalias": "cpu:type:aarch64:feature:,0000,0001,0002"}, "aarch64"),
    ({"/proc/cpuinfo": X86_CPUINFO}, "x86"),
    ({"/proc/cpuinfo": ARM_CPUINFO}, "arm"),
    ({"/proc/sys/kernel/arch": "aarch64", "/proc/cpuinfo": X86_CPUINFO}, "aarch64"),  # the kernel's own word wins
    ({}, None),
])
def test_kernel_arch_sources(tree, files, expect):
    for path, text in files.items():
        fs.put(tree, path, text)
    assert hostinfo.kernel_arch() == expect


def test_aarch64_code_on_an_x86_kernel_is_emulated_and_names_the_interpreter(tree):
    fs.put(tree, "/proc/sys/kernel/arch", "x86_64")
    fs.put(tree, "/proc/sys/fs/binfmt_misc/qemu-aarch64", QEMU_BINFMT)
    why = hostinfo.emulation("aarch64")
    assert why == ("aarch64 code emulated on the host's x86_64 kernel "
                   "(user-mode emulation: qemu binfmt interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P)")


def test_emulation_from_cpuinfo_alone(tree):
    # A chroot without /proc/sys/kernel/arch (older kernels) and without /sys mounted: cpuinfo decides.
    fs.put(tree, "/proc/cpuinfo", X86_CPUINFO)
    assert hostinfo.emulation("aarch64") == "aarch64 code emulated on the host's x86 kernel (user-mode emulation)"
    fs.put(tree, "/proc/cpuinfo", ARM_CPUINFO)
    assert hostinfo.emulation("x86_64") == "x86_64 code emulated on the host's arm kernel (user-mode emulation)"


@pytest.mark.parametrize("code, kernel", [
    ("aarch64", "aarch64"),   # a Raspberry Pi 4/5 with 64-bit OS
    ("armv7l", "aarch64"),    # 32-bit Raspberry Pi OS on a 64-bit kernel: compat mode, native
    ("x86_64", "x86_64"),
    ("i686", "x86_64"),
    ("aarch64", ""),          # kernel arch unreadable: claim nothing
    ("mystery", "x86_64"),    # unknown architecture names: claim nothing
])
def test_native_combinations_are_not_emulated(tree, code, kernel):
    if kernel:
        fs.put(tree, "/proc/sys/kernel/arch", kernel)
    fs.put(tree, "/proc/sys/fs/binfmt_misc/qemu-aarch64", QEMU_BINFMT)  # registered, but not what runs us
    assert hostinfo.emulation(code) is None


def test_disabled_binfmt_entry_is_not_named(tree):
    fs.put(tree, "/proc/sys/kernel/arch", "x86_64")
    fs.put(tree, "/proc/sys/fs/binfmt_misc/qemu-aarch64", QEMU_BINFMT.replace("enabled", "disabled"))
    assert hostinfo.emulation("aarch64").endswith("(user-mode emulation)")


@pytest.fixture(scope="module")
def arts(tmp_path_factory):
    return onnx_artifacts(tmp_path_factory)


@pytest.mark.parametrize("kernel", ["x86_64", "aarch64"])
def test_bench_says_emulated_timings_are_not_the_devices(arts, tree, monkeypatch, capsys, kernel):
    fs.put(tree, "/proc/sys/kernel/arch", kernel)
    monkeypatch.setattr(hostinfo, "machine", lambda: "aarch64")
    j = tree / "r.json"
    code = main(["bench", str(arts["intel-cpu"]), "--runs", "3", "--warmup", "1", "--power", "none",
                 "--json-out", str(j)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    host = json.loads(j.read_text())["environment"]["host"]
    if kernel == "x86_64":
        assert host["emulation"].startswith("aarch64 code emulated on the host's x86_64 kernel")
        assert "warning: timings are not the device's: aarch64 code emulated" in cap.err
        assert "**Emulated: timings are not the device's** (aarch64 code emulated" in cap.out
    else:
        assert host["emulation"] is None
        assert "not the device's" not in cap.err + cap.out
