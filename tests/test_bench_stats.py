"""Latency statistics on known sequences (checked against hand values and numpy's linear percentiles)."""

import math

import numpy as np
import pytest

from edge_sdk.bench.stats import histogram, percentile, summarize


def test_known_sequence_one_to_hundred():
    s = summarize([float(v) for v in range(100, 0, -1)])  # order must not matter
    assert s["min"] == 1 and s["max"] == 100 and s["count"] == 100
    assert s["mean"] == pytest.approx(50.5)
    assert s["p50"] == pytest.approx(50.5)
    assert s["p90"] == pytest.approx(90.1)
    assert s["p99"] == pytest.approx(99.01)
    # sample standard deviation of 1..100 = sqrt(100*101/12)
    assert s["std"] == pytest.approx(math.sqrt(100 * 101 / 12))


def test_matches_numpy_linear_percentiles():
    rng = np.random.default_rng(3)
    values = list(rng.lognormal(1.0, 0.5, size=997))
    s = summarize(values)
    for q in (50, 90, 95, 99):
        assert s[f"p{q}"] == pytest.approx(float(np.percentile(values, q)), rel=1e-12)
    assert s["std"] == pytest.approx(float(np.std(values, ddof=1)), rel=1e-12)


def test_single_value_and_outlier():
    one = summarize([4.0])
    assert one["p50"] == one["p99"] == one["min"] == one["max"] == 4.0 and one["std"] == 0.0
    s = summarize([1.0] * 99 + [100.0])
    assert s["p50"] == 1.0 and s["max"] == 100.0
    assert s["p99"] == pytest.approx(1.0 + 99.0 * 0.01)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_bad_input_raises(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_percentile_range_checked():
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_histogram_counts_everything():
    edges, counts = histogram([1, 2, 2, 3, 10], bins=3)
    assert sum(counts) == 5 and len(edges) == 4 and counts[0] == 4 and counts[-1] == 1
    assert histogram([5, 5], bins=10) == ([5, 5], [2])
