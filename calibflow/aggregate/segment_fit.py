"""``partial_pooling`` fitted from the streaming pass's tables instead of rows.

The pass (``tables.aggregate_tables``) keeps, per segment column, a (value, coarse cell, label) table with
each group's count ``n`` and logit sum ``sum_z``. The penalised likelihood of one column's offsets and
log-slopes is a sum over rows of Bernoulli terms; here each group stands for its rows at the group's mean
logit ``sum_z / n``, weighted by ``n`` (calibrators take frequency weights), so the fit is the row fit on
``values x cells x 2`` weighted points: memory bounded by the table (at most ``tables.SEG_KEYS_MAX`` keys),
never by the rows. What the coarse grid costs is the within-group curvature of the log likelihood in ``z``:
a group spans at most one coarse cell (a few hundredths of a logit at 256 cells, wider when 1e5 values
share the key budget); measured against the row fit in tests/library/test_segment_fit.py and
docs/benchmarks/segments.md.

Several columns. The tables are marginal (one per column, not the joint of the columns), so each column's
block is fitted on its own table against its own global pair: that fit integrates the other columns'
effects out, which shrinks its offsets toward 0 (a logistic model is not collapsible). ``_combine`` scales
them back with the logistic-normal approximation (Zeger, Liang & Albert 1988) and takes the global pair
from the columns' fits. With one column the result is the row fit (up to the grid); with several it is
exact when the columns' effects are additive and their values independent. Column pairs (intersections)
need a joint table, which the pass does not build: none are fitted here (``pair_tests_`` says so). Cost,
measured (tests/library/test_segment_fit.py, docs/benchmarks/segments.md): one column, predictions within
0.005 on the logit of the row fit; three columns with a pair effect at 1e6 rows, test log loss +7e-4.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from calibflow.calibrators import make
from calibflow.calibrators.partial_pooling import PartialPoolingCalibrator, _Block, _Fitter
from calibflow.segments import as_levels

#: Recorded in the fitted state so a reader knows no pair was tested (the tables are marginal).
NO_PAIRS = "no intersections: fitted from marginal per-column tables"


def _points(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean logit, label, count) per group with weight."""
    n = table["n"].to_numpy(np.float64)
    keep = n > 0
    n = n[keep]
    z = table["sum_z"].to_numpy(np.float64)[keep] / n
    return z, table["label"].to_numpy(np.float64)[keep], n


def _column_codes(table: pd.DataFrame) -> tuple[list[str], np.ndarray]:
    """The column's vocabulary (text levels as ``calibflow.segments`` reads them, sorted; a null is its own
    level) and each weighted group's code in it."""
    keep = table["n"].to_numpy(np.float64) > 0
    raw = table["seg_0"].to_numpy(dtype=object)[keep]
    codes, uniq = pd.factorize(pd.Series(raw, dtype=object), use_na_sentinel=False)
    text = as_levels(np.asarray(uniq, dtype=object))  # one reading for the whole column, as apply's
    vocab = sorted(set(text.tolist()))
    index = {v: i for i, v in enumerate(vocab)}
    lookup = np.array([index[t] for t in text], dtype=np.int64)
    return vocab, lookup[codes]


def _column_fit(table: pd.DataFrame, centre: float, slopes: bool, tol: float, max_iter: int):
    z, y, w = _points(table)
    vocab, codes = _column_codes(table)
    fit = _Fitter(z, y, w, tol, max_iter, centre=centre)
    fit.blocks.append(_Block([0], codes, len(vocab), slopes))
    fit.run()
    return vocab, fit


def partial_pooling_from_tables(
    fine: pd.DataFrame,
    segments: dict[str, pd.DataFrame],
    kind: str = "logit",
    **options: Any,
) -> PartialPoolingCalibrator:
    """A fitted ``partial_pooling`` calibrator (scores of ``kind``) from the pass's ``fine`` table and its
    per-column ``segments`` tables (``Tables.fine`` / ``Tables.segments``); ``options`` as the method's."""
    if not segments:
        raise ValueError("partial_pooling needs at least one segment column's table")
    cal = make("partial_pooling", input=kind, **options)
    tol, max_iter = float(cal.tol), int(cal.max_iter)
    z, y, w = _points(fine)
    centre = float(w @ z / w.sum())
    names, vocabs, fits, sweeps, converged = [], [], [], 0, True
    for col, table in segments.items():
        vocab, fit = _column_fit(table, centre, bool(cal.slopes), tol, max_iter)
        names.append(str(col))
        vocabs.append(vocab)
        fits.append(fit)
        sweeps, converged = max(sweeps, fit.sweeps), converged and fit.converged
    a, b, blocks = _combine(fits)
    cal.segment_names_, cal.vocab_, cal.blocks_ = names, vocabs, blocks
    cal.pair_tests_ = [{"note": NO_PAIRS, "included": False}] if len(names) > 1 else []
    cal.global_ = np.array([a, b, centre])
    cal.n_sweeps_, cal.converged_ = int(sweeps), bool(converged)
    cal.fitted_ = True
    return cal


#: The logistic-normal attenuation constant: integrating a N(0, V) effect out of a logistic model scales
#: its coefficients by about 1 / sqrt(1 + C2 V) (Zeger, Liang & Albert, Biometrics 44, 1988: C2 = (16
#: sqrt(3) / (15 pi))^2).
C2 = (16 * np.sqrt(3) / (15 * np.pi)) ** 2


def _combine(fits: list[_Fitter]) -> tuple[float, float, list[dict[str, Any]]]:
    """The global pair and one block per column from marginal fits.

    Column ``k``'s table fit integrates the other columns' offsets out, so its offsets are attenuated by
    ``s_k = sqrt(1 + C2 V_-k)`` (``V_-k``: the count-weighted variances of the other columns' offsets,
    summed) and the fine table's Platt pair by ``s = sqrt(1 + C2 V)``. Each column's offsets are centred
    (count weights) and scaled back by ``s_k``, the pair by ``s``; the variances are those of the scaled
    offsets (a fixed point, a few rounds). Log-slopes are ratios, which the scaling keeps: only centred.
    With one column ``V_-k = 0`` and ``s`` only moves the pair onto the column's own fit.
    """
    levels = [np.bincount(f.blocks[0].codes, f.w, f.blocks[0].n_levels) for f in fits]
    raw = [f.blocks[0].offset + f.a for f in fits]
    centred = [r - (lv @ r) / lv.sum() for r, lv in zip(raw, levels, strict=True)]
    var = [0.0] * len(fits)
    for _ in range(50):
        total = sum(var)
        new = [float(lv @ (np.sqrt(1 + C2 * (total - v)) * c) ** 2 / lv.sum())
               for c, lv, v in zip(centred, levels, var, strict=True)]
        done = max(abs(x - y) for x, y in zip(new, var, strict=True)) < 1e-12
        var = new
        if done:
            break
    total = sum(var)
    blocks = []
    for i, (f, c, lv, v) in enumerate(zip(fits, centred, levels, var, strict=True)):
        g = f.blocks[0].log_slope + f.b
        blocks.append({
            "columns": [i],
            "keys": None,
            "offset": np.sqrt(1 + C2 * (total - v)) * c,
            "log_slope": g - (lv @ g) / lv.sum(),
            "tau2": float(f.blocks[0].tau2),
            "sigma2": float(f.blocks[0].sigma2),
        })
    # each column's fit gives the conditional intercept and log-slope at the centred levels (scaled by s_k)
    s_k = [np.sqrt(1 + C2 * (total - v)) for v in var]
    a = np.mean([s * (lv @ r) / lv.sum() for s, lv, r in zip(s_k, levels, raw, strict=True)])
    b = np.mean([np.log(s) + (lv @ (f.blocks[0].log_slope + f.b)) / lv.sum()
                 for s, lv, f in zip(s_k, levels, fits, strict=True)])
    return float(a), float(b), blocks
