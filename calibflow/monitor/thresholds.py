"""Bands: the alert thresholds learned from the champion's reference windows, the user's hard
limits and the practical limits; which metric of a scored row is out.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from calibflow.monitor.config import MonitorConfig
from calibflow.monitor.state import MonitorState


def _pred_quantile(n: int, band_k: float, split: int = 1) -> float:
    """Half-width of a prediction interval for one new value, in sample sd, at the normal tail of band_k
    sd shared by ``split`` segments (Bonferroni: a window watches every segment at once)."""
    tail = float(stats.norm.sf(band_k)) / max(int(split), 1)
    return float(stats.t.ppf(1 - tail, n - 1) * math.sqrt(1 + 1 / n))


def _reference_rows(state: MonitorState, segment: str, version: int, metric: str, n: int) -> list[dict]:
    """The first ``n`` rows that ``version`` scored on ``segment`` while ``metric`` was not drifted."""
    rows = [
        r
        for r in state.history
        if r["version"] == version
        and r["segment"] == segment
        and not r.get("skipped")
        and metric not in r.get("drifted", [])
    ]
    return rows[:n]


def _reference(state: MonitorState, segment: str, version: int, metric: str, n: int) -> list[float]:
    """The first ``n`` values of ``metric`` that ``version`` scored on ``segment`` while not drifted."""
    return [r[metric] for r in _reference_rows(state, segment, version, metric, n)]


#: A reference whose pooled ratio is off 1 by more than this many standard errors (and by more than
#: ``REFERENCE_TOLERANCE``) is a biased champion's output: it teaches no band.
REFERENCE_Z = 3.0
REFERENCE_TOLERANCE = 0.02


def shown_calibrated(rows: list[dict[str, Any]]) -> bool:
    """Reference windows whose calibration was shown right, as a set: their pooled ratio
    ``sum p / sum y`` (weights: positives) is within ``REFERENCE_Z`` standard errors of 1, or within
    ``REFERENCE_TOLERANCE`` of it. A champion serving 0.95 on every window (10 windows of se 0.02:
    pooled se 0.006) never teaches its band that 0.95 is normal. Judged on the set, not per window:
    dropping each window whose own interval misses 1 would cut the reference's tails and narrow the band
    (more false alarms). Rows without a standard error (older states) are accepted."""
    use = [r for r in rows if r.get("positives") and r.get("calibration_ratio") is not None]
    ses = [r.get("ratio_se") for r in use]
    if not use or any(se is None or not math.isfinite(se) for se in ses):
        return True
    pos = np.array([float(r["positives"]) for r in use])
    ratio = np.array([float(r["calibration_ratio"]) for r in use])
    pooled = float((ratio * pos).sum() / pos.sum())
    se = float(np.sqrt(((np.array(ses, float) * pos) ** 2).sum()) / pos.sum())
    return abs(pooled - 1) <= max(REFERENCE_Z * se, REFERENCE_TOLERANCE)


def _learned_rows(state: MonitorState, segment: str, metric: str, cfg: MonitorConfig) -> list[dict]:
    """The current champion's reference windows; while they fill, the latest earlier complete set (module
    doc). A version whose reference windows are not shown calibrated (``shown_calibrated``) is skipped."""
    for version in range(state.champion, 0, -1):
        rows = _reference_rows(state, segment, version, metric, cfg.reference_windows)
        if len(rows) >= cfg.reference_windows and shown_calibrated(rows):
            return rows
    return []


def _learned(state: MonitorState, segment: str, metric: str, cfg: MonitorConfig) -> list[float]:
    return [r[metric] for r in _learned_rows(state, segment, metric, cfg)]


def ratio_spread(rows: list[dict[str, Any]]) -> float:
    """The spread a band of the reference windows' ratios is drawn with: their sample sd, but never less
    than their own sampling error (the root mean square of their ``ratio_se``): ten windows can spread
    less than their noise by chance. IT in the study (33 positives a day) learned sd 0.034 where each
    window's se was 0.13-0.16, and paged on 1.18 and 1.25, one se above 1 (docs/monitoring.md; its noisier
    days were then also skipped by selection, which ``scoring.unjudged`` no longer does)."""
    r = np.array([float(row["calibration_ratio"]) for row in rows])
    sd = float(r.std(ddof=1)) if r.size > 1 else 0.0
    ses = np.array([float(row["ratio_se"]) for row in rows if row.get("ratio_se") is not None], float)
    ses = ses[np.isfinite(ses)]
    return max(sd, float(np.sqrt(np.mean(ses**2)))) if ses.size else sd


def bands(
    state: MonitorState, segment: str, cfg: MonitorConfig, n_segments: int = 1
) -> dict[str, list[float | None]]:
    """Alert band per metric for ``segment`` under the current champion (module doc, step 2);
    ``n_segments`` watched in the window share the band's tail (family-wise over segments)."""
    out: dict[str, list[float | None]] = {}
    lo_f, hi_f = cfg.floor_ratio if cfg.floor_ratio is not None else (None, None)
    ref = _learned_rows(state, segment, "calibration_ratio", cfg)
    r = np.array([float(row["calibration_ratio"]) for row in ref])
    e = np.log(np.maximum(np.array(_learned(state, segment, "ece", cfg)), 1e-6))
    lo = hi = top = None
    if r.size:
        half = _pred_quantile(r.size, cfg.band_k, n_segments) * ratio_spread(ref)
        lo, hi = float(r.mean() - half), float(r.mean() + half)
    if e.size:
        top = float(np.exp(e.mean() + _pred_quantile(e.size, cfg.band_k, n_segments) * e.std(ddof=1)))
        top = min(top, 1.0)  # ECE <= 1: a band above 1 (few references) alerts the same, and the figure reads
    out["calibration_ratio"] = [_tight(lo, lo_f, max), _tight(hi, hi_f, min)]
    out["learned_ratio"] = [lo, hi]  # the value is judged against this; the floor against the interval
    out["ece"] = [None, _tight(top, cfg.floor_ece, min)]
    ps = cfg.practical_slope  # not learned: the slope is judged against 1 (``slope_off``)
    out["calibration_slope"] = [None, None] if ps is None else [1 - ps, 1 + ps]
    out["reference"] = [int(r.size)]
    return out


def _tight(learned: float | None, floor: float | None, pick) -> float | None:
    """Combine a learned limit and the user's absolute one: whichever fires first."""
    vals = [float(v) for v in (learned, floor) if v is not None]
    return pick(vals) if vals else None


def _outside(value: float, band: list[float | None]) -> bool:
    lo, hi = band
    return (lo is not None and value < lo) or (hi is not None and value > hi)


def practically_off(row: dict[str, Any], cfg: MonitorConfig, n_segments: int = 1) -> bool:
    """The ratio is beyond ``1 +- practical_ratio`` by more than z standard errors, z at the band's tail
    (``band_k`` sd, split over ``n_segments``): the practical limit pages at the band's rate, not at a
    95% interval's per segment and window. Rows scored before ``ratio_se`` existed use their interval."""
    pr = cfg.practical_ratio
    if pr is None:
        return False
    if row.get("ratio_se") is None:
        return row["ratio_low"] > 1 + pr or row["ratio_high"] < 1 - pr
    z = float(stats.norm.isf(stats.norm.sf(cfg.band_k) / max(int(n_segments), 1)))
    r, se = row["calibration_ratio"], max(row["ratio_se"], 1e-12)
    # Low side: the delta-method se grows about as the ratio, so it is taken at the limit (se * (1 - pr)
    # / r), not at the observed ratio: a 17-positive country scored on a day with 31 positives shows 0.53
    # with an se of 0.085 at 0.53 (4.4 se under 0.9: a false incident in the stable scenario), 0.145 at 0.9.
    se_low = se * (1 - pr) / r if r > 0 else se
    return (r - (1 + pr)) / se > z or ((1 - pr) - r) / max(se_low, se) > z


def pooled_row(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """``rows`` (scored windows of one segment) as one: ratio ``sum p / sum y`` pooled with positives as
    weights, its standard error from the windows' (independent days). None without positives or an se."""
    use = [r for r in rows if r.get("positives") and r.get("calibration_ratio") is not None]
    if not use or any(r.get("ratio_se") is None for r in use):
        return None
    pos = sum(float(r["positives"]) for r in use)
    ratio = sum(float(r["calibration_ratio"]) * float(r["positives"]) for r in use) / pos
    se = math.sqrt(sum((float(r["ratio_se"]) * float(r["positives"])) ** 2 for r in use)) / pos
    return {"calibration_ratio": ratio, "ratio_se": se, "positives": pos}


def practically_off_pooled(rows: list[dict[str, Any]], cfg: MonitorConfig, n_segments: int = 1) -> bool:
    """``practically_off`` on the newest windows of one segment pooled: the last 2, ..., ``len(rows)``
    (the newest window and up to ``recovery - 1`` before it, scored by the same champion; a change that
    began inside them is not diluted by the windows before it). Why: a segment of ~8% of rows (130
    positives a day, ratio se 0.055) that is 35% low sits 3.6 se under 0.9 on one window, under the
    34-segment z of 3.95, and its learned band (10 references, t with 9 df at that tail) is +-0.45 wide,
    so it was alerted on one seed in eight only days late or never; three days pooled are 6 se under.
    The same z as the one-window test, so up to ``recovery`` tests per (segment, window) at that tail: on
    a champion within the limit each fires far less often than its nominal tail (it needs the ratio 10%
    off by z se); the study's stable windows count every incident, whichever test opened it."""
    for k in range(2, len(rows) + 1):  # every run of windows ending now: a change that began k days ago
        row = pooled_row(rows[-k:])
        if row is not None and practically_off(row, cfg, n_segments):
            return True
    return False


def _z(cfg: MonitorConfig, n_segments: int) -> float:
    """The normal quantile at the band's own tail (``band_k`` sd, split over the watched segments)."""
    return float(stats.norm.isf(stats.norm.sf(cfg.band_k) / max(int(n_segments), 1)))


def ece_off(row: dict[str, Any], cfg: MonitorConfig) -> bool:
    """ECE above the absolute practical limit: ``practical_ece`` plus three times the ECE a calibrated
    window of these predictions shows by noise alone (``ece_null``). No learned band can widen it."""
    if cfg.practical_ece is None or row.get("ece") is None:
        return False
    return bool(row["ece"] > cfg.practical_ece + 3 * float(row.get("ece_null") or 0.0))


def slope_off(row: dict[str, Any], cfg: MonitorConfig, n_segments: int = 1) -> bool:
    """The calibration slope is beyond ``1 +- practical_slope`` by more than z standard errors (z at the
    band's tail): over- or under-confident scores, which a ratio near 1 cannot show."""
    ps, b, se = cfg.practical_slope, row.get("calibration_slope"), row.get("slope_se")
    if ps is None or b is None or se is None:
        return False
    return bool((abs(b - 1) - ps) / max(se, 1e-12) > _z(cfg, n_segments))


def within_limit(metric: str, rows: list[dict[str, Any]], cfg: MonitorConfig) -> bool:
    """``rows`` (the last ``recovery`` in-band windows) are back within the practical limit, which an
    incident needs to close besides being in band: their pooled ratio ``sum p / sum y`` within
    ``1 +- practical_ratio``, their mean slope within ``1 +- practical_slope``, no ECE practically off.
    Pooled over the windows, so a segment still 18% low closes no incident inside its wide band, and one
    noisy window of a small segment does not hold an incident open."""
    if metric == "calibration_ratio":
        if cfg.practical_ratio is None:
            return True
        pos = sum(float(r["positives"]) for r in rows)
        sp = sum(float(r["calibration_ratio"]) * float(r["positives"]) for r in rows)
        # One pooled standard error of slack: a small segment's noise (se 0.1 a window) does not hold
        # its incident open for weeks, a large one still 18% low (pooled se 0.04) stays open.
        se2 = sum((float(r.get("ratio_se") or 0.0) * float(r["positives"])) ** 2 for r in rows)
        slack = math.sqrt(se2) / pos if pos > 0 else 0.0
        return bool(pos > 0 and abs(sp / pos - 1) <= cfg.practical_ratio + slack)
    if metric == "ece":
        return not any(ece_off(r, cfg) for r in rows)
    slopes = [r["calibration_slope"] for r in rows if r.get("calibration_slope") is not None]
    return not slopes or cfg.practical_slope is None or abs(float(np.mean(slopes)) - 1) <= cfg.practical_slope


def ratio_outside(row: dict[str, Any], band: dict, cfg: MonitorConfig) -> bool:
    """The ratio outside its learned band, or beyond the user's ``floor_ratio`` for sure: its interval
    wholly past the floor. The floor is judged on the interval, not the value: a country expecting 30
    positives that gets 14 reads 2.07 by chance (about 1 window in 1,000), and paged over the hard limit 2
    on two stable seeds of twenty once such days were judged (docs/monitoring.md); its interval
    [1.2, 3.7] says it may well be 1. A band made by hand without ``learned_ratio`` is all learned."""
    value = row["calibration_ratio"]
    if _outside(value, band.get("learned_ratio", band["calibration_ratio"])):
        return True
    if cfg.floor_ratio is None or "learned_ratio" not in band:
        return False
    lo_f, hi_f = cfg.floor_ratio
    low, high = row.get("ratio_low", value), row.get("ratio_high", value)
    return bool(low > hi_f or high < lo_f)


def out_of_band(row: dict[str, Any], band: dict, cfg: MonitorConfig, n_segments: int = 1) -> list[str]:
    """The watched metrics of ``row`` outside their band, or practically off for sure (ratio beyond its
    practical limit by z standard errors, ECE above its absolute limit, slope beyond its limit)."""
    out = ["calibration_ratio"] if ratio_outside(row, band, cfg) else []
    if _outside(row["ece"], band["ece"]):
        out.append("ece")
    if practically_off(row, cfg, n_segments) and "calibration_ratio" not in out:
        out.insert(0, "calibration_ratio")
    if ece_off(row, cfg) and "ece" not in out:
        out.append("ece")
    if slope_off(row, cfg, n_segments):
        out.append("calibration_slope")
    return out
