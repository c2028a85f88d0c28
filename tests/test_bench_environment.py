"""The environment recorded next to the numbers, read from a fake Jetson-like sysfs tree."""

import json

from edge_sdk.bench import environment
from fixtures.power import fakesysfs as fs


def test_environment_from_fake_jetson_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    fs.put(tmp_path, "/proc/cpuinfo", "processor\t: 0\nmodel name\t: ARMv8 Processor rev 1 (v8l)\n")
    fs.put(tmp_path, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "schedutil")
    fs.put(tmp_path, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq", 1984000)
    fs.put(tmp_path, "/sys/devices/system/cpu/cpu1/cpufreq/scaling_cur_freq", 729600)
    fs.put(tmp_path, "/sys/class/thermal/thermal_zone0/type", "cpu-thermal")
    fs.put(tmp_path, "/sys/class/thermal/thermal_zone0/temp", 45500)
    fs.put(tmp_path, "/sys/class/devfreq/17000000.ga10b/cur_freq", 612000000)
    fs.put(tmp_path, "/etc/nv_tegra_release", "# R35 (release), REVISION: 4.1, GCID: 33958178")
    fs.put(tmp_path, "/var/lib/nvpmodel/status", "pmode:0002 fmode:quiet")
    env = environment.collect()
    assert env["host"]["cpu_model"] == "ARMv8 Processor rev 1 (v8l)"
    assert env["governor"] == "schedutil"
    assert env["cpu_clocks_mhz"] == {"cpu0": 1984.0, "cpu1": 729.6}
    assert env["devfreq_clocks_mhz"] == {"17000000.ga10b": 612.0}
    assert env["temperatures_c"] == {"cpu-thermal": 45.5}
    assert env["jetson_release"].startswith("# R35") and env["jetson_power_mode"] == "pmode:0002 fmode:quiet"
    assert "numpy" in env["runtime_versions"]
    json.dumps(env)


def test_environment_on_a_bare_tree_is_missing_not_wrong(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    env = environment.collect()
    assert env["governor"] is None and env["temperatures_c"] == {} and env["jetson_power_mode"] is None
