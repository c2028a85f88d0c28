"""The NaN/Inf scan of the input contract: the fast x.x check and its exact fallback.

``sumsq_finite`` is a one-pass shortcut (a sum of squares is NaN/Inf when any value is); a
False from it is always confirmed elementwise, so the contract stays exact. Real numpy, no
runtime needed: the plans are built from their entries as ``plan_inputs`` would.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from edge_sdk.errors import InputValidationError
from edge_sdk.runtimes.tensors import InputPlan, _Entry, sumsq_finite

SHAPE = (1, 6, 5, 3)
POSITIONS = [(0, 0, 0, 0), (0, 3, 2, 1), (0, 5, 4, 2)]  # first, middle, last
NON_FINITE = [np.nan, np.inf, -np.inf]


def _x(dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(0).uniform(-1, 1, SHAPE).astype(dtype)


def _plan(dtype="float32", *, quantized=False, two=False, check=True) -> InputPlan:
    dt = np.dtype(dtype)
    q = dict(scale=0.02, zero_point=-3, qmin=-128, qmax=127) if quantized else {}
    entries = [_Entry("a", SHAPE, dt, 0, dt.kind == "f", quantized, **q)]
    if two:
        entries.append(_Entry("b", SHAPE, dt, 1, dt.kind == "f", quantized, **q))
    return InputPlan(entries, check)


@pytest.fixture(autouse=True)
def _no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scan must not leak numpy's overflow/invalid warnings
        yield


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("value", NON_FINITE)
def test_fast_scan_is_false_for_nan_and_inf_anywhere(dtype, pos, value):
    x = _x(dtype)
    assert sumsq_finite(x)
    x[pos] = value
    assert not sumsq_finite(x)


def test_fast_scan_does_not_let_plus_and_minus_inf_cancel():
    x = _x()
    x[0, 0, 0, 0], x[0, 1, 0, 0] = np.inf, -np.inf
    assert not sumsq_finite(x)


def test_fast_scan_overflow_is_quiet_even_under_errstate_raise():
    huge = np.full(SHAPE, 1e30, np.float32)  # finite, but x.x overflows float32
    with np.errstate(all="raise"):
        assert not sumsq_finite(huge)  # a false alarm, never an exception


@pytest.mark.parametrize("make", [
    lambda x: x,  # one contiguous array: the short path
    lambda x: np.asfortranarray(x),  # strided: the general path
    lambda x: {"a": x},  # a dict: the general path
], ids=["array", "fortran", "dict"])
@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("value", NON_FINITE)
def test_plan_rejects_nan_and_inf_at_any_position(make, pos, value):
    x = _x()
    x[pos] = value
    with pytest.raises(InputValidationError, match=r"Input 'a' contains 1 NaN/Inf"):
        _plan().convert(make(x), False)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_plan_rejects_every_float_dtype_and_counts(dtype):
    x = _x(dtype)
    x[0, 0, 0, 0], x[0, 2, 2, 2], x[0, 5, 4, 2] = np.nan, np.inf, -np.inf
    with pytest.raises(InputValidationError, match=r"contains 3 NaN/Inf"):
        _plan(dtype).convert(x, False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_plan_accepts_huge_finite_values_whose_sum_overflows(dtype):
    big = np.finfo(dtype).max / 4
    x = np.full(SHAPE, big, dtype)
    assert not sumsq_finite(x)  # the shortcut alarms ...
    feed, _ = _plan(dtype).convert(x, False)  # ... and the exact check clears it
    assert feed[0] is x


def test_quantized_input_given_floats_is_scanned_before_quantizing():
    x = _x()
    x[0, 4, 1, 0] = -np.inf
    with pytest.raises(InputValidationError, match="1 NaN/Inf"):
        _plan("int8", quantized=True).convert(x, False)
    x[0, 4, 1, 0] = 1e30  # finite and huge: clipped to qmax, not refused
    feed, _ = _plan("int8", quantized=True).convert(x, False)
    assert feed[0].dtype == np.int8 and feed[0][0, 4, 1, 0] == 127


def test_second_input_is_scanned_too():
    a, b = _x(), _x()
    b[0, 5, 4, 2] = np.nan
    with pytest.raises(InputValidationError, match="Input 'b' contains 1 NaN/Inf"):
        _plan(two=True).convert({"a": a, "b": b}, False)


def test_check_finite_off_passes_nan_through_untouched():
    x = _x()
    x[0, 1, 1, 1] = np.nan
    feed, _ = _plan(check=False).convert(x, False)
    assert feed[0] is x


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("qdtype, zero_point", [("int8", -3), ("uint8", 128)])
def test_in_place_quantize_equals_the_plain_formula(dtype, qdtype, zero_point):
    scale = 0.02
    info = np.iinfo(qdtype)
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, SHAPE).astype(dtype)
    x.flat[:40] = ((np.arange(40) - 20) + 0.5) * scale  # ties of rint
    x.flat[40:44] = [500.0, -500.0, 3.0, -3.0]  # clipped both ways
    plan = InputPlan([_Entry("a", SHAPE, np.dtype(qdtype), 0, False, True, scale, zero_point,
                             int(info.min), int(info.max))], True)
    feed, _ = plan.convert(x, False)
    want = np.clip(np.rint(x / np.float32(scale)) + zero_point, info.min, info.max).astype(qdtype)
    assert feed[0].dtype == want.dtype
    np.testing.assert_array_equal(feed[0], want)
    np.testing.assert_array_equal(plan.convert(np.asfortranarray(x), False)[0][0], want)
