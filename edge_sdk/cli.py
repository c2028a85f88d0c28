"""The ``edge-sdk`` command line.

Commands are thin: they parse options, build a config, call the library and print. Errors
become exit codes in exactly one place (:func:`main`, via :func:`edge_sdk.errors.exit_code_for`):
a user mistake prints one line and a hint; ``--debug`` shows the traceback.
Command modules register themselves at the bottom of this file and import their heavy
dependencies only inside the command body, so ``edge-sdk --help`` stays light.
"""

from __future__ import annotations

import json
import sys
import traceback

import click

from ._version import __version__
from .errors import EdgeSDKError, exit_code_for

_STATE = {"debug": False}


def emit_json(data) -> None:
    """Print ``data`` as JSON on stdout (the one JSON writer used by every command)."""
    click.echo(json.dumps(data, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="edge-sdk")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
def cli(debug: bool) -> None:
    """edge-sdk: convert a model for a device, run it, and measure it there."""
    _STATE["debug"] = debug


# ----------------------------------------------------------------------------- profiles
@cli.group()
def profiles() -> None:
    """List and inspect device profiles."""


@profiles.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profiles_list(as_json: bool) -> None:
    """List the built-in device profiles and their aliases."""
    from .profiles import all_aliases, builtin_profiles

    profs = builtin_profiles()
    aliases = all_aliases()
    rows = []
    for name, p in sorted(profs.items()):
        rows.append({
            "name": name,
            "aliases": sorted(a for a, c in aliases.items() if c == name),
            "formats": list(p.artifact.formats),
            "precision": p.quantization.precision,
            "runtime": [f"{s.backend}/{s.accelerator}" for s in p.runtime.chain],
            "description": p.description,
        })
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        click.echo(f"{r['name']:14s} {', '.join(r['formats']):24s} {r['precision']:5s} "
                   f"aliases: {', '.join(r['aliases']) or '-'}")
        click.echo(f"{'':14s} runtime: {' -> '.join(r['runtime'])}")
        click.echo(f"{'':14s} {r['description']}")


@profiles.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profiles_show(name: str, as_json: bool) -> None:
    """Show every setting of profile NAME (a name, alias or .toml path)."""
    from .profiles import resolve_profile

    notes: list[str] = []
    prof = resolve_profile(name, notes=notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    data = prof.to_dict()
    data["sha256"] = prof.sha256
    if as_json:
        emit_json(data)
        return
    _print_tree(data)


def _print_tree(data, indent: int = 0) -> None:
    pad = " " * indent
    for key, val in data.items():
        if isinstance(val, dict):
            click.echo(f"{pad}{key}:")
            _print_tree(val, indent + 2)
        elif isinstance(val, list) and val and isinstance(val[0], dict):
            click.echo(f"{pad}{key}:")
            for item in val:
                click.echo(f"{pad}  - " + ", ".join(f"{k}={v}" for k, v in item.items()))
        else:
            click.echo(f"{pad}{key}: {val}")


@profiles.command("validate")
@click.argument("path", type=click.Path(dir_okay=False))
def profiles_validate(path: str) -> None:
    """Validate a custom profile file."""
    from .profiles import load_profile_file

    prof = load_profile_file(path)
    click.echo(f"{path}: valid profile '{prof.name}' (sha256 {prof.sha256[:12]})")


# ----------------------------------------------------------------------------- doctor
@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def doctor(as_json: bool) -> None:
    """What this host can run: runtimes, delegates, devices, sensors, profiles."""
    from . import doctor as doc

    report = doc.collect()
    if as_json:
        emit_json(report)
    else:
        click.echo(doc.render(report))


# ----------------------------------------------------------------------------- verify
@cli.command()
@click.argument("artifact", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify(artifact: str, as_json: bool) -> None:
    """Check an artifact folder: manifest schema, paths and every file's sha256."""
    from .manifest import read_manifest

    m = read_manifest(artifact, verify=True)
    if as_json:
        emit_json({"artifact": artifact, "valid": True, "profile": m.profile.name,
                   "files": [a.path for a in m.artifacts]})
        return
    click.echo(f"{artifact}: OK ({m.profile.name}, {len(m.artifacts)} file(s) verified)")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the CLI and map errors to exit codes in one place."""
    try:
        cli.main(args=argv, prog_name="edge-sdk", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except EdgeSDKError as exc:
        if _STATE["debug"]:
            traceback.print_exc()
        click.echo(f"error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"  hint: {exc.hint}", err=True)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        click.echo("Interrupted; nothing was left half-written.", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001 - an internal error: say so, keep the trace
        traceback.print_exc()
        click.echo(f"internal error: {type(exc).__name__}: {exc}\n  This is a bug in edge-sdk; "
                   "please report it with the trace above.", err=True)
        return exit_code_for(exc)
    return 0


def run() -> None:  # pragma: no cover - thin wrapper
    sys.exit(main())


# Command modules register themselves on `cli` (each keeps its heavy imports inside the command).
# Add new command modules here.
from . import cli_bench  # noqa: E402,F401
from . import cli_run  # noqa: E402,F401
from . import cli_convert  # noqa: E402,F401
