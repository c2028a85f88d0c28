"""Report schema, Markdown side-by-side ratios, atomic JSON, and the PNG plot (with a power panel)."""

import json

from edge_sdk.bench.plot import write_plot
from edge_sdk.bench.report import SCHEMA_VERSION, BenchReport, BenchResult, to_markdown
from edge_sdk.bench.stats import summarize


def _result(name, samples, power=None):
    return BenchResult(
        name=name, artifact=f"/a/{name}", profile="intel-cpu", backend="openvino/CPU", delegate="CPU",
        precision="int8", threads=2, runs=len(samples), warmup=1, load_ms=10.0, first_inference_ms=3.0,
        latency_ms=summarize(samples), throughput_ips=1000.0 / summarize(samples)["mean"], peak_rss_mb=100.0,
        rss_growth_mb=0.0, cpu_time_s=0.5,
        power=power or {"source": None, "available": False, "reason": "no power sensor readable here",
                        "avg_w": None, "energy_per_inference_mj": None, "idle_w": None, "samples": 0},
        samples_ms=samples)


def test_markdown_ratios_against_first():
    rep = BenchReport([_result("fp32", [2.0] * 10), _result("int8", [1.0] * 10)], {"host": {"cpu_model": "X"}})
    md = to_markdown(rep)
    p50 = next(line for line in md.splitlines() if line.startswith("| p50 (ms)"))
    assert p50 == "| p50 (ms) | 2 | 1 (×0.50) |"
    assert "Ratios (×) are against the first column (fp32)" in md
    assert "n/a (no power sensor readable here)" in md


def test_json_schema_and_atomic_write(tmp_path):
    rep = BenchReport([_result("a", [1.0, 2.0, 3.0])], {"host": {}}, skipped=[{"name": "b", "path": "/b", "reason": "r"}])
    path = rep.write_json(tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert data["schema_version"] == SCHEMA_VERSION == 1
    assert data["results"][0]["latency_ms"]["p50"] == 2.0 and data["skipped"][0]["reason"] == "r"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_plot_with_power_panel(tmp_path):
    power = {"source": "rapl", "available": True, "reason": None, "avg_w": 7.5, "energy_per_inference_mj": 3.0,
             "idle_w": 5.0, "samples": 3, "series": [[0.0, 7.0], [0.1, 8.0], [0.2, 7.5]]}
    rep = BenchReport([_result("a", [1.0, 1.2, 0.9, 1.1], power), _result("b", [2.0, 2.1])], {})
    png = write_plot(rep, tmp_path / "p.png")
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000


def test_power_cell_in_markdown():
    power = {"source": "ina3221", "available": True, "reason": None, "avg_w": 6.0, "energy_per_inference_mj": 2.5,
             "idle_w": 4.0, "samples": 80}
    md = to_markdown(BenchReport([_result("a", [1.0], power)], {}))
    assert "| power (W) | 6 (ina3221, idle 4) |" in md and "| energy / inference (mJ) | 2.5 |" in md

