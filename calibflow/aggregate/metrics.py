"""Every metric from the bucket table, with Poisson-bootstrap intervals, overall and per segment.

Exact (same value as the in-memory metric on the rows, up to float summation order): log loss (summed
per row in the pass), Brier (from ``sum w q^2``), calibration ratio ``sum p / sum y``.
From buckets: ECE/MCE (any number of uniform bins; a group falls in the bin of its mean probability,
so only the rows of the <= n_bins - 1 buckets straddling a bin edge can land in the wrong bin) and AUC
(Mann-Whitney on the bucket histogram with ties inside a bucket counted half; the exact AUC lies
within ``auc_tie_bound = 0.5 sum_b pos_b neg_b / (P N)`` of it).
Intervals: the metric is recomputed on each replicate's Poisson weights (``b0..``), with each group's
per-row quantities at their group means (within a bucket-label group they vary by O(dz)); the interval
is the 2.5-97.5 percentile of the replicates, except for ECE and MCE, whose replicates sit above the
estimate (noise adds absolute gaps): their spread is placed around the estimate (``_centred_interval``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from calibflow.aggregate.replicates import in_group_order, replicate_metrics
from calibflow.metrics import row_log_loss

_METRICS = ("log_loss", "brier", "calibration_ratio", "ece", "mce", "auc")


def _replicate_cols(table: pd.DataFrame) -> list[str]:
    return [c for c in table.columns if c.startswith("b") and c[1:].isdigit()]


def _collapse(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (bucket, label), segments summed, sorted by (bucket, label)."""
    cols = ["n", "sum_z", "sum_q", "sum_ll", "sum_q2", *_replicate_cols(table)]
    if in_group_order(table):
        # Already one row per (bucket, label) in order (the pass's ORDER BY, no segments): no groupby.
        return table[["bucket", "label", *cols]].reset_index(drop=True)
    # Column by column (one groupby of every column first copies them all into one block, then sums it:
    # on a calibrated distinct-score table ~4x the replicate counts' memory at once). Still pandas' sums
    # (compensated): a group's sum_q / n that moves by an ulp can move it across an ECE bin edge.
    by = table.groupby(["bucket", "label"], sort=True)
    sums = {c: by[c].sum() for c in cols}
    index = sums["n"].index
    out = {"bucket": index.get_level_values(0).to_numpy(), "label": index.get_level_values(1).to_numpy()}
    out.update({c: v.to_numpy() for c, v in sums.items()})
    return pd.DataFrame(out)


def _group_runs(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows in (bucket, label) order (stable: ties keep the table's order) and where each group
    starts in it."""
    b, y = table["bucket"].to_numpy(), table["label"].to_numpy()
    order = np.lexsort((y, b))
    bs, ys = b[order], y[order]
    return order, np.flatnonzero(np.r_[True, (bs[1:] != bs[:-1]) | (ys[1:] != ys[:-1])])


#: Columns holding each group's probability itself (a calibrated table's, a distinct-score table's).
EXACT_PROB = ("prob", "score_probability")


def collapsed(table: pd.DataFrame) -> pd.DataFrame:
    """``_collapse`` keeping the exact probability column (:data:`EXACT_PROB`) where the table has one
    (all rows of a (bucket, label) group share it): what every metric and diagnostic reads, so that a
    caller computing many of them groups a table once, not once per function."""
    exact = next((c for c in EXACT_PROB if c in table.columns), None)
    if exact is None or in_group_order(table):
        g = _collapse(table)
        return g.assign(**{exact: table[exact].to_numpy()}) if exact else g
    g = _collapse(table)
    order, start = _group_runs(table)
    g[exact] = table[exact].to_numpy(np.float64)[order][start]  # the group's first row's, as groupby.first
    return g


def _point(g: pd.DataFrame, n: np.ndarray, n_bins: int, exact: bool) -> dict[str, float]:
    """Metrics of groups ``g`` weighted by ``n`` (``g.n`` itself, or a replicate's counts)."""
    base = g["n"].to_numpy()
    y = g["label"].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(base > 0, n / base, 0.0)  # a replicate rescales each group's sums
    tot, pos = n.sum(), n[y == 1].sum()
    sq, sll, sq2 = (g[c].to_numpy() * scale for c in ("sum_q", "sum_ll", "sum_q2"))
    # a replicate may draw no row of a small segment (tot = 0): its metrics are NaN, not an error
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {
            "log_loss": sll.sum() / tot,
            "brier": (sq2.sum() - 2 * sq[y == 1].sum() + pos) / tot,
            "calibration_ratio": sq.sum() / pos if pos > 0 else float("nan"),
        }
        mean_q = g["sum_q"].to_numpy() / base
        idx = np.minimum((np.nan_to_num(mean_q) * n_bins).astype(np.intp), n_bins - 1)
        cnt = np.bincount(idx, weights=n, minlength=n_bins)
        gap = np.bincount(idx, weights=n * y - sq, minlength=n_bins)
        out["ece"] = float(np.abs(gap).sum() / tot)
    out["mce"] = float(np.max(np.abs(gap[cnt > 0]) / cnt[cnt > 0])) if (cnt > 0).any() else float("nan")
    b = g["bucket"].to_numpy()
    nb = int(b.max()) + 1
    pb = np.bincount(b, weights=np.where(y == 1, n, 0.0), minlength=nb)
    qb = np.bincount(b, weights=np.where(y == 0, n, 0.0), minlength=nb)
    neg_below = np.cumsum(qb) - qb
    npos, nneg = pb.sum(), qb.sum()
    out["auc"] = float((pb @ (neg_below + 0.5 * qb)) / (npos * nneg)) if npos * nneg > 0 else float("nan")
    if exact:
        out["auc_tie_bound"] = float(0.5 * (pb @ qb) / (npos * nneg)) if npos * nneg > 0 else float("nan")
        out["n"], out["positives"] = float(tot), float(pos)
    return {k: float(v) for k, v in out.items()}


def _seen(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """The replicates that saw any row (a replicate with no row gives NaN)."""
    v = np.asarray(values, dtype=np.float64)
    return v[~np.isnan(v)]


def _interval(values: Sequence[float] | np.ndarray, a: float) -> list[float]:
    """The central interval of the replicates that saw any row (NaN when none did)."""
    v = _seen(values)
    return [float(np.quantile(v, a)), float(np.quantile(v, 1 - a))] if v.size else [float("nan")] * 2


#: Metrics whose plug-in estimate is biased upward by sampling noise (a sum of absolute gaps): a replicate
#: adds noise again, so the replicates sit above the estimate and their percentile interval can exclude it.
_NOISE_BIASED = ("ece", "mce")


def _centred_interval(values: Sequence[float] | np.ndarray, point: float, a: float) -> list[float]:
    """The replicates' spread around their median, placed on the estimate: ``[point - (median - q_a),
    point + (q_1-a - median)]`` (at least 0). It always holds the estimate, which the plain percentile
    interval of an ECE did not (0.0224 printed with [0.0230, 0.0572] on a test fixture); it describes the
    estimate's sampling spread, not a correction of ECE's upward bias."""
    v = _seen(values)
    if not v.size or not np.isfinite(point):
        return [float("nan")] * 2
    lo, mid, hi = np.quantile(v, [a, 0.5, 1 - a])
    return [float(max(point - (mid - lo), 0.0)), float(point + (hi - mid))]


def _ratio_ci(g: pd.DataFrame, level: float) -> list[float]:
    """``sum p / sum y``'s interval from the groups' counts (``calibflow.intervals.ratio_interval``: exact
    Poisson on the positives, coverage measured), as the row path's."""
    from calibflow.intervals import ratio_interval

    n, y = g["n"].to_numpy(np.float64), g["label"].to_numpy(np.float64)
    pos, sq = float(n @ y), float(g["sum_q"].sum())
    if pos <= 0:
        return [float("nan")] * 2
    lo, hi = ratio_interval(pos, sq, max(sq - float(g["sum_q2"].sum()), 0.0), level)
    return [float(lo), float(hi)]


def _with_intervals(g: pd.DataFrame, n_bins: int, level: float) -> dict:
    return overall_and_draws(g, n_bins, level)[0]


def overall_and_draws(g: pd.DataFrame, n_bins: int, level: float) -> tuple[dict, dict[str, np.ndarray]]:
    """The overall block of :func:`metrics_from_table` for collapsed groups ``g``, and each replicate's
    metrics (``replicates.REPLICATE_METRICS``, KS included: a caller needing KS's interval reuses them)."""
    res = _point(g, g["n"].to_numpy(), n_bins, exact=True)
    reps = _replicate_cols(g)
    draws: dict[str, np.ndarray] = {}
    if reps:
        # one compiled pass per replicate (calibflow.aggregate.replicates), not _point's numpy passes
        draws = replicate_metrics(g, reps, n_bins)
        a = (1 - level) / 2
        res["ci"] = {m: _interval(draws[m], a) for m in _METRICS}
        for m in _NOISE_BIASED:
            res["ci"][m] = _centred_interval(draws[m], res[m], a)
        res["ci"]["calibration_ratio"] = _ratio_ci(g, level)  # the rows' interval, not the replicates'
        res["replicates"] = len(reps)
    return res, draws


def metrics_from_table(
    table: pd.DataFrame, n_bins: int = 15, segments: tuple[str, ...] | int = (), level: float = 0.95
) -> dict:
    """``{"overall": {...}, "segments": [{"segment": (...), ...}]}`` from one bucket table.

    ``segments``: the ``seg_i`` key columns of the table to break down by (all of them by default).
    """
    seg_cols = [c for c in table.columns if c.startswith("seg_")]
    out: dict = {"overall": _with_intervals(_collapse(table), n_bins, level), "segments": []}
    if seg_cols:
        for key, part in table.groupby(seg_cols, sort=True):
            row = _with_intervals(_collapse(part), n_bins, level)
            row["segment"] = [k.item() if hasattr(k, "item") else k for k in np.atleast_1d(key)]
            out["segments"].append(row)
    return out


def calibrated_table(table: pd.DataFrame, cal, kind: str = "probability") -> pd.DataFrame:
    """The table with each group's probability replaced by the calibrator at the group's mean score.

    Bucket-level (not per row): log loss and Brier of calibrated predictions are then approximations of
    O(dz) inside a group, unlike the exact ones of the raw scores.
    """
    from scipy.special import expit

    # A shallow copy: the columns replaced below are new arrays, the replicate counts (most of the table)
    # stay shared with ``table`` (copy-on-write), so a method's table costs its five columns, not a copy.
    t = table.copy(deep=False)
    mean_z = t["sum_z"] / t["n"]
    s = expit(mean_z) if kind == "probability" else mean_z
    if f"score_{kind}" in t.columns:  # a distinct-score table: each group's own score, not a mean
        s = t[f"score_{kind}"]
    p = cal.predict(s.to_numpy(np.float64))
    # Re-bucket on the calibrated value: groups a step map sends to one probability are ties for the AUC
    # (as on the rows), and a non-monotone map's order is the one ranked.
    t["bucket"] = np.unique(p, return_inverse=True)[1].astype(np.int32)
    t["prob"] = p  # the group's probability itself (sum_q / n can be one ulp off)
    t["sum_q"] = t["n"] * p
    t["sum_q2"] = t["n"] * p * p
    t["sum_ll"] = t["n"] * row_log_loss(t["label"].to_numpy(np.float64), p)
    return t
