"""What runs on a device: receive an artifact folder as bytes, verify it, bench it in a fresh process.

These functions are shipped to workers by reference (``edge_sdk.fleet.tasks.bench_task``), so a
device needs the same edge-sdk installed; the task never executes code sent with it, only
bytes that must match the sha256 the client computed and then pass the same trust check as
``load`` (:func:`edge_sdk.trust.check_artifact`) under the *device's* own policy (its config
file: trusted keys, delegate allow list), which a client can only narrow, never widen.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

#: The child process: the same ``edge-sdk bench`` a user would type on the device.
CHILD = "import sys; from edge_sdk.cli import main; sys.exit(main(sys.argv[1:]))"
MAX_FILES = 10_000
#: A task's work folder in the temp dir: ``edge-sdk-fleet-<kind>-<pid of the device process>-<random>``.
WORK_PREFIX = "edge-sdk-fleet-"


def _work_folder(kind: str) -> Path:
    """A fresh work folder named after this device process, so that a later one can tell a dead
    process's folder (a device killed or powered off mid-task) from a live one's."""
    return Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{kind}-{os.getpid()}-"))


def sweep_work_folders(tmp: str | os.PathLike | None = None) -> list[Path]:
    """Remove the work folders of device processes that are gone (killed mid-task: ``finally``
    never ran). Folders of live processes, and names this module did not make, stay.

    Returns:
        The folders removed.
    """
    import re

    if os.name != "posix":  # os.kill(pid, 0) terminates the process on Windows
        return []
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{WORK_PREFIX}*"):
        m = re.fullmatch(rf"{re.escape(WORK_PREFIX)}(?:bench|convert)-(\d+)-\w+", folder.name)
        if not m or not folder.is_dir() or _alive(int(m.group(1))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def pack_folder(folder: str | os.PathLike) -> dict[str, Any]:
    """An artifact folder as ``{"files": {relpath: bytes}, "sha256": {relpath: hex}}`` (regular files only).

    Raises:
        ModelLoadError: the folder holds a symlink or something that is not a regular file.
    """
    from edge_sdk.errors import ModelLoadError

    root = Path(folder)
    files: dict[str, bytes] = {}
    sums: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            raise ModelLoadError(f"{path}: a symbolic link in an artifact folder is not sent to the fleet.",
                                 "Copy the file itself into the folder.")
        if path.is_dir():
            continue
        if not path.is_file():
            raise ModelLoadError(f"{path}: not a regular file.", "Remove it from the artifact folder.")
        data = path.read_bytes()
        files[rel] = data
        sums[rel] = hashlib.sha256(data).hexdigest()
    return {"name": root.name, "files": files, "sha256": sums}


def unpack_folder(payload: dict[str, Any], dest: Path) -> Path:
    """Write a packed folder under ``dest`` after checking every file's sha256 and path.

    Raises:
        ModelLoadError: a hash mismatch, a path escaping the folder, or too many files.
    """
    from edge_sdk.errors import ModelLoadError

    files, sums = payload["files"], payload["sha256"]
    if len(files) > MAX_FILES or set(files) != set(sums):
        raise ModelLoadError("the artifact sent to this device is malformed (file list and hashes differ).")
    name = str(payload.get("name") or "artifact")
    if not name or name.startswith(".") or "/" in name or "\\" in name:
        name = "artifact"
    folder = dest / name
    folder.mkdir(parents=True)
    for rel, data in files.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or any(p in ("", ".", "..") for p in parts):
            raise ModelLoadError(f"the artifact sent to this device names an unsafe path '{rel}'.")
        if hashlib.sha256(data).hexdigest() != sums[rel]:
            raise ModelLoadError(f"{rel}: sha256 of the bytes received differs from the one the client sent "
                                 "(damaged in transit); nothing was loaded.")
        target = folder.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return folder


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the bench child gets SIGKILL when the device process dies (no orphaned benchmark)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort, other systems
        pass


def bench_task(payload: dict[str, Any], cli_args: list[str], trusted_keys: list[bytes] | None = None,
               timeout_s: float | None = None, image: dict[str, Any] | None = None) -> dict[str, Any]:
    """Bench one artifact folder on this device; returns ``{"ok", "report"|"reason", "device"}``.

    Args:
        payload: :func:`pack_folder`'s output.
        cli_args: ``edge-sdk bench`` options (the same ones as a local bench).
        trusted_keys: Public keys (bytes) the client requires a signature by, checked in
            addition to the device's own policy.
        timeout_s: Kill the bench child after this long.
        image: :func:`pack_path` of an image for ``--image`` (end-to-end timing), or None.
    """
    from edge_sdk.errors import EdgeSDKError
    from edge_sdk.trust import Policy, check_artifact

    device = _device_block()
    tmp = _work_folder("bench")
    try:
        try:
            folder = unpack_folder(payload, tmp)
            check_artifact(folder, verify=True, policy=Policy.resolve())  # the device's own policy
            if trusted_keys:
                check_artifact(folder, verify=True, policy=Policy.resolve(None, list(trusted_keys)))
            if image is not None:
                cli_args = [*cli_args, "--image", str(unpack_path(image, tmp / "image"))]
        except EdgeSDKError as exc:
            return {"ok": False, "reason": f"refused on the device: {exc.message}", "device": device}
        out = tmp / "report.json"
        cmd = [sys.executable, "-c", CHILD, "bench", str(folder), "--json-out", str(out), *cli_args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp,
                                  preexec_fn=preexec)
        except subprocess.TimeoutExpired:
            return {"ok": False, "reason": f"the benchmark did not finish within {timeout_s:g} s", "device": device}
        if proc.returncode not in (0, 9) or not out.is_file():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"ok": False, "device": device,
                    "reason": f"edge-sdk bench exited {proc.returncode} on the device: " + " / ".join(tail)}
        report = json.loads(out.read_text())
        warnings = [ln[len("warning: "):] for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
        return {"ok": True, "report": report, "warnings": warnings, "device": device}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _device_block() -> dict[str, Any]:
    """The running worker's name, address and tags."""
    from distributed import get_worker

    w = get_worker()
    tags = sorted(k for k in (w.state.total_resources or {}) if k != "bench")
    return {"name": str(w.name), "address": w.address, "profiles": tags}


def pack_path(path: str | os.PathLike) -> dict[str, Any]:
    """A file or a folder as :func:`pack_folder`'s payload (a file: one entry, ``"file": True``)."""
    p = Path(path)
    if p.is_dir():
        return dict(pack_folder(p), file=False)
    data = p.read_bytes()
    return {"name": p.name, "files": {p.name: data}, "sha256": {p.name: hashlib.sha256(data).hexdigest()}, "file": True}


def unpack_path(payload: dict[str, Any], dest: Path) -> Path:
    """Write :func:`pack_path`'s payload under ``dest`` (hashes checked); returns the file or folder."""
    dest.mkdir(parents=True, exist_ok=True)
    folder = unpack_folder(payload, dest)
    return folder / next(iter(payload["files"])) if payload.get("file") else folder


def convert_task(inputs: dict[str, dict[str, Any]], profile: str, cli_args: list[str],
                 timeout_s: float | None = None) -> dict[str, Any]:
    """Convert the model in ``inputs`` for ``profile`` on this device with ``edge-sdk convert`` in a child.

    Args:
        inputs: ``{"model": payload, "calib": payload, "val": payload, "preprocess": payload}``
            (:func:`pack_path`; only ``model`` is required). Option values ``@calib`` etc. in
            ``cli_args`` are replaced by the unpacked paths.
        profile: The built-in profile name.
        cli_args: The other ``edge-sdk convert`` options.
        timeout_s: Kill the conversion after this long.

    Returns:
        ``{"ok": True, "summary": dict|None, "rc", "folder": packed artifact folder|None, "log",
        "device"}`` or ``{"ok": False, "reason", "device"}``.
    """
    from edge_sdk.errors import EdgeSDKError

    device = _device_block()
    tmp = _work_folder("convert")
    try:
        try:
            paths = {key: unpack_path(payload, tmp / "in" / key) for key, payload in inputs.items()}
        except EdgeSDKError as exc:
            return {"ok": False, "reason": f"refused on the device: {exc.message}", "device": device}
        args = [str(paths[a[1:]]) if a.startswith("@") and a[1:] in paths else a for a in cli_args]
        out = tmp / "out"
        cmd = [sys.executable, "-c", CHILD, "convert", str(paths["model"]), "--profile", profile, "--out", str(out),
               "--json", *args]
        preexec = _die_with_parent if sys.platform.startswith("linux") else None
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=tmp, preexec_fn=preexec,
                                  env=dict(os.environ, PYTHONUNBUFFERED="1"))
        except subprocess.TimeoutExpired:
            return {"ok": False, "reason": f"the conversion did not finish within {timeout_s:g} s", "device": device}
        try:
            summary = json.loads(proc.stdout) if proc.stdout.strip() else None
        except ValueError:
            summary = None
        if proc.returncode not in (0, 6, 7) or (summary is None and proc.returncode != 0):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"ok": False, "device": device,
                    "reason": f"edge-sdk convert exited {proc.returncode} on the device: " + " / ".join(tail)}
        from edge_sdk.manifest import find_profile_folders

        folder = find_profile_folders(out).get(profile)
        return {"ok": True, "rc": proc.returncode, "summary": summary, "device": device,
                "folder": pack_folder(folder) if folder else None, "log": proc.stderr[-20000:]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
