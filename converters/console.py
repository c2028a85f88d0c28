"""Keeping the converters' console output to our own progress lines.

TensorFlow, its converter and onnx2tf print tens of lines from C++ (fds 1/2, absl) that would bury
the one-line-per-stage progress of ``edge-sdk convert``. :func:`quiet` moves that chatter into a log
file; :func:`import_tensorflow` imports TensorFlow (the first import is the noisiest) that way.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from edge_sdk._deps import require


@contextlib.contextmanager
def quiet(log: Path):
    """Send the converter's console chatter (C++ prints on fds 1/2, absl and Python warnings) to ``log``.

    The converter's errors still arrive as exceptions; only its progress noise is moved.
    """
    import logging
    import warnings

    absl = logging.getLogger("absl")
    level = absl.level
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log, "ab") as fh, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        absl.setLevel(logging.ERROR)
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            absl.setLevel(level)


def import_tensorflow(purpose: str) -> ModuleType:
    """Import TensorFlow with its import-time console noise sent to a temporary log.

    Raises:
        MissingDependencyError: TensorFlow is not installed (names the ``convert`` extra).
    """
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with tempfile.TemporaryDirectory() as tmp, quiet(Path(tmp) / "tf-import.log"):
        return require("tensorflow", purpose)
