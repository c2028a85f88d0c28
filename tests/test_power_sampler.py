"""Energy per inference from fake sensor trees that a writer thread updates during the measured window.

The writer makes the fake sensors draw known watts; the check is our handling (window
alignment, counter wrap-around, rail selection, idle subtraction), with a tolerance for
thread scheduling on a shared CI host, not a performance assertion.
"""

import time

import pytest

from edge_sdk.power import PowerMonitor
from edge_sdk.power.sampler import Sampler
from fixtures.power import fakesysfs as fs


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    return tmp_path


def _window(mon: PowerMonitor, seconds: float, inferences: int) -> dict:
    mon.start()
    try:
        t0 = mon.mark()
        time.sleep(seconds)
        t1 = mon.mark()
    finally:
        mon.stop()
    return mon.result(t0, t1, inferences)


def test_rapl_energy_with_wraparound_and_subzone_excluded(root):
    span = 1_000_000  # 1 J: at 7.5 W the counters wrap several times in the window
    fs.rapl_tree(root, {"intel-rapl:0": "package-0", "intel-rapl:0:0": "core", "intel-rapl:1": "package-1"}, span)
    with fs.rapl_writer(root, {"intel-rapl:0": 5.0, "intel-rapl:0:0": 3.0, "intel-rapl:1": 2.5}, span):
        mon = PowerMonitor("rapl", interval_s=0.01)
        block = _window(mon, 0.8, inferences=100)
    mon.close()
    assert block["available"] is True, block["reason"]
    assert block["source"] == "rapl"
    assert block["avg_w"] == pytest.approx(7.5, rel=0.1)  # packages only: the core sub-zone is inside package-0
    assert block["energy_per_inference_mj"] == pytest.approx(block["energy_j"] * 1000 / 100)
    assert block["energy_per_inference_mj"] == pytest.approx(7.5 * 0.8 * 1000 / 100, rel=0.12)
    assert block["counter_wraps"] >= 4
    assert block["samples"] >= 20


def test_ina3221_rails_with_changing_load_and_idle_baseline(root):
    fs.ina3221_hwmon_tree(root, {"VDD_IN": (5000, 800), "VDD_CPU_GPU_CV": (5000, 300), "VDD_SOC": (5000, 200)})
    state = {"busy": False}

    def step(t):
        # idle: 4 W on VDD_IN; busy: a square wave 5 W / 7 W (avg 6 W); sub-rails move too
        ma = 800 if not state["busy"] else (1000 if int(t / 0.01) % 2 else 1400)
        fs.put(root, f"{fs.ORIN_HWMON}/curr1_input", ma)
        fs.put(root, f"{fs.ORIN_HWMON}/curr2_input", ma // 3)

    with fs.Writer(step):
        mon = PowerMonitor("auto", preferred=["ina3221"], interval_s=0.005)
        idle = mon.measure_idle(0.3)
        state["busy"] = True
        time.sleep(0.05)
        block = _window(mon, 0.8, inferences=200)
    mon.close()
    assert idle == pytest.approx(4.0, rel=0.02)
    assert block["available"] is True and block["source"] == "ina3221"
    assert block["avg_w"] == pytest.approx(6.0, rel=0.08)  # VDD_IN only: summing would give ~8 W
    assert block["idle_w"] == pytest.approx(4.0, rel=0.02)
    assert block["above_idle_w"] == pytest.approx(block["avg_w"] - block["idle_w"])
    assert block["energy_per_inference_above_idle_mj"] < block["energy_per_inference_mj"]
    assert block["series"] and all(len(p) == 2 for p in block["series"])


def test_sensor_that_disappears_mid_run_is_reported_not_zero(root):
    fs.ina3221_hwmon_tree(root, {"VDD_IN": (5000, 800)})
    mon = PowerMonitor("ina3221", interval_s=0.01)
    mon.start()
    t0 = mon.mark()
    (root / fs.ORIN_HWMON.lstrip("/") / "curr1_input").unlink()
    time.sleep(0.05)
    t1 = mon.mark()
    mon.stop()
    block = mon.result(t0, t1, 10)
    assert block["available"] is False and "not readable" in block["reason"] and block["avg_w"] is None


def test_sampler_marks_bracket_the_window():
    values = iter(range(10_000))
    s = Sampler(lambda: next(values), 0.005).start()
    a = s.mark()
    time.sleep(0.05)
    b = s.mark()
    s.stop()
    pts = s.between(a, b)
    assert pts[0][0] == a and pts[-1][0] == b
    assert [v for _, v in pts] == sorted(v for _, v in pts)
    with pytest.raises(ValueError):
        Sampler(lambda: 0, 0)


def test_nvml_energy_counter_through_a_fake_pynvml(root, monkeypatch):
    """No NVIDIA GPU here: a stand-in pynvml whose energy counter grows at 50 W checks our handling."""
    import sys
    import types

    t0 = time.perf_counter()
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: "gpu0",
        nvmlDeviceGetTotalEnergyConsumption=lambda h: int(1e6 + 50_000 * (time.perf_counter() - t0)),  # mJ
        nvmlDeviceGetPowerUsage=lambda h: 50_000)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    mon = PowerMonitor("nvml", interval_s=0.01)
    assert mon.source.kind == "energy" and "not the host" in mon.source.description
    block = _window(mon, 0.3, inferences=30)
    assert block["available"] and block["avg_w"] == pytest.approx(50.0, rel=0.02)
    def not_supported(handle):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")

    fake.nvmlDeviceGetTotalEnergyConsumption = not_supported
    mon = PowerMonitor("nvml", interval_s=0.01)  # pre-Volta: no energy counter, sampled power instead
    assert mon.source.kind == "power"
    block = _window(mon, 0.1, inferences=10)
    assert block["avg_w"] == pytest.approx(50.0)
