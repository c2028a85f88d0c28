"""`edge-sdk bench`: report files and schema, gates and exit codes, --json -, missing plot extra, progress."""

import io
import json
import sys

import pytest

from edge_sdk.cli import main
from edge_sdk.cli_bench import ProgressPrinter
from edge_sdk.errors import BenchmarkGateError, InputValidationError, MissingDependencyError, ModelLoadError
from fixtures.power import fakesysfs as fs
from rt_artifacts import onnx_artifacts

LATENCY_KEYS = {"p50", "p90", "p95", "p99", "mean", "std", "min", "max"}
POWER_KEYS = {"source", "available", "reason", "avg_w", "energy_per_inference_mj", "idle_w", "samples"}


@pytest.fixture(scope="session")
def arts(tmp_path_factory):
    return onnx_artifacts(tmp_path_factory)


def test_bench_writes_json_markdown_plot(arts, tmp_path, capsys):
    out = arts["intel-cpu"].parent
    j, m, png = tmp_path / "r.json", tmp_path / "r.md", tmp_path / "r.png"
    code = main(["bench", str(out), "--runs", "15", "--warmup", "2", "--json-out", str(j), "--markdown", str(m),
                 "--plot", str(png), "--fail-if", "p99_ms>100000"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "| p99 (ms) |" in cap.out and "skipped" in cap.out and "openvino/CPU" in cap.out
    data = json.loads(j.read_text())
    assert data["schema_version"] == 1 and data["tool"] == "edge-sdk bench"
    (r,) = data["results"]
    assert LATENCY_KEYS <= set(r["latency_ms"])
    for key in ("load_ms", "first_inference_ms", "throughput_ips", "peak_rss_mb", "rss_growth_mb", "cpu_time_s"):
        assert isinstance(r[key], float), key
    assert POWER_KEYS <= set(r["power"]) and r["power"]["available"] is False and r["power"]["reason"]
    assert r["backend"] == "openvino/CPU" and r["precision"]
    env = data["environment"]
    for key in ("host", "governor", "temperatures_c", "jetson_power_mode", "runtime_versions"):
        assert key in env
    assert {s["name"].split("/")[-1] for s in data["skipped"]} == {"jetson-orin", "intel-npu"}
    assert data["gates"] == {"checked": ["p99_ms>100000"], "failed": []}
    assert m.read_text().startswith("## edge-sdk bench")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failing_gate_exits_9_prints_figure_and_keeps_report(arts, tmp_path, capsys):
    j = tmp_path / "r.json"
    code = main(["bench", str(arts["intel-cpu"]), "--runs", "5", "--warmup", "0", "--power", "none",
                 "--fail-if", "p50_ms>0", "--json-out", str(j)])
    err = capsys.readouterr().err
    assert code == BenchmarkGateError.exit_code == 9
    assert "p50_ms = " in err and "> 0" in err and "Traceback" not in err
    assert json.loads(j.read_text())["gates"]["failed"]


def test_bad_gate_is_input_error_and_writes_nothing(arts, tmp_path, capsys):
    j = tmp_path / "r.json"
    code = main(["bench", str(arts["intel-cpu"]), "--fail-if", "p99_ms => 3", "--json-out", str(j)])
    assert code == InputValidationError.exit_code and not j.exists()
    assert "METRIC OP NUMBER" in capsys.readouterr().err


def test_json_to_stdout(arts, capsys):
    assert main(["bench", str(arts["intel-cpu"]), "--runs", "3", "--warmup", "0", "--power", "none", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["runs"] == 3


def test_missing_matplotlib_fails_before_measuring(arts, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what a device without the [plot] extra has
    code = main(["bench", str(arts["intel-cpu"]), "--plot", str(tmp_path / "p.png")])
    err = capsys.readouterr().err
    assert code == MissingDependencyError.exit_code and "edge-sdk[plot]" in err
    assert not (tmp_path / "p.png").exists()


def test_not_an_artifact_is_one_line_no_traceback(cli, tmp_path):
    r = cli("bench", str(tmp_path))
    assert r.returncode == ModelLoadError.exit_code
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr and "hint:" in r.stderr


def test_cli_reports_watts_from_fake_rapl_updated_during_the_run(arts, tmp_path, monkeypatch, capsys):
    span = 2_000_000
    fs.rapl_tree(tmp_path, {"intel-rapl:0": "package-0"}, span)
    monkeypatch.setenv("EDGE_SDK_SYSFS_ROOT", str(tmp_path))
    j = tmp_path / "r.json"
    with fs.rapl_writer(tmp_path, {"intel-rapl:0": 9.0}, span):
        code = main(["bench", str(arts["intel-cpu"]), "--duration", "2.0", "--warmup", "1", "--json-out", str(j)])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    p = json.loads(j.read_text())["results"][0]["power"]
    assert p["available"] and p["source"] == "rapl" and p["avg_w"] == pytest.approx(9.0, rel=0.1)
    assert "(rapl" in cap.out  # the table shows the watts and the source


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_progress_bar_on_tty_and_lines_otherwise():
    tty = _Stream(True)
    bar = ProgressPrinter(tty, min_s=0.0)
    bar(5, 10, 1.0, "m")
    bar(10, 10, 2.0, "m")
    assert "\rm: [###############" in tty.getvalue() and tty.getvalue().endswith("\n")
    plain = _Stream(False)
    lines = ProgressPrinter(plain, min_s=0.0)
    lines(5, None, 1.0, "m")
    lines(6, None, 1.1, "m")  # within 5 s of the last line: not printed
    lines(9, 9, 3.0, "m")
    assert plain.getvalue().splitlines() == ["m: 5 runs, 1.0s", "m: 9/9 runs, 3.0s"]
    quiet = _Stream(False)
    ProgressPrinter(quiet, min_s=2.0)(3, 10, 0.1, "m")  # short runs print nothing
    assert quiet.getvalue() == ""


def test_bench_never_imports_tensorflow(arts):
    import subprocess

    code = ("import sys\nfrom edge_sdk.cli import main\n"
            f"assert main(['bench', {str(arts['intel-cpu'])!r}, '--runs', '2', '--warmup', '0', '--json']) == 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'onnx2tf', 'nncf'))\n"
            "assert not bad, bad\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]


def test_fallback_is_one_warning_line(arts, capsys):
    out = arts["intel-cpu"].parent
    assert main(["bench", str(out), "--profile", "jetson", "--runs", "3", "--warmup", "0", "--power", "none"]) == 0
    cap = capsys.readouterr()
    assert "warning: jetson-orin: running on onnxruntime/CPUExecutionProvider" in cap.err
    assert "FallbackWarning" not in cap.err and "(fallback)" in cap.out


def test_int8_onnx_on_x86_says_which_arithmetic_ran(arts, tmp_path, capsys):
    """An int8 QDQ artifact benched with ONNX Runtime on this x86 host runs int8 x int8 (what the
    gate checked, what ARM/TensorRT compute); the report says so and why it is the slow path."""
    from edge_sdk.runtimes.onnxruntime import X86

    j, m = tmp_path / "r.json", tmp_path / "r.md"
    code = main(["bench", str(arts["jetson-orin"]), "--backend", "onnxruntime", "--device", "CPUExecutionProvider",
                 "--runs", "5", "--warmup", "1", "--power", "none", "--json-out", str(j), "--markdown", str(m)])
    assert code == 0, capsys.readouterr().err
    (r,) = json.loads(j.read_text())["results"]
    arithmetic = r["runtime"]["details"].get("int8_arithmetic", "")
    if X86:
        assert arithmetic.startswith("s8s8"), r["runtime"]
        assert "x86_u8_activations" in m.read_text()
    else:
        assert arithmetic == "" and "x86_u8_activations" not in m.read_text()
