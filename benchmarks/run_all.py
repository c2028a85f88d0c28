"""Run the whole performance suite and write ``docs/benchmarks.md``.

    python benchmarks/run_all.py

Each benchmark runs in its own process and writes a JSON result (see ``_common.py``); this script
collects them, side by side, with the host description.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = ["bench_facade_overhead.py", "bench_int8_vs_float.py", "bench_cold_start.py", "bench_vs_vendor.py",
         "bench_conversion.py", "bench_realmodels.py", "bench_pipeline.py"]


def to_markdown(data: dict) -> str:
    cols = data["columns"]
    lines = [f"## {data['title']}", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in data["rows"]]
    lines += [""] + [f"- {n}" for n in data.get("notes", [])] + [""]
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(HERE.parent))
    from edge_sdk import hostinfo

    host = hostinfo.summary()
    parts = [f"# Performance suite results\n\nGenerated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by "
             f"`python benchmarks/run_all.py` on {host['cpu_model']} ({host['cpu_count']} cores, {host['machine']}, "
             f"Python {host['python']}). Ratios are measured side by side in one run.\n"]
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for script in SUITE:
            path = HERE / script
            if not path.exists():
                failed.append(f"{script}: missing")
                continue
            out = Path(tmp) / (path.stem + ".json")
            print(f"== {script}", file=sys.stderr, flush=True)
            r = subprocess.run([sys.executable, str(path), "--json", str(out)], cwd=HERE)
            if r.returncode != 0 or not out.exists():
                failed.append(f"{script}: exit {r.returncode}")
                continue
            parts.append(to_markdown(json.loads(out.read_text())))
    if failed:
        parts.append("## Not measured in this run\n\n" + "\n".join(f"- {f}" for f in failed) + "\n")
    (HERE.parent / "docs" / "benchmarks.md").write_text("\n".join(parts))
    print(f"wrote docs/benchmarks.md ({len(SUITE) - len(failed)}/{len(SUITE)} benchmarks)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
