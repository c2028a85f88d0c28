"""How much data each gate criterion rests on, and a one-sided 95% bound on its figure (issue 54,
step a: computed and recorded beside every decision; the decisions themselves are unchanged).

A criterion is a figure, a side and a threshold (``top1_agreement >= 0.9``). Its evidence:

* ``n``: the samples it rests on (the held-back samples, or those float decides, or those with a
  confident position); ``elements`` where it is measured on more than one element per sample;
* ``estimate``: the figure; ``bound``: the one-sided 95% bound on the side that matters (the lower
  bound of an agreement, the upper bound of an error):
  - a rate over samples (one yes/no per sample): the Wilson score bound;
  - a mean over elements grouped by sample (positions of a dense map, frames, points), or a rate over
    elements: a bootstrap over *samples* (elements of one sample move together), seeded, so the same
    data gives the same bound run to run;
  - a worst case, a percentile or an F1: no bound yet (``method: null``), ``n`` only;
* ``verdict``: what the bound says - ``passed`` when the bound clears the threshold, ``failed`` when
  the estimate misses it, ``unverified`` otherwise. It is recorded, not yet acted on (``decides``).

32 agreeing of 32 has a Wilson lower bound of 0.92: it shows 0.9 and cannot show 0.95 (59 of 59 can).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: One-sided 95%.
Z = 1.6448536269514722
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 1000
SEED = 0


def wilson_bound(k: int, n: int, lower: bool = True) -> float:
    """One-sided 95% Wilson score bound of a proportion ``k / n`` (lower, or upper)."""
    if n <= 0:
        return 0.0 if lower else 1.0
    p = k / n
    denom = 1 + Z * Z / n
    centre = p + Z * Z / (2 * n)
    spread = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n))
    return max(0.0, (centre - spread) / denom) if lower else min(1.0, (centre + spread) / denom)


def bootstrap_bound(values: np.ndarray, groups: np.ndarray | None, lower: bool, seed: int = SEED,
                    resamples: int = BOOTSTRAP_RESAMPLES) -> float:
    """One-sided 95% bound of the mean of ``values``, resampling whole groups (samples) with
    replacement: the 5th (lower) or 95th (upper) percentile of the resampled means."""
    v = np.asarray(values, np.float64).ravel()
    g = np.arange(v.size) if groups is None else np.asarray(groups).ravel()
    ids, inverse = np.unique(g, return_inverse=True)
    sums = np.bincount(inverse, weights=v, minlength=ids.size)
    counts = np.bincount(inverse, minlength=ids.size).astype(np.float64)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, ids.size, size=(resamples, ids.size))
    means = sums[pick].sum(axis=1) / np.maximum(counts[pick].sum(axis=1), 1.0)
    return float(np.percentile(means, 100 * (1 - CONFIDENCE) if lower else 100 * CONFIDENCE))


def evidence(value: float, threshold: float, higher: bool, values: Any = None, groups: Any = None,
             n: int | None = None) -> dict[str, Any]:
    """The evidence record of one criterion.

    Args:
        value: The figure as judged.
        threshold / higher: The threshold and whether higher is better.
        values: The per-element quantity the figure is the mean of (booleans for a rate), or None
            where the figure is no mean (a worst case, a percentile, an F1).
        groups: The sample each element belongs to (None: one element per sample).
        n: The samples it rests on, where ``values`` does not say.
    """
    rec: dict[str, Any] = {"estimate": _num(value), "threshold": threshold, "side": "min" if higher else "max"}
    method, bound = None, None
    if values is not None:
        v = np.asarray(values).ravel()
        g = None if groups is None else np.asarray(groups).ravel()
        samples = int(v.size if g is None else np.unique(g).size)
        rec["n"] = samples
        if g is not None and v.size != samples:
            rec["elements"] = int(v.size)
        if v.size:
            if v.dtype == bool and g is None:
                method, bound = "wilson", wilson_bound(int(v.sum()), int(v.size), lower=higher)
            else:
                method, bound = "bootstrap", bootstrap_bound(v.astype(np.float64), g, lower=higher)
    elif n is not None:
        rec["n"] = int(n)
    rec["method"] = method
    rec["bound"] = None if bound is None else _num(bound)
    missed = not math.isfinite(value) or (value < threshold if higher else value > threshold)
    if missed:
        rec["verdict"] = "failed"
    elif bound is not None and (bound >= threshold if higher else bound <= threshold):
        rec["verdict"] = "passed"
    else:
        rec["verdict"] = "unverified"
    return rec


def _num(x: float) -> float | str:
    x = float(x)
    if not math.isfinite(x):
        return "inf" if x > 0 else ("-inf" if x < 0 else "nan")
    return float(f"{x:.6g}")


def format_verdict(outputs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the bounds say of a format over all its outputs and groups: ``verdict`` (failed if any
    criterion failed, else unverified if any is, else passed), ``criteria`` (how many), ``worst``
    (the criterion whose bound sits closest to, or furthest past, its threshold, by relative
    margin) and ``unverified`` (the names of those the data cannot show)."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, m in outputs.items():
        for part_name, part in [(name, m), *((f"{name}/{g}", p) for g, p in m.get("groups", {}).items())]:
            for key, ev in part.get("evidence", {}).items():
                found.append((f"{part_name}: {key}", ev))
    if not found:
        return {"verdict": "passed", "criteria": 0, "decides": False}
    order = {"failed": 0, "unverified": 1, "passed": 2}
    verdict = min((ev["verdict"] for _, ev in found), key=order.__getitem__)

    def margin(ev: dict[str, Any]) -> float:
        at = ev["bound"] if isinstance(ev.get("bound"), float) else ev["estimate"]
        if not isinstance(at, float):
            return -math.inf
        t = float(ev["threshold"])
        return ((at - t) if ev["side"] == "min" else (t - at)) / max(abs(t), 1e-6)

    name, worst = min(found, key=lambda f: (order[f[1]["verdict"]], margin(f[1])))
    return {"verdict": verdict, "criteria": len(found), "decides": False, "worst": {"criterion": name, **worst},
            "unverified": [n for n, ev in found if ev["verdict"] == "unverified"]}
