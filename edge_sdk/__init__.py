"""edge-sdk: take a trained model to edge devices and tell the truth about how it runs there.

Importing this package imports no ML framework. The public entry points load their
backends lazily:

    edge_sdk.load(path, ...)        -> a loaded model (runtime facade)
    edge_sdk.convert(model, ...)    -> per-profile artifact folders
    edge_sdk.benchmark(path, ...)   -> a benchmark report
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ._version import __version__
from .errors import (
    AccuracyGateError,
    BenchmarkGateError,
    CalibrationError,
    ConversionError,
    DelegateUnavailableError,
    EdgeSDKError,
    InputValidationError,
    ManifestError,
    MissingDependencyError,
    ModelLoadError,
    ProfileError,
)
from . import errors as _errors
from .profiles import Profile, builtin_profiles, resolve_profile

#: Every error class of edge_sdk.errors is exported, including ones added later (listed above for type checkers).
_ERROR_NAMES = sorted(n for n, v in vars(_errors).items() if isinstance(v, type) and issubclass(v, EdgeSDKError))
globals().update({n: getattr(_errors, n) for n in _ERROR_NAMES})

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs
    from .bench import benchmark
    from .converters.pipeline import convert
    from .detect import Detection, Head, TopK
    from .manifest import read_manifest
    from .preprocess import ImageTransform
    from .runtimes.base import FallbackWarning
    from .runtimes.tensors import InputRangeWarning
    from .runtimes.facade import AccuracyWarning, InferenceResult, Model, Stream, load

# name -> "module:attribute", resolved on first access (PEP 562) so that `import edge_sdk` stays light.
_LAZY = {
    "load": "edge_sdk.runtimes.facade:load",
    "AccuracyWarning": "edge_sdk.runtimes.facade:AccuracyWarning",
    "Model": "edge_sdk.runtimes.facade:Model",
    "Stream": "edge_sdk.runtimes.facade:Stream",
    "InferenceResult": "edge_sdk.runtimes.facade:InferenceResult",
    "FallbackWarning": "edge_sdk.runtimes.base:FallbackWarning",
    "InputRangeWarning": "edge_sdk.runtimes.tensors:InputRangeWarning",
    "Detection": "edge_sdk.detect:Detection",
    "Head": "edge_sdk.detect:Head",
    "TopK": "edge_sdk.detect:TopK",
    "ImageTransform": "edge_sdk.preprocess:ImageTransform",
    "convert": "edge_sdk.converters.pipeline:convert",
    "benchmark": "edge_sdk.bench:benchmark",
    "read_manifest": "edge_sdk.manifest:read_manifest",
}


if not TYPE_CHECKING:  # hidden from type checkers: a module __getattr__ would make `edge_sdk.lod` valid to mypy

    def __getattr__(name: str):
        target = _LAZY.get(name)
        if target is None:
            raise AttributeError(f"module 'edge_sdk' has no attribute {name!r}")
        mod, _, attr = target.partition(":")
        value = getattr(importlib.import_module(mod), attr)
        globals()[name] = value
        return value


__all__ = [
    "AccuracyGateError",
    "BenchmarkGateError",
    "CalibrationError",
    "ConversionError",
    "DelegateUnavailableError",
    "EdgeSDKError",
    "InputValidationError",
    "ManifestError",
    "MissingDependencyError",
    "ModelLoadError",
    "Profile",
    "ProfileError",
    "__version__",
    "builtin_profiles",
    "resolve_profile",
    *_LAZY,
]
__all__ += [n for n in _ERROR_NAMES if n not in __all__]
