"""The quick start: convert the bundled digits model for every built-in profile, run each artifact
here through the runtime facade, benchmark it, and print one honest table.

    python examples/quickstart.py [--model examples/digits/digits_cnn.onnx] [--out quickstart-out]

Columns: profile, format, size, float vs int8 top-1 accuracy on the 300 held-out validation digits,
p50 latency here, and the backend/delegate that actually ran (a missing accelerator is said plainly).
Exits non-zero if any artifact's int8 accuracy is more than 1 point below float.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

# TensorFlow (used by the converters, never by the runtime) is chatty on stderr; keep the table readable.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import edge_sdk  # noqa: E402
from edge_sdk.preprocess import apply, from_dict  # noqa: E402

HERE = Path(__file__).resolve().parent / "digits"
PROFILES = ["intel-cpu", "intel-npu", "jetson-orin", "arm-cpu", "coral-edgetpu"]
MAX_DROP_POINTS = 1.0  # percentage points of top-1 on the validation set


def float_accuracy(model_path: Path, spec, labels: dict[str, int]) -> int:
    """Correct top-1 count of the float ONNX model with ONNX Runtime (the reference)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return sum(int(sess.run(None, {name: apply(HERE / "val" / f, spec)})[0].argmax() == y) for f, y in labels.items())


def artifact_accuracy(folder: Path, backend: str | None, labels: dict[str, int]) -> tuple[int, str, str, list[str]]:
    """Correct top-1 count through the facade, with the profile's own runtime chain (fallbacks reported)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = edge_sdk.load(folder, backend=backend)
    notes = sorted({str(w.message) for w in caught})
    with model:
        hits = 0
        for f, y in labels.items():
            res = model.infer_image(HERE / "val" / f)
            hits += int(next(iter(res.outputs.values())).argmax() == y)
        return hits, model.backend, res.delegate, notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(HERE / "digits_cnn.onnx"))
    ap.add_argument("--out", default="quickstart-out")
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()

    labels = json.loads((HERE / "val_labels.json").read_text())
    spec = from_dict(json.loads((HERE / "preprocess.json").read_text()))

    t0 = time.perf_counter()
    print(f"[1/3] converting {args.model} for {', '.join(PROFILES)} (calibration: {HERE / 'calib'})", file=sys.stderr)
    # All 200 calibration images calibrate; the 300 validation images feed the accuracy gate.
    edge_sdk.convert(args.model, PROFILES, args.out, calib=str(HERE / "calib"), validation=str(HERE / "val"),
                     preprocess=spec, force=True)
    t_convert = time.perf_counter() - t0

    print("[2/3] float reference and int8 accuracy on 300 held-out digits", file=sys.stderr)
    n = len(labels)
    ref = float_accuracy(HERE / "digits_cnn.onnx", spec, labels)
    pct = lambda hits: f"{100.0 * hits / n:.1f}%"  # noqa: E731

    rows, failures, footnotes = [], [], []
    print("[3/3] running and benchmarking each artifact here", file=sys.stderr)
    for prof in PROFILES:
        folder = Path(args.out) / prof
        manifest = edge_sdk.read_manifest(folder)
        for fmt in manifest.formats:
            step = next(s for s in manifest.profile.spec["runtime"]["chain"] if s["format"] == fmt)
            backend = step["backend"] if len(manifest.formats) > 1 else None
            acc, ran_on, delegate, notes = artifact_accuracy(folder, backend, labels)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the fallback was already recorded by artifact_accuracy
                report = edge_sdk.benchmark(folder, runs=args.runs, warmup=20, backend=backend, power="none")
            p50 = report.results[0].latency_ms["p50"]
            size_kb = sum(a.size_bytes for a in manifest.artifacts if a.format == fmt and a.role != "log") / 1024
            mark = ""
            if notes:
                footnotes.append("; ".join(notes))
                mark = f"  fallback [{len(footnotes)}]"
            rows.append((prof, fmt, f"{size_kb:.0f} KiB", pct(ref), pct(acc),
                         f"{p50:.3f} ms", f"{ran_on} [{delegate}]" + mark))
            # Compare counts, not rounded percentages: at most 1 point = 3 of 300 images.
            if (ref - acc) * 100 > MAX_DROP_POINTS * n:
                failures.append(f"{prof}/{fmt}: int8 {pct(acc)} vs float {pct(ref)}")

    head = ("profile", "format", "size", "float top-1", "int8 top-1", "p50 here", "ran on (backend [delegate])")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head) - 1)]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r[:-1], widths)) + "  " + r[-1]  # noqa: E731
    print()
    print(line(head))
    print(line(tuple("-" * w for w in widths) + ("-" * 28,)))
    for r in rows:
        print(line(r))
    for i, note in enumerate(footnotes, 1):
        print(f"[{i}] {note}")
    print(f"\nconversion of {len(PROFILES)} profiles took {t_convert:.0f} s; artifacts in {args.out}/")
    print("This host has no Jetson, Coral or NPU: those rows ran on the fallback named above, "
          "so their latency is this CPU's, not the device's.")
    if failures:
        print("\nACCURACY GATE (quick start): " + "; ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
