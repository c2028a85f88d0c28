"""``edge-sdk fleet``: serve a fleet scheduler, join it as a device, list its devices, make TLS files.

Thin, like every command module: Dask is imported inside the command bodies (``edge_sdk.fleet``
does it lazily), so ``edge-sdk --help`` stays light and a missing ``fleet`` extra is one line
naming ``edge-sdk[fleet]``. ``bench --fleet`` lives in :mod:`edge_sdk.cli_bench` and calls
:func:`run_fleet_bench` here.
"""

from __future__ import annotations

import sys

import click

from .cli import cli, emit_json

TLS_HELP = "Folder made by `edge-sdk fleet certs` (mutual TLS); required off loopback."
INSECURE_HELP = "Allow plain TCP on a non-loopback address (anyone who reaches it can run code on the devices)."


@cli.group()
def fleet() -> None:
    """A device fleet on Dask: one scheduler, devices that join it, benches across them (docs/fleet.md)."""


@fleet.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=int, default=8786, show_default=True, help="Port to listen on.")
@click.option("--tls", "tls_dir", type=click.Path(file_okay=False), help=TLS_HELP)
@click.option("--insecure", is_flag=True, help=INSECURE_HELP)
@click.option("--dashboard-port", type=int, default=8787, show_default=True,
              help="Dask dashboard port (only when bokeh is installed; 0: none).")
def fleet_serve(host: str, port: int, tls_dir, insecure: bool, dashboard_port: int) -> None:
    """Run the fleet scheduler here until Ctrl-C."""
    from .fleet.node import serve
    from .fleet.security import Address, check_transport, parse_address

    addr = parse_address(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", tls=bool(tls_dir))
    addr = check_transport(Address(addr.scheme, addr.host, addr.port), tls_dir, insecure, "scheduler")

    def ready(address: str, dashboard: bool) -> None:
        click.echo(f"fleet scheduler at {address}" + (f" (dashboard on port {dashboard_port})" if dashboard else ""))
        click.echo(f"devices join with: edge-sdk fleet join {address}" + (" --tls DIR" if tls_dir else ""))
        sys.stdout.flush()

    serve(addr, tls_dir, dashboard_port=dashboard_port, ready=ready)


@fleet.command("join")
@click.argument("address")
@click.option("--name", help="This device's name in the fleet (default: the host name); unique.")
@click.option("--profiles", help="Comma-separated tags replacing detection, e.g. intel-cpu,convert "
                                 "(for tests and devices the probe misjudges).")
@click.option("--tls", "tls_dir", type=click.Path(file_okay=False), help=TLS_HELP)
@click.option("--insecure", is_flag=True, help=INSECURE_HELP)
@click.option("--timeout", "timeout_s", type=float, default=30.0, show_default=True,
              help="Give up when the scheduler is unreachable this long.")
def fleet_join(address: str, name, profiles, tls_dir, insecure: bool, timeout_s: float) -> None:
    """Join the fleet at ADDRESS as a device, tagged with the profiles this host runs natively."""
    from .fleet.node import join, parse_profiles
    from .fleet.security import check_transport, parse_address

    addr = check_transport(parse_address(address, tls=bool(tls_dir)), tls_dir, insecure, "worker")
    tags = parse_profiles(profiles)

    def ready(dev: str, tags: list[str]) -> None:
        click.echo(f"joined {addr.url} as '{dev}' with tags: {', '.join(tags) or 'none (nothing runs natively here)'}")
        sys.stdout.flush()

    join(addr, tls_dir, name=name, profiles=tags, timeout_s=timeout_s, ready=ready)


@fleet.command("status")
@click.argument("address")
@click.option("--tls", "tls_dir", type=click.Path(file_okay=False), help=TLS_HELP)
@click.option("--insecure", is_flag=True, help=INSECURE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--timeout", "timeout_s", type=float, default=10.0, show_default=True, help="Connect timeout (s).")
def fleet_status(address: str, tls_dir, insecure: bool, as_json: bool, timeout_s: float) -> None:
    """The devices of the fleet at ADDRESS: tags, runtimes, versions, busy or idle."""
    from .fleet.client import status

    data = status(address, tls_dir, insecure, timeout_s)
    if as_json:
        emit_json(data)
        return
    click.echo(f"fleet {data['scheduler']}: {len(data['devices'])} device(s)")
    for d in data["devices"]:
        host = d.get("host") or {}
        rts = ", ".join(f"{k} {v}" for k, v in sorted((d.get("runtimes") or {}).items()) if v)
        click.echo(f"  {d['name']:16s} {'busy' if d['busy'] else 'idle':4s}  {', '.join(d['profiles']) or '-'}")
        click.echo(f"  {'':16s} {host.get('machine', '?')}, {host.get('cpu_model', '?')}, edge-sdk "
                   f"{d.get('edge_sdk') or '?'}, Python {host.get('python', '?')}; {rts or 'no runtime'}")


@fleet.command("certs")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--host", "hosts", multiple=True,
              help="Name or IP the scheduler is reached by (repeatable; localhost and loopback IPs always).")
@click.option("--days", type=int, default=825, show_default=True, help="Validity.")
@click.option("--force", is_flag=True, help="Replace existing files.")
def fleet_certs(folder: str, hosts, days: int, force: bool) -> None:
    """Make a CA and scheduler/worker/client certificates for mutual TLS in FOLDER."""
    from .fleet.security import make_certs

    written = make_certs(folder, list(hosts), days=days, force=force)
    click.echo(f"wrote {', '.join(sorted(written))} in {folder}")
    click.echo("scheduler: ca.pem + scheduler.pem/.key; each device: ca.pem + worker.pem/.key; "
               "workstation: ca.pem + client.pem/.key. Keep ca.key off the devices.")


def run_fleet_bench(artifacts, address: str, devices: str, tls_dir, insecure: bool, as_json: bool, json_out, md_path,
                    plot_path, **options) -> None:
    """``edge-sdk bench ... --fleet ADDRESS``: bench on the fleet, print and write the reports.

    Raises:
        BenchmarkGateError: a gate failed on some device (after the reports are written).
        FleetError: every task of an artifact failed (after the reports are written).
    """
    from .errors import BenchmarkGateError
    from .fleet.client import bench
    from .fleet.node import FleetError

    report = bench(list(artifacts), address, devices=devices, tls=tls_dir, insecure=insecure,
                   progress=lambda line: click.echo(line, err=True), **options)
    for w in report.environment.get("warnings", []):
        click.echo(f"warning: {w}", err=True)
    if as_json:
        emit_json(report.to_dict())
    else:
        click.echo(report.to_markdown())
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
    final = [f for f in report.failed if not f["retried"]]
    if final:  # a row that was not replaced by a retry: the run is incomplete (the reports are written)
        raise FleetError(f"{len(final)} fleet task(s) failed: "
                         + "; ".join(f"{f['name']}: {f['reason']}" for f in final),
                         "The other rows are in the report; `edge-sdk fleet status` lists the devices.")
    if report.gates_failed:
        raise BenchmarkGateError(
            f"{len(report.gates_failed)} benchmark gate(s) failed: " + "; ".join(report.gates_failed),
            "The figures above are from this run; the report files were written before failing.")
