"""Our p50 next to the vendors' own tools, same artifact, same thread count.

- OpenVINO: ``benchmark_app -hint latency`` (installed with openvino). benchmark_app refuses
  ``-nthreads`` together with ``-hint``, so the thread count goes in through ``-load_config``
  (``INFERENCE_NUM_THREADS``), which keeps the latency hint.
- LiteRT: ``ai-edge-litert`` 2.1.0 ships no benchmark tool (its wheel holds the interpreter,
  ``tools/flatbuffer_utils.py`` and ``apply_plugin_main``; ``benchmark_model`` is a separate
  native binary built from the TensorFlow/LiteRT source tree). We compare against a raw
  ``Interpreter`` loop instead: set_tensor + invoke + get_tensor, the least any Python app does.

Rounds alternate ours and theirs so machine load hits both. Each row reports our wall-clock
p50 per ``model.infer`` call, the backend-only p50 (``timings['inference']``), and the vendor's
own Python call in a loop, so a gap can be split into the Python binding's fixed per-call cost
and the facade's (input checks, quantize/dequantize, output copies). Fixed costs are large
relative to a tiny model and small for a real one, which is why a larger generated model
(conv64x4) is measured too.

Run: ``python benchmarks/bench_vs_vendor.py [--json out.json] [--threads N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO, ensure_artifacts, print_table, write_result

sys.path.insert(0, str(REPO / "tests"))  # the generated-model builders live with the tests

BENCHMARK_APP = Path(sys.executable).with_name("benchmark_app")


def ours(folder: Path, threads: int, runs: int, mode: str = "end-to-end") -> tuple[float, float | None, str]:
    """(p50 ms per call, backend-only p50 ms inside infer(), backend) from edge_sdk.benchmark in ``mode``."""
    import edge_sdk

    rep = edge_sdk.benchmark(folder, runs=runs, warmup=50, threads=threads, power="none", mode=mode)
    r = rep.results[0]
    return r.latency_ms["p50"], (r.inference_ms or {}).get("p50"), r.backend or "?"


def benchmark_app(xml: Path, threads: int, seconds: int, work: Path) -> float:
    """OpenVINO benchmark_app median latency (ms) with the latency hint and ``threads``."""
    cfg = work / "ov_config.json"
    cfg.write_text(json.dumps({"CPU": {"INFERENCE_NUM_THREADS": str(threads)}}))
    r = subprocess.run([str(BENCHMARK_APP), "-m", str(xml), "-d", "CPU", "-hint", "latency", "-load_config", str(cfg),
                        "-t", str(seconds)], capture_output=True, text=True, timeout=600)
    m = re.search(r"Median:\s+([\d.]+)\s*(ms|us)", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"benchmark_app failed: {r.stdout[-800:]}{r.stderr[-800:]}")
    return float(m.group(1)) / (1000.0 if m.group(2) == "us" else 1.0)


def raw_litert(tflite: Path, threads: int, runs: int) -> float:
    """p50 (ms) of a raw LiteRT Interpreter loop: set_tensor + invoke + get_tensor."""
    import time

    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=str(tflite), num_threads=threads)
    it.allocate_tensors()
    inp, out = it.get_input_details()[0], it.get_output_details()[0]
    x = np.zeros(inp["shape"], inp["dtype"])
    lat = []
    for i in range(runs + 50):
        t = time.perf_counter_ns()
        it.set_tensor(inp["index"], x)
        it.invoke()
        it.get_tensor(out["index"])
        if i >= 50:
            lat.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(lat)


def raw_openvino(xml: Path, threads: int, runs: int) -> float:
    """p50 (ms) of a raw OpenVINO Python loop: ``InferRequest.infer`` on a prepared array."""
    import time

    import numpy as np
    import openvino as ov

    compiled = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
    req = compiled.create_infer_request()
    x = np.random.default_rng(0).random(list(compiled.inputs[0].shape), dtype=np.float32)
    lat = []
    for i in range(runs + 50):
        t = time.perf_counter_ns()
        req.infer([x], share_inputs=True)
        if i >= 50:
            lat.append((time.perf_counter_ns() - t) / 1e6)
    return statistics.median(lat)


def model_file(folder: Path, fmt: str) -> Path:
    man = json.loads((folder / "manifest.json").read_text())
    return folder / next(a["path"] for a in man["artifacts"] if a["format"] == fmt and a["role"] == "model")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--work", help="artifact cache folder (default: a temp folder)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="edge-sdk-vendor-"))
    work.mkdir(parents=True, exist_ok=True)
    digits = ensure_artifacts(work / "digits", ["intel-cpu", "arm-cpu"])
    import rt_artifacts

    big = work / "conv64"
    if not (big / "artifacts" / "intel-cpu" / "manifest.json").is_file():
        rt_artifacts.build_onnx_family(big / "work", big / "artifacts", hw=64, channels=32, blocks=4)
    cases = [("digits CNN (OpenVINO IR int8)", digits / "intel-cpu", "ov"),
             ("conv64x4 (OpenVINO IR int8)", big / "artifacts" / "intel-cpu", "ov"),
             ("digits CNN (TFLite int8)", digits / "arm-cpu", "litert")]
    rows, notes = [], []
    for label, folder, kind in cases:
        mine, mine_backend, theirs, raw, bound = [], [], [], [], []
        backend = "?"
        for _ in range(args.rounds):  # alternate so drift hits both
            p50, inf, backend = ours(folder, args.threads, args.runs)
            mine.append(p50)
            bound.append(ours(folder, args.threads, args.runs, mode="backend")[0])
            if inf is not None:
                mine_backend.append(inf)
            if kind == "ov":
                xml = model_file(folder, "openvino-ir")
                theirs.append(benchmark_app(xml, args.threads, 3, work))
                raw.append(raw_openvino(xml, args.threads, args.runs))
            else:
                theirs.append(raw_litert(model_file(folder, "tflite-int8"), args.threads, args.runs))
                raw.append(theirs[-1])
        a, v = statistics.median(mine), statistics.median(theirs)
        b = statistics.median(mine_backend) if mine_backend else None
        r = statistics.median(raw)
        m = statistics.median(bound)
        tool = "benchmark_app -hint latency" if kind == "ov" else "raw Interpreter loop (no LiteRT benchmark tool shipped)"
        rows.append([label, backend, args.threads, f"{a:.4f}", f"{b:.4f}" if b else "n/a", f"{m:.4f}", f"{r:.4f}",
                     f"{v:.4f}", tool, f"{a / v:.2f}", f"{m / v:.2f}", "yes" if abs(m / v - 1) <= 0.10 else "no"])
    notes += [
        "p50 per inference, median over alternating rounds; same artifact, same thread count (INFERENCE_NUM_THREADS / num_threads).",
        "ours = wall time of one edge_sdk Model.infer call (input checks, float->int8 quantize, output dequantize, copies); "
        "ours backend-only = the runtime call inside it (timings['inference']); ours --mode backend = `edge-sdk bench "
        "--mode backend`: the runtime call alone on inputs bound once (OpenVINO request tensors set once, ORT IO "
        "binding, LiteRT tensors set once), what the vendors' tools time.",
        "benchmark_app times the C++ request with pre-filled input tensors (inference_only for static shapes): "
        "no Python, no numpy conversion, no output copy. Two fixed per-call costs separate us from it: the vendor's "
        "Python binding (raw Python API vs benchmark_app) and our facade (ours vs raw Python API). Being fixed, they "
        "dominate the ~0.03 ms digits model and shrink in relative terms on the larger conv64x4 model.",
        "raw Python API = the vendor's own Python call in a loop on a prepared array (OpenVINO InferRequest.infer, "
        "LiteRT set_tensor+invoke+get_tensor): it separates the Python-binding cost (raw vs benchmark_app) from the "
        "facade's cost (ours vs raw).",
        "ai-edge-litert 2.1.0 ships no benchmark tool (no benchmark_model in the wheel); the LiteRT row compares against "
        "a raw Interpreter loop instead.",
    ]
    data = write_result(args.json or work / "bench_vs_vendor.json",
                        "edge-sdk bench p50 vs the vendors' tools",
                        ["model", "backend", "threads", "ours end-to-end p50 (ms)", "backend-only inside infer() p50 (ms)",
                         "ours --mode backend p50 (ms)", "raw Python API p50 (ms)", "vendor p50 (ms)",
                         "vendor tool", "end-to-end / vendor", "--mode backend / vendor", "backend mode within 10%"],
                        rows, notes)
    print_table(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
