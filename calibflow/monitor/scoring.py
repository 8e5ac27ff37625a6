"""Scores of one calibrator on one window: the calibration ratio with its bootstrap interval and
standard error, ECE and its noise level, the calibration slope, log loss and Brier, overall and per
segment value.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow import sources as S
from calibflow.intervals import ratio_interval, row_resamples
from calibflow.monitor.config import ALL, MonitorConfig, _check


def bootstrap_ratio_ci(
    y: NDArray[np.float64], p: NDArray[np.float64], n_boot: int, level: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile interval of ``sum p / sum y`` over row resamples (chunked: bounded memory at 1e6 rows)."""

    # 0/1 labels: a resample's positives counted from one byte a row (the same integers as the float sum)
    yb = y.astype(bool) if np.all((y == 0) | (y == 1)) else None

    def ratio(idx: np.ndarray) -> np.ndarray:
        sy = np.count_nonzero(yb[idx], axis=1).astype(np.float64) if yb is not None else y[idx].sum(axis=1)
        sp = p[idx].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(sy > 0, sp / sy, np.inf)

    ratios = row_resamples(y.size, n_boot, rng, ratio)
    a = (1 - level) / 2
    lo, hi = np.quantile(ratios, [a, 1 - a])
    return float(lo), float(hi)


def ratio_se(y: NDArray[np.float64], p: NDArray[np.float64]) -> float:
    """Standard error of ``R = sum p / sum y`` over row resamples (delta method: ``sd(p - R y) sqrt(n) / sum
    y``), the spread the bootstrap interval estimates, in closed form so that far tails need no draws: the
    rows' case of :func:`ratio_ses` (each row its own group), the one formula the table path uses too."""
    ones = np.ones(y.size)
    return float(ratio_ses(np.zeros(y.size, np.int64), y, p, p * p, ones, 1)[0])


def ratio_ses(
    code: NDArray[np.int64], y: NDArray[np.float64], q: NDArray[np.float64], q2: NDArray[np.float64],
    n: NDArray[np.float64], m: int,
) -> NDArray[np.float64]:
    """Per value ``0..m-1`` the standard error of ``R = sum p / sum y`` from rows or groups of rows with one
    label (``n`` rows of label ``y``, ``q = sum p``, ``q2 = sum p^2``; a row: ``1, y, p, p^2``): with
    ``sum (p - R y) = 0``, ``n var(p - R y) = sum p^2 - 2 R sum p y + R^2 sum y``."""
    pos, s_q = np.bincount(code, n * y, m), np.bincount(code, q, m)
    s_qy, s_q2 = np.bincount(code, q * y, m), np.bincount(code, q2, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = s_q / pos
        return np.sqrt(np.clip(s_q2 - 2 * r * s_qy + r * r * pos, 0.0, None)) / pos


def score(y: NDArray[np.float64], p: NDArray[np.float64], cfg: MonitorConfig) -> dict[str, Any]:
    """The champion's metric row on one (window, segment): ratio with interval, ECE, log loss, Brier."""
    pos = float(y.sum())
    row: dict[str, Any] = {"n": int(y.size), "positives": int(pos)}
    if pos <= 0:
        row["skipped"] = NO_POSITIVE
        return row
    expected = float(p.sum())  # the champion's sum p: whether the row is judged (``unjudged``)
    # The exact interval from the counts (``intervals.ratio_interval``), the table path's: one interval
    # for a window however it is scored, and no resampling of every row (1.2 s of a 5-source morning).
    lo, hi = (float(v) for v in ratio_interval(pos, expected, float((p * (1 - p)).sum()), cfg.ci_level))
    ratio = expected / pos
    row["expected_positives"] = expected
    row.update(
        calibration_ratio=ratio,
        ratio_low=lo,
        ratio_high=hi,
        ratio_se=ratio_se(y, p),
        ece=M.ece(y, p, cfg.n_bins),
        ece_null=ece_null(p, cfg.n_bins),
        log_loss=M.log_loss(y, p),
        brier=M.brier(y, p),
        skipped="",
    )
    row.update(calibration_slope(y, p))
    return row


NO_POSITIVE = "0 labelled positive(s): not judged"
#: What a (window, segment) row keeps when it is not judged.
COUNTS = ("n", "positives", "expected_positives")


def unjudged(row: dict[str, Any], earlier: list[int], cfg: MonitorConfig) -> str:
    """Why a scored (window, segment) is not judged, or "" when it is. Judged when the positives it is
    expected to have reach ``min_positives``: the champion's ``sum p`` on the window, or the mean positives
    of the segment's previous windows (``earlier``, the newest ``calib_windows``; at least
    ``min_calib_windows`` of them). Never the window's own positives: a country with about 17 positives a
    day, judged only on the days its labels happened to reach 30, was judged on its luckiest days, which
    read about half of 1 by selection and paged (docs/monitoring.md). The history still catches a
    segment the champion under-predicts by half: its observed positives, not its ``sum p``, fill it."""
    if row.get("skipped"):
        return str(row["skipped"])
    expected = float(row["expected_positives"])
    recent = earlier[-cfg.calib_windows :]
    known = len(recent) >= cfg.min_calib_windows
    usual = float(np.mean(recent)) if known else 0.0
    if max(expected, usual) >= cfg.min_positives:
        return ""
    seen = f", {usual:.1f} a window before" if known else ""
    return (f"{expected:.1f} expected positive(s){seen} < min_positives={cfg.min_positives}: not judged"
            f" ({row['positives']} labelled)")


def ece_null(p: NDArray[np.float64], n_bins: int) -> float:
    """The ECE a perfectly calibrated window with these predictions shows on average (its noise level):
    per bin, ``E|sum (y - p)| ~ sqrt(2/pi) sqrt(sum p (1 - p))`` (normal approximation), over n rows."""
    if p.size == 0:
        return 0.0
    return float(ece_nulls(np.zeros(p.size, np.int64), M.bin_index(p, n_bins), p * (1 - p), 1, n_bins)[0]
                 / p.size)


def ece_nulls(
    code: NDArray[np.int64], bins: NDArray[np.intp], var: NDArray[np.float64], m: int, n_bins: int
) -> NDArray[np.float64]:
    """Per value ``0..m-1``: ``sqrt(2/pi) sum_bins sqrt(sum p (1 - p))``, the numerator of
    :func:`ece_null`, from rows or groups (``var``: each one's ``sum p (1 - p)``, ``bins`` its ECE bin)."""
    v = np.bincount(code * n_bins + bins, weights=var, minlength=m * n_bins).reshape(m, n_bins)
    return math.sqrt(2 / math.pi) * np.sqrt(np.clip(v, 0.0, None)).sum(axis=1)


def calibration_slope(y: NDArray[np.float64], p: NDArray[np.float64]) -> dict[str, float]:
    """Logistic recalibration ``logit P(y) = a + b logit(p)``: the slope ``b`` (1 when calibrated; below
    1 when the scores are over-confident) and its standard error, by a few Newton steps from (0, 1).
    Empty when the window cannot identify a slope (one class, constant predictions)."""
    z = np.log(M.clip_probability(p)) - np.log1p(-M.clip_probability(p))
    b, se = slope_fits(np.zeros(p.size, np.int64), z, y, np.ones(p.size), 1)
    if not np.isfinite(b[0]):
        return {}
    return {"calibration_slope": float(b[0]), "slope_se": float(se[0])}


def slope_fits(
    code: NDArray[np.int64], z: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64], m: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per value ``0..m-1`` of ``code``, :func:`calibration_slope`'s fit of ``y`` on ``z`` (logits) with
    weights ``w``: rows (weights 1) or groups of rows (weights their counts, ``z`` their mean logit, as the
    table path fits a window's cells). One Newton step per iteration for every value still moving, the
    2x2 information inverted in closed form. (slope, se), NaN where no slope is identified: under 3 rows,
    one class, constant logits, a singular information.

    The logits are cut at ``logit(1 / (2 n))`` (``n``: the value's rows), the probability a window of n
    rows cannot tell from 0: an isotonic champion serves exactly 0 to its bottom block (logit -34.5 after
    clipping), and one click on such a row pulled a stable country's slope to 0.35 (se 0.13) and paged;
    cut there it reads 0.77, as over-confident as one such click shows (docs/monitoring.md)."""
    n, pos = np.bincount(code, w, m), np.bincount(code, w * y, m)
    with np.errstate(invalid="ignore", divide="ignore"):
        eps = 0.5 / np.maximum(n, 1.0)
        edge = np.log1p(-eps) - np.log(eps)  # |logit| of 1 / (2n)
        z = np.clip(z, -edge[code], edge[code])
        zbar = np.bincount(code, w * z, m) / n
        spread = np.sqrt(np.bincount(code, w * (z - zbar[code]) ** 2, m) / n)
    ok = (n >= 3) & (pos > 0) & (pos < n) & (spread >= 1e-9)
    beta = np.tile([0.0, 1.0], (m, 1))
    se = np.full(m, np.nan)
    moving = ok.copy()
    for _ in range(25):
        if not moving.any():
            break
        eta = np.clip(beta[code, 0] + beta[code, 1] * z, -35, 35)
        mu = 1 / (1 + np.exp(-eta))
        ww, r = w * mu * (1 - mu), w * (y - mu)
        i00, i01, i11 = (np.bincount(code, ww * f, m) for f in (1.0, z, z * z))
        g0, g1 = np.bincount(code, r, m), np.bincount(code, r * z, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            det = i00 * i11 - i01 * i01
            s0, s1 = (i11 * g0 - i01 * g1) / det, (i00 * g1 - i01 * g0) / det
            var_b = i00 / det
        singular = moving & ~((det > 0) & np.isfinite(s0) & np.isfinite(s1))
        ok &= ~singular
        moving &= ~singular
        beta[moving, 0] += s0[moving]
        beta[moving, 1] += s1[moving]
        se[moving] = np.sqrt(np.clip(var_b[moving], 0.0, None))
        moving &= np.maximum(np.abs(s0), np.abs(s1)) >= 1e-8
    ok &= np.isfinite(beta).all(axis=1)
    return np.where(ok, beta[:, 1], np.nan), np.where(ok, se, np.nan)


def segment_masks(frame: pd.DataFrame, segments: tuple[str, ...]) -> list[tuple[str, NDArray[np.bool_]]]:
    """``[("all", all rows), ("country=FR", mask), ...]`` in a stable order."""
    out = [(ALL, np.ones(len(frame), bool))]
    for col in segments:
        values = frame[col].astype(str).to_numpy()
        for v in sorted(set(values)):
            out.append((f"{col}={v}", values == v))
    return out


def per_row_loss(y: NDArray[np.float64], p: NDArray[np.float64], metric: str) -> NDArray[np.float64]:
    if metric == "log_loss":
        return M.row_log_loss(y, p)
    return (p - y) ** 2


def predict_frame(cal: C.BaseCalibrator, frame: pd.DataFrame, score_kind: str | None) -> NDArray[np.float64]:
    """The calibrator's probabilities for a window's rows; a per-segment champion (select may deploy one)
    also reads the segment columns it was fitted on, which the source must declare."""
    scores = frame["score"].to_numpy(float)
    if "segments" not in getattr(cal, "needs", ()):
        return S.calibrate_scores(cal, scores, score_kind)
    names = [str(c) for c in getattr(cal, "segment_names_", [])]
    missing = [c for c in names if c not in frame.columns]
    _check(not missing, f"the champion is per segment and needs the column(s) {missing}: declare them "
           "under the source's `segments:`")
    segs = {c: frame[c].to_numpy(dtype=object) for c in names}
    return S.calibrate_scores(cal, scores, score_kind, segments=segs)
