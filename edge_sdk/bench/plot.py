"""PNG plot of a benchmark: latency histogram, latency over the run, power over the run, and
with ``bench --ops`` the most expensive operators.

matplotlib is an optional extra (``pip install "edge-sdk[plot]"``) imported only here, only
when a plot is asked for, with the non-interactive Agg backend (devices have no display).
"""

from __future__ import annotations

import io
from pathlib import Path

from edge_sdk._deps import require
from edge_sdk.fsutil import atomic_write_bytes

from .report import BenchReport


def write_plot(report: BenchReport, path: str | Path) -> Path:
    """Render the report's plots into one PNG at ``path`` (written atomically).

    Args:
        report: A report with at least one result.
        path: The PNG to write.

    Returns:
        The path written.

    Raises:
        MissingDependencyError: matplotlib is not installed (extra ``plot``).
    """
    mpl = require("matplotlib", "bench --plot", extra="plot")
    mpl.use("Agg")
    plt = require("matplotlib.pyplot", "bench --plot", extra="plot")
    with_power = [r for r in report.results if r.power.get("available") and r.power.get("series")]
    with_ops = [r for r in report.results if r.ops and r.ops.get("timed") and r.ops.get("rows")]
    rows = 2 + (1 if with_power else 0) + len(with_ops)
    fig, axes = plt.subplots(rows, 1, figsize=(9, 3.2 * rows))
    try:
        hist, series = axes[0], axes[1]
        for r in report.results:
            hist.hist(r.samples_ms, bins=40, alpha=0.55, label=f"{r.name} (p50 {r.latency_ms['p50']:.3g} ms)")
            series.plot(range(len(r.samples_ms)), r.samples_ms, lw=0.8, label=r.name)
            series.axhline(r.latency_ms["p99"], ls="--", lw=0.7, color=series.lines[-1].get_color())
        hist.set(title="Latency distribution", xlabel="ms", ylabel="runs")
        series.set(title="Latency over the run (dashed: p99)", xlabel="run", ylabel="ms")
        hist.legend(fontsize=8)
        series.legend(fontsize=8)
        if with_power:
            pw = axes[2]
            for r in with_power:
                ts, ws = zip(*r.power["series"])
                pw.plot(ts, ws, lw=0.9, label=f"{r.name} ({r.power['source']}, {r.power['avg_w']:.3g} W avg)")
                if r.power.get("idle_w") is not None:
                    pw.axhline(r.power["idle_w"], ls=":", lw=0.8, color=pw.lines[-1].get_color())
            pw.set(title="Power over the timed window (dotted: idle)", xlabel="s", ylabel="W")
            pw.legend(fontsize=8)
        for k, r in enumerate(with_ops):  # bench --ops: the 15 most expensive ops, time share
            ax = axes[rows - len(with_ops) + k]
            top = sorted(r.ops["rows"], key=lambda row: -(row["time_ms"] or 0.0))[:15][::-1]
            ax.barh([f"{row['type']} {row['name'][:28]} ({row['precision'] or '-'})" for row in top],
                    [100 * (row["share"] or 0.0) for row in top],
                    color=["tab:red" if row["flags"] else "tab:blue" for row in top])
            ax.set(title=f"Per-op time share, {r.name} (red: reformat/fallback)", xlabel="% of op time")
            ax.tick_params(axis="y", labelsize=7)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
    finally:
        plt.close(fig)
    path = Path(path)
    atomic_write_bytes(path, buf.getvalue())
    return path
