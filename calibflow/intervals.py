"""Intervals the stages, the monitor and the report share: one home for each rule.

- ``jeffreys_interval``: a binomial rate's interval (reliability bins, per-segment rates).
- ``percentile_interval``: the percentile interval of bootstrap (or Poisson-replicate) statistics.
- ``normal_mean_interval``: the CLT interval of a (weighted) mean, e.g. of paired per-row loss differences:
  deterministic, so a verdict drawn from it cannot flip with the bootstrap's seed or count.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def jeffreys_interval(
    positives: np.ndarray, count: np.ndarray, level: float
) -> tuple[np.ndarray, np.ndarray]:
    """Jeffreys interval of a binomial rate: Beta(k + 1/2, n - k + 1/2) quantiles (Brown, Cai, DasGupta 2001).

    Chosen over Wald because it stays inside [0, 1] and keeps its coverage at the low rates of ads data
    (a bin with 2 positives out of 300); the bounds are 0 / 1 when k = 0 / k = n, as they recommend.
    """
    tail = (1.0 - level) / 2.0
    lo = stats.beta.ppf(tail, positives + 0.5, count - positives + 0.5)
    hi = stats.beta.ppf(1.0 - tail, positives + 0.5, count - positives + 0.5)
    return np.where(positives > 0, lo, 0.0), np.where(positives < count, hi, 1.0)


def percentile_interval(values: np.ndarray, level: float) -> list[float] | None:
    """The central ``level`` percentile interval of the finite ``values``; None when there are none."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not v.size:
        return None
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(v, [tail, 1.0 - tail])
    return [float(lo), float(hi)]


def normal_mean_interval(
    values: np.ndarray, level: float, sample_weight: np.ndarray | None = None
) -> tuple[float, float, float, float, float]:
    """(mean, low, high, standard error, n) of the weighted mean of ``values``; weights are row counts."""
    d = np.asarray(values, dtype=np.float64)
    w = np.ones_like(d) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    n = float(w.sum())
    mean = float(w @ d / n)
    var = float(w @ (d - mean) ** 2 / max(n - 1.0, 1.0))
    se = math.sqrt(var / n)
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    return mean, mean - z * se, mean + z * se, se, n
