"""The monitor at scale: a window's champion scores from one streaming pass over its rows.

``scoring.score`` holds a window's rows and resamples them ``n_bootstrap`` times for the ratio's
interval (200 x n row draws: minutes at 1e7 rows, out of memory at 1e8). Here the champion is applied to
each batch of the pass row by row (``tables.aggregate_tables`` with ``TableRows(transform=...)``), and
the window is its calibrated probabilities' tables: the fine (bucket, label) grid for the overall row, a
coarse (value, cell, label) table per segment column. From them, per (window, segment), the same row as
``scoring.score``:

- ``n``, ``positives``, ``calibration_ratio`` (``sum p / sum y``), ``log_loss`` and ``brier``: sums of
  the pass, equal to the rows' up to summation order;
- ``ece`` (``n_bins`` equal-width bins): a group in the bin of its mean probability; the cells' edges
  include the bin edges, so only the rows of the one fine bucket holding an edge can land in the other bin
  (``docs/benchmarks/scale.md`` gives the measured error);
- ``ece_null`` (the ECE noise level) and ``calibration_slope`` / ``slope_se``: from the same groups
  (:func:`noise_and_slope`), so both paths raise the same ECE and slope alerts;
- ``ratio_low`` / ``ratio_high``: percentiles over ``n_bootstrap`` Poisson replicates drawn per group
  (``segments.segment_metrics``: ``Poisson(n)`` per group is the law of the sum of its rows' Poisson(1)
  weights), not the rows' multinomial resamples: the same large-sample interval, not the same draws.

Memory: the tables (a few MB for the overall grid plus values x cells), not the rows. A per-segment
champion (one that reads segment columns) is applied by the row path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from calibflow import metrics as M
from calibflow import sources as S
from calibflow.aggregate import tables as T
from calibflow.aggregate.segments import _by_value, segment_metrics
from calibflow.monitor.config import ALL, MonitorConfig
from calibflow.monitor.scoring import NO_POSITIVE, ece_nulls, ratio_ses, slope_fits
from calibflow.monitor.windows import Window

#: Windows with at least this many rows are scored from their tables (the stage's switch).
AGGREGATE_ROWS = 1_000_000
#: Such a window's gate is judged on a seeded sample of about this many of its rows (and as many of its
#: trailing windows' rows): the gate's memory stays that of a 1e6-row window whatever the day holds.
GATE_ROWS = 1_000_000


def aggregable(champion: Any) -> bool:
    """Whether the champion can be applied to the pass's batches (a score-only calibrator)."""
    return "segments" not in getattr(champion, "needs", ())


def window_tables(
    parts: Sequence[T.Part],
    champion: Any,
    score_kind: str | None,
    segments: Sequence[str] = (),
    n_bins: int = 15,
    threads: int | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> T.Tables:
    """The champion's calibrated probabilities of the window's rows (DuckDB FROM items ``parts`` with
    columns ``score``, ``label`` and the segment columns) as the pass's tables."""
    if not aggregable(champion):
        raise ValueError("a per-segment champion is applied to rows: score this window with scoring.score")

    def calibrated(s: np.ndarray) -> np.ndarray:
        return S.calibrate_scores(champion, s, score_kind)

    rows = T.TableRows("score", "label", "probability", tuple(segments), transform=calibrated)
    return T.aggregate_tables(parts, rows, T.PassOptions(ece_bins=n_bins, threads=threads), con=con)


def window_seed(cfg: MonitorConfig, window: Window) -> int:
    """The replicates' seed of one (seed, window), as ``process_window`` seeds its generator: a resumed
    run draws what an uninterrupted one would."""
    seq = np.random.SeedSequence([cfg.seed, int(window.start.value // 10**9) & 0x7FFFFFFF])
    return int(seq.generate_state(1)[0])


def ratio_se(table: pd.DataFrame) -> np.ndarray:
    """Per value (``segment_metrics``' order) the ratio's standard error from the table's groups:
    ``scoring.ratio_ses``, the one formula the row path uses, so the practical limit judges a table-scored
    window by the same standard error as a row-scored one."""
    v, values = _by_value(table)
    n, y = table["n"].to_numpy(np.float64), table["label"].to_numpy(np.float64)
    sq, sq2 = table["sum_q"].to_numpy(np.float64), table["sum_q2"].to_numpy(np.float64)
    return ratio_ses(v, y, sq, sq2, n, values.size)


def noise_and_slope(table: pd.DataFrame, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per value (``segment_metrics``' order) ``scoring.ece_null`` and ``scoring.calibration_slope``
    (slope, se; NaN: none) from the table's groups, so that the table path raises the alerts and closes the
    incidents the row path does. ECE noise: each group's ``sum p (1 - p) = sum_q - sum_q2`` in the ECE bin
    of its mean probability (as ``segment_metrics`` bins the ECE). Slope: the logistic fit over the groups
    weighted by their rows at their mean logit ``sum_z / n`` (the label term is exact; the fitted term is
    off by the logit's spread inside a group: 5e-4 wide on the fine grid, a coarse cell's width per
    segment). A group whose logit is infinite (a probability of 0 or 1) is fitted at its mean
    probability's clipped logit, as the rows are."""
    v, values = _by_value(table)
    m = values.size
    n, y = table["n"].to_numpy(np.float64), table["label"].to_numpy(np.float64)
    sq, sq2, sz = (table[c].to_numpy(np.float64) for c in ("sum_q", "sum_q2", "sum_z"))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_q = np.nan_to_num(sq / n)
        z = sz / n
    pc = M.clip_probability(mean_q)
    z = np.where(np.isfinite(z), z, np.log(pc) - np.log1p(-pc))
    lo, hi = M.clip_probability(np.array([0.0, 1.0]))
    z = np.clip(z, np.log(lo) - np.log1p(-lo), np.log(hi) - np.log1p(-hi))
    bins = np.minimum((mean_q * n_bins).astype(np.int64), n_bins - 1)
    null = ece_nulls(v, bins, sq - sq2, m, n_bins) / np.bincount(v, n, m)
    slope, se = slope_fits(v, z, y, n, m)
    return null, slope, se


def _row(
    m: pd.Series, cfg: MonitorConfig, se: float = float("nan"), null: float = 0.0,
    slope: tuple[float, float] = (float("nan"), float("nan")),
) -> dict[str, Any]:
    """``scoring.score``'s row from one value's metrics (``null``: its ECE noise level, ``slope``:
    its calibration slope and standard error, NaN when none is identified)."""
    pos = float(m["positives"])
    row: dict[str, Any] = {"n": int(round(float(m["n"]))), "positives": int(round(pos))}
    if pos <= 0:
        row["skipped"] = NO_POSITIVE
        return row
    row["expected_positives"] = float(m["calibration_ratio"]) * pos  # the champion's sum p
    row.update(
        calibration_ratio=float(m["calibration_ratio"]),
        ratio_low=float(m["calibration_ratio_low"]),
        ratio_high=float(m["calibration_ratio_high"]),
        ratio_se=float(se),
        ece=float(m["ece"]),
        ece_null=float(null),
        log_loss=float(m["log_loss"]),
        brier=float(m["brier"]),
        skipped="",
    )
    if np.isfinite(slope[0]):
        row.update(calibration_slope=float(slope[0]), slope_se=float(slope[1]))
    return row


def window_scores(tabs: T.Tables, cfg: MonitorConfig, seed: int) -> dict[str, dict[str, Any]]:
    """Per segment name (``all``, then ``column=value`` sorted as ``scoring.segment_masks`` sorts them)
    the champion's row, from :func:`window_tables`'s tables; replicates seeded by ``seed``."""
    opts = {"n_bins": cfg.n_bins, "replicates": cfg.n_bootstrap, "seed": seed, "level": cfg.ci_level}
    overall = tabs.fine.assign(seg_0=ALL, code=0)
    null, b, b_se = noise_and_slope(overall, cfg.n_bins)
    out = {ALL: _row(segment_metrics(overall, **opts).iloc[0], cfg, ratio_se(overall)[0], null[0],
                         (b[0], b_se[0]))}
    for col, table in tabs.segments.items():
        m, se = segment_metrics(table, **opts), ratio_se(table)
        null, b, b_se = noise_and_slope(table, cfg.n_bins)
        names = [f"{col}={v}" for v in m["value"].astype(str)]
        for name, i in sorted(zip(names, range(len(m)), strict=True)):
            out[name] = _row(m.iloc[i], cfg, se[i], null[i], (b[i], b_se[i]))
    return out


def score_frame(
    frame: pd.DataFrame,
    champion: Any,
    score_kind: str | None,
    cfg: MonitorConfig,
    segments: Sequence[str],
    seed: int,
) -> dict[str, dict[str, Any]]:
    """:func:`window_scores` of a window already in memory (the stage's frame), DuckDB scanning it."""
    con = S.connect()
    con.register("window_rows", frame[["score", "label", *segments]])
    tabs = window_tables([T.Part("(SELECT * FROM window_rows)")], champion, score_kind, segments,
                         cfg.n_bins, threads=1, con=con)
    return window_scores(tabs, cfg, seed)
