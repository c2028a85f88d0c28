"""The sensitivity report beside the artifact: ``sensitivity.<format>.json`` and ``.md``.

Ranked layers (error each adds, with the measured gain of keeping the top ones float alone),
the recovery steps with their time and verdict, and the recipe that was chosen.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sdk.fsutil import atomic_write_bytes

if TYPE_CHECKING:
    from . import Recovery

REPORT_STEM = "sensitivity"


def report_data(fmt: str, profile: str, rec: "Recovery") -> dict[str, Any]:
    chosen = rec.chosen
    return {"format": fmt, "profile": profile, "passed": chosen.passed, "chosen": chosen.recipe.name,
            "float_nodes": list(chosen.recipe.float_nodes), "calibration": chosen.recipe.method(chosen.facts["job"].profile),
            "seconds": round(rec.seconds, 1), "budget_s": round(rec.budget_s, 1), "budget_clock": rec.budget_clock,
            "stopped": rec.stopped, "advice": rec.advice,
            "steps": rec.steps, "layers": [e.to_dict() for e in rec.ranking]}


def markdown(data: dict[str, Any], top: int = 30) -> str:
    lines = [f"# Sensitivity of {data['format']} for {data['profile']}", "",
             f"Result: **{'passed' if data['passed'] else 'failed'}** with recipe `{data['chosen']}`"
             + (f", float layers: {', '.join('`' + n + '`' for n in data['float_nodes'])}" if data["float_nodes"] else "")
             + f". Recovery took {data['seconds']} s; its budget was {data['budget_s']} "
             + ("CPU seconds (twice the baseline's work)" if data.get("budget_clock") == "cpu" else "s")
             + (f" (stopped: {data['stopped']})" if data["stopped"] else "") + "."
             + (f" Next: {data['advice']}." if data.get("advice") else ""), "",
             "## Steps", "", "| recipe | seconds | CPU s | verdict | score | figures |", "|---|---|---|---|---|---|"]
    for s in data["steps"]:
        verdict = ("pass" if s.get("passed") else "error: " + s["error"] if "error" in s else
                   "skipped: " + s["skipped"] if "skipped" in s else "layers ranked" if s.get("ranking") else "fail")
        lines.append(f"| {s['recipe']} | {s['seconds']} | {s.get('cpu_s', '')} | {verdict} | {s.get('score', '')} | {s.get('figures', '')[:200]} |")
    lines += ["", "## Layers, most sensitive first", "",
              "*own int8 noise*: the layer's output through its own int8 step (relative L2, worst channel) - what ranks "
              "it; *output error*: int8 vs float at its output, everything before it included; *gain*: the gate score's "
              "change when it (and the layers reading its output, *keep float*) alone stay float.", "",
              "| # | layer | op | own int8 noise | output error | gain alone float | keep float |",
              "|---|---|---|---|---|---|---|"]
    for i, e in enumerate(data["layers"][:top], 1):
        keep = ", ".join(f"`{n}`" for n in e.get("keep_float", [e["name"]]))
        lines.append(f"| {i} | `{e['name']}` | {e['op']} | {e['added']} | {e['error']} | {e.get('gain', '')} | {keep} |")
    if len(data["layers"]) > top:
        lines.append(f"\n{len(data['layers']) - top} more in the JSON.")
    return "\n".join(lines) + "\n"


def write_report(folder: Path, fmt: str, profile: str, rec: "Recovery") -> list[str]:
    """Write the JSON and Markdown reports into ``folder``; returns their names."""
    data = report_data(fmt, profile, rec)
    names = [f"{REPORT_STEM}.{fmt}.json", f"{REPORT_STEM}.{fmt}.md"]
    atomic_write_bytes(folder / names[0], (json.dumps(data, indent=1) + "\n").encode())
    atomic_write_bytes(folder / names[1], markdown(data).encode())
    return names
