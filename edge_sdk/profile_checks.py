"""Value checks of device profiles: identifiers, finite numbers, threshold ranges.

Used by :func:`edge_sdk.profiles._validate` (and by the manifest for the profile name it
records). A profile is user input, or arrives inside an artifact: nothing in it is trusted.
"""

from __future__ import annotations

import math
import re

from .errors import EdgeSDKError, ProfileError

#: A profile name (and alias): a plain identifier, never a path - it names output folders.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: A runtime-chain accelerator: a delegate / provider / device name, or ``external:/absolute/path``.
ACCELERATOR_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
#: Largest profile file read.
MAX_PROFILE_BYTES = 1024 * 1024
#: Accuracy thresholds in decibels: finite and not negative (a negative minimum SQNR is no gate).
_DB_MARK = "db"


def check_name(name: object, where: str, error: type[EdgeSDKError] = ProfileError) -> str:
    """Refuse a profile name that is not a plain identifier (``../../victim``, ``""``, ``a/b``).

    Raises:
        EdgeSDKError: (``error``) naming ``where`` and the rule.
    """
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise error(f"{where}: invalid profile name {str(name)[:80]!r}: a name is 1-64 letters, digits, '-', '_' "
                    "or '.', starting with a letter or digit (it names folders, so never a path).",
                    "Rename the profile, e.g. name = \"my-board\".")
    return name


def check_accuracy(values: dict, where: str, key: str = "accuracy") -> None:
    """Every number of the accuracy section (and its nested tables) is finite and in range.

    Fields whose name contains ``db`` are finite and not negative; ``max_*`` fields (error bounds)
    and integers finite and not negative; ``*threshold*`` fields (cut-offs on output values)
    finite; every other threshold (cosine, agreement, F1, IoU, fractions) in [0, 1].
    Generic on purpose: new per-output-kind thresholds are held to the same rules.
    """
    for name, value in values.items():
        sub = f"{key}.{name}"
        if isinstance(value, dict):
            check_accuracy(value, where, sub)
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    check_accuracy(item, where, f"{sub}[{i}]")
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        low = name.lower()
        if not math.isfinite(value):
            raise ProfileError(f"{where}: key '{sub}': must be a finite number, got {value}")
        if "threshold" in low:  # a cut-off on the output's own values (unbounded maps too): finite is enough
            continue
        if _DB_MARK in low or low.startswith("max_") or isinstance(value, int):
            if value < 0:
                raise ProfileError(f"{where}: key '{sub}': must be 0 or more, got {value}",
                                   "A negative threshold turns the accuracy gate off.")
        elif not 0.0 <= value <= 1.0:
            raise ProfileError(f"{where}: key '{sub}': must be between 0 and 1, got {value}")


def check_numbers(values, where: str, key: str = "") -> None:
    """No NaN or infinity anywhere in a profile (TOML allows ``nan`` and ``inf``)."""
    if isinstance(values, dict):
        for k, v in values.items():
            check_numbers(v, where, f"{key}.{k}" if key else str(k))
    elif isinstance(values, list):
        for i, v in enumerate(values):
            check_numbers(v, where, f"{key}[{i}]")
    elif isinstance(values, float) and not math.isfinite(values):
        raise ProfileError(f"{where}: key '{key}': must be a finite number, got {values}")
