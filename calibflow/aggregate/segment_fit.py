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
from the columns' fits: with one column the result is the row fit (up to the grid), with several it is
exact when the columns' effects are additive and their values independent.

Column pairs (intersections) need joint tables, which the pass does not build: :func:`pair_table` is a
second streaming pass (DuckDB GROUP BY, one (value_i, value_j, cell, label) table per pair) and
:func:`add_pairs` score-tests each pair against the main columns' fit and adds the supported ones as
shrunk cell offsets, as the row fit does. Cost, measured (tests/library/test_segment_fit.py,
docs/benchmarks/segments.md): one column, predictions within 0.002 on the logit of the row fit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.special import chdtrc, expit

from calibflow.calibrators import make
from calibflow.calibrators.partial_pooling import PartialPoolingCalibrator, _Block, _dl_tau2, _Fitter
from calibflow.segments import as_levels, level_codes

#: Recorded in the fitted state until :func:`add_pairs` tests the pairs on their joint tables.
NO_PAIRS = "no intersections tested: marginal per-column tables only"


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


# ---- column pairs: a joint (value_i, value_j, cell, label) table per pair, a second DuckDB pass ------------

#: Coarse cells of the pair tables: uniform on the logit over [-Z_PAIR, Z_PAIR] (clipped outside).
PAIR_CELLS, Z_PAIR = 128, 10.0


def pair_table(source_sql: str, params: dict[str, Any], logit_col: str, label: str, a: str, b: str,
               weight: str | None = None) -> pd.DataFrame:
    """One column pair's (a, b, cell, label) table of ``n`` and ``sum_z`` by DuckDB's streaming GROUP BY
    over ``source_sql`` (a FROM item; memory: the table's groups, not the rows)."""
    from calibflow.sources import connect
    from calibflow.sources import quote_ident as q

    w = f"CAST({q(weight)} AS DOUBLE)" if weight else "1.0"
    z = f"CAST({q(logit_col)} AS DOUBLE)"
    width = 2 * Z_PAIR / PAIR_CELLS
    cell = f"least(greatest(floor(({z} + {Z_PAIR}) / {width}), 0), {PAIR_CELLS - 1})"
    sql = (f"SELECT {q(a)} AS a, {q(b)} AS b, {cell} AS cell, CAST({q(label)} AS INTEGER) AS label, "
           f"sum({w}) AS n, sum({w} * {z}) AS sum_z FROM {source_sql} WHERE isfinite({z}) "
           "GROUP BY ALL")
    con = connect()
    try:
        return con.sql(sql, params=params).df()
    finally:
        con.close()


def add_pairs(cal: PartialPoolingCalibrator, tables: dict[tuple[str, str], pd.DataFrame]) -> None:
    """Score-test each pair on its joint table against ``cal`` (the main columns' fit) and add the pairs
    the test supports (``alpha`` / pairs, Bonferroni; at most ``max_cells`` cells) as offset blocks, each
    level's offset shrunk by its evidence (DerSimonian-Laird variance, as the row fit). The main blocks
    stay as fitted: the pair is a deviation from them, estimated after them."""
    tests = []
    for (a, b), t in tables.items():
        i, j = cal.segment_names_.index(a), cal.segment_names_.index(b)
        t = t[t["n"] > 0]
        ci = level_codes(as_levels(t["a"].to_numpy(dtype=object)), cal.vocab_[i])
        cj = level_codes(as_levels(t["b"].to_numpy(dtype=object)), cal.vocab_[j])
        seen = (ci >= 0) & (cj >= 0)  # always, on the rows the main columns were fitted on
        t, ci, cj = t[seen], ci[seen], cj[seen]
        z = t["sum_z"].to_numpy(np.float64) / t["n"].to_numpy(np.float64)
        # the pair table integrates the other columns out: its logit is the conditional one shrunk by
        # s = sqrt(1 + C2 V_others) (as in _combine); the cell offsets are fitted there and scaled back
        s = np.sqrt(1 + C2 * sum(float(blk["tau2"]) for blk in cal.blocks_
                                 if len(blk["columns"]) == 1 and blk["columns"][0] not in (i, j)))
        base = _main_logit(cal, z, {i: ci, j: cj}) / s
        keys = ci * len(cal.vocab_[j]) + cj
        cells, inv = np.unique(keys, return_inverse=True)
        test = {"columns": [a, b], "cells": int(cells.size)}
        if cells.size > cal.max_cells:
            tests.append({**test, "q": None, "df": None, "p_value": None, "included": False})
            continue
        y, n = t["label"].to_numpy(np.float64), t["n"].to_numpy(np.float64)
        p = expit(base)
        u, info = np.bincount(inv, n * (y - p), cells.size), np.bincount(inv, n * p * (1 - p), cells.size)
        ok = info > 1e-12
        q = float((u[ok] ** 2 / info[ok]).sum())
        df = max(1, int(ok.sum()) - len(cal.vocab_[i]) - len(cal.vocab_[j]) + 1)
        pval = float(chdtrc(df, q))
        include = pval < cal.alpha / len(tables)
        tests.append({**test, "q": q, "df": df, "p_value": pval, "included": bool(include)})
        if include:
            off, tau2 = _pair_offsets(base, y, n, inv, cells.size, float(cal.tol), int(cal.max_iter))
            cal.blocks_.append({"columns": [i, j], "keys": cells.astype(np.int64), "offset": s * off,
                                "log_slope": np.zeros(cells.size), "tau2": tau2, "sigma2": 0.0})
    cal.pair_tests_ = tests


def _main_logit(cal: PartialPoolingCalibrator, z: np.ndarray, codes: dict[int, np.ndarray]) -> np.ndarray:
    """The fitted logit at ``z`` from the global pair and the single-column blocks of ``codes``' columns
    (the other columns' offsets average 0 over a pair table, which integrates them out)."""
    a, b, c = (float(v) for v in cal.global_)
    off, ls = np.zeros(z.size), np.zeros(z.size)
    for blk in cal.blocks_:
        cols = blk["columns"]
        if len(cols) == 1 and cols[0] in codes:
            off += np.asarray(blk["offset"])[codes[cols[0]]]
            ls += np.asarray(blk["log_slope"])[codes[cols[0]]]
    return a + off + np.exp(b + ls) * (z - c)


def _pair_offsets(base, y, n, inv, m: int, tol: float, max_iter: int) -> tuple[np.ndarray, float]:
    """Cell offsets on top of the fixed ``base`` logit: Fisher scoring of the penalised likelihood with the
    DerSimonian-Laird prior variance re-estimated every step."""
    off, tau2 = np.zeros(m), 0.0
    for _ in range(max_iter):
        p = expit(base + off[inv])
        u, info = np.bincount(inv, n * (y - p), m), np.bincount(inv, n * p * (1 - p), m)
        raw = off + np.divide(u, info, out=np.zeros(m), where=info > 1e-12)
        tau2 = _dl_tau2(raw, info)
        new = np.zeros(m) if tau2 <= 1e-12 else (info * off + u) / (info + 1.0 / tau2)
        step = np.clip(new - off, -2.0, 2.0)
        off = off + step
        if np.abs(step).max(initial=0.0) < tol:
            break
    return off, float(tau2)
