"""Reading a user's ``.npy`` / ``.npz`` without trusting its header.

``numpy.load`` believes the header: a 200-byte ``.npy`` that claims a shape of 3.6 PiB makes it
allocate (``MemoryError``), an ``.npz`` member does the same from inside the zip, a FIFO named
``x.npy`` blocks the reader forever, and a zip whose members inflate to more than the machine's
memory ends the process. :func:`load_array_file` checks all of that first - a regular file, each
array's header against the bytes that are really there, the total against physical memory, no
object arrays - and then loads with ``allow_pickle=False``. Every refusal is the caller's
:class:`~edge_sdk.errors.EdgeSDKError` naming the file and what to do.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path
from typing import IO

import numpy as np

from .errors import EdgeSDKError


def regular_file(path: Path, *, what: str, error: type[EdgeSDKError]) -> int:
    """The size of ``path`` when it is a regular file (links followed: the user named it).

    Raises:
        EdgeSDKError: (``error``) missing, or a FIFO, device, socket or folder (reading one could block).
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise error(f"Cannot read {what} {path}: {exc.strerror or exc}.") from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise error(f"{what.capitalize()} {path} is {kind}; only regular files are read (reading it could block forever).",
                    "Write the data to a file first, then pass that file.")
    return st.st_size


def memory_bytes() -> int | None:
    """Physical memory of this machine, or None where it cannot be read."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _header(fp: IO[bytes]) -> tuple[tuple[int, ...], np.dtype]:
    fmt = np.lib.format
    version = fmt.read_magic(fp)
    if version == (1, 0):
        shape, _fortran, dtype = fmt.read_array_header_1_0(fp)
    elif version in ((2, 0), (3, 0)):
        shape, _fortran, dtype = fmt.read_array_header_2_0(fp)
    else:  # pragma: no cover - read_magic only returns known versions
        raise ValueError(f"unsupported .npy version {version}")
    return tuple(int(d) for d in shape), np.dtype(dtype)


def _check(shape: tuple[int, ...], dtype: np.dtype, available: int, where: str, error: type[EdgeSDKError]) -> int:
    if dtype.hasobject:
        raise error(f"Cannot read {where}: it holds Python objects (dtype {dtype}); only numeric arrays are read "
                    "(no pickles).",
                    "Save plain numeric arrays (e.g. float32).")
    need = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if need > available:
        raise error(f"Cannot read {where}: its header claims shape {shape} of {dtype} ({need:,} bytes), but only "
                    f"{available:,} bytes of data follow: truncated, or not a file numpy wrote.",
                    "Write it again with numpy.save / numpy.savez.")
    return need


def load_array_file(path: str | Path, *, error: type[EdgeSDKError], what: str = "array file"):
    """A ``.npy`` (an array) or ``.npz`` (``{name: array}``), every header checked before any allocation.

    Raises:
        EdgeSDKError: (``error``) not a regular file, a header claiming more data than the file
            holds, more than this machine's memory in all, object arrays, or a damaged file.
    """
    path = Path(path)
    size = regular_file(path, what=what, error=error)
    memory = memory_bytes()
    try:
        if path.suffix.lower() == ".npz":
            total = 0
            with zipfile.ZipFile(path) as zf:
                for info in zf.infolist():
                    with zf.open(info) as member:
                        shape, dtype = _header(member)
                        # file_size is what the member inflates to: a bomb's claim is checked as it is read
                        total += _check(shape, dtype, info.file_size - member.tell(), f"{path} member {info.filename!r}",
                                        error)
            if memory is not None and total > memory:
                raise error(f"{path} inflates to {total:,} bytes of arrays; this machine has {memory:,} bytes of memory.",
                            "Split the data into several files (a folder of per-sample .npz files).")
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        with open(path, "rb") as fp:
            shape, dtype = _header(fp)
            _check(shape, dtype, size - fp.tell(), str(path), error)
        return np.load(path, allow_pickle=False)
    except EdgeSDKError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError, MemoryError) as exc:
        raise error(f"Cannot read {path}: corrupt or not a NumPy file ({str(exc)[:200]}).",
                    "Write it again with numpy.save / numpy.savez (numeric arrays, no pickles).") from None


__all__ = ["load_array_file", "memory_bytes", "regular_file"]
