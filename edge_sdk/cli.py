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
from .errors import EdgeSDKError, InputValidationError, exit_code_for

def emit_json(data) -> None:
    """Print ``data`` as JSON on stdout (the one JSON writer used by every command)."""
    click.echo(json.dumps(data, indent=2, default=str))


def check_output_path(path: str, option: str) -> None:
    """Refuse a report path that cannot be written, before the run (by creating and removing a file there).

    Raises:
        InputValidationError: the folder is missing or not writable, or the path is a folder.
    """
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    if target.is_dir():
        raise InputValidationError(f"{option} {path}: is a folder; give a file name.",
                                   f"e.g. {option} {target / 'bench.out'}")
    parent = target.parent if str(target.parent) else Path(".")
    try:
        fd, probe = tempfile.mkstemp(prefix=".edge-sdk-write-test-", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputValidationError(f"{option} {path}: cannot write there ({exc.strerror or exc}).",
                                   "Pick a path in an existing, writable folder.") from None


def write_json_out(data, path: str) -> None:
    """Write ``data`` as JSON to ``path`` atomically (``--json-out``) and say so on stderr."""
    from .fsutil import atomic_write_bytes

    atomic_write_bytes(path, (json.dumps(data, indent=2, default=str) + "\n").encode())
    click.echo(f"wrote {path}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="edge-sdk")
@click.option("--debug", is_flag=True, help="Show full tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """edge-sdk: convert a model for a device, run it, and measure it there."""
    ctx.ensure_object(dict)["debug"] = debug  # read back by main() when an error ends the command


class BackendChoice(click.Choice):
    """``--backend`` values: the registered backends, read when first needed (``--help`` or parsing),
    so a backend registered by a plugin appears without an edit here and ``edge-sdk --help`` imports
    no runtime code."""

    def __init__(self) -> None:
        super().__init__((), case_sensitive=False)

    @property  # type: ignore[override]
    def choices(self):  # noqa: D102 - click reads this attribute
        from .runtimes.select import BACKENDS

        return tuple(BACKENDS.names())

    @choices.setter
    def choices(self, _value) -> None:  # click's __init__ assigns it; the registry is the source
        pass


def runtime_options(*, what: str):
    """The options that pick what runs, declared once for ``run`` and ``bench``.

    ``--profile``, ``--backend`` (choices from the backend registry), ``--device``, ``--strict``
    and ``--threads`` (at least 1). ``what`` names the command's subject in the help text.
    """

    def deco(f):
        for opt in reversed([
            click.option("--profile", default=None,
                         help=f"Pick this profile from a `convert` output folder (name, alias or .toml) to {what}."),
            click.option("--backend", type=BackendChoice(), default=None,
                         help="Force this backend; no fallback."),
            click.option("--device", default=None,
                         help="Force this delegate / execution provider / OpenVINO device; no fallback."),
            click.option("--strict", is_flag=True,
                         help="Fail (exit 5) instead of falling back from the profile's accelerator."),
            click.option("--threads", type=click.IntRange(min=1), default=None,
                         help="CPU threads for the runtime (default: the runtime's own)."),
        ]):
            f = opt(f)
        return f

    return deco


def output_options(f):
    """``--json`` (a flag: print JSON on stdout instead of text) and ``--json-out FILE`` (also write it),
    one meaning in every command that has them."""
    f = click.option("--json-out", "json_out", metavar="FILE", default=None,
                     help="Also write the JSON report to FILE.")(f)
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout instead of text.")(f)


# ----------------------------------------------------------------------------- profiles
@cli.group()
def profiles() -> None:
    """List and inspect device profiles."""


@profiles.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def profiles_list(as_json: bool) -> None:
    """List the built-in device profiles and their aliases."""
    from .profiles import all_aliases, builtin_profile_errors, builtin_profiles

    profs = builtin_profiles()
    for exc in builtin_profile_errors().values():  # the others still list
        click.echo(f"warning: skipped {exc.message}" + (f" ({exc.hint})" if exc.hint else ""), err=True)
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


# ----------------------------------------------------------------------------- trust
def trust_options(*key_flags: str):
    """The trust options shared by commands that load artifacts (defined once; see edge_sdk.trust).

    Adds ``keys`` (trusted Ed25519 public keys: the manifest must be signed by one) and
    ``allow_delegates`` (delegate libraries a profile chain may load) to the command.
    """
    def deco(f):
        f = click.option(*(key_flags or ("--trusted-key",)), "keys", multiple=True, type=click.Path(dir_okay=False),
                         help="Trusted Ed25519 public key (.pub): refuse artifacts not signed by one (repeatable).")(f)
        f = click.option("--allow-external-delegate", "allow_delegates", multiple=True, metavar="LIB",
                         help="Absolute path of a delegate library a profile chain may load (repeatable); "
                              "an artifact can never load one on its own.")(f)
        return f
    return deco


def policy_from(keys, allow_delegates):
    """The :class:`edge_sdk.trust.Policy` for the trust options (plus the user config file)."""
    from .trust import Policy

    return Policy.resolve(list(allow_delegates), list(keys) if keys else None)


# ----------------------------------------------------------------------------- verify
@cli.command()
@click.argument("artifact", type=click.Path())
@trust_options("--key", "--trusted-key")
@click.option("--no-load", is_flag=True, help="Static checks only: skip the trial load in a child process.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify(artifact: str, keys, allow_delegates, no_load: bool, as_json: bool) -> None:
    """Check ARTIFACT exactly as `load` would, without loading it into this process.

    Manifest (strict JSON, schema, paths), every file's sha256, the preprocessing and profile
    hashes, the signature (with --key), the delegate policy, the model containers, then a trial
    load in a child process. A `convert` output folder: every profile folder.
    """
    from .runtimes.verify import verify_paths

    reports, first = verify_paths(artifact, policy=policy_from(keys, allow_delegates), load_check=not no_load)
    if as_json:
        emit_json(reports[0] if len(reports) == 1 and first is None else {"artifact": artifact, "profiles": reports,
                                                                          "valid": first is None})
    else:
        for rep in reports:
            if not rep["valid"]:
                click.echo(f"{rep['artifact']}: FAILED: {rep['error']}")
                continue
            gate = rep["accuracy_gate"]
            if gate == "failed":
                click.echo(f"warning: {rep['artifact']}: its accuracy gate FAILED; it was kept with --allow-accuracy-drop "
                           "and may not do the model's task (load(strict=True) refuses it)", err=True)
            signed = (f", signed by key {rep['signed_by']}" if rep["signed_by"] else
                      ", signature present (not checked: pass --key)" if rep["signature_present"] else ", unsigned")
            click.echo(f"{rep['artifact']}: OK ({rep['profile']}, {len(rep['files'])} file(s) verified, "
                       f"accuracy gate {gate}{signed}); {rep['load']}")
    if first is not None:
        raise first


# ----------------------------------------------------------------------------- signing
@cli.command()
@click.argument("artifact", type=click.Path())
@click.option("--key", "key", required=True, type=click.Path(dir_okay=False), help="Ed25519 private key (edge-sdk keygen).")
def sign(artifact: str, key: str) -> None:
    """Sign ARTIFACT's manifest (which covers every file's sha256) with an Ed25519 key.

    The artifact is verified first; a damaged one is never signed. A `convert` output folder:
    every profile folder. Devices then refuse unsigned or altered artifacts with
    `load(..., trusted_keys=[...])`, `verify --key`, or [trust] trusted_keys in the config file.
    """
    from .manifest import find_profile_folders, is_artifact_folder
    from .signing import SIGNATURE_NAME, sign_artifact

    folders = [artifact] if is_artifact_folder(artifact) else [str(f) for f in find_profile_folders(artifact).values()]
    if not folders:
        from .errors import ModelLoadError

        raise ModelLoadError(f"{artifact} is neither an artifact folder nor a convert output folder.",
                             "Pass the folder `edge-sdk convert` wrote.")
    for folder in folders:
        rec = sign_artifact(folder, key)
        click.echo(f"{folder}: signed (key {rec['key_id']}) -> {SIGNATURE_NAME}")


@cli.command()
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Path prefix: writes PREFIX.key (private, mode 0600) and PREFIX.pub.")
@click.option("--force", is_flag=True, help="Overwrite existing key files.")
def keygen(out: str, force: bool) -> None:
    """Make an Ed25519 key pair for signing artifacts (keep the .key secret; ship the .pub to devices)."""
    from .signing import generate_keypair, key_id, load_public_key

    priv, pub = generate_keypair(out, force=force)
    click.echo(f"private key: {priv} (keep it secret)\npublic key:  {pub} (key {key_id(load_public_key(pub))})")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: run the CLI and map errors to exit codes in one place.

    Everything it prints goes through :class:`edge_sdk.termsafe.SafeStream`: names from artifacts
    and models are shown, never executed by the terminal.
    """
    from .termsafe import SafeStream

    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)  # type: ignore[assignment]
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = saved


def _main(argv: list[str] | None) -> int:
    state = {"debug": False}  # the click context's obj: the group callback sets "debug"
    try:
        cli.main(args=argv, prog_name="edge-sdk", standalone_mode=False, obj=state)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except EdgeSDKError as exc:
        if state.get("debug"):
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
from . import cli_explain  # noqa: E402,F401
from . import cli_fleet  # noqa: E402,F401
from . import cli_freeze  # noqa: E402,F401

