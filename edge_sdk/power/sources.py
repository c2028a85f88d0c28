"""Power sources: where a device reports how much power it draws, behind one small contract.

Every source is either a **power** source (``read()`` returns the instantaneous watts, rails
already combined) or an **energy** source (``read()`` returns one cumulative counter per
channel, in joules, and ``ranges`` gives each counter's wrap-around range in joules).
Integrating over a window is :mod:`edge_sdk.power.energy`'s job; sources only read.

All sysfs reads go through :mod:`edge_sdk.hostinfo`, so ``EDGE_SDK_SYSFS_ROOT`` redirects them
to a copied (or fake) tree. Sources register by name in :data:`SOURCES`; each class has a
``find()`` that returns a ready instance or raises :class:`SensorUnavailable` with the reason.
Jetson rails (INA3221 and tegrastats) are combined by :func:`edge_sdk.power.rails.combine`.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import threading
from pathlib import PurePosixPath
from typing import ClassVar, Literal

from edge_sdk import hostinfo
from edge_sdk.errors import EdgeSDKError, InputValidationError
from edge_sdk.registry import Registry

from .rails import combine, parse_tegrastats_line

Kind = Literal["power", "energy"]


class SensorUnavailable(EdgeSDKError):
    """A power source cannot be read on this host; ``message`` says why."""


class PowerSource:
    """Base of all sources.

    Attributes:
        name: Registry name (``rapl``, ``ina3221`` ...).
        kind: ``"power"`` (read() -> watts) or ``"energy"`` (read() -> joule counters).
        ranges: For energy sources, each counter's wrap-around range in joules (None: no wrap).
        description: One line for reports: which files / rails / command are read and how combined.
    """

    name: ClassVar[str] = ""
    kind: ClassVar[Kind] = "power"

    def __init__(self, description: str, ranges: list[float | None] | None = None):
        self.description = description
        self.ranges = ranges or []

    @classmethod
    def find(cls) -> "PowerSource":  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self):  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release anything held (subprocesses); safe to call twice."""

    def info(self) -> dict:
        """JSON-ready description used by ``doctor`` and the report."""
        return {"kind": self.kind, "description": self.description}


def _read_number(path: str) -> float:
    text = hostinfo.read_text(path)
    if text is None:
        raise SensorUnavailable(f"{path} is not readable")
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        raise SensorUnavailable(f"{path} does not hold a number ({text[:40]!r})") from None


SOURCES: Registry[type[PowerSource]] = Registry("power source", InputValidationError)


# ----------------------------------------------------------------------------- RAPL
@SOURCES.register("rapl")
class RaplSource(PowerSource):
    """Intel/AMD RAPL energy counters under ``/sys/class/powercap``.

    Only top-level zones (``intel-rapl:N``, one per package, also on AMD Zen, or ``psys`` = the whole
    platform) are summed: sub-zones (``intel-rapl:N:M``, core/uncore/dram) are already
    inside their package, and when ``psys`` exists it alone is used because it contains
    the packages. Counters are microjoules and wrap at ``max_energy_range_uj``.
    """

    name = "rapl"
    kind = "energy"

    def __init__(self, zones: list[str], names: list[str], ranges: list[float | None]):
        super().__init__(
            "RAPL energy counters " + ", ".join(f"{n} ({z}/energy_uj)" for n, z in zip(names, zones)), ranges)
        self.zones = zones
        self.names = names

    @classmethod
    def find(cls) -> "RaplSource":
        zones = [z for z in hostinfo.sysfs_glob("/sys/class/powercap/*")
                 # intel-rapl-mmio:N is the same package domain through MMIO (for power limits): not added again
                 if re.fullmatch(r"(intel-rapl|amd-rapl):\d+", PurePosixPath(z).name)]
        if not zones:
            raise SensorUnavailable("no RAPL zones under /sys/class/powercap (not an Intel/AMD host, "
                                    "or the intel_rapl/amd_energy driver is not loaded)")
        readable, names, ranges, why = [], [], [], []
        for zone in zones:
            name = hostinfo.read_text(f"{zone}/name") or PurePosixPath(zone).name
            try:
                _read_number(f"{zone}/energy_uj")
            except SensorUnavailable as exc:
                # Since Linux 5.10 energy_uj is root-only (CVE-2020-8694 'Platypus').
                why.append(f"{exc.message} (since Linux 5.10 energy_uj is readable by root only)")
                continue
            top = hostinfo.read_text(f"{zone}/max_energy_range_uj")
            readable.append(zone)
            names.append(name)
            ranges.append(float(top) / 1e6 if top and top.isdigit() else None)
        if not readable:
            raise SensorUnavailable("; ".join(why))
        if "psys" in names:
            i = names.index("psys")
            return cls([readable[i]], ["psys"], [ranges[i]])
        return cls(readable, names, ranges)

    def read(self) -> list[float]:
        return [_read_number(f"{z}/energy_uj") / 1e6 for z in self.zones]


# ----------------------------------------------------------------------------- INA3221
@SOURCES.register("ina3221")
class Ina3221Source(PowerSource):
    """Jetson INA3221 power monitors, hwmon (JetPack 5+) or iio (JetPack 4) sysfs layout.

    hwmon: ``inN_label`` names the rail, ``inN_input`` is bus millivolts and ``currN_input``
    milliamps; iio: ``rail_name_N`` and ``in_powerN_input`` in milliwatts. Rails are combined
    by :func:`edge_sdk.power.rails.combine` (the total input rail alone when present).
    """

    name = "ina3221"

    def __init__(self, channels: dict[str, tuple[str, str | None]], used: list[str], method: str):
        super().__init__(f"INA3221 rails: {method}")
        self.channels = channels  # rail -> (power-or-voltage file, current file or None)
        self.used = used
        self.method = method

    @staticmethod
    def _hwmon_dirs() -> list[str]:
        dirs = hostinfo.sysfs_glob("/sys/bus/i2c/drivers/ina3221/*/hwmon/hwmon*")
        for hw in hostinfo.sysfs_glob("/sys/class/hwmon/hwmon*"):
            if (hostinfo.read_text(f"{hw}/name") or "").startswith("ina3221") and hw not in dirs:
                dirs.append(hw)
        return dirs

    @classmethod
    def find(cls) -> "Ina3221Source":
        channels: dict[str, tuple[str, str | None]] = {}
        for hw in cls._hwmon_dirs():
            for label_file in hostinfo.sysfs_glob(f"{hw}/in*_label"):
                n = re.fullmatch(r"in(\d+)_label", PurePosixPath(label_file).name)
                rail = hostinfo.read_text(label_file) or ""
                if n and hostinfo.read_text(f"{hw}/curr{n.group(1)}_input") is not None:
                    channels[rail] = (f"{hw}/in{n.group(1)}_input", f"{hw}/curr{n.group(1)}_input")
        for dev in hostinfo.sysfs_glob("/sys/bus/i2c/drivers/ina3221x/*/iio:device*"):
            for name_file in hostinfo.sysfs_glob(f"{dev}/rail_name_*"):
                n = name_file.rsplit("_", 1)[1]
                rail = hostinfo.read_text(name_file) or ""
                if hostinfo.read_text(f"{dev}/in_power{n}_input") is not None:
                    channels[rail] = (f"{dev}/in_power{n}_input", None)
        if not channels:
            raise SensorUnavailable("no readable INA3221 rails (hwmon under /sys/bus/i2c/drivers/ina3221 "
                                    "or iio under /sys/bus/i2c/drivers/ina3221x): not a Jetson, or no permission")
        try:
            used, method = combine(list(channels))
        except ValueError as exc:
            raise SensorUnavailable(f"INA3221: {exc}") from None
        return cls(channels, used, method)

    def rail_watts(self, rail: str) -> float:
        first, curr = self.channels[rail]
        if curr is None:
            return _read_number(first) / 1000.0  # iio in_powerN_input: mW
        return _read_number(first) * _read_number(curr) / 1e6  # hwmon: mV * mA

    def read(self) -> float:
        return sum(self.rail_watts(r) for r in self.used)


# ----------------------------------------------------------------------------- generic hwmon
@SOURCES.register("hwmon")
class HwmonSource(PowerSource):
    """Generic hwmon power/energy: ``energyN_input`` (microjoule counters) when any exist,
    else ``powerN_input`` / ``powerN_average`` (microwatts), summed over devices.

    INA3221 devices are left to the ``ina3221`` source (their rails overlap, so summing them
    blindly would double count the total rail).
    """

    name = "hwmon"

    def __init__(self, files: list[str], kind: Kind):
        self.kind = kind  # type: ignore[misc] - per instance: hwmon may expose either
        super().__init__(f"hwmon {kind}: " + ", ".join(files), [None] * len(files) if kind == "energy" else None)
        self.files = files

    @classmethod
    def find(cls) -> "HwmonSource":
        energy, power = [], []
        for hw in hostinfo.sysfs_glob("/sys/class/hwmon/hwmon*"):
            if (hostinfo.read_text(f"{hw}/name") or "").startswith("ina3221"):
                continue
            energy += [f for f in hostinfo.sysfs_glob(f"{hw}/energy*_input") if hostinfo.read_text(f) is not None]
            found = [f for f in hostinfo.sysfs_glob(f"{hw}/power*_input") if hostinfo.read_text(f) is not None]
            if not found:
                found = [f for f in hostinfo.sysfs_glob(f"{hw}/power*_average") if hostinfo.read_text(f) is not None]
            power += found
        if energy:
            return cls(energy, "energy")
        if power:
            return cls(power, "power")
        raise SensorUnavailable("no readable power*_input / energy*_input under /sys/class/hwmon")

    def read(self):
        values = [_read_number(f) / 1e6 for f in self.files]
        return values if self.kind == "energy" else sum(values)


# ----------------------------------------------------------------------------- NVML
@SOURCES.register("nvml")
class NvmlSource(PowerSource):
    """NVIDIA GPU board power: NVML through ``pynvml`` when importable, else ``nvidia-smi``.

    With NVML on Volta and newer GPUs the board's energy counter
    (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver loaded) is used, so the
    window's energy is a counter difference; otherwise power readings are sampled. Both
    report the GPU board only, not the host; the description says so.
    """

    name = "nvml"

    def __init__(self, description: str, handle=None, smi: str | None = None, energy: bool = False):
        self.kind = "energy" if energy else "power"  # type: ignore[misc] - per instance
        super().__init__(description, [None] if energy else None)
        self._handle = handle
        self._smi = smi

    @classmethod
    def find(cls) -> "NvmlSource":
        try:
            import pynvml  # type: ignore[import-not-found]

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - pynvml missing or no driver: try nvidia-smi next
            handle = None
        if handle is not None:
            try:
                pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
                return cls("NVML nvmlDeviceGetTotalEnergyConsumption, GPU 0 board energy counter (not the host)",
                           handle=handle, energy=True)
            except Exception:  # noqa: BLE001 - pre-Volta GPUs: NVML_ERROR_NOT_SUPPORTED
                pass
            try:
                pynvml.nvmlDeviceGetPowerUsage(handle)
                return cls("NVML nvmlDeviceGetPowerUsage, GPU 0 board power (not the host)", handle=handle)
            except Exception:  # noqa: BLE001
                pass
        smi = shutil.which("nvidia-smi")
        if smi is None:
            raise SensorUnavailable("neither pynvml (with a working driver) nor nvidia-smi is available")
        src = cls("nvidia-smi --query-gpu=power.draw, GPU 0 board power (not the host)", smi=smi)
        src.read()
        return src

    def read(self):
        if self._handle is not None:
            import pynvml  # type: ignore[import-not-found]

            if self.kind == "energy":
                return [pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000.0]
            return pynvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
        try:
            out = subprocess.run([self._smi, "--query-gpu=power.draw", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=5).stdout
            return float(out.strip().splitlines()[0])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
            raise SensorUnavailable(f"nvidia-smi gave no power reading ({exc})") from None


# ----------------------------------------------------------------------------- streaming commands
class _StreamingSource(PowerSource):
    """A long-running command printing one reading per line; ``read()`` returns the latest."""

    def __init__(self, description: str, argv: list[str]):
        super().__init__(description)
        self.argv = argv
        self._latest: float | None = None
        self._error: str | None = None
        self._ready = threading.Event()
        try:
            self._proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as exc:
            raise SensorUnavailable(f"cannot start {argv[0]}: {exc.strerror}") from None
        self._thread = threading.Thread(target=self._pump, name=f"edge-sdk-{self.name}", daemon=True)
        self._thread.start()
        if not self._ready.wait(5.0) or self._latest is None:
            self.close()
            raise SensorUnavailable(f"{' '.join(argv)} printed no power reading within 5 s"
                                    + (f" ({self._error})" if self._error else ""))

    def parse(self, line: str) -> float | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _pump(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                value = self.parse(line)
            except ValueError as exc:
                self._error = str(exc)
                continue
            if value is not None:
                self._latest = value
                self._ready.set()
        self._ready.set()

    def read(self) -> float:
        if self._latest is None:
            raise SensorUnavailable(f"{self.argv[0]} stopped printing readings")
        return self._latest

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self._proc.kill()


@SOURCES.register("tegrastats")
class TegrastatsSource(_StreamingSource):
    """``tegrastats --interval MS``: the Jetson fallback when the INA3221 sysfs is not readable.

    tegrastats refreshes on its own interval, so samples repeat between its lines; the
    interval is set to the sampler's (minimum 10 ms, what tegrastats accepts).
    """

    name = "tegrastats"
    interval_ms = 50

    def __init__(self, argv: list[str]):
        self.method = ""
        super().__init__("tegrastats", argv)
        self.description = f"tegrastats rails: {self.method}"

    @classmethod
    def find(cls) -> "TegrastatsSource":
        exe = shutil.which("tegrastats")
        if exe is None:
            raise SensorUnavailable("tegrastats is not on PATH (not a Jetson)")
        return cls([exe, "--interval", str(max(10, cls.interval_ms))])

    def parse(self, line: str) -> float | None:
        rails = parse_tegrastats_line(line)
        if not rails:
            return None
        used, self.method = combine(list(rails))
        return sum(rails[r] for r in used) / 1000.0


@SOURCES.register("cmd")
class CommandSource(PowerSource):
    """An external meter: a command run once per sample whose output is watts.

    The first number in its output is the reading (``4.2``, ``4.2 W``, ``power=4.2``).
    """

    name = "cmd"

    def __init__(self, command: str):
        super().__init__(f"external command: {command}")
        try:
            self.argv = shlex.split(command)
        except ValueError as exc:
            raise InputValidationError(f"--power cmd:{command!r} cannot be parsed ({exc}).",
                                       'Quote it like --power \'cmd:my-meter --watts\'.') from None
        if not self.argv:
            raise InputValidationError("--power cmd: needs a command.", "Example: --power 'cmd:cat /tmp/watts'")

    @classmethod
    def find(cls) -> "CommandSource":
        raise SensorUnavailable("the external command source is only used when asked for (--power cmd:...)")

    def read(self) -> float:
        try:
            r = subprocess.run(self.argv, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SensorUnavailable(f"power command {self.argv[0]!r} failed: {exc}") from None
        m = re.search(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", r.stdout)
        if r.returncode != 0 or m is None:
            raise SensorUnavailable(f"power command {self.argv[0]!r} printed no number "
                                    f"(exit {r.returncode}, output {r.stdout[:60]!r})")
        return float(m.group(0))


#: The order ``auto`` tries when the profile names no sensors.
AUTO_ORDER = ("ina3221", "rapl", "nvml", "hwmon", "tegrastats")
