"""The input/output contract: manifest specs matched to the runtime's tensors, precomputed once.

At load, :func:`plan_inputs` / :func:`plan_outputs` match each manifest tensor to the native
one (by name, else by position when the runtime renames tensors, as TFLite does) and refuse
any disagreement in shape, dtype or quantization: the manifest is the contract, and we never
reshape, transpose or cast silently. The resulting plans hold everything the hot path needs
as plain attributes, so ``convert`` does no lookups beyond one pass over the inputs.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from edge_sdk.errors import InputValidationError, ModelLoadError
from edge_sdk.manifest import TensorSpec

from .base import NativeTensor


@dataclass(frozen=True)
class _Entry:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    pos: int  # index in the runtime's native order
    is_float: bool
    quantized: bool
    scale: float = 1.0
    zero_point: int = 0
    qmin: int = 0
    qmax: int = 0


def _match(specs: list[TensorSpec], natives: list[NativeTensor], kind: str) -> list[int]:
    """Native position of each spec: by name when all names match, else by position."""
    if len(specs) != len(natives):
        raise ModelLoadError(f"The manifest lists {len(specs)} {kind}(s) but the model file has {len(natives)} "
                             f"({', '.join(n.name for n in natives)}).", "The artifact is inconsistent: convert again.")
    by_name = {n.name: i for i, n in enumerate(natives)}
    if all(s.name in by_name for s in specs):
        return [by_name[s.name] for s in specs]
    return list(range(len(specs)))


def _entry(spec: TensorSpec, native: NativeTensor, pos: int, kind: str) -> _Entry:
    shape = tuple(int(d) for d in spec.shape)
    dtype = np.dtype(spec.dtype)
    if len(native.shape) != len(shape) or any(n != -1 and n != s for n, s in zip(native.shape, shape)):
        raise ModelLoadError(f"{kind} '{spec.name}': the manifest says shape {list(shape)} but the model file has "
                             f"{list(native.shape)} ('{native.name}').", "The artifact is inconsistent: convert again.")
    if native.dtype != dtype:
        raise ModelLoadError(f"{kind} '{spec.name}': the manifest says {dtype} but the model file has {native.dtype}.",
                             "The artifact is inconsistent: convert again.")
    q = spec.quantization
    quantized = q is not None and dtype.kind in "iu"
    if quantized and native.quant is not None and native.quant[0] > 0:
        ns, nz = native.quant
        if abs(ns - q.scale) > 1e-6 * max(abs(ns), 1e-12) + 1e-12 or nz != q.zero_point:
            raise ModelLoadError(f"{kind} '{spec.name}': the manifest says scale {q.scale}, zero point {q.zero_point} "
                                 f"but the model file has {ns}, {nz}.", "The artifact is inconsistent: convert again.")
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    return _Entry(spec.name, shape, dtype, pos, dtype.kind == "f", quantized,
                  float(q.scale) if quantized else 1.0, int(q.zero_point) if quantized else 0,
                  int(info.min) if info else 0, int(info.max) if info else 0)


def _bad(msg: str, hint: str | None = None) -> InputValidationError:
    return InputValidationError(msg, hint)


def _vdot_warns() -> bool:
    """Whether ``np.vdot`` reports a float overflow (no numpy up to 2.4 does; ``np.dot`` does on numpy 2)."""
    big = np.full(4, 1e30, np.float32)
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn"):
        warnings.simplefilter("always")
        np.vdot(big, big)
    return bool(caught)


_VDOT_WARNS = _vdot_warns()  # then the scan needs an errstate, which costs microseconds a call on numpy 1.x
_vdot = np.vdot
_isfinite = math.isfinite


def sumsq_finite(arr: np.ndarray) -> bool:
    """The fast NaN/Inf scan: True when x.x is finite, which proves every value of ``arr`` finite.

    One BLAS pass (``np.vdot`` flattens a C-contiguous float32/float64 array without a copy, and
    squares, so +Inf and -Inf cannot cancel). False when some value is NaN/Inf, but also when huge
    finite values overflow the sum (|x| ~ 1e19 in float32): a False must be confirmed with the
    exact elementwise check (:meth:`InputPlan._exact_finite`).
    """
    if _VDOT_WARNS:
        with np.errstate(over="ignore", invalid="ignore"):
            return _isfinite(_vdot(arr, arr))
    return _isfinite(_vdot(arr, arr))


def _quantize(arr: np.ndarray, e: _Entry) -> np.ndarray:
    """``clip(rint(x / scale) + zero_point, qmin, qmax)`` in ``e.dtype``, in place on one temporary.

    The same values (and dtype promotion) as the plain expression, ~25% faster on a 1x96x96x3
    input: np.clip's dispatch costs more than maximum + minimum, and no temporary per step.
    """
    q = np.divide(arr, np.float32(e.scale))  # exactly ``arr / scale``: the only new array
    np.rint(q, out=q)
    q += e.zero_point
    np.maximum(q, e.qmin, out=q)
    np.minimum(q, e.qmax, out=q)
    return q.astype(e.dtype)


class InputPlan:
    """Checks and converts user inputs into the runtime's native feed list.

    Args:
        entries: One per manifest input, in manifest order.
        check_finite: Reject NaN/Inf in float inputs.
    """

    def __init__(self, entries: list[_Entry], check_finite: bool):
        self.entries = entries
        self.names = [e.name for e in entries]
        self.n = len(entries)
        self.check_finite = check_finite
        # The common case (one input, passed as an array of the native dtype) gets a short path:
        # after a native call the interpreter runs cache-cold, so every Python operation saved counts.
        one = entries[0] if len(entries) == 1 and entries[0].pos == 0 else None
        self._one = one
        self._one_check = one is not None and one.is_float and check_finite

    def _arrays(self, inputs: Any) -> list:
        if isinstance(inputs, dict):
            if len(inputs) == self.n:
                try:
                    return [inputs[name] for name in self.names]
                except KeyError:
                    pass
            missing = [n for n in self.names if n not in inputs]
            extra = [str(k) for k in inputs if k not in self.names]
            raise _bad(f"Input names do not match: expected {self.names}"
                       + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else "") + ".",
                       "Pass a dict with exactly the model's input names (see model.inputs).")
        if self.n == 1:
            return [inputs]
        raise _bad(f"This model has {self.n} inputs {self.names}; got one {type(inputs).__name__}.",
                   "Pass a dict {name: array} with every input.")

    def convert(self, inputs: Any, raw: bool) -> tuple[list[np.ndarray], float]:
        """Validate ``inputs`` and return (native feed list, seconds spent quantizing).

        Raises:
            InputValidationError: names, shape, dtype or values break the contract.
        """
        e = self._one
        if (e is not None and type(inputs) is np.ndarray and inputs.dtype == e.dtype and inputs.shape == e.shape
                and inputs.flags.c_contiguous):
            if self._one_check:
                self._finite(e, inputs)
            return [inputs], 0.0
        arrays = self._arrays(inputs)
        feed: list[Any] = [None] * self.n
        t_quant = 0.0
        for e, arr in zip(self.entries, arrays):
            if not isinstance(arr, np.ndarray):
                raise _bad(f"Input '{e.name}': expected a numpy array {e.dtype} {list(e.shape)}, got {type(arr).__name__}.",
                           f"Use np.asarray(x, dtype=np.{e.dtype}).")
            if isinstance(arr, np.ma.MaskedArray):  # a runtime reads the values under the mask
                masked = int(np.ma.count_masked(arr))
                if masked:
                    raise _bad(f"Input '{e.name}' is a masked array with {masked} masked value(s); the runtime would "
                               "read the values under the mask.",
                               "Fill them first (x.filled(value)), or pass np.asarray(x) if the mask means nothing.")
                arr = np.asarray(arr.data)
            if arr.shape != e.shape:
                raise _bad(f"Input '{e.name}': expected shape {list(e.shape)}, got {list(arr.shape)}.",
                           "Inputs are never reshaped or transposed for you: fix the shape (and layout) before calling infer().")
            dt = arr.dtype
            if dt == e.dtype:
                if e.is_float and self.check_finite:
                    self._finite(e, arr)
                feed[e.pos] = arr if arr.flags.c_contiguous else np.ascontiguousarray(arr)
            elif e.quantized and not raw and dt.kind == "f":
                if self.check_finite:
                    self._finite(e, arr)
                t = time.perf_counter()
                feed[e.pos] = _quantize(arr, e)
                t_quant += time.perf_counter() - t
            else:
                if e.quantized and raw:
                    hint = f"raw=True passes tensors through: give {e.dtype} values, or drop raw=True to quantize floats."
                elif e.quantized:
                    hint = f"Give float values (quantized with the manifest's scale/zero point) or {e.dtype} values."
                else:
                    hint = f"Convert explicitly: x.astype(np.{e.dtype})."
                raise _bad(f"Input '{e.name}': expected dtype {e.dtype}, got {dt}.", hint)
        return feed, t_quant

    @staticmethod
    def _finite(e: _Entry, arr: np.ndarray) -> None:
        if arr.dtype.char in "fd" and arr.flags.c_contiguous and sumsq_finite(arr):
            return
        InputPlan._exact_finite(e, arr)

    @staticmethod
    def _exact_finite(e: _Entry, arr: np.ndarray) -> None:
        """The exact elementwise check, behind the fast scan's False (NaN/Inf, or a sum overflow)."""
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        if bad:
            raise _bad(f"Input '{e.name}' contains {bad} NaN/Inf value(s).",
                       "Fix the input, or load with check_finite=False if non-finite values are intended.")


class OutputPlan:
    """Turns the runtime's native outputs into ``{manifest name: array}``, dequantizing int8."""

    def __init__(self, entries: list[_Entry]):
        self.entries = entries
        self.any_quantized = any(e.quantized for e in entries)
        self.pairs = [(e.name, e.pos) for e in entries]
        self._one = entries[0].name if len(entries) == 1 and not self.any_quantized else None

    def convert(self, outs: list[np.ndarray], raw: bool) -> dict[str, np.ndarray]:
        if self._one is not None:
            return {self._one: outs[0]}
        if raw or not self.any_quantized:
            return {name: outs[pos] for name, pos in self.pairs}
        result = {}
        for e in self.entries:
            q = outs[e.pos]
            result[e.name] = ((q.astype(np.float32) - np.float32(e.zero_point)) * np.float32(e.scale)) if e.quantized else q
        return result


def plan_inputs(specs: list[TensorSpec], natives: list[NativeTensor], check_finite: bool) -> InputPlan:
    """Precompute the input contract (see module doc).

    Raises:
        ModelLoadError: the model file disagrees with the manifest.
    """
    pos = _match(specs, natives, "input")
    return InputPlan([_entry(s, natives[p], p, "input") for s, p in zip(specs, pos)], check_finite)


def plan_outputs(specs: list[TensorSpec], natives: list[NativeTensor]) -> OutputPlan:
    """Precompute the output conversion.

    Raises:
        ModelLoadError: the model file disagrees with the manifest.
    """
    pos = _match(specs, natives, "output")
    return OutputPlan([_entry(s, natives[p], p, "output") for s, p in zip(specs, pos)])


class InputRangeWarning(UserWarning):
    """An input lies far outside the range the artifact was calibrated on (``load(strict=True)`` refuses it)."""


class RangeGuard:
    """Input values against the ranges the converter recorded (``manifest.calibration.input_ranges``).

    A float input whose values reach more than :attr:`SPANS` calibrated spans beyond the calibrated
    ``[lo, hi]`` is almost surely fed at another scale than the model was made for (0-255 pixels to a
    0-1 model: 254 spans out), and int8 would clip it silently. Evidence for the bound: over the 23
    practice models (n = 40-80 held-out samples each) held-out data reaches at most 0.059 spans past
    the calibration range (openWakeWord's hey_jarvis), so 1 span is 17x the worst honest excursion.
    A feeding mistake is systematic, so the first :attr:`FIRST` calls of a model and every
    :attr:`EVERY`-th after are checked (two reductions per float input), not every call.
    """

    SPANS = 1.0
    FIRST = 16
    EVERY = 256

    def __init__(self, ranges: dict[str, tuple[float, float]], names: list[str], strict: bool):
        self.ranges, self.names, self.strict = ranges, names, strict
        self.calls = 0
        self.warned: set[str] = set()

    @classmethod
    def from_manifest(cls, calibration: dict, names: list[str], strict: bool) -> "RangeGuard | None":
        """The guard for the recorded ranges of these inputs, or None when none were recorded."""
        raw = calibration.get("input_ranges") if isinstance(calibration, dict) else None
        ranges = {}
        for name, pair in (raw.items() if isinstance(raw, dict) else ()):
            if (name in names and isinstance(pair, list) and len(pair) == 2
                    and all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v) for v in pair)
                    and pair[0] <= pair[1]):
                ranges[name] = (float(pair[0]), float(pair[1]))
        return cls(ranges, names, strict) if ranges else None

    def check(self, inputs: Any) -> None:
        """Warn (or, strict, raise) when an input is far outside its calibrated range.

        Raises:
            InputValidationError: strict, and an input is out of range.
        """
        self.calls += 1
        if self.calls > self.FIRST and self.calls % self.EVERY:
            return
        if isinstance(inputs, dict):
            items = [(n, inputs.get(n)) for n in self.ranges]
        elif len(self.names) == 1:
            items = [(self.names[0], inputs)]
        else:
            return  # the input plan names the mistake
        for name, arr in items:
            if name not in self.ranges or not isinstance(arr, np.ndarray) or arr.dtype.kind != "f" or not arr.size:
                continue
            lo, hi = self.ranges[name]
            span = (hi - lo) or max(abs(hi), 1.0)
            amin, amax = float(np.min(arr)), float(np.max(arr))
            if not (amin < lo - self.SPANS * span or amax > hi + self.SPANS * span):
                continue
            message = (f"Input '{name}' holds values {amin:.4g}..{amax:.4g}, far outside the range it was calibrated on "
                       f"({lo:.4g}..{hi:.4g}): the model will likely answer wrongly (int8 clips what lies outside).")
            hint = ("Feed it as the calibration data was fed (e.g. pixels scaled to 0..1 rather than 0..255); "
                    "infer_image() applies the recorded preprocessing for you.")
            if self.strict:
                raise _bad(message, hint)
            if name not in self.warned:
                self.warned.add(name)
                warnings.warn(f"{message} {hint}", InputRangeWarning, stacklevel=4)
