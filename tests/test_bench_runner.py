"""edge_sdk.benchmark on real tiny artifacts (OpenVINO IR, int8 QDQ ONNX) through the real runtime facade.

Checks what the report says and that its figures are consistent with each other, never how
fast anything is. Power runs against fake RAPL / INA3221 trees that a writer thread updates
while the timed loop runs.
"""

import pytest

import edge_sdk
from edge_sdk.bench import benchmark
from edge_sdk.bench.runner import make_feed
from edge_sdk.errors import DelegateUnavailableError, InputValidationError, ModelLoadError
from edge_sdk.manifest import TensorSpec
from fixtures.power import fakesysfs as fs
from rt_artifacts import onnx_artifacts


@pytest.fixture(scope="session")
def arts(tmp_path_factory):
    return onnx_artifacts(tmp_path_factory)


@pytest.fixture(scope="session")
def convert_out(arts):
    return arts["intel-cpu"].parent  # a `convert`-style folder: intel-cpu, intel-npu, jetson-orin


def _consistent(r, runs):
    lat = r.latency_ms
    assert lat["count"] == runs == r.runs == len(r.samples_ms) and r.samples_stride == 1
    assert lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]
    assert lat["min"] <= lat["mean"] <= lat["max"] and lat["std"] >= 0
    assert r.throughput_ips == pytest.approx(runs / r.wall_s)
    assert r.load_ms > 0 and r.first_inference_ms > 0 and r.cpu_time_s >= 0
    assert r.peak_rss_mb >= r.rss_after_load_mb > 0
    assert r.inference_ms is not None and r.inference_ms["p50"] <= lat["p50"]  # backend time is inside ours


def test_convert_folder_runs_native_profiles_and_says_what_it_skipped(convert_out):
    rep = benchmark(convert_out, runs=25, warmup=2)
    assert [r.profile for r in rep.results] == ["intel-cpu"]
    r = rep.results[0]
    _consistent(r, 25)
    assert r.backend == "openvino/CPU" and r.delegate == "CPU" and not r.fallback
    assert r.precision  # as reported by OpenVINO (INFERENCE_PRECISION_HINT), else the manifest's
    skipped = {s["name"].split("/")[-1]: s["reason"] for s in rep.skipped}
    assert set(skipped) == {"jetson-orin", "intel-npu"}
    assert "fallback" in skipped["jetson-orin"] and "TensorrtExecutionProvider" in skipped["jetson-orin"]
    # no sensor on this host: unavailable with the reason, never a zero
    assert r.power["available"] is False and r.power["reason"] and r.power["avg_w"] is None
    env = rep.environment
    assert env["host"]["cpu_count"] >= 1 and "openvino" in env["runtime_versions"]


def test_profile_pick_runs_fallback_and_reports_it(convert_out):
    with pytest.warns(UserWarning, match="jetson-orin: running on onnxruntime/CPUExecutionProvider"):
        rep = benchmark(convert_out, profile="jetson", runs=10, warmup=1, power="none", threads=1)
    (r,) = rep.results
    assert r.profile == "jetson-orin" and r.backend == "onnxruntime/CPUExecutionProvider" and r.fallback
    assert r.threads == 1 and "disabled" in r.power["reason"]
    assert r.runtime["peak_rss_scope"] == "this artifact"
    with pytest.raises(DelegateUnavailableError):
        benchmark(convert_out, profile="jetson", runs=3, warmup=0, power="none", strict=True)
    with pytest.raises(InputValidationError, match="coral"):
        benchmark(convert_out, profile="coral", runs=3)


def test_nothing_native_is_one_clear_error(arts, tmp_path):
    import shutil

    shutil.copytree(arts["jetson-orin"], tmp_path / "out" / "jetson-orin")
    with pytest.raises(DelegateUnavailableError) as exc:
        benchmark(tmp_path / "out", runs=3)
    assert "--profile" in exc.value.hint


def test_single_artifact_duration_mode_and_end_to_end(arts, tmp_path):
    from PIL import Image

    img = tmp_path / "img.png"
    Image.new("RGB", (20, 12), (10, 200, 30)).save(img)
    rep = edge_sdk.benchmark(arts["intel-cpu"], duration_s=0.3, warmup=1, image=str(img), power="none")
    (r,) = rep.results
    assert r.end_to_end and r.runs >= 1 and r.wall_s >= 0.3
    _consistent(r, r.runs)


def test_bad_options_fail_before_running(arts):
    for kwargs in ({"runs": 0}, {"warmup": -1}, {"duration_s": 0.0}, {"threads": 0}, {"idle_s": -2},
                   {"sample_interval_s": 0.0}):
        with pytest.raises(InputValidationError):
            benchmark(arts["intel-cpu"], **kwargs)
    with pytest.raises(InputValidationError):
        benchmark(arts["intel-cpu"], fail_if=["p99 > 1"])
    with pytest.raises(InputValidationError):
        benchmark(arts["intel-cpu"], power="thermometer")
    with pytest.raises(ModelLoadError):
        benchmark(arts["float_onnx"].parent / "no-such-folder")
    with pytest.raises(InputValidationError, match="--image"):
        benchmark(arts["intel-cpu"], image=str(arts["float_onnx"]))  # not an image


def test_gates_and_two_artifacts_side_by_side(arts):
    rep = benchmark([arts["intel-cpu"], arts["intel-cpu"]], runs=10, warmup=1, power="none",
                    fail_if=["p99_ms>100000", "p50_ms>0"])
    assert len(rep.results) == 2 and rep.gates_checked == ["p99_ms>100000", "p50_ms>0"]
    assert len(rep.gates_failed) == 2 and all("p50_ms = " in f for f in rep.gates_failed)
    md = rep.to_dict()
    assert md["schema_version"] == 1 and md["gates"]["failed"] == rep.gates_failed


def test_energy_per_inference_on_fake_rapl_during_the_run(arts, tmp_path, monkeypatch):
    span = 3_000_000
    fs.rapl_tree(tmp_path, {"intel-rapl:0": "package-0", "intel-rapl:0:0": "core"}, span)
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    with fs.rapl_writer(tmp_path, {"intel-rapl:0": 12.0, "intel-rapl:0:0": 4.0}, span):
        rep = benchmark(arts["intel-cpu"], duration_s=0.6, warmup=1, power="auto", idle_s=0.2,
                        sample_interval_s=0.01)
    p = rep.results[0].power
    assert p["available"] is True and p["source"] == "rapl", p["reason"]
    assert p["avg_w"] == pytest.approx(12.0, rel=0.1) and p["idle_w"] == pytest.approx(12.0, rel=0.1)
    assert p["counter_wraps"] >= 1 and p["samples"] >= 10
    runs = rep.results[0].runs
    assert p["energy_per_inference_mj"] == pytest.approx(p["energy_j"] * 1000 / runs)


def test_energy_per_inference_on_fake_ina3221_during_the_run(arts, tmp_path, monkeypatch):
    fs.ina3221_hwmon_tree(tmp_path, {"VDD_IN": (5000, 1000), "VDD_CPU_GPU_CV": (5000, 400), "VDD_SOC": (5000, 300)})
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    with fs.Writer(lambda t: fs.put(tmp_path, f"{fs.ORIN_HWMON}/curr1_input", 1200 if int(t / 0.01) % 2 else 1000)):
        rep = benchmark(arts["intel-cpu"], duration_s=0.6, warmup=1, power="ina3221", sample_interval_s=0.005)
    p = rep.results[0].power
    assert p["available"] is True and "VDD_IN" in p["description"]
    assert p["avg_w"] == pytest.approx(5.5, rel=0.08)  # VDD_IN only (5 W / 6 W square wave)
    assert p["energy_per_inference_mj"] > 0


def test_make_feed_matches_specs():
    feed = make_feed([TensorSpec("a", [1, 3], "float32"), TensorSpec("b", [2], "uint8"), TensorSpec("c", [2], "int8")])
    assert feed["a"].shape == (1, 3) and str(feed["a"].dtype) == "float32"
    assert str(feed["b"].dtype) == "uint8" and str(feed["c"].dtype) == "int8"


def test_long_runs_keep_all_statistics_but_thin_the_stored_samples(arts, monkeypatch):
    from edge_sdk.bench import runner

    monkeypatch.setattr(runner, "MAX_SAMPLES", 7)
    (r,) = benchmark(arts["intel-cpu"], runs=20, warmup=0, power="none").results
    assert r.latency_ms["count"] == 20 and r.samples_stride == 3 and len(r.samples_ms) == 7
