"""Energy integration over a window: power samples (trapezoid) and wrapping energy counters."""

import pytest

from edge_sdk.power.energy import integrate_counters, integrate_power, unwrap


def test_constant_power_over_exact_window():
    samples = [(t / 10, 5.0) for t in range(0, 31)]  # 5 W for 3 s, sampled at 10 Hz
    e = integrate_power(samples, 1.0, 3.0)
    assert e.joules == pytest.approx(10.0) and e.avg_w == pytest.approx(5.0)
    assert e.samples == 21


def test_window_ends_are_interpolated_between_samples():
    # a ramp 0 W at t=0 to 10 W at t=10: energy over [2.5, 7.5] = avg 5 W * 5 s
    samples = [(0.0, 0.0), (10.0, 10.0)]
    e = integrate_power(samples, 2.5, 7.5)
    assert e.joules == pytest.approx(25.0)
    assert e.series[0] == (0.0, pytest.approx(2.5)) and e.series[-1][1] == pytest.approx(7.5)


def test_step_change_uses_trapezoids():
    samples = [(0.0, 2.0), (1.0, 2.0), (2.0, 6.0), (3.0, 6.0)]
    assert integrate_power(samples, 0.0, 3.0).joules == pytest.approx(2.0 + 4.0 + 6.0)


def test_counter_wraps_are_unwrapped():
    raw = [0.8, 0.95, 0.1, 0.3, 0.05]
    out, wraps = unwrap(raw, 1.0)
    assert wraps == 2
    assert out == pytest.approx([0.8, 0.95, 1.1, 1.3, 2.05])


def test_counter_reset_without_range_is_an_error():
    with pytest.raises(ValueError, match="backwards"):
        unwrap([5.0, 1.0], None)


def test_counters_two_channels_with_wrap_and_partial_window():
    # channel 0: 4 W wrapping at 10 J; channel 1: 1 W, no wrap; samples each second
    samples = [(float(t), [(4.0 * t) % 10.0, 1.0 * t]) for t in range(0, 8)]
    e = integrate_counters(samples, [10.0, None], 1.5, 6.5)
    assert e.joules == pytest.approx(5.0 * 5.0)
    assert e.wraps == 2
    assert all(w == pytest.approx(5.0) for _, w in e.series)


@pytest.mark.parametrize("samples,start,end", [([(0.0, 1.0)], 0.0, 1.0), ([(0.0, 1.0), (1.0, 1.0)], 1.0, 1.0)])
def test_degenerate_inputs(samples, start, end):
    with pytest.raises(ValueError):
        integrate_power(samples, start, end)
