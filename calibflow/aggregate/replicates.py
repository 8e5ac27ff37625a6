"""The Poisson replicates' metrics, one compiled pass over the groups per replicate.

``metrics._point`` computes a replicate's metrics with about fifteen numpy passes over the groups (scaled
sums, bincounts for ECE and AUC, a cumulative sum), each allocating a temporary the size of the table.
On a distinct-score table (one group per distinct score, up to ``scale.distinct_max`` = 2^20 groups) that
is ~15 ms a replicate, 32 replicates, every method: the evaluate and select stages' main cost. Here each
replicate is one sequential pass with no temporaries, reading the replicate's column where the table holds
it (no groups x replicates matrix is built). The draws are the table's own ``b0..`` columns, so the same
seed gives the same intervals; values equal ``_point``'s up to summation order (numpy sums pairwise, this
pass left to right: relative differences of ~1e-12, the tests bound them).

The groups must be in (bucket, label) order, as ``metrics._collapse`` returns them: AUC and the KS path
walk the buckets in order.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pandas as pd

#: The metrics of :func:`replicate_metrics` (``metrics._METRICS`` plus Gupta et al.'s KS).
REPLICATE_METRICS = ("log_loss", "brier", "calibration_ratio", "ece", "mce", "auc", "ks")


def _one_replicate(w, base, y, bucket, sum_q, sum_ll, sum_q2, ece_idx, n_bins, out):  # noqa: PLR0913, PLR0915
    """``out[:] = log_loss, brier, ratio, ece, mce, auc, ks`` of the groups weighted by ``w``."""
    tot = pos = sll = sq2 = sq_tot = sq_pos = 0.0
    cnt = np.zeros(n_bins)
    gap = np.zeros(n_bins)
    auc_num = neg_cum = pb = qb = 0.0
    path = ks = 0.0
    step = 0.0
    for i in range(w.size):
        if i > 0 and bucket[i] != bucket[i - 1]:  # a bucket ends: its AUC term and the KS path's point
            auc_num += pb * (neg_cum + 0.5 * qb)
            neg_cum += qb
            pb = qb = 0.0
            path += step
            step = 0.0
            ks = max(ks, abs(path))
        wi = w[i]
        scale = wi / base[i] if base[i] > 0 else 0.0
        sq = sum_q[i] * scale
        tot += wi
        sq_tot += sq
        sll += sum_ll[i] * scale
        sq2 += sum_q2[i] * scale
        yw = wi if y[i] == 1 else 0.0
        if y[i] == 1:
            pos += wi
            sq_pos += sq
            pb += wi
        else:
            qb += wi
        k = ece_idx[i]
        cnt[k] += wi
        gap[k] += yw - sq
        step += yw - sq
    auc_num += pb * (neg_cum + 0.5 * qb)
    neg_cum += qb
    path += step
    ks = max(ks, abs(path))
    ece = mce = 0.0
    seen = False
    for k in range(n_bins):
        ece += abs(gap[k])
        if cnt[k] > 0:
            mce = max(mce, abs(gap[k]) / cnt[k]) if seen else abs(gap[k]) / cnt[k]
            seen = True
    out[0] = sll / tot
    out[1] = (sq2 - 2.0 * sq_pos + pos) / tot
    out[2] = sq_tot / pos if pos > 0 else math.nan
    out[3] = ece / tot
    out[4] = mce if seen else math.nan
    out[5] = auc_num / (pos * neg_cum) if pos * neg_cum > 0 else math.nan
    out[6] = ks / tot


@cache
def _compiled():
    """:func:`_one_replicate` compiled by numba, on first use: a module that imports this one for its
    helpers does not pay numba's import (a third of a second)."""
    import numba

    return numba.njit(nogil=True, cache=True, error_model="numpy")(_one_replicate)


def in_group_order(table: pd.DataFrame) -> bool:
    """Whether ``table`` is one row per (bucket, label), in that order (as ``metrics._collapse`` returns)."""
    b, y = table["bucket"].to_numpy(), table["label"].to_numpy()
    return b.size <= 1 or bool(np.all((b[1:] > b[:-1]) | ((b[1:] == b[:-1]) & (y[1:] > y[:-1]))))


def ece_bins_of(g: pd.DataFrame, n_bins: int) -> np.ndarray:
    """Each group's ECE bin, from its mean probability (``metrics._point``'s rule; a replicate keeps it)."""
    base = g["n"].to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_q = g["sum_q"].to_numpy(np.float64) / base
    return np.minimum((np.nan_to_num(mean_q) * n_bins).astype(np.intp), n_bins - 1)


def replicate_metrics(g: pd.DataFrame, reps: list[str], n_bins: int) -> dict[str, np.ndarray]:
    """Per metric of :data:`REPLICATE_METRICS`, its value on each replicate column ``reps`` of the
    collapsed groups ``g`` (NaN where a replicate drew no row, or no positive for the ratio)."""
    if not in_group_order(g):
        raise ValueError("replicate_metrics needs the groups in (bucket, label) order (metrics._collapse)")
    bucket, y = g["bucket"].to_numpy(), g["label"].to_numpy()
    cols = (g[c].to_numpy(np.float64) for c in ("n", "sum_q", "sum_ll", "sum_q2"))
    base, sq, sll, sq2 = (np.ascontiguousarray(c) for c in cols)
    bucket, y = np.ascontiguousarray(bucket, np.int64), np.ascontiguousarray(y, np.int64)
    idx = ece_bins_of(g, n_bins)
    vals = np.empty((len(reps), len(REPLICATE_METRICS)))
    one_replicate = _compiled()
    for r, c in enumerate(reps):
        w = np.ascontiguousarray(g[c].to_numpy(np.float64))
        one_replicate(w, base, y, bucket, sq, sll, sq2, idx, n_bins, vals[r])
    return {m: vals[:, j] for j, m in enumerate(REPLICATE_METRICS)}
