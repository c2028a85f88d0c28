"""Reading untrusted files: regular files only, bounded size, and JSON parsed strictly.

``manifest.json`` (and anything else that crosses the trust boundary) is read with
:func:`read_regular_file`, which never blocks on a FIFO or a device (``O_NONBLOCK``, then
``fstat``), never follows a symbolic link, and refuses files over a size limit before reading
them. :func:`loads` then parses JSON the strict way: duplicate keys, ``NaN``/``Infinity``,
numbers that overflow to infinity, integers of more than :data:`MAX_INT_DIGITS` digits and
nesting deeper than :data:`MAX_DEPTH` are errors, each naming the file, never a
``RecursionError`` or ``ValueError`` escaping as an internal error.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from .errors import EdgeSDKError

#: Deepest nesting of arrays/objects accepted (manifests are about 6 deep).
MAX_DEPTH = 64
#: Longest integer literal accepted (int64 has 19 digits).
MAX_INT_DIGITS = 20
#: Longest path accepted (Linux PATH_MAX).
MAX_PATH_CHARS = 4096


class _Invalid(ValueError):
    """A strictness rule was broken (raised inside the decoder, reported by :func:`loads`)."""


def read_regular_file(path: str | Path, *, limit: int, what: str, error: type[EdgeSDKError]) -> bytes:
    """Read a whole regular file of at most ``limit`` bytes, without following links or blocking.

    Args:
        path: The file.
        limit: Largest size accepted, in bytes.
        what: What the file is, for messages (e.g. ``"manifest"``).
        error: The error class to raise.

    Returns:
        The file's bytes.

    Raises:
        EdgeSDKError: (``error``) missing, a link, a FIFO/device/folder, too large, too long a
            path, or unreadable.
    """
    text = os.fspath(path)
    if len(text) > MAX_PATH_CHARS:
        raise error(f"The {what} path is {len(text)} characters long (limit {MAX_PATH_CHARS}).",
                    "Use a shorter path.")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(text, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{text} is a symbolic link; refusing to read the {what} through it.",
                        "Copy the real file into place.") from None
        raise error(f"Cannot read the {what} {text}: {exc.strerror or exc}.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise error(f"The {what} {text} is {kind}; only regular files are read.",
                        "Replace it with the real file.")
        if st.st_size > limit:
            raise error(f"The {what} {text} is {st.st_size} bytes; the limit is {limit}.",
                        "This is not a file edge-sdk wrote; the artifact may have been tampered with.")
        chunks, total = [], 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > limit:  # the file grew while we read it
                raise error(f"The {what} {text} is larger than the limit of {limit} bytes.")
            chunks.append(block)
        return b"".join(chunks)
    except OSError as exc:
        raise error(f"Cannot read the {what} {text}: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)


def hash_regular_file(path: str | Path, *, what: str, error: type[EdgeSDKError], digest: bool = True) -> tuple[int, str]:
    """(size, sha256) of a regular file, opened without following links or blocking on a FIFO.

    Args:
        path: The file.
        what: The file, as messages should name it.
        error: The error class to raise.
        digest: Compute the sha256 (False: only check the file and return its size and "").

    Raises:
        EdgeSDKError: (``error``) a link, not a regular file, or unreadable.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    h, size = hashlib.sha256(), 0
    try:
        fd = os.open(os.fspath(path), flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{what} is a symbolic link; artifacts must contain real files.") from None
        raise error(f"{what}: cannot read it: {exc.strerror or exc}.") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{what} is not a regular file.", "Replace it with the real file.")
        if not digest:
            return st.st_size, ""
        while block := os.read(fd, 1 << 20):
            h.update(block)
            size += len(block)
    except OSError as exc:
        raise error(f"{what}: cannot read it: {exc.strerror or exc}.") from None
    finally:
        os.close(fd)
    return size, h.hexdigest()


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Invalid(f"duplicate key '{key[:80]}'")
        out[key] = value
    return out


def _constant(name: str) -> Any:
    raise _Invalid(f"{name} is not a number JSON allows")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Invalid(f"number {text[:40]} is out of range")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Invalid(f"integer of {digits} digits (limit {MAX_INT_DIGITS})")
    return int(text)


def depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: safe on any input)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node.values())
        elif isinstance(node, list):
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in node)
    return deepest


def loads(data: bytes | str, *, where: str, error: type[EdgeSDKError], hint: str | None = None) -> Any:
    """Parse JSON strictly.

    Args:
        data: UTF-8 bytes (or text).
        where: The file, for messages.
        error: The error class to raise.
        hint: What to do about a malformed file.

    Returns:
        The parsed value.

    Raises:
        EdgeSDKError: (``error``) not UTF-8, not JSON, a duplicate key, a non-finite or
            oversized number, or nesting deeper than :data:`MAX_DEPTH`.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    except UnicodeDecodeError as exc:
        raise error(f"{where} is not UTF-8 text (byte {exc.start}).", hint) from None
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float,
                           parse_int=_int)
    except RecursionError:
        raise error(f"{where}: JSON nested too deeply (limit {MAX_DEPTH}).", hint) from None
    except _Invalid as exc:
        raise error(f"{where} is not valid strict JSON: {exc}.", hint) from None
    except ValueError as exc:  # json.JSONDecodeError, and int() limits
        raise error(f"{where} is not valid JSON ({str(exc)[:200]}).", hint) from None
    if depth(value) > MAX_DEPTH:
        raise error(f"{where}: JSON nested too deeply (limit {MAX_DEPTH}).", hint)
    return value


def dumps_canonical(value: Any) -> bytes:
    """The canonical JSON form hashes are taken over (sorted keys, no spaces, no NaN)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


__all__ = ["MAX_DEPTH", "MAX_INT_DIGITS", "MAX_PATH_CHARS", "depth", "dumps_canonical", "hash_regular_file", "loads",
           "read_regular_file"]
