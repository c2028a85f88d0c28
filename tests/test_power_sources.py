"""Power sources on fake sysfs trees (EDGE_SDK_SYSFS_ROOT), tegrastats formats, commands, discovery."""

import json
import sys
from pathlib import Path

import pytest

from edge_sdk.errors import InputValidationError
from edge_sdk.power import PowerMonitor, discover, open_source
from edge_sdk.power.rails import combine, parse_tegrastats_line
from edge_sdk.power.sources import Ina3221Source, RaplSource, SensorUnavailable
from fixtures.power import fakesysfs as fs

FIXTURES = Path(__file__).parent / "fixtures" / "power"


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "root"
    r.mkdir()
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(r))
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))  # no tegrastats / nvidia-smi
    return r


def test_no_sensor_is_unavailable_with_reason_never_zero(root):
    mon = PowerMonitor("auto")
    block = mon.result(None, None, 10)
    assert block["available"] is False and block["avg_w"] is None and block["energy_per_inference_mj"] is None
    assert "rapl" in block["reason"] and "ina3221" in block["reason"]
    found = discover()
    assert set(found) == {"rapl", "ina3221", "nvml", "hwmon", "tegrastats"}
    assert not any(v["available"] for v in found.values()) and all(v["reason"] for v in found.values())
    json.dumps(found)


def test_rapl_sums_packages_not_subzones(root):
    fs.rapl_tree(root, {"intel-rapl:0": "package-0", "intel-rapl:0:0": "core", "intel-rapl:1": "package-1",
                        "intel-rapl-mmio:0": "package-0"})
    fs.put(root, "/sys/class/powercap/intel-rapl:0/energy_uj", 2_000_000)
    fs.put(root, "/sys/class/powercap/intel-rapl:1/energy_uj", 500_000)
    src = RaplSource.find()
    assert src.names == ["package-0", "package-1"]
    assert src.read() == [2.0, 0.5]
    assert src.ranges[0] == pytest.approx(262143.32885)
    assert discover()["rapl"]["available"] is True


def test_rapl_prefers_psys(root):
    fs.rapl_tree(root, {"intel-rapl:0": "package-0", "intel-rapl:1": "psys"})
    assert RaplSource.find().names == ["psys"]


def test_rapl_unreadable_counter_says_why(root):
    fs.put(root, "/sys/class/powercap/intel-rapl:0/name", "package-0")
    with pytest.raises(SensorUnavailable, match="root only"):
        RaplSource.find()


def test_ina3221_hwmon_orin_uses_total_rail_only(root):
    fs.ina3221_hwmon_tree(root, {"VDD_IN": (5000, 1200), "VDD_CPU_GPU_CV": (5000, 300), "VDD_SOC": (5000, 200)})
    src = Ina3221Source.find()
    assert src.used == ["VDD_IN"]
    assert src.read() == pytest.approx(6.0)
    assert "total rail VDD_IN" in src.description


def test_ina3221_iio_xavier_sums_rails_and_nano_uses_pom_5v_in(root):
    fs.ina3221_iio_tree(root, {"1-0040": {"GPU": 1000, "CPU": 311, "SOC": 1243},
                               "1-0041": {"CV": 0, "VDDRQ": 155, "SYS5V": 2004}})
    src = Ina3221Source.find()
    assert sorted(src.used) == ["CPU", "CV", "GPU", "SOC", "SYS5V", "VDDRQ"]
    assert src.read() == pytest.approx(4.713)


def test_ina3221_nano_iio(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    fs.ina3221_iio_tree(tmp_path, {"6-0040": {"POM_5V_IN": 2867, "POM_5V_GPU": 0, "POM_5V_CPU": 723}})
    assert Ina3221Source.find().read() == pytest.approx(2.867)


def test_combine_rules():
    assert combine(["VDD_IN", "VDD_SOC"])[0] == ["VDD_IN"]
    assert combine(["NC", "VDD_GPU_SOC", "VDD_CPU_CV"])[0] == ["VDD_GPU_SOC", "VDD_CPU_CV"]
    # TX2: module and carrier board in parallel; their sub-rails are not added
    assert combine(["VDD_SYS_GPU", "VDD_SYS_SOC", "VDD_IN", "VDD_SYS_CPU", "VDD_MUX", "VDD_5V0_IO_SYS"])[0] == \
        ["VDD_IN", "VDD_MUX"]
    assert combine(["5V_IN", "VDD_CPU_GPU", "VDD_SOC"])[0] == ["5V_IN"]
    with pytest.raises(ValueError):
        combine(["NC", "sum of shunt voltages"])


@pytest.mark.parametrize("sample,rails,total_mw", [
    ("tegrastats_jp4_nano.txt", {"POM_5V_IN": 2867, "POM_5V_GPU": 0, "POM_5V_CPU": 723}, 2867),
    ("tegrastats_jp4_xavier.txt", {"GPU": 0, "CPU": 311, "SOC": 1243, "CV": 0, "VDDRQ": 155, "SYS5V": 2004}, 3713),
    ("tegrastats_jp5_orin_nx.txt", {"VDD_IN": 5000, "VDD_CPU_GPU_CV": 1234, "VDD_SOC": 1200}, 5000),
    ("tegrastats_jp6_agx_orin.txt", {"VDD_GPU_SOC": 3000, "VDD_CPU_CV": 800, "VIN_SYS_5V0": 3500, "NC": 0,
                                     "VDDQ_VDD2_1V8AO": 400}, 7700),
])
def test_tegrastats_formats(sample, rails, total_mw):
    line = (FIXTURES / sample).read_text().splitlines()[0]
    parsed = parse_tegrastats_line(line)
    assert parsed == rails  # RAM/SWAP/IRAM/CPU [..] fields are not taken for rails
    used, _ = combine(list(parsed))
    assert sum(parsed[r] for r in used) == total_mw


def test_tegrastats_line_without_rails():
    assert parse_tegrastats_line("RAM 2000/7000MB (lfb 1x4MB) SWAP 0/3000MB (cached 0MB)") == {}


def test_tegrastats_source_reads_streaming_command(root, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fs.tegrastats_script(tmp_path, "tegrastats_jp5_orin_nx.txt")) + ":/usr/bin:/bin")
    src, why = open_source("tegrastats")
    try:
        assert why == "" and src.name == "tegrastats"
        assert src.read() in (5.0, 9.0)  # VDD_IN only, from one of the two lines
        assert "VDD_IN" in src.description
    finally:
        src.close()


def test_nvidia_smi_fallback(root, tmp_path, monkeypatch):
    bindir = tmp_path / "smi"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho 42.50\n")
    (bindir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    src, why = open_source("nvml")
    assert src is not None, why
    assert src.read() == pytest.approx(42.5) and "not the host" in src.description


def test_external_command_source(root):
    src, why = open_source(f"cmd:{sys.executable} -c \"print('power=3.25 W')\"")
    assert src is not None and src.read() == pytest.approx(3.25)
    none, why = open_source(f"cmd:{sys.executable} -c \"print('no number')\"")
    assert none is None and "no number" in why


@pytest.mark.parametrize("spec", ["watts", "rapl2", "cmd:", "cmd:'unterminated"])
def test_bad_power_spec_is_input_error(spec):
    with pytest.raises(InputValidationError):
        open_source(spec)


def test_power_none_says_disabled(root):
    src, why = open_source("none")
    assert src is None and "disabled" in why


def test_doctor_lists_fake_sensors(root):
    from edge_sdk import doctor

    fs.ina3221_hwmon_tree(root, {"VDD_IN": (5000, 1000), "VDD_SOC": (5000, 100)})
    sensors = doctor.collect()["power_sensors"]
    assert sensors["ina3221"]["available"] is True and "VDD_IN" in sensors["ina3221"]["description"]


def test_generic_hwmon_power_and_energy(root):
    fs.put(root, "/sys/class/hwmon/hwmon0/name", "ina3221")  # left to the ina3221 source
    fs.put(root, "/sys/class/hwmon/hwmon0/power1_input", 99_000_000)
    fs.put(root, "/sys/class/hwmon/hwmon2/name", "amdgpu")
    fs.put(root, "/sys/class/hwmon/hwmon2/power1_average", 12_500_000)
    src, why = open_source("hwmon")
    assert src is not None, why
    assert src.kind == "power" and src.read() == pytest.approx(12.5)
    fs.put(root, "/sys/class/hwmon/hwmon3/name", "platform_meter")
    fs.put(root, "/sys/class/hwmon/hwmon3/energy1_input", 3_000_000)
    src, _ = open_source("hwmon")
    assert src.kind == "energy" and src.read() == [3.0]  # counters win: exact energy over the window


def test_tegrastats_power_over_a_window(root, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(fs.tegrastats_script(tmp_path, "tegrastats_jp6_agx_orin.txt")) + ":/usr/bin:/bin")
    import time

    mon = PowerMonitor("auto", preferred=["ina3221", "tegrastats"], interval_s=0.01)
    try:
        mon.start()
        t0 = mon.mark()
        time.sleep(0.2)
        t1 = mon.mark()
        mon.stop()
        block = mon.result(t0, t1, 4)
    finally:
        mon.close()
    assert block["source"] == "tegrastats" and block["available"] is True
    assert block["avg_w"] == pytest.approx(7.7)  # AGX Orin: no total rail, NC ignored
    assert block["energy_per_inference_mj"] == pytest.approx(7.7 * (t1 - t0) * 1000 / 4)
