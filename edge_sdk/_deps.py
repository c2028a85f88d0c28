"""Lazy, explicit imports of optional heavy dependencies.

Nothing in the core imports an ML framework at import time. Code that needs one calls
:func:`require`, which imports on first use and turns an ``ImportError`` into a
:class:`~edge_sdk.errors.MissingDependencyError` naming the extra to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from types import ModuleType

from .errors import MissingDependencyError
from .offline import PHONES_HOME, no_telemetry

#: import name -> the edge-sdk extra that provides it (runtime modules: from the backend descriptors)
EXTRAS: dict[str, str] = {
    "onnx": "convert",
    "tensorflow": "convert",
    "nncf": "convert",
    "onnx2tf": "convert",
    "tf2onnx": "convert",
    "ai_edge_quantizer": "convert",
    "matplotlib": "plot",
}


def extra_for(module: str) -> str:
    """The edge-sdk extra (or install sentence) that provides ``module``'s top-level package."""
    top = module.split(".")[0]
    if top in EXTRAS:
        return EXTRAS[top]
    from .backends import backends

    for desc in backends().values():
        if desc.extra and any(mod == top for mod, _ in desc.modules) and top != "tensorflow":
            return desc.extra
    return "all"


def require(module: str, purpose: str = "", extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise :class:`MissingDependencyError`.

    Args:
        module: Dotted import name.
        purpose: Shown to the user: what the module was needed for.
        extra: Override the extra named in the hint.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: The module (or one of its own dependencies) is not importable.

    OpenVINO and NNCF are imported with their telemetry declined (see :mod:`edge_sdk.offline`).
    """
    top = module.split(".")[0]
    try:
        if top in PHONES_HOME and module not in sys.modules:
            with no_telemetry():
                return importlib.import_module(module)
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module, extra or extra_for(module), purpose) from exc


def available(module: str) -> bool:
    """True when ``module`` can be found without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def version_of(distribution: str) -> str | None:
    """Installed version of a distribution, without importing it; None when absent."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None
