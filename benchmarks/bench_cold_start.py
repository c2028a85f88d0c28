"""Runtime-only cold start: import + load + first inference, and peak RSS, facade vs raw runtime.

Each measurement is a fresh Python process (what a device app pays at boot), repeated and
alternated between facade and raw. Run: ``python benchmarks/bench_cold_start.py --json out.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from _common import REPO, ensure_artifacts, print_table, write_result

PROBE = r"""
import json, resource, sys, time
t0 = time.perf_counter()
mode, folder, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
import numpy as np
if mode == "facade":
    import edge_sdk
    backend = {"onnx-qdq": "onnxruntime", "openvino-ir": "openvino", "tflite-int8": "litert"}[fmt]
    m = edge_sdk.load(folder, backend=backend)
    t1 = time.perf_counter()
    spec = m.inputs[0]
    m.infer(np.zeros(spec.shape, np.float32))
else:
    man = json.load(open(folder + "/manifest.json"))
    path = folder + "/" + next(a["path"] for a in man["artifacts"] if a["format"] == fmt and a["role"] == "model")
    if fmt == "onnx-qdq":
        import onnxruntime as ort
        s = ort.InferenceSession(path, providers=["CPUExecutionProvider"]); t1 = time.perf_counter()
        i = s.get_inputs()[0]; s.run(None, {i.name: np.zeros(i.shape, np.float32)})
    elif fmt == "openvino-ir":
        import openvino as ov
        c = ov.Core().compile_model(path, "CPU"); t1 = time.perf_counter()
        c(np.zeros(list(c.inputs[0].shape), np.float32))
    else:
        try:
            from ai_edge_litert.interpreter import Interpreter
        except ImportError:
            from tflite_runtime.interpreter import Interpreter
        it = Interpreter(model_path=path); it.allocate_tensors(); t1 = time.perf_counter()
        d = it.get_input_details()[0]; it.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"])); it.invoke()
t2 = time.perf_counter()
print(json.dumps({"load_ms": (t1 - t0) * 1e3, "total_ms": (t2 - t0) * 1e3,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "tf": "tensorflow" in sys.modules}))
"""

CASES = [("jetson-orin", "onnx-qdq", "ONNX Runtime"), ("intel-cpu", "openvino-ir", "OpenVINO"),
         ("arm-cpu", "tflite-int8", "LiteRT")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="cold_start.json")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--artifacts", default=str(REPO / "benchmarks" / ".artifacts"))
    args = ap.parse_args()
    out = ensure_artifacts(Path(args.artifacts), [c[0] for c in CASES])
    rows = []
    for prof, fmt, label in CASES:
        res = {"facade": [], "raw": []}
        for _ in range(args.repeat):
            for mode in ("facade", "raw"):
                p = subprocess.run([sys.executable, "-c", PROBE, mode, str(out / prof), fmt],
                                   capture_output=True, text=True, check=True)
                res[mode].append(json.loads(p.stdout.strip().splitlines()[-1]))
        med = {m: {k: statistics.median(r[k] for r in res[m]) for k in ("total_ms", "rss_mb")} for m in res}
        tf_loaded = any(r["tf"] for r in res["facade"])
        rows.append([label, f"{med['raw']['total_ms']:.0f}", f"{med['facade']['total_ms']:.0f}",
                     f"{med['facade']['total_ms'] / med['raw']['total_ms']:.2f}",
                     f"{med['raw']['rss_mb']:.0f}", f"{med['facade']['rss_mb']:.0f}",
                     "yes (BUG)" if tf_loaded else "no"])
    data = write_result(args.json, "Cold start: import + load + first inference (fresh process, median of "
                        f"{args.repeat})", ["runtime", "raw ms", "facade ms", "facade/raw", "raw RSS MB",
                                            "facade RSS MB", "TensorFlow imported"], rows,
                        ["facade includes manifest parsing and sha256 verification of every file"])
    print_table(data)


if __name__ == "__main__":
    main()
