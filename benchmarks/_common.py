"""Shared helpers for the performance suite: timing loops, medians and the JSON result format.

Every benchmark script writes one JSON file: ``{"title", "columns", "rows", "notes"}``; rows are
lists aligned with columns. ``run_all.py`` turns them into ``docs/benchmarks.md``. Ratios are
always measured side by side in one process run, interleaving the contenders, so drift in
machine load hits both equally.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]

# The raw baselines import OpenVINO (and benchmark_app) directly, which sends a usage event to
# Google Analytics unless telemetry is declined; openvino_telemetry declines when CI=true. Set it for
# this process and every child, so the raw side is neither phoning home nor paying for it.
os.environ.setdefault("CI", "true")
DIGITS = REPO / "examples" / "digits"


def interleaved_medians(fns: dict[str, Callable[[], object]], rounds: int = 30, per_round: int = 50,
                        warmup: int = 50) -> dict[str, float]:
    """Median per-call latency (ms) of each callable, measured in interleaved rounds."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter_ns()
            for _ in range(per_round):
                fn()
            samples[name].append((time.perf_counter_ns() - t0) / per_round / 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def write_result(path: str | os.PathLike, title: str, columns: list[str], rows: list[list], notes: list[str]) -> dict:
    data = {"title": title, "columns": columns, "rows": rows, "notes": notes}
    Path(path).write_text(json.dumps(data, indent=2, default=str) + "\n")
    return data


def print_table(data: dict) -> None:
    cols = data["columns"]
    rows = [[str(c) for c in r] for r in data["rows"]]
    widths = [max(len(str(x)) for x in [cols[i], *(r[i] for r in rows)]) for i in range(len(cols))]
    print(f"\n{data['title']}")
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    for n in data["notes"]:
        print(f"  note: {n}")


def ensure_artifacts(out: Path, profiles: list[str]) -> Path:
    """Convert the bundled digits model once into ``out`` (reused by every benchmark)."""
    import edge_sdk
    from edge_sdk.preprocess import from_dict

    missing = [p for p in profiles if not (out / p / "manifest.json").is_file()]
    if missing:
        spec = from_dict(json.loads((DIGITS / "preprocess.json").read_text()))
        edge_sdk.convert(str(DIGITS / "digits_cnn.onnx"), missing, str(out), calib=str(DIGITS / "calib"), validation=str(DIGITS / "val"),
                         preprocess=spec, force=True)
    return out
