"""The benchmark report: typed results, a versioned JSON schema, and a Markdown table.

JSON schema (``schema_version`` 1), stable for CI scripts that read it::

    {"schema_version": 1, "tool": "edge-sdk bench", "edge_sdk": "...", "created_at": "...",
     "environment": {...host, temperatures, governor, nvpmodel, clocks, runtime versions...},
     "results": [{"name", "artifact", "profile", "backend", "delegate", "precision", "threads",
                  "runs", "warmup", "load_ms", "first_inference_ms",
                  "latency_ms": {"p50","p90","p95","p99","mean","std","min","max","count"},
                  "inference_ms": {...same, the backend's own timing...} | null,
                  "throughput_ips", "peak_rss_mb", "rss_growth_mb", "cpu_time_s", ...,
                  "power": {"source","available","reason","avg_w","energy_per_inference_mj",
                            "idle_w","samples",...},
                  "samples_ms": [...], "samples_stride": 1}],
     "skipped": [{"name", "path", "reason", "refused"}], "gates": {"checked": [...], "failed": [...]}}

``refused: true`` marks a profile folder that failed its checks (corrupt, tampered, unsigned),
as opposed to one skipped because this host is not its device. The power block counts readings
it discarded as impossible (negative or not finite) in ``discarded_readings``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from edge_sdk._version import __version__
from edge_sdk.fsutil import atomic_write_bytes

SCHEMA_VERSION = 1


@dataclass
class BenchResult:
    """Everything measured for one artifact. Times in ms unless the name says otherwise."""

    name: str
    artifact: str
    profile: str | None
    backend: str | None
    delegate: str | None
    precision: str | None
    threads: int | None
    runs: int
    warmup: int
    load_ms: float
    first_inference_ms: float
    latency_ms: dict[str, float]
    throughput_ips: float
    peak_rss_mb: float | None
    rss_growth_mb: float | None
    cpu_time_s: float
    power: dict[str, Any]
    inference_ms: dict[str, float] | None = None
    end_to_end: bool = False
    fallback: bool = False
    wall_s: float = 0.0
    cpu_utilization: float = 0.0
    rss_after_load_mb: float | None = None
    runtime: dict[str, Any] = field(default_factory=dict)
    samples_ms: list[float] = field(default_factory=list)
    #: ``samples_ms`` keeps every n-th run of very long runs (1: all of them).
    samples_stride: int = 1
    #: ``bench --ops``: the per-operator profile (:class:`edge_sdk.bench.ops.OpProfile` as a dict).
    ops: dict[str, Any] | None = None
    #: ``end-to-end`` (``Model.infer``) or ``backend`` (the runtime call alone on buffers bound once).
    mode: str = "end-to-end"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BenchReport:
    """What ``edge_sdk.benchmark`` returns and ``edge-sdk bench`` prints and writes."""

    results: list[BenchResult]
    environment: dict[str, Any]
    skipped: list[dict] = field(default_factory=list)
    gates_checked: list[str] = field(default_factory=list)
    gates_failed: list[str] = field(default_factory=list)
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON document (schema above)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": "edge-sdk bench",
            "edge_sdk": __version__,
            "created_at": self.created_at,
            "environment": self.environment,
            "results": [r.to_dict() for r in self.results],
            "skipped": self.skipped,
            "gates": {"checked": self.gates_checked, "failed": self.gates_failed},
        }

    def write_json(self, path: str | Path) -> Path:
        """Write the JSON report atomically (no half-written file on a crash)."""
        path = Path(path)
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=2, default=str) + "\n").encode())
        return path

    def write_markdown(self, path: str | Path) -> Path:
        path = Path(path)
        atomic_write_bytes(path, (to_markdown(self) + "\n").encode())
        return path


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


#: Markdown rows: label -> (dotted key in a result dict, lower-is-better). Ratios use these.
ROWS: list[tuple[str, str, bool]] = [
    ("backend/delegate", "_backend", True),
    ("precision", "precision", True),
    ("threads", "threads", True),
    ("load (ms)", "load_ms", True),
    ("first inference (ms)", "first_inference_ms", True),
    ("p50 (ms)", "latency_ms.p50", True),
    ("p90 (ms)", "latency_ms.p90", True),
    ("p95 (ms)", "latency_ms.p95", True),
    ("p99 (ms)", "latency_ms.p99", True),
    ("mean ± std (ms)", "_meanstd", True),
    ("min / max (ms)", "_minmax", True),
    ("throughput (inf/s)", "throughput_ips", False),
    ("peak RSS (MB)", "peak_rss_mb", True),
    ("RSS growth (MB)", "rss_growth_mb", True),
    ("CPU time (s)", "cpu_time_s", True),
    ("power (W)", "_power", True),
    ("energy / inference (mJ)", "power.energy_per_inference_mj", True),
]


def _cell(r: dict[str, Any], key: str) -> tuple[str, float | None]:
    from .gates import lookup

    if key == "_backend":
        return f"{r.get('backend') or '?'}" + (" (fallback)" if r.get("fallback") else ""), None
    if key == "_meanstd":
        lat = r["latency_ms"]
        return f"{_fmt(lat['mean'])} ± {_fmt(lat['std'])}", lat["mean"]
    if key == "_minmax":
        lat = r["latency_ms"]
        return f"{_fmt(lat['min'])} / {_fmt(lat['max'])}", None
    if key == "_power":
        p = r["power"]
        if not p.get("available"):
            reason = p.get("reason") or "no sensor"
            return "n/a (" + (reason.split(" (")[0] if len(reason) > 60 else reason) + ")", None
        idle = f", idle {_fmt(p['idle_w'])}" if p.get("idle_w") is not None else ""
        return f"{_fmt(p['avg_w'])} ({p['source']}{idle})", p["avg_w"]
    value = lookup(r, key)
    if key == "threads" and value is None:
        return "runtime default", None
    return _fmt(value), value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def to_markdown(report: BenchReport) -> str:
    """Side-by-side Markdown table; with several results each cell also shows the ratio to the first."""
    results = [r.to_dict() for r in report.results]
    env = report.environment
    host = env.get("host", {})
    lines = [f"## edge-sdk bench ({report.created_at})", "",
             f"Host: {host.get('cpu_model', '?')} ({host.get('machine', '?')}, {host.get('cpu_count', '?')} cores), "
             f"governor {host.get('governor') or 'n/a'}, power mode {env.get('jetson_power_mode') or 'n/a'}", ""]
    if host.get("emulation"):
        lines += [f"**Emulated: timings are not the device's** ({host['emulation']}).", ""]
    if results:
        lines.append("| metric | " + " | ".join(r["name"] for r in results) + " |")
        lines.append("|---|" + "---|" * len(results))
        for label, key, _lower in ROWS:
            cells, base = [], None
            for i, r in enumerate(results):
                text, num = _cell(r, key)
                if i == 0:
                    base = num
                elif num is not None and base:
                    text += f" (×{num / base:.2f})"
                cells.append(text)
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        runs = ", ".join(f"{r['name']}: {r['runs']} runs after {r['warmup']} warm-up"
                         + (" (end to end with preprocessing)" if r.get("end_to_end") else "")
                         + (" (backend mode: the runtime call alone on inputs bound once)"
                            if r.get("mode") == "backend" else "")
                         + (" (per step of a stream, state carried: " + ", ".join(r["runtime"]["stream"]["state"]) + ")"
                            if (r.get("runtime") or {}).get("stream") else "") for r in results)
        lines += ["", f"Runs: {runs}."]
        if len(results) > 1:
            lines.append(f"Ratios (×) are against the first column ({results[0]['name']}).")
    for r in results:
        if r["power"].get("warning_discarded"):
            lines.append(f"- power, {r['name']}: {r['power']['warning_discarded']}")
        arithmetic = str(((r.get("runtime") or {}).get("details") or {}).get("int8_arithmetic") or "")
        if arithmetic.startswith("s8s8"):
            lines.append(f"- int8, {r['name']}: ONNX Runtime on x86 ran int8 x int8 ({arithmetic}); this is "
                         "its slow path here, chosen so the numbers are the ones the gate checked. "
                         "`backend_options.onnxruntime.x86_u8_activations = true` in the manifest selects the faster "
                         "x86 default whose results differ.")
    for r in results:
        if r.get("ops"):
            from .ops import OpProfile, OpRow, to_lines

            d = dict(r["ops"])
            prof = OpProfile(**{**d, "rows": [OpRow(**row) for row in d["rows"]]})
            lines += ["", f"Per-op profile, {r['name']}:", "```", *to_lines(prof), "```"]
    for s in report.skipped:
        lines.append(f"- {'REFUSED' if s.get('refused') else 'skipped'} {s['name']}: {s['reason']}")
    for f in report.gates_failed:
        lines.append(f"- **gate failed**: {f}")
    return "\n".join(lines)
