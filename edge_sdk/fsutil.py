"""Filesystem helpers: hashing, atomic file writes and atomic folder publication."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

_CHUNK = 1 << 20
#: A file in an artifact folder that is not (or not yet) published: load and verify refuse it.
UNPUBLISHED_MARKER = ".edge-sdk-unpublished"
#: Staging folders are ``.<name>.partial-XXXX`` beside the destination.
STAGING_INFIX = ".partial-"
LOCK_NAME = ".edge-sdk-convert.lock"


def _umask() -> int:
    # os.umask can only be read by setting it; restore it at once.
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; published files get normal permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def staging_dir(final: str | Path, *, force: bool = False):
    """Yield a temporary folder beside ``final``; on success it replaces ``final`` atomically.

    On any exception (including KeyboardInterrupt) the temporary folder is removed and
    ``final`` is left exactly as it was. An existing ``final`` is only replaced with ``force``.

    Args:
        final: The folder to publish.
        force: Allow replacing an existing folder.

    Raises:
        FileExistsError: ``final`` exists and ``force`` is False (checked before any work).
    """
    final = Path(final)
    if final.exists() and not force:
        raise FileExistsError(str(final))
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}{STAGING_INFIX}", dir=final.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes 0700; the published folder must be readable by the device user
    # Until the rename, the folder says it is unfinished: a copy taken now (or left by a kill) never loads.
    mark_unpublished(tmp, f"unfinished conversion (staging folder of process {os.getpid()})")
    try:
        yield tmp
        (tmp / UNPUBLISHED_MARKER).unlink()
        old = None
        if final.exists():
            old = final.parent / f".{final.name}.old-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def mark_unpublished(folder: str | Path, reason: str) -> None:
    """Mark ``folder`` as not loadable (a staging folder, a rejected candidate); ``reason`` is shown."""
    (Path(folder) / UNPUBLISHED_MARKER).write_text(reason.strip() + "\n", encoding="utf-8")


def unpublished_reason(folder: str | Path) -> str | None:
    """Why ``folder`` is not a published artifact, or None when it is (no marker, no staging name)."""
    folder = Path(folder)
    marker = folder / UNPUBLISHED_MARKER
    if marker.is_file():
        try:
            return marker.read_text(encoding="utf-8", errors="replace").strip()[:300] or "not published"
        except OSError:
            return "not published"
    if folder.name.startswith(".") and STAGING_INFIX in folder.name:
        return "unfinished conversion (staging folder)"
    return None


@contextlib.contextmanager
def output_lock(out: str | Path):
    """Hold the exclusive conversion lock of output folder ``out`` (released on exit or death).

    Raises:
        BlockingIOError: another process holds it (its pid is in the message).
    """
    import fcntl

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise BlockingIOError(holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        try:
            yield path
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)
    finally:
        os.close(fd)


def clean_stale(out: str | Path) -> list[str]:
    """Remove staging (``.*.partial-*``) and swap (``.*.old-*``) folders left by killed runs.

    Call only while holding :func:`output_lock` of ``out``: then no live run owns them.

    Returns:
        The names removed.
    """
    out = Path(out)
    removed = []
    if not out.is_dir():
        return removed
    for child in out.iterdir():
        if child.is_dir() and not child.is_symlink() and child.name.startswith(".") and (
                STAGING_INFIX in child.name or ".old-" in child.name):
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    return sorted(removed)
