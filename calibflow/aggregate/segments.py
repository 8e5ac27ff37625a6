"""Per-segment metrics from a coarse (segment value, cell, label) table, all values at once.

A segment table (``tables.Tables.segments[col]``) holds, per value, a few hundred cells. Every metric here
is a ``bincount`` over the value's code, so 1e5 values cost a few vector passes over the table, not 1e5
Python loops (``metrics.metrics_from_table`` loops per value and draws replicate columns per group; at
1e5 values that alone is a table of groups x replicates).

Exact from the pass whatever the cells: counts, positives, ``sum p / sum y``, log loss and Brier of the
raw scores. From the cells: ECE (a group in the bin of its mean probability: the cells' edges include the
``k / ece_bins`` bin edges, so only the fine bucket holding an edge can put rows in the wrong bin; the
error bound is measured in docs/benchmarks/scale.md) and AUC (ties inside a cell counted half).
Calibrated tables (``metrics.calibrated_table``) apply the calibrator at each group's mean score, so a
segment's calibrated sums are approximations inside a cell (measured against the rows in the tests).

Intervals: ``sum p / sum y``'s from the counts (``calibflow.intervals.ratio_interval``, what the row path
computes too: exact Poisson on the positives, coverage measured in benchmarks/segment_coverage.py); the
log loss's from Poisson-bootstrap replicates drawn per group on the fly (``Poisson(n)``, the law of the sum
of the group's rows' Poisson(1) weights; :func:`calibflow.aggregate.table.add_replicates`), one
replicate at a time, so memory is the table plus values x replicates. A seed gives the same draws for
an uncalibrated table and its calibrated copy (same groups, same order): paired intervals.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from calibflow.intervals import ratio_interval
from calibflow.metrics import clip_probability, expit
from calibflow.segments import NULL_LEVEL, OTHER_LEVEL, enough_evidence, is_flagged


def _by_value(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each group's dense value index (values in sorted order) and the values themselves."""
    code = table["code"].to_numpy() if "code" in table.columns else pd.factorize(table["seg_0"], sort=True)[0]
    uniq, inv = np.unique(code, return_inverse=True)
    first = np.zeros(uniq.size, np.int64)
    first[inv[::-1]] = np.arange(inv.size)[::-1]  # the first group of each value
    return inv, table["seg_0"].to_numpy()[first]


def _auc(v: np.ndarray, bucket: np.ndarray, y: np.ndarray, n: np.ndarray, m: int):
    """Per value, Mann-Whitney AUC on its cells (ties inside a cell counted half) and the bound
    ``0.5 sum_cells pos neg / (P N)`` on its distance from the rows' AUC."""
    nb = int(bucket.max()) + 1 if bucket.size else 1
    uniq, inv = np.unique(v.astype(np.int64) * nb + bucket, return_inverse=True)
    pb = np.bincount(inv, n * (y == 1), uniq.size)
    qb = np.bincount(inv, n * (y == 0), uniq.size)
    val = uniq // nb
    cq = np.cumsum(qb)
    before = np.r_[0.0, cq][np.searchsorted(val, np.arange(m))]  # negatives of the earlier values
    neg_below = cq - qb - before[val]
    num = np.bincount(val, pb * (neg_below + 0.5 * qb), m)
    den = np.bincount(val, pb, m) * np.bincount(val, qb, m)
    ties = 0.5 * np.bincount(val, pb * qb, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan), np.where(den > 0, ties / den, np.nan)


def _sums(v, y, n, sq, sll, m) -> tuple[np.ndarray, ...]:
    return (np.bincount(v, n, m), np.bincount(v, n * y, m), np.bincount(v, sq, m), np.bincount(v, sll, m))


def segment_metrics(
    table: pd.DataFrame,
    n_bins: int = 15,
    replicates: int = 0,
    seed: int = 0,
    level: float = 0.95,
) -> pd.DataFrame:
    """One row per segment value: n, positives, sum_p, calibration_ratio, log_loss, brier, ece, auc (with
    auc_tie_bound) and, with
    ``replicates``, ``calibration_ratio_low/high`` and ``log_loss_low/high`` (percentile intervals)."""
    v, values = _by_value(table)
    m = values.size
    n, y = table["n"].to_numpy(np.float64), table["label"].to_numpy(np.float64)
    sq, sll, sq2 = (table[c].to_numpy(np.float64) for c in ("sum_q", "sum_ll", "sum_q2"))
    tot, pos, sum_q, sum_ll = _sums(v, y, n, sq, sll, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_q = np.nan_to_num(sq / n)
        out = pd.DataFrame({
            "value": values,
            "n": tot,
            "positives": pos,
            "sum_p": sum_q,  # kept beside the ratio: a pooled row sums it (a value may have no positive)
            "calibration_ratio": np.where(pos > 0, sum_q / pos, np.nan),
            "log_loss": sum_ll / tot,
            "brier": (np.bincount(v, sq2, m) - 2 * np.bincount(v, sq * y, m) + pos) / tot,
        })
    idx = np.minimum((mean_q * n_bins).astype(np.int64), n_bins - 1)
    gap = np.bincount(v * n_bins + idx, n * y - sq, m * n_bins).reshape(m, n_bins)
    out["ece"] = np.abs(gap).sum(axis=1) / tot
    out["auc"], out["auc_tie_bound"] = _auc(v, table["bucket"].to_numpy(np.int64), y, n, m)
    if replicates > 0:
        out = out.join(_intervals(v, y, n, sq, sll, m, replicates, seed, level))
        # the ratio's interval from the counts, as the row path's (the replicates' percentile interval
        # dropped the draws with no positive and had no measured coverage)
        var = np.clip(sum_q - np.bincount(v, sq2, m), 0.0, None)  # sum p (1 - p) over the value's rows
        lo, hi = ratio_interval(pos, sum_q, var, level)
        out["calibration_ratio_low"] = np.where(pos > 0, lo, np.nan)
        out["calibration_ratio_high"] = np.where(pos > 0, hi, np.nan)
    return out


def _intervals(v, y, n, sq, sll, m, replicates: int, seed: int, level: float) -> pd.DataFrame:
    """Percentile intervals of each value's ratio and log loss over Poisson replicates drawn per group."""
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E6]))
    ratio = np.empty((replicates, m))
    ll = np.empty((replicates, m))
    with np.errstate(invalid="ignore", divide="ignore"):
        scale_ = np.where(n > 0, 1.0 / n, 0.0)
        for r in range(replicates):
            k = rng.poisson(np.clip(n, 0.0, None)).astype(np.float64)
            tot, pos, s_q, s_ll = _sums(v, y, k, sq * k * scale_, sll * k * scale_, m)
            ratio[r] = np.where(pos > 0, s_q / pos, np.nan)
            ll[r] = np.where(tot > 0, s_ll / tot, np.nan)
    tail = (1.0 - level) / 2.0
    out = {}
    for name, draws in (("calibration_ratio", ratio), ("log_loss", ll)):
        out[f"{name}_low"] = _nanquantile_cols(draws, tail)
        out[f"{name}_high"] = _nanquantile_cols(draws, 1.0 - tail)
    return pd.DataFrame(out)


def _nanquantile_cols(draws: np.ndarray, q: float) -> np.ndarray:
    """``np.nanquantile(draws, q, axis=0)`` (linear method) for many columns at once: numpy's own loops
    over the columns in Python (25 s for 1e5 values)."""
    srt = np.sort(draws, axis=0)  # NaN sort last
    k = np.isfinite(srt).sum(axis=0)
    pos = q * np.maximum(k - 1, 0)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.maximum(k - 1, 0))
    cols = np.arange(srt.shape[1])
    a, b = srt[lo, cols], srt[hi, cols]
    with np.errstate(invalid="ignore"):
        return np.where(k > 0, a + (b - a) * (pos - lo), np.nan)


def segment_records(
    unc: pd.DataFrame,
    cal: pd.DataFrame | None,
    column: str,
    top: int | None = None,
    unc_metrics: pd.DataFrame | None = None,
    **opts: Any,
) -> list[dict[str, Any]]:
    """The card's per-segment ratios (largest ``top`` values first): ``column``, ``value``, ``n``,
    ``positives``, ``ratio_uncalibrated``, ``ratio``, ``ratio_ci`` (of ``cal``, or of ``unc``),
    ``ratio_uncalibrated_ci`` (of ``unc``),
    ``flagged`` (the interval excludes 1 and the value has the positives to tell) and ``too_few``.
    Values past the ``top`` largest that are not flagged are pooled
    into one ``(other values) xK`` row (sums exact, no interval): the column's rows add up to the table's.
    ``unc_metrics``: ``segment_metrics(unc, **opts)`` computed before (select compares every method with
    the same uncalibrated table)."""
    mu = segment_metrics(unc, **opts) if unc_metrics is None else unc_metrics
    mc = segment_metrics(cal, **opts) if cal is not None else mu
    return records_from_metrics(mu, mc, column, top)


def records_from_metrics(
    mu: pd.DataFrame, mc: pd.DataFrame, column: str, top: int | None = None
) -> list[dict[str, Any]]:
    """:func:`segment_records` from :func:`segment_metrics`-shaped frames (``value``, ``n``, ``positives``,
    ``sum_p``, ``calibration_ratio`` and, for ``mc``, ``calibration_ratio_low/high``), one row per value in
    the same order: also what a pass over the rows gives (``segment_compare.segment_ratio_records``).

    The columns are taken out of the frames once (a pandas lookup per value and field was most of
    select's per-segment cost at 200 values); the values written are the same Python floats."""
    values, n = mu["value"].to_numpy(object), mu["n"].to_numpy(np.float64)
    positives = mu["positives"].to_numpy(np.float64)
    ratio_u, ratio_c = (m["calibration_ratio"].to_numpy(np.float64) for m in (mu, mc))
    ci_u, ci_c = _ratio_cis(mu), _ratio_cis(mc)
    order = np.argsort(-n, kind="stable")
    out, rest = [], []
    for rank, i in enumerate(order.tolist()):
        ci = ci_c[i]
        pos = float(positives[i])
        flagged = is_flagged(ci, pos)
        if top and rank >= top and not flagged:
            rest.append(i)
            continue
        out.append({
            "column": column,
            "value": NULL_LEVEL if pd.isna(values[i]) else str(values[i]),
            "n": int(round(float(n[i]))),
            "positives": int(round(pos)),
            "ratio_uncalibrated": float(ratio_u[i]) if pos else None,
            "ratio": float(ratio_c[i]) if pos else None,
            "ratio_ci": ci,
            "ratio_uncalibrated_ci": ci_u[i],  # before calibration, as the row path's card had it
            "flagged": flagged,
            "too_few": not enough_evidence(pos),
        })
    if rest:
        out.append(_pooled(mu, mc, rest, column))
    return out


def _ratio_cis(m: pd.DataFrame) -> list[list[float] | None]:
    """Each row's ratio interval of a :func:`segment_metrics` frame, None where it has none."""
    if "calibration_ratio_low" not in m.columns:
        return [None] * len(m)
    lo = m["calibration_ratio_low"].to_numpy(np.float64)
    hi = m["calibration_ratio_high"].to_numpy(np.float64)
    return [[float(a), float(b)] if np.isfinite(a) else None for a, b in zip(lo, hi, strict=True)]


def _pooled(mu: pd.DataFrame, mc: pd.DataFrame, idx: list[int], column: str) -> dict[str, Any]:
    """One row for the values ``idx``: rows, positives and ``sum p`` summed, its ratios from those sums.

    ``sum p`` is summed as it is, never rebuilt as ratio x positives: a value with no positive has no
    ratio but has predictions, and leaving them out read 0.37 for the pooled row of a calibrated table."""
    n, pos = float(mu["n"].iloc[idx].sum()), float(mu["positives"].iloc[idx].sum())
    enough = np.array([enough_evidence(float(k)) for k in mu["positives"].iloc[idx]], dtype=bool)
    sp_u, sp_c = (float(m["sum_p"].iloc[idx].sum()) for m in (mu, mc))
    return {"column": column, "value": f"{OTHER_LEVEL} x{len(idx)}", "n": int(round(n)),
            "positives": int(round(pos)), "ratio_uncalibrated": sp_u / pos if pos else None,
            "ratio": sp_c / pos if pos else None, "ratio_ci": None, "flagged": False, "too_few": False,
            # each pooled value with the evidence was tested (none flagged): chance_flags counts them
            "tested": int((np.isfinite(mc["calibration_ratio_low"].iloc[idx]) & enough).sum())
            if "calibration_ratio_low" in mc.columns else 0,
            "too_few_pooled": int((~enough).sum())}


def _cell_fit(fine: pd.DataFrame, cal: Any, kind: str, grid: Any, starts: np.ndarray) -> pd.DataFrame:
    """Per (coarse cell, label): the fine table's weighted mean logit ``z0``, mean calibrated probability
    ``p0``, the slope of the calibrated probability on the logit across the cell's fine groups, and the
    range of those probabilities."""
    n = fine["n"].to_numpy(np.float64)
    keep = n > 0
    n, z = n[keep], fine["sum_z"].to_numpy(np.float64)[keep] / n[keep]
    y = fine["label"].to_numpy()[keep]
    p = np.asarray(cal.predict(expit(z) if kind == "probability" else z), np.float64)
    bucket = np.clip(np.floor((np.clip(z, -grid.z_max, grid.z_max) + grid.z_max) / grid.width), 0,
                     grid.n_buckets - 1).astype(np.int64)
    key = np.searchsorted(starts[1:], bucket, side="right") * 2 + y
    pc = clip_probability(p)
    ll = np.where(y == 1, -np.log(pc), -np.log1p(-pc))
    frame = pd.DataFrame({"key": key, "n": n, "nz": n * z, "np": n * p, "nl": n * ll, "p": p})
    g = frame.groupby("key").agg(n=("n", "sum"), nz=("nz", "sum"), np_=("np", "sum"), nl=("nl", "sum"),
                                 lo=("p", "min"), hi=("p", "max"))
    g["z0"], g["p0"], g["l0"] = g["nz"] / g["n"], g["np_"] / g["n"], g["nl"] / g["n"]
    dz = z - g["z0"].reindex(key).to_numpy()
    sxx = pd.Series(n * dz * dz).groupby(key).sum()
    for col, v, ref in (("slope", p, "p0"), ("slope_l", ll, "l0")):
        sxy = pd.Series(n * dz * (v - g[ref].reindex(key).to_numpy())).groupby(key).sum()
        g[col] = np.where(sxx > 0, sxy / sxx.where(sxx > 0, 1.0), 0.0)
    return g


def calibrated_segment_table(
    seg: pd.DataFrame, fine: pd.DataFrame, starts: np.ndarray, cal: Any, kind: str, grid: Any
) -> pd.DataFrame:
    """A segment table under calibrator ``cal``, each group's probability taken from the fine grid.

    A coarse cell holds rows whose calibrated probabilities differ (a step map can jump inside it), so
    the calibrator at the group's mean score (``metrics.calibrated_table``) misses the spread. Here a
    group's probability is the fine table's mean calibrated probability over the same (cell, label),
    moved along the cell's least-squares slope to the group's own mean logit and kept inside the cell's
    range: exact when the segment's rows are spread over the cell's fine buckets as all rows are, and
    to first order otherwise (measured in tests/library/test_aggregate_segments.py).
    """
    g = _cell_fit(fine, cal, kind, grid, starts)
    key = seg["bucket"].to_numpy(np.int64) * 2 + seg["label"].to_numpy(np.int64)
    at = g.reindex(key)
    z = seg["sum_z"].to_numpy(np.float64) / seg["n"].to_numpy(np.float64)
    p = at["p0"].to_numpy() + at["slope"].to_numpy() * (z - at["z0"].to_numpy())
    p = np.clip(p, at["lo"].to_numpy(), at["hi"].to_numpy())
    ll = at["l0"].to_numpy() + at["slope_l"].to_numpy() * (z - at["z0"].to_numpy())
    missing = ~np.isfinite(p)  # a (cell, label) absent from the fine table: only if the tables differ
    if missing.any():
        p[missing] = np.asarray(cal.predict(expit(z[missing]) if kind == "probability" else z[missing]))
        pc = clip_probability(p[missing])
        ll[missing] = np.where(seg["label"].to_numpy()[missing] == 1, -np.log(pc), -np.log1p(-pc))
    t = seg.copy()
    t["bucket"] = np.unique(p, return_inverse=True)[1].astype(np.int32)
    t["prob"] = p
    t["sum_q"] = t["n"] * p
    t["sum_q2"] = t["n"] * p * p  # Brier at the group's probability (within-cell spread not carried)
    t["sum_ll"] = t["n"] * ll
    return t
