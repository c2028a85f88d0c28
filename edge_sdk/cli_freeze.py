"""``edge-sdk freeze``: a hashed requirements lock for a device image.

Resolves what ``pip install "edge-sdk[EXTRA]"`` would install on the target (Python version and
platform tag, e.g. ``3.11`` / ``manylinux2014_aarch64``) with ``pip install --dry-run --report``
(wheels only), and prints one ``name==version --hash=sha256:...`` line per package, ready for
``pip install --require-hashes -r``. edge-sdk itself is not in the lock (install your wheel with
``--no-deps`` after it).

This is the one command that reaches the package index: locking is its purpose. Nothing else in
edge-sdk touches the network.
"""

from __future__ import annotations

import json
import os
import platform as _platform
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import click

from .cli import cli
from .errors import EdgeSDKError, InputValidationError

DIST = "edge-sdk"


def _packaging():
    """packaging's Marker, default_environment, InvalidRequirement, Requirement (imported on use, so the
    CLI starts without it; pip vendors it where it is not installed on its own)."""
    try:
        from packaging.markers import Marker, default_environment
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # pragma: no cover - a bare venv: pip is there, freeze runs it anyway
        from pip._vendor.packaging.markers import Marker, default_environment  # type: ignore[no-redef]
        from pip._vendor.packaging.requirements import InvalidRequirement, Requirement  # type: ignore[no-redef]
    return Marker, default_environment, InvalidRequirement, Requirement
#: pip's wording when the index cannot be reached (connection refused, no DNS, no route, timeouts).
_OFFLINE = re.compile(r"Could not fetch URL \S+: connection error|NewConnectionError|Failed to establish a new connection|Name or service not known|"
                      r"Temporary failure in name resolution|Network is unreachable|ConnectTimeout|"
                      r"Connection refused|No route to host|ProxyError|Max retries exceeded|"
                      r"ReadTimeoutError|SSLError")


class RegistryUnreachableError(InputValidationError):
    """The package index could not be reached (``freeze`` needs it; nothing else does)."""


def _requirements(extras: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(requirement strings of edge-sdk core + ``extras``, with markers; every extra edge-sdk has)."""
    try:
        reqs = metadata.requires(DIST) or []
    except metadata.PackageNotFoundError as exc:  # pragma: no cover - the CLI runs from the install
        raise InputValidationError("edge-sdk's own metadata is missing.", "reinstall edge-sdk with pip") from exc
    Requirement = _packaging()[3]
    known = sorted(set(metadata.metadata(DIST).get_all("Provides-Extra") or []))
    out: list[str] = []
    seen: set[str] = set()

    def add(extra: str | None) -> None:
        if extra in seen:
            return
        if extra is not None:
            seen.add(extra)
        for line in reqs:
            r = Requirement(line)
            in_extra = r.marker is not None and "extra" in str(r.marker)
            if extra is None and in_extra or extra is not None and not (in_extra and r.marker.evaluate({"extra": extra})):
                continue
            if r.name.replace("_", "-").lower() == DIST:  # an extra made of other extras ([all], [device])
                for sub in sorted(r.extras):
                    add(sub)
                continue
            r.marker = _strip_extra(r.marker)
            out.append(str(r))

    for e in extras:
        if e not in known:
            raise InputValidationError(f"edge-sdk has no extra '{e}'.", f"choose from: {', '.join(known)}")
    add(None)
    for e in extras:
        add(e)
    return list(dict.fromkeys(out)), known


def _strip_extra(marker):
    """The marker without its ``extra == "..."`` clause (None when nothing else is left)."""
    if marker is None:
        return None
    Marker = _packaging()[0]
    text = re.sub(r'\s*(and\s+)?extra\s*==\s*"[^"]*"', "", str(marker)).strip()
    text = re.sub(r"^\s*and\s+", "", text).strip()
    return Marker(text) if text and text != "()" else None


_MANYLINUX_ALIASES = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}


def platform_tags(plat: str) -> list[str]:
    """``plat`` and every older manylinux tag a system with its glibc also installs (as pip does for
    the running machine, but not for ``--platform``): ``manylinux_2_28_aarch64`` also takes wheels
    tagged ``manylinux_2_17_aarch64`` / ``manylinux2014_aarch64``. Other tags are kept as given."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", plat)
    legacy = re.fullmatch(r"(manylinux2014|manylinux2010|manylinux1)_(\w+)", plat)
    if legacy:
        (major, minor), arch = _MANYLINUX_ALIASES[legacy.group(1)], legacy.group(2)
    elif m:
        major, minor, arch = int(m.group(1)), int(m.group(2)), m.group(3)
    else:
        return [plat]
    tags = []
    for glibc in range(minor, 4, -1):
        tags.append(f"manylinux_{major}_{glibc}_{arch}")
        tags += [f"{alias}_{arch}" for alias, v in _MANYLINUX_ALIASES.items() if v == (major, glibc)]
    return tags


def _target_env(python: str, plat: str | None) -> dict[str, str]:
    """Marker environment of the target (for edge-sdk's own requirements; pip evaluates the rest)."""
    default_environment = _packaging()[1]
    env = dict(default_environment())
    env["python_version"] = python
    env["python_full_version"] = python + ".0" if python.count(".") == 1 else python
    if plat:
        machine = next((m for m in ("aarch64", "x86_64", "armv7l", "arm64", "amd64") if plat.lower().endswith(m)), None)
        if machine:
            env["platform_machine"] = machine
        if plat.startswith(("manylinux", "musllinux", "linux")):
            env.update(sys_platform="linux", platform_system="Linux", os_name="posix")
        elif plat.startswith("macosx"):
            env.update(sys_platform="darwin", platform_system="Darwin", os_name="posix")
        elif plat.startswith("win"):
            env.update(sys_platform="win32", platform_system="Windows", os_name="nt")
    return env


def resolve(extras: tuple[str, ...], python: str | None, plat: str | None, extra_reqs: tuple[str, ...] = (),
            index_url: str | None = None, timeout: int = 600) -> dict:
    """Resolve the lock: ``{"python", "platform", "requirements", "packages": [{name, version, sha256, url}]}``."""
    _, _, InvalidRequirement, Requirement = _packaging()
    if python is not None and not re.fullmatch(r"3\.\d{1,2}", python):
        raise InputValidationError(f"--python {python!r} is not a version like 3.11.", "pass MAJOR.MINOR, e.g. --python 3.11")
    target_python = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    reqs, _ = _requirements(extras)
    for line in extra_reqs:
        try:
            Requirement(line)
        except InvalidRequirement as exc:
            raise InputValidationError(f"--with {line!r} is not a requirement: {exc}", 'e.g. --with "opencv-python-headless>=4.10"') from exc
    env = _target_env(target_python, plat)
    wanted = []
    for line in [*reqs, *extra_reqs]:
        r = Requirement(line)
        if r.marker is None or r.marker.evaluate(env):
            r.marker = None
            wanted.append(str(r))
    with tempfile.TemporaryDirectory(prefix="edge-sdk-freeze-") as tmp:
        report = Path(tmp) / "report.json"
        # -vv: pip says "Could not fetch URL ...: connection error" only at info level
        cmd = [sys.executable, "-m", "pip", "install", "-vv", "--dry-run", "--ignore-installed",
               "--disable-pip-version-check", "--no-input", "--only-binary=:all:", "--report", str(report),
               "--target", str(Path(tmp) / "target")]
        if python:
            cmd += ["--python-version", python]
        if plat:
            for tag in platform_tags(plat):
                cmd += ["--platform", tag]
        if index_url:
            cmd += ["--index-url", index_url]
        cmd += wanted
        env_vars = {**os.environ, "PIP_REQUIRE_VIRTUALENV": "0"}
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env_vars)
        except subprocess.TimeoutExpired as exc:
            raise RegistryUnreachableError(f"pip did not finish resolving within {timeout} s.",
                                           "check the network or --index-url; freeze needs the package index") from exc
        if proc.returncode != 0 or not report.exists():
            err = "\n".join(line for line in (proc.stderr + proc.stdout).splitlines()
                            if line.strip() and "is ignored: it is neither a file nor a directory" not in line)
            if _OFFLINE.search(err):
                raise RegistryUnreachableError(
                    "The package index cannot be reached: freeze resolves versions and hashes there.",
                    "run it where the index (or your mirror, --index-url URL) is reachable; "
                    "no other edge-sdk command needs the network")
            last = [ln for ln in err.splitlines() if ln.startswith("ERROR")] or err.splitlines()[-3:]
            raise InputValidationError(
                f"pip could not resolve {' '.join(wanted)} for Python {target_python}"
                f"{' on ' + plat if plat else ''}: {' / '.join(last)[:600]}",
                "check --python/--platform (a wheel must exist for the target, e.g. manylinux2014_aarch64) "
                "and the --with requirements")
        data = json.loads(report.read_text())
    packages = []
    for item in data.get("install", []):
        meta, info = item["metadata"], item.get("download_info", {})
        hashes = info.get("archive_info", {}).get("hashes") or {}
        sha = hashes.get("sha256")
        if sha is None and "hash" in info.get("archive_info", {}):
            algo, _, value = info["archive_info"]["hash"].partition("=")
            sha = value if algo == "sha256" else None
        if sha is None:  # a local file without a hash in pip's report: hash it
            raise InputValidationError(f"pip gave no sha256 for {meta['name']} {meta['version']} ({info.get('url')}).",
                                       "use an index that serves hashes (PyPI does)")
        packages.append({"name": meta["name"], "version": meta["version"], "sha256": sha, "url": info.get("url", "")})
    packages.sort(key=lambda p: p["name"].lower())
    return {"python": target_python, "platform": plat or "this machine", "requirements": wanted, "packages": packages}


def render(lock: dict, extras: tuple[str, ...]) -> str:
    try:
        version = metadata.version(DIST)
    except metadata.PackageNotFoundError:  # pragma: no cover
        version = "?"
    lines = [
        f"# edge-sdk {version} [{','.join(extras) or 'core'}] for Python {lock['python']} on {lock['platform']}",
        f"# resolved by `edge-sdk freeze` (pip {_pip_version()}) from: {'; '.join(lock['requirements'])}",
        "# install: pip install --require-hashes --no-deps -r THIS_FILE && pip install --no-deps edge_sdk-*.whl",
    ]
    for p in lock["packages"]:
        lines.append(f"{p['name']}=={p['version']} \\\n    --hash=sha256:{p['sha256']}")
    return "\n".join(lines) + "\n"


def _pip_version() -> str:
    try:
        return metadata.version("pip")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "?"


@cli.command()
@click.option("--extra", "extras", multiple=True, metavar="EXTRA",
              help="edge-sdk extra to lock (repeatable), e.g. litert, onnxruntime, openvino, device.")
@click.option("--python", "python", default=None, metavar="X.Y", help="Target Python version (default: this one).")
@click.option("--platform", "plat", default=None, metavar="TAG",
              help="Target wheel platform tag, e.g. manylinux2014_aarch64 (default: this machine).")
@click.option("--with", "extra_reqs", multiple=True, metavar="REQ",
              help='Another requirement for the image, repeatable, e.g. --with "opencv-python-headless".')
@click.option("--index-url", default=None, help="Package index or mirror (default: pip's configuration).")
@click.option("--json", "as_json", is_flag=True, help="Print the lock as JSON.")
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False), help="Write the lock here.")
def freeze(extras, python, plat, extra_reqs, index_url, as_json, output):
    """Print a hashed requirements lock for a device image.

    Unlike every other command, this one REACHES THE PACKAGE INDEX (through pip) to resolve
    versions and sha256 hashes: wheels only, for the --python/--platform given. edge-sdk itself is
    left out of the lock; install your edge-sdk wheel with --no-deps on top of it.
    """
    if _platform.python_implementation() != "CPython":  # pragma: no cover
        raise EdgeSDKError("freeze runs on CPython.")
    lock = resolve(tuple(extras), python, plat, tuple(extra_reqs), index_url)
    text = json.dumps(lock, indent=2) + "\n" if as_json else render(lock, tuple(extras))
    if output:
        Path(output).write_text(text)
        click.echo(f"wrote {len(lock['packages'])} pinned packages to {output}", err=True)
    else:
        click.echo(text, nl=False)
