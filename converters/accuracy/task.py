"""A user's task metric beside the gate: ``--metric path.py:function`` or ``module:function``.

Contract (the same from Python, ``convert(..., metric=function)``)::

    def metric(float_outputs, int8_outputs, inputs) -> dict:
        # float_outputs / int8_outputs: one {output name: array} per held-back sample
        # inputs: one {input name: array} per held-back sample (the model's inputs)
        return {"passed": True, "exact_strings": 0.97, ...}   # "passed" plus named numbers

Its figures go into the manifest next to the gate's (``accuracy.formats.<format>.task``); a
``passed`` of False fails that format like a gate threshold does.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import numbers
from pathlib import Path
from typing import Any, Callable

from edge_sdk.errors import ConversionError, InputValidationError


def load_metric(spec: str) -> Callable:
    """Resolve ``path.py:function`` or ``module:function`` to the function.

    Raises:
        InputValidationError: malformed spec, missing file/module, or no such callable.
    """
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise InputValidationError(f"--metric '{spec}': expected path.py:function or module:function.")
    try:
        if path.endswith(".py"):
            file = Path(path)
            if not file.is_file():
                raise InputValidationError(f"--metric: file not found: {file}")
            mod_spec = importlib.util.spec_from_file_location(f"edge_sdk_user_metric_{file.stem}", file)
            module = importlib.util.module_from_spec(mod_spec)  # type: ignore[arg-type]
            mod_spec.loader.exec_module(module)  # type: ignore[union-attr]
        else:
            module = importlib.import_module(path)
    except InputValidationError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module may raise anything on import
        raise InputValidationError(f"--metric: cannot import {path}: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise InputValidationError(f"--metric: {path} has no function '{func}'.")
    return fn


def run_task_metric(fn: Callable, reference: list[dict], test: list[dict], inputs: list[dict]) -> dict[str, Any]:
    """Call the user's metric and check what it returns.

    Raises:
        ConversionError: the metric raised or returned something other than the contract.
    """
    name = getattr(fn, "__name__", "metric")
    try:
        result = fn([dict(r) for r in reference], [dict(t) for t in test], [dict(i) for i in inputs])
    except Exception as exc:  # noqa: BLE001 - user code
        raise ConversionError(f"Task metric '{name}' raised {type(exc).__name__}: {exc}",
                              "Fix the metric function (see the --metric contract in the README).") from None
    if not isinstance(result, dict) or not isinstance(result.get("passed"), bool):
        raise ConversionError(f"Task metric '{name}' must return a dict with a boolean 'passed', got {result!r:.200}.")
    out: dict[str, Any] = {"metric": name, "passed": result["passed"]}
    for key, value in result.items():
        if key == "passed":
            continue
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            v = float(value)
            out[str(key)] = v if math.isfinite(v) else str(v)
        elif isinstance(value, (str, bool)):
            out[str(key)] = value
    return out
