"""The row path's binning-free diagnostics, equal-mass bins, selection-set metrics and per-segment ratios,
from the bucket table.

Every function reads the table's (bucket, label) groups in bucket order. Bucket order is score order: the
logit grid and the distinct-score rank are monotone in the score, and a calibrated table
(:func:`calibflow.aggregate.metrics.calibrated_table`) is re-bucketed on the calibrated value. A group
stands for its rows at its mean probability ``sum_q / n``; on a distinct-score table every row of a group
has that probability, so each result below is the row path's (``calibflow.metrics``,
``calibflow.diagnostics``) up to float summation order, except where a tie is broken by row order
(KS inside a block of tied scores, the selection boundary), which the table cannot know and bounds.

- Cumulative calibration (Gupta et al. 2020's KS; Arrieta-Ibarra et al. 2022's Kuiper test): the path
  ``C_b = sum_{buckets <= b} (positives - sum q) / N`` is *exact at every bucket end* (sums of the pass).
  Inside a bucket the rows' order is unknown, but each positive adds ``1 - q_i > 0`` and each negative
  ``-q_i < 0``, so the row path's value there lies in ``[C_{b-1} - sum_{neg} q / N,
  C_{b-1} + sum_{pos} (1 - q) / N]``: the row KS lies in ``[ks, ks + ks_bound]`` and the row Kuiper
  range in ``[kuiper, kuiper_high]`` (so its p-value in ``[kuiper_pvalue_low, kuiper_pvalue]``). Both
  bounds are at most the heaviest bucket's weight / N.
- Smooth ECE (Blasiok & Nakkiran, ICLR 2024, eq. 3 and Sec. 5): the kernel smoother is linear in the
  points' weights (``calibflow.diagnostics`` spreads ``w_i (f_i - y_i)`` and ``w_i`` onto its grid), so the
  groups enter as weighted points (mean probability, label, weight ``n``): identical on a distinct-score
  table; on the logit grid each point moves by at most one bucket's width in probability
  (``dz / 4``), see :func:`smooth_ece_from_table`.
- Log-loss miscalibration (CORP, Dimitriadis, Gneiting & Jordan 2021): exact log loss of the pass minus
  the log loss of the PAV fit on the buckets. On a distinct-score table the buckets are the row path's
  tie groups (identical); on the logit grid the fit is constant inside each bucket, a subset of the
  monotone maps PAV searches on rows, so the table's term is a *lower bound* of the row path's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats
from sklearn.isotonic import isotonic_regression

from calibflow._validation import check_n_bins
from calibflow.aggregate.metrics import EXACT_PROB, _collapse, _replicate_cols, in_group_order
from calibflow.aggregate.replicates import replicate_metrics
from calibflow.binning import bin_of, linear_edges
from calibflow.diagnostics import brownian_range_cdf, smooth_ece
from calibflow.metrics import clip_probability

#: Above this many group draws, consistency bands use the normal approximation (see reliability_bins).
BAND_DRAW_LIMIT = 4_000_000


def groups(table: pd.DataFrame) -> pd.DataFrame:
    """Non-empty (bucket, label) groups in bucket order, segments summed, with their mean probability.

    Every function below takes the table and, optionally, ``g = groups(table)`` computed once (the
    collapse is the costly step on a table of a million groups)."""
    g = _collapse(table)
    # Where the table holds each group's probability itself (a calibrated table's ``prob``, a distinct-score
    # probability table's score), use it: ``sum_q / n`` can be one ulp off, which moves a tie at an edge.
    exact = next((c for c in EXACT_PROB if c in table.columns), None)
    if exact and in_group_order(table):  # _collapse kept the rows as they are: no groupby
        g["p"] = table[exact].to_numpy(np.float64)
    elif exact:
        g["p"] = table.groupby(["bucket", "label"], sort=True)[exact].first().to_numpy(np.float64)
    else:
        g["p"] = np.clip(g["sum_q"].to_numpy() / g["n"].to_numpy(), 0.0, 1.0)
    empty = g["n"].to_numpy() <= 0
    # filtering copies every column (the replicates too): only when some group is empty
    return g[~empty].reset_index(drop=True) if empty.any() else g


def _block_starts(bucket: np.ndarray) -> np.ndarray:
    return np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])


# ---- cumulative: KS and Kuiper ---------------------------------------------------------------------------
def _paths(g: pd.DataFrame, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The exact path at bucket ends (with C_0 = 0) and, per bucket, the highest and lowest value a row
    order inside it could reach; groups weighted by ``w`` (``n`` or a replicate's counts)."""
    n, y = g["n"].to_numpy(), g["label"].to_numpy()
    sq = g["sum_q"].to_numpy() * np.where(n > 0, w / n, 0.0)
    first = _block_starts(g["bucket"].to_numpy())
    tot = w.sum()
    step = np.add.reduceat(w * y - sq, first) / tot
    up = np.add.reduceat(np.where(y == 1, w - sq, 0.0), first) / tot
    down = np.add.reduceat(np.where(y == 0, sq, 0.0), first) / tot
    path = np.r_[0.0, np.cumsum(step)]
    return path, path[:-1] + up, path[:-1] - down, tot


def ks_from_groups(g: pd.DataFrame, w: np.ndarray | None = None) -> float:
    """Gupta et al.'s KS calibration error ``max_k |sum_{j <= k} (y_j - p_j)| / N`` at bucket ends."""
    path, _, _, _ = _paths(g, g["n"].to_numpy() if w is None else w)
    return float(np.max(np.abs(path)))


def cumulative_from_table(table: pd.DataFrame, g: pd.DataFrame | None = None) -> dict[str, float]:
    """``ks`` (``calibflow.metrics.ks_error``), ``ks_bound``, the Kuiper range and its p-value
    (``calibflow.diagnostics.cumulative_tests``) with the p-value at the highest range the rows allow.

    The Brownian scale ``sigma = sqrt(sum_i p_i (1 - p_i)) / N`` is exact from the pass
    (``sum q - sum q^2``).
    """
    g = groups(table) if g is None else g
    path, hi, lo, tot = _paths(g, g["n"].to_numpy())
    ks = float(np.max(np.abs(path)))
    ks_high = max(ks, float(np.max(np.abs(hi))), float(np.max(np.abs(lo))))
    kuiper = float(path.max() - path.min())
    kuiper_high = float(max(path.max(), hi.max()) - min(path.min(), lo.min()))
    var = g["sum_q"].sum() - g["sum_q2"].sum()
    if not var > 0:
        raise ValueError("every prediction is 0 or 1: the calibration tests need predictions inside (0, 1)")
    sigma = math.sqrt(var) / tot
    return {
        "ks": ks,
        "ks_bound": ks_high - ks,
        "kuiper": kuiper / sigma,
        "kuiper_pvalue": 1.0 - brownian_range_cdf(kuiper / sigma),
        "kuiper_pvalue_low": 1.0 - brownian_range_cdf(kuiper_high / sigma),
    }


def ks_replicates(table: pd.DataFrame, g: pd.DataFrame | None = None) -> np.ndarray:
    """KS on each Poisson replicate's counts (the interval's draws): one compiled pass per replicate
    (``replicates.replicate_metrics``), equal to ``ks_from_groups`` up to summation order."""
    g = groups(table) if g is None else g
    reps = _replicate_cols(g)
    return replicate_metrics(g, reps, 1)["ks"] if reps else np.empty(0)


# ---- smooth ECE and the log-loss miscalibration term ------------------------------------------------------
def smooth_ece_from_table(table: pd.DataFrame, g: pd.DataFrame | None = None) -> float:
    """Smooth ECE (Blasiok & Nakkiran 2024) of the groups as weighted points.

    Error on the logit grid: a point sits at its group's mean probability instead of at each row's, at
    most ``h = dz / 4`` away (1.2e-4 on the default grid). At a fixed bandwidth ``sigma`` the smoothed
    residual is Lipschitz in the points' positions, so ``smECE_sigma`` moves by at most about
    ``h (1 + 2 phi(0) / sigma)`` (``2 phi(0) / sigma = 0.8 / sigma`` is the integral of the kernel's
    |slope|; reflection at 0 and 1 only folds that integral); the automatic
    bandwidth is found by 10 bisection steps (as relplot), and a shift that flips one step moves the
    result by the value's change over one step of ``sigma`` (2^-10). Measured: docs/benchmarks/scale.md.
    """
    g = groups(table) if g is None else g
    return float(smooth_ece(g["label"].to_numpy(np.float64), g["p"].to_numpy(), g["n"].to_numpy()))


def log_loss_miscalibration_from_table(table: pd.DataFrame, g: pd.DataFrame | None = None) -> float:
    """CORP's MCB for the log loss: exact log loss minus the log loss of the PAV recalibration on buckets."""
    g = groups(table) if g is None else g
    n, y = g["n"].to_numpy(), g["label"].to_numpy()
    first = _block_starts(g["bucket"].to_numpy())
    nb = np.add.reduceat(n, first)
    pos = np.add.reduceat(n * y, first)
    # PAV's solution is the same for every Bregman score (log loss included): fit the rates, weight n.
    r = clip_probability(isotonic_regression(pos / nb, sample_weight=nb))
    recal = -(pos @ np.log(r) + (nb - pos) @ np.log1p(-r)) / nb.sum()
    return float(g["sum_ll"].sum() / n.sum() - recal)


# ---- reliability bins: equal-mass edges from cumulative weights -------------------------------------------
def reliability_bins(
    table: pd.DataFrame,
    n_bins: int,
    strategy: str = "quantile",
    level: float = 0.95,
    n_draws: int = 400,
    seed: int = 0,
    draw_limit: int = BAND_DRAW_LIMIT,
    g: pd.DataFrame | None = None,
) -> dict[str, np.ndarray]:
    """Per bin: count, positives, mean prediction, observed rate, and the consistency band of a calibrated
    model's observed rate (Broecker & Smith 2007), as ``calibflow.diagnostics.consistency_bands``.

    ``quantile``: edges as ``calibflow.metrics.bin_index`` would put them on the rows, then each group in
    the bin of its mean probability (``searchsorted(..., side="right")``, as the rows). On the logit grid
    only the rows of the <= n_bins - 1 groups holding an edge can be in the wrong bin. Band: under the
    null each group's positives are Binomial(n, p) (the rows' Bernoulli(p) summed; exact in law on a
    distinct-score table, not the same random numbers as the row path); above ``draw_limit`` group draws,
    the normal approximation of each bin's sum (mean sum n p, variance sum n p (1 - p)).
    """
    n_bins = check_n_bins(n_bins)
    g = groups(table) if g is None else g
    n, y, p = g["n"].to_numpy(), g["label"].to_numpy(), g["p"].to_numpy()
    if strategy == "quantile":
        idx = bin_of(linear_edges(p, n_bins, counts=n), p)
    elif strategy == "uniform":
        idx = np.minimum((p * n_bins).astype(np.intp), n_bins - 1)
    else:
        raise ValueError(f"strategy must be 'quantile' or 'uniform', got {strategy!r}")
    cnt = np.bincount(idx, weights=n, minlength=n_bins)
    pos = np.bincount(idx, weights=n * y, minlength=n_bins)
    sq = np.bincount(idx, weights=g["sum_q"].to_numpy(), minlength=n_bins)
    band_low, band_high = _bands(idx, n, p, cnt, n_bins, level, n_draws, seed, draw_limit)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"count": cnt, "positives": pos, "mean_pred": sq / cnt, "observed": pos / cnt,
                "band_low": band_low, "band_high": band_high}


def _bands(idx, n, p, cnt, n_bins, level, n_draws, seed, draw_limit) -> tuple[np.ndarray, np.ndarray]:
    alpha = (1 - level) / 2
    if n.size * n_draws > draw_limit:
        mean = np.bincount(idx, weights=n * p, minlength=n_bins)
        sd = np.sqrt(np.bincount(idx, weights=n * p * (1 - p), minlength=n_bins))
        zq = stats.norm.ppf(1 - alpha)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.clip((mean - zq * sd) / cnt, 0, 1), np.clip((mean + zq * sd) / cnt, 0, 1)
    rng = np.random.default_rng(seed)
    counts = np.round(n).astype(np.int64)
    rates = np.empty((n_draws, n_bins))
    for d in range(n_draws):
        with np.errstate(invalid="ignore", divide="ignore"):
            rates[d] = np.bincount(idx, weights=rng.binomial(counts, p), minlength=n_bins) / cnt
    low, high = np.nanquantile(rates, [alpha, 1 - alpha], axis=0) if cnt.any() else (cnt, cnt)
    return np.asarray(low), np.asarray(high)


# ---- selection-set metrics --------------------------------------------------------------------------------
def selection_from_table(
    table: pd.DataFrame, alpha: float = 0.1, n_bins: int = 10, g: pd.DataFrame | None = None
) -> dict[str, float]:
    """``calibflow.metrics.selection_metrics`` (Fan et al., eq. 1-2) on the top ``ceil(alpha N)`` rows by p.

    Groups are taken whole from the highest probability down; the last one is taken in part (its rows
    pro rata by label), since which of its rows the row path takes depends on row order. On a
    distinct-score table that group's rows share one probability (a tie the rows break by row order);
    otherwise (and with no tie at the boundary) this is the row path's selection.
    """
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    g = groups(table) if g is None else g
    # only the columns used here: the replicate counts would make the reorder a copy of the whole table
    order = np.argsort(-g["p"].to_numpy(), kind="stable")
    g = g[["n", "label", "p", "sum_q", "sum_q2", "sum_ll"]].iloc[order]
    n, y, p = g["n"].to_numpy(), g["label"].to_numpy(), g["p"].to_numpy()
    k = math.ceil(alpha * n.sum())
    # Groups tied in p at the boundary share it pro rata: fraction of each tie block taken.
    before = np.cumsum(n) - n
    block = np.unique(p, return_inverse=True)[1]
    b_start = np.bincount(block, weights=np.where(np.r_[True, p[1:] != p[:-1]], before, 0.0))
    b_size = np.bincount(block, weights=n)
    frac = np.clip((k - b_start[block]) / b_size[block], 0.0, 1.0)
    w = frac * n
    sel = w > 0
    w, y, p, frac = w[sel], y[sel], p[sel], frac[sel]
    sq, sq2, sll = (g[c].to_numpy()[sel] * frac for c in ("sum_q", "sum_q2", "sum_ll"))
    tot, pos = w.sum(), float(w @ y)
    idx = np.minimum((p * n_bins).astype(np.intp), n_bins - 1)
    cnt = np.bincount(idx, weights=w, minlength=n_bins)
    gap = np.bincount(idx, weights=w * y - sq, minlength=n_bins)
    return {
        "alpha": float(alpha),
        "n_selected": int(k),
        "positives": pos,
        "E": float(sq.sum() / pos - 1.0) if pos > 0 else float("nan"),
        "ece": float(np.abs(gap).sum() / tot),
        "mce": float(np.max(np.abs(gap[cnt > 0]) / cnt[cnt > 0])),
        "brier": float((sq2.sum() - 2 * (sq @ y) + pos) / tot),
        "log_loss": float(sll.sum() / tot),
    }


# ---- per-segment calibration ratios ----------------------------------------------------------------------
def segment_ratios(
    unc: pd.DataFrame, cal: pd.DataFrame, names: Sequence[str], level: float = 0.95, top: int = 20
) -> list[dict]:
    """Per value of each segment column ``seg_i`` (named ``names[i]``), the largest ``top`` first: rows,
    positives, ``sum p / sum y`` before (``unc``) and after (``cal``, the same groups calibrated) and the
    after-ratio's interval from the counts (``calibflow.intervals.ratio_interval``, as the row path's)."""
    from calibflow.intervals import ratio_interval
    from calibflow.segments import enough_evidence, is_flagged

    y = cal["label"].to_numpy()
    frame = pd.DataFrame({"n": cal["n"], "pos": cal["n"] * y, "su": unc["sum_q"], "sc": cal["sum_q"],
                          "sc2": cal["sum_q2"]})
    out = []
    for i, name in enumerate(names):
        by = frame.groupby(cal[f"seg_{i}"].astype(str), sort=True).sum()
        by = by.sort_values("n", ascending=False, kind="stable").head(top)
        for value, r in by.iterrows():
            pos = float(r["pos"])
            lo, hi = ratio_interval(pos, float(r["sc"]), max(float(r["sc"] - r["sc2"]), 0.0), level)
            ci = [float(lo), float(hi)] if pos > 0 and np.isfinite(lo) else None
            out.append({
                "column": name,
                "value": str(value),
                "n": int(round(r["n"])),
                "positives": int(round(pos)),
                "ratio_uncalibrated": float(r["su"] / pos) if pos else None,
                "ratio": float(r["sc"] / pos) if pos else None,
                "ratio_ci": ci,
                "flagged": is_flagged(ci, pos),
                "too_few": not enough_evidence(pos),
            })
    return out
