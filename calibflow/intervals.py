"""Intervals the stages, the monitor and the report share: one home for each rule.

- ``jeffreys_interval``: a binomial rate's interval (reliability bins, per-segment rates).
- ``ratio_interval``: the interval of ``sum p / sum y`` (a segment's or the whole test's) from the counts:
  Garwood's exact Poisson interval on the observed positives, scaled to the Poisson-binomial's variance;
  its coverage is measured per (base rate, rows) cell in ``benchmarks/segment_coverage.py``.
- ``percentile_interval``: the percentile interval of bootstrap (or Poisson-replicate) statistics.
- ``normal_mean_interval``: the CLT interval of a (weighted) mean, e.g. of paired per-row loss differences:
  deterministic, so a verdict drawn from it cannot flip with the bootstrap's seed or count.
- The row bootstrap, one implementation for evaluate, select and the monitor: ``resample_counts`` draws the
  resamples once as row multiplicities, ``resample_metrics`` evaluates every metric on all of them at once
  (a resample is the test set weighted by its multiplicities), ``bootstrap_intervals`` turns them into
  percentile intervals; two probability vectors on the same counts are a paired bootstrap.
  ``paired_mean_interval`` is the bootstrap of a mean of paired per-row differences (the monitor's gate).
  The aggregate path's analogue is the Poisson replicates of ``calibflow.aggregate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from calibflow import metrics

METRIC_KEYS = ("ece", "mce", "brier", "log_loss", "ks", "calibration_ratio", "auc")


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


def ratio_interval(
    positives: np.ndarray | float,
    expected: np.ndarray | float,
    variance: np.ndarray | float,
    level: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Interval of ``expected / positives`` (``sum p / sum y``) when ``y`` are Bernoulli draws.

    ``positives``: ``sum w y``; ``expected``: ``sum w p``; ``variance``: ``sum w^2 p (1 - p)`` (with row
    counts as ``w``, ``sum_p - sum_p2``). The true ratio is ``sum p / mu`` with ``mu = E[sum y]``; ``sum y``
    is Poisson-binomial with variance ``phi * mu``, ``phi = variance / expected`` (1 at small ``p``, 1/2 at
    ``p = 1/2``, and the effective-count factor with weights). So ``sum y / phi`` is taken as Poisson with
    mean ``mu / phi`` (same mean and variance) and ``mu`` gets Garwood's exact interval on that count:
    ``[Gamma(k).ppf(a/2), Gamma(k + 1).ppf(1 - a/2)] * phi``, lower end 0 at ``k = 0``. Why not the
    bootstrap: a percentile bootstrap of a ratio has no coverage at a handful of positives (resamples with
    no positive are dropped, and one row gives a zero-width interval); this one never has zero width, its
    upper end is ``inf`` with no positive, and its coverage is measured (docs/benchmarks/segments.md).
    NaN where ``expected <= 0`` (no prediction to test).
    """
    k_obs = np.asarray(positives, dtype=np.float64)
    e_sum = np.asarray(expected, dtype=np.float64)
    var = np.asarray(variance, dtype=np.float64)
    tail = (1.0 - level) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        phi = np.clip(np.where(e_sum > 0, var / e_sum, 1.0), 1e-12, None)
        k = np.clip(k_obs, 0.0, None) / phi
        mu_lo = np.where(k > 0, stats.gamma.ppf(tail, np.where(k > 0, k, 1.0)), 0.0) * phi
        mu_hi = stats.gamma.ppf(1.0 - tail, k + 1.0) * phi
        lo = np.where(e_sum > 0, e_sum / mu_hi, np.nan)
        hi = np.where(e_sum > 0, np.where(mu_lo > 0, e_sum / np.where(mu_lo > 0, mu_lo, 1.0), np.inf), np.nan)
    return lo, hi


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
    return moments_interval(n, mean, float(w @ (d - mean) ** 2), level)


def moments_interval(
    n: float, mean: float, m2: float, level: float
) -> tuple[float, float, float, float, float]:
    """:func:`normal_mean_interval` from the moments of the values: their count ``n``, mean and sum of
    squared deviations ``m2`` (what a streaming pass accumulates, ``aggregate.segment_compare``), so
    the rows and the pass share one formula."""
    var = m2 / max(n - 1.0, 1.0)
    se = math.sqrt(var / n)
    z = float(stats.norm.ppf(0.5 + level / 2.0))
    return mean, mean - z * se, mean + z * se, se, n


# ---- the row bootstrap ----------------------------------------------------------------------------------


def resample_counts(n_boot: int, y: np.ndarray, rng_seed: int) -> np.ndarray:
    """``(n_boot, y.size)`` multiplicities of each row per resample (single-class resamples redrawn)."""
    n = y.size
    rng = np.random.default_rng(rng_seed)
    counts = np.empty((n_boot, n), dtype=np.float64)
    for b in range(n_boot):
        while True:
            c = np.bincount(rng.integers(0, n, size=n), minlength=n)
            if 0 < c @ y < c.sum():
                break
        counts[b] = c
    return counts


def resample_metrics(
    y: np.ndarray, p: np.ndarray, W: np.ndarray, n_bins: int, keys: Sequence[str] = METRIC_KEYS
) -> dict[str, np.ndarray]:
    """Every metric in ``keys`` (of ``calibflow.metrics.summary``) for all resamples at once.

    A resample is the rows with weights ``W[b]`` (its multiplicities), so each metric is the library's
    weighted definition; computing them as matrix products over ``W`` replaces thousands of calls (tested
    against ``calibflow.metrics`` with ``sample_weight``). AUC is the weighted Mann-Whitney statistic with
    ties counted half, as ``roc_auc_score`` computes it.
    """
    W = np.atleast_2d(W)
    n = p.size
    tot = W.sum(axis=1)
    out: dict[str, np.ndarray] = {}
    if {"ece", "mce"} & set(keys):
        onehot = np.zeros((n, n_bins))
        onehot[np.arange(n), metrics.bin_index(p, n_bins)] = 1.0
        cnt, sp, sy = W @ onehot, W @ (onehot * p[:, None]), W @ (onehot * y[:, None])
        gap = np.abs(sy - sp)
        out["ece"] = gap.sum(axis=1) / tot
        with np.errstate(invalid="ignore", divide="ignore"):
            out["mce"] = np.where(cnt > 0, gap / cnt, -np.inf).max(axis=1)
    if "brier" in keys:
        out["brier"] = W @ (p - y) ** 2 / tot
    if "log_loss" in keys:
        out["log_loss"] = W @ metrics.row_log_loss(y, p) / tot
    if "calibration_ratio" in keys:
        with np.errstate(invalid="ignore", divide="ignore"):
            out["calibration_ratio"] = (W @ p) / (W @ y)
    if {"ks", "auc"} & set(keys):
        order = np.argsort(p, kind="mergesort")
        Ws = W[:, order]
        out["ks"] = np.abs(np.cumsum(Ws * (y - p)[order], axis=1)).max(axis=1) / tot
        out["auc"] = _weighted_auc(p[order], y[order], Ws)
    return {k: out[k] for k in keys}


def _weighted_auc(ps: np.ndarray, ys: np.ndarray, Ws: np.ndarray) -> np.ndarray:
    """AUC per row of ``Ws`` for scores ``ps`` sorted ascending: P(s+ > s-) + 0.5 P(s+ = s-)."""
    start = np.r_[True, ps[1:] != ps[:-1]]
    gid = np.cumsum(start) - 1
    bounds = np.r_[np.flatnonzero(start), ps.size]
    neg, pos = Ws * (1 - ys), Ws * ys
    cum = np.hstack([np.zeros((Ws.shape[0], 1)), np.cumsum(neg, axis=1)])
    below = cum[:, bounds[gid]]
    tie = cum[:, bounds[gid + 1]] - below
    return (pos * (below + 0.5 * tie)).sum(axis=1) / (pos.sum(axis=1) * neg.sum(axis=1))


def resampled(
    y: np.ndarray, p: np.ndarray, counts: np.ndarray, n_bins: int, keys: Sequence[str] = METRIC_KEYS,
    chunk: int = 50,
) -> dict[str, np.ndarray]:
    """``resample_metrics`` over all of ``counts``, ``chunk`` resamples at a time (bounds the memory)."""
    parts = [resample_metrics(y, p, counts[i : i + chunk], n_bins, keys)
             for i in range(0, counts.shape[0], chunk)]
    return {k: np.concatenate([d[k] for d in parts]) for k in keys}


def bootstrap_intervals(
    y: np.ndarray, p: np.ndarray, counts: np.ndarray, n_bins: int, level: float, chunk: int = 50
) -> dict[str, dict[str, float]]:
    """Percentile bootstrap interval ``{"low", "high"}`` of each metric (metrics with no finite resample
    are left out); ``calibration_ratio``'s is :func:`ratio_interval` (the same on the aggregate path)."""
    out = {}
    for k, arr in resampled(y, p, counts, n_bins, METRIC_KEYS, chunk).items():
        ci = percentile_interval(arr, level)
        if ci is not None:
            out[k] = {"low": ci[0], "high": ci[1]}
    if y.sum() > 0:  # sum p / sum y: the counts' interval (coverage measured), not the percentile one
        lo, hi = ratio_interval(float(y.sum()), float(p.sum()), float(p @ (1.0 - p)), level)
        out["calibration_ratio"] = {"low": float(lo), "high": float(hi)}
    return out


def row_resamples(
    n: int, n_boot: int, rng: np.random.Generator, stat: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """``stat(idx)`` over ``n_boot`` resamples of ``n`` rows, drawn in chunks of ``(b, n)`` row indices so
    the memory stays bounded at 1e6 rows; ``stat`` maps a chunk's indices to one value per resample."""
    chunk = max(1, min(n_boot, 4_000_000 // max(n, 1)))
    out: list[np.ndarray] = []
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        out.append(np.asarray(stat(rng.integers(0, n, size=(b, n))), dtype=np.float64))
        done += b
    return np.concatenate(out) if out else np.empty(0)


def paired_mean_interval(
    d: np.ndarray, n_boot: int, level: float, rng: np.random.Generator
) -> tuple[float, float, float]:
    """Mean of per-row differences ``d`` and its percentile interval over ``n_boot`` row resamples."""
    means = row_resamples(d.size, n_boot, rng, lambda idx: d[idx].mean(axis=1))
    a = (1 - level) / 2
    lo, hi = np.quantile(means, [a, 1 - a])
    return float(d.mean()), float(lo), float(hi)
