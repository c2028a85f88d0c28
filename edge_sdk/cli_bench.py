"""``edge-sdk bench``: measure artifacts on this device, write the reports, enforce the gates.

Thin: options become arguments of :func:`edge_sdk.benchmark`; the command prints the
Markdown table (or JSON with ``--json -``), writes the files asked for, and only then raises
:class:`~edge_sdk.errors.BenchmarkGateError` for failed gates, so a failing CI run still
leaves its report behind. Exit codes are decided in :func:`edge_sdk.cli.main`.
"""

from __future__ import annotations

import sys
import time
import warnings

import click

from .cli import check_output_path, cli, emit_json, output_options, runtime_options, trust_options
from .errors import BenchmarkGateError, InputValidationError, ModelLoadError


class ProgressPrinter:
    """Progress on stderr: a redrawn bar on a TTY, else a plain line every few seconds.

    Args:
        stream: Where to write (stderr).
        min_s: Runs shorter than this print nothing (short runs need no progress).
    """

    def __init__(self, stream=None, min_s: float = 2.0):
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_s = min_s
        self._last_line = 0.0
        self._drawn = False

    def __call__(self, done: int, total: int | None, seconds: float, name: str) -> None:
        finished = total is not None and done >= total
        if seconds < self.min_s and not (finished and self._drawn):
            return
        if self.tty:
            if total:
                filled = int(30 * done / total)
                text = f"\r{name}: [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {seconds:.1f}s"
            else:
                text = f"\r{name}: {done} runs {seconds:.1f}s"
            self.stream.write(text + ("\n" if finished else ""))
            self.stream.flush()
            self._drawn = not finished
            return
        now = time.monotonic()
        if finished or now - self._last_line >= 5.0:
            self.stream.write(f"{name}: {done}{'/' + str(total) if total else ''} runs, {seconds:.1f}s\n")
            self.stream.flush()
            self._last_line = now
            self._drawn = not finished


def legacy_json_file(artifacts) -> None:
    """Catch the old ``bench ... --json FILE`` / ``--json -`` form: ``--json`` is now a flag, so FILE
    would be read as one more artifact.

    Raises:
        InputValidationError: an artifact argument is ``-`` or a ``.json`` file name that is not an artifact.
    """
    from pathlib import Path

    for a in artifacts:
        p = Path(a)
        if a == "-" or (p.suffix.lower() == ".json" and not p.is_dir()):
            raise InputValidationError(
                f"'{a}' is not an artifact: `--json` is a flag (print the JSON report instead of the table).",
                "Write the report to a file with --json-out FILE; print it with --json.")


@cli.command("bench")
@click.argument("artifacts", nargs=-1, required=True, type=click.Path())
@runtime_options(what="bench")
@click.option("--runs", type=int, default=100, show_default=True, help="Timed inferences.")
@click.option("--warmup", type=int, default=10, show_default=True, help="Untimed inferences after the cold one.")
@click.option("--duration", type=float, help="Run the timed loop for S seconds instead of --runs.")
@click.option("--power", default="auto", show_default=True,
              help='auto|none|rapl|ina3221|tegrastats|nvml|hwmon|cmd:"COMMAND printing watts".')
@click.option("--interval-ms", type=float, default=20.0, show_default=True,
              help="Power/memory sampling period; keep it shorter than the load's changes (aliasing).")
@click.option("--idle", "idle_s", type=float, default=0.0, help="Seconds of idle baseline before the timed loop.")
@click.option("--image", type=click.Path(dir_okay=False), help="Time preprocessing of this image + inference (end to end).")
@output_options
@click.option("--markdown", "md_path", help="Write the Markdown table to FILE.")
@click.option("--plot", "plot_path", help='Write a PNG plot to FILE (needs the "plot" extra: matplotlib).')
@click.option("--fail-if", "fail_if", multiple=True, help="Gate such as 'p99_ms>20' (repeatable); exit 9 when true.")
@click.option("--no-verify", is_flag=True, help="Skip the artifact hash check (development only).")
@click.option("--mode", type=click.Choice(["end-to-end", "backend"]), default="end-to-end", show_default=True,
              help="backend: time the runtime call alone on inputs bound once (what benchmark_app times).")
@click.option("--ops", is_flag=True,
              help="Also profile per operator with the runtime's own profiler (top 15 printed, all in --json).")
@click.option("--no-crash-guard", is_flag=True,
              help="Do not trial-load each model in a child process first (a crashing model then ends the run).")
@trust_options()
@click.option("--fleet", "fleet_address", metavar="ADDRESS",
              help="Bench on the devices of the fleet at ADDRESS instead of here (docs/fleet.md).")
@click.option("--devices", default="all", show_default=True,
              help="With --fleet: all matching devices, one per artifact (retried on another if it dies), or NAME,...")
@click.option("--tls", "tls_dir", type=click.Path(file_okay=False),
              help="With --fleet: the `edge-sdk fleet certs` folder (mutual TLS; required off loopback).")
@click.option("--insecure", is_flag=True, help="With --fleet: allow plain TCP to a non-loopback scheduler.")
def bench(artifacts, profile, runs, warmup, duration, threads, strict, power, interval_ms, idle_s, image, backend,
          device, as_json, json_out, md_path, plot_path, fail_if, no_verify, mode, ops, no_crash_guard, keys, allow_delegates,
          fleet_address, devices, tls_dir, insecure) -> None:
    """Benchmark ARTIFACTS on this device: latency, cold start, memory, power and energy.

    With --fleet ADDRESS, on the devices of a fleet instead: one report, a row per device x artifact.
    """
    from .bench import benchmark, to_markdown

    legacy_json_file(artifacts)
    for opt, path in (("--json-out", json_out), ("--markdown", md_path), ("--plot", plot_path)):
        if path:  # an unwritable report path fails now, not after minutes of measuring
            check_output_path(path, opt)
    if plot_path:  # likewise a missing matplotlib
        from ._deps import require

        require("matplotlib", "bench --plot", extra="plot")
    if fleet_address:
        if allow_delegates:
            raise InputValidationError("--allow-external-delegate is not supported with --fleet.",
                                       "A device's delegate allow list is its own config file (docs/fleet.md).")
        if mode != "end-to-end":
            raise InputValidationError("--mode backend is not supported with --fleet yet.",
                                       "Run `edge-sdk bench --mode backend` on the device itself.")
        from .cli_fleet import run_fleet_bench

        run_fleet_bench(artifacts, fleet_address, devices, tls_dir, insecure, as_json, json_out, md_path, plot_path,
                        profile=profile, runs=runs, warmup=warmup, duration_s=duration, threads=threads, strict=strict,
                        power=power, idle_s=idle_s, backend=backend, device=device, fail_if=fail_if,
                        sample_interval_s=interval_ms / 1000.0, verify=not no_verify,
                        crash_guard=False if no_crash_guard else None, trusted_keys=list(keys) if keys else None,
                        image=image, ops=ops)
        return
    if tls_dir or insecure or devices != "all":
        raise InputValidationError("--devices, --tls and --insecure only apply with --fleet ADDRESS.")
    with warnings.catch_warnings(record=True) as caught:
        # a fallback warning is news, not a bug: one plain line instead of Python's source-line format
        warnings.simplefilter("always")
        report = benchmark(list(artifacts), runs=runs, warmup=warmup, duration_s=duration, threads=threads,
                           strict=strict, power=power, idle_s=idle_s, profile=profile, image=image,
                           backend=backend, device=device, fail_if=fail_if, verify=not no_verify,
                           sample_interval_s=interval_ms / 1000.0, progress=ProgressPrinter(),
                           crash_guard=False if no_crash_guard else None, trusted_keys=list(keys) if keys else None,
                           allow_external_delegates=list(allow_delegates), ops=ops, mode=mode)
    for w in caught:
        if issubclass(w.category, UserWarning):
            click.echo(f"warning: {w.message}", err=True)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(to_markdown(report))
    if json_out:
        report.write_json(json_out)
        click.echo(f"wrote {json_out}", err=True)
    if md_path:
        report.write_markdown(md_path)
        click.echo(f"wrote {md_path}", err=True)
    if plot_path:
        from .bench.plot import write_plot

        write_plot(report, plot_path)
        click.echo(f"wrote {plot_path}", err=True)
    refused = [sk for sk in report.skipped if sk.get("refused")]
    if refused:
        raise ModelLoadError(
            f"{len(refused)} profile folder(s) failed their checks and were not benchmarked: "
            + "; ".join(f"{sk['name']}: {sk['reason']}" for sk in refused),
            "The figures above are for the others. Copy the artifact again, or convert again.")
    if report.gates_failed:
        raise BenchmarkGateError(
            f"{len(report.gates_failed)} benchmark gate(s) failed: " + "; ".join(report.gates_failed),
            "The figures above are from this run; the report files were written before failing.")
