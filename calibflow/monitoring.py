"""Calibration over time: matured windows, champion scores, learned bands, and a champion/challenger gate.

Pure library (numpy/pandas and our calibrators; no Prefect, no DVC). A *frame* has the columns ``time``,
``score``, ``label`` and optionally segment columns. One call to ``process_window`` does a day's work for
one window, in this order, and returns a new ``MonitorState`` (JSON round-trip, never pickle):

1. **Score the champion** on the window, overall (segment ``all``) and per segment value: calibration ratio
   ``sum p / sum y`` with a percentile-bootstrap interval (rows resampled), ECE (equal-width bins), log loss
   and Brier. A (window, segment) with fewer than ``min_positives`` labelled positives is *skipped with a
   note* instead of scored; when the overall window is skipped no gate runs either.
2. **Bands** (the alert thresholds) are learned per (segment, metric) from the champion's *reference
   windows*: the first ``reference_windows`` windows it scored after it took office that were not judged
   drifted (a window out of band, or inside an open incident, never enters a reference). Rule: a
   prediction interval for one new value, ``mean +- q * sd * sqrt(1 + 1/n)`` with ``q`` the Student-t
   quantile (n - 1 degrees of freedom) at the normal tail of ``band_k`` sd, split over the S segments
   watched in the window (Bonferroni: S bands are judged at once): ten reference values give the nominal
   rate, not the several-fold excess of a plain 3-sd band on a noisy sd. The ratio is two-sided;
   ECE is upper only and learned on log(ECE) (ECE is skewed and bounded below by its noise). Always on as
   well: the user's hard limits (``floor_ratio``, ``floor_ece``) and the *practical* limit: the ratio is
   beyond ``1 +- practical_ratio`` by more than ``z`` standard errors (delta method over rows), ``z`` the
   normal quantile at the band's own tail (``band_k`` sd split over the S segments). (A 95% interval
   here paged on 3-sd Poisson swings of 100-positive segments: 0.7 incidents per 100 stable windows.)
   A value out on ``patience`` consecutive scored windows raises an alert.
3. **Incidents** (what a person is paged for): the first alert on a (segment, metric) opens an incident;
   it stays open until the metric is back in band for ``recovery`` consecutive scored windows; an alert
   within ``cooldown`` windows of a close reopens that incident instead of opening a new one. Incidents
   are derived from the history (``incidents``), so a rescored history gives the same incidents.
4. **The gate.** Each challenger method is fitted on the trailing calibration window (the
   ``calib_windows`` periods just before the window) and scored beside the champion on this, the newest
   held-out window. The best challenger by the selection metric (log loss or Brier: proper scores,
   per-row additive, so the paired bootstrap resamples per-row differences) is compared with the champion by
   a paired bootstrap of ``metric(champion) - metric(challenger)``; the interval level is
   Bonferroni-adjusted for the number of challengers (``1 - (1 - ci_level) / m``) because the best of m is
   picked on the same window. It is promoted only if the whole interval is above zero, the mean gain is at
   least ``min_gain`` of the champion's loss (a practical gain, not a 1e-5 one), the challenger keeps the
   ranking (its class declares ``monotone`` and its predictions are non-decreasing on the sorted scores of
   both windows) and no rollback pins the champion.

**One scale.** The frame's ``score`` column is the user's own score on the source's ``score_kind`` scale
(probability, logit or score). Every prediction goes through ``calibflow.sources.calibrate_scores`` (the
one conversion select and ``apply`` use) and every challenger is fitted on the champion's declared input
converted from that scale, then records ``score_kind`` in its JSON.

The history is keyed by (window start, segment): ``process_window`` refuses a window already processed,
so a resumed run never double-counts one, and ``pending_windows`` lists exactly the matured windows not yet
in the state, so none is lost. ``truncate`` drops everything from a window on (a late or re-delivered day:
the history and the gate are recomputed from there); versions promoted from then on are kept, marked
withdrawn, and their numbers are never reused. Windows sit on a fixed grid (``origin`` + k * ``period``),
so deleting old files never moves it.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import special, stats

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow import sources as S
from calibflow.intervals import paired_mean_interval, row_resamples
from calibflow.segments import aligned, as_levels, level_codes

ALL = "all"
SELECTION_METRICS = ("log_loss", "brier")
WATCHED = ("calibration_ratio", "ece", "calibration_slope")
#: A row whose logit prediction moves by more than this is "changed" by a challenger (min_gain base).
CHANGE_TOL = 0.01
STATE_SCHEMA = 2


# ---------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MonitorConfig:
    """Every knob of the monitor (params.yaml ``monitor:`` section; see docs/monitoring.md)."""

    period: str = "1D"  # window length, a pandas offset alias (1D daily, 7D weekly, 6h)
    origin: str = "1970-01-01"  # the window grid: origin + k * period (1970-01-01 is a Thursday)
    label_delay: str = "2D"  # a window is scored only once window_end + label_delay <= now
    calib_windows: int = 14  # trailing calibration window of the challengers, in periods
    min_calib_windows: int = 3  # fewer trailing periods with data: no challenger this window
    reference_windows: int = 10  # the champion's first N scored windows define its bands
    band_k: float = 3.0  # band: t prediction interval, normal tail of band_k sd split over segments
    patience: int = 1  # consecutive out-of-band windows before an alert
    floor_ratio: tuple[float, float] | None = (0.5, 2.0)  # absolute calibration-ratio limits (None: off)
    floor_ece: float | None = None  # absolute ECE ceiling (None: off)
    practical_ratio: float | None = 0.1  # out when the ratio's interval is wholly outside 1 +- this
    practical_ece: float | None = 0.02  # out when ECE exceeds this plus 3x its calibrated-noise level
    practical_slope: float | None = 0.1  # out when the calibration slope is beyond 1 +- this (z se)
    replace_after: int = 3  # champion found worse (interval > 0) on this many gates in a row: replaced
    label_deadline: str | None = "7D"  # a matured window still without labels this long after its end
    delivery_deadline: str | None = "2D"  # a window with no delivery this long after its end: incident
    recovery: int = 3  # consecutive in-band windows that close an incident
    cooldown: int = 3  # an alert within this many windows of a close reopens that incident
    min_gain: float = 0.002  # promotion needs a mean gain >= this share of the champion's loss
    min_positives: int = 30  # fewer labelled positives in a (window, segment): skipped with a note
    methods: tuple[str, ...] = ("platt", "beta", "isotonic")
    # Also fitted when the source declares segments: a shift in one segment needs a per-segment map,
    # since a global challenger fitted on all segments pulls the unshifted ones off.
    segmented_methods: tuple[str, ...] = ("partial_pooling",)
    selection_metric: str = "log_loss"
    n_bootstrap: int = 200
    ci_level: float = 0.95
    n_bins: int = 15
    seed: int = 0

    def __post_init__(self) -> None:
        _check(_offset(self.period) > pd.Timedelta(0), f"monitor.period must be > 0, got {self.period!r}")
        _check(_offset(self.label_delay) >= pd.Timedelta(0), "monitor.label_delay must be >= 0")
        _origin(self.origin)
        for k in (
            "calib_windows",
            "min_calib_windows",
            "reference_windows",
            "patience",
            "n_bootstrap",
            "recovery",
            "replace_after",
        ):
            _check(int(getattr(self, k)) >= 1, f"monitor.{k} must be an integer >= 1, got {getattr(self, k)}")
        _check(self.min_calib_windows <= self.calib_windows, "monitor.min_calib_windows > calib_windows")
        _check(self.reference_windows >= 2, "monitor.reference_windows must be >= 2 (a band needs a spread)")
        _check(self.band_k > 0, f"monitor.band_k must be > 0, got {self.band_k}")
        _check(int(self.cooldown) >= 0, f"monitor.cooldown must be an integer >= 0, got {self.cooldown}")
        _check(0 <= self.min_gain < 1, f"monitor.min_gain must be in [0, 1), got {self.min_gain}")
        if self.practical_ratio is not None:
            _check(
                0 < self.practical_ratio < 1,
                f"monitor.practical_ratio must be in (0, 1) or null, got {self.practical_ratio}",
            )
        for key in ("practical_ece", "practical_slope"):
            v = getattr(self, key)
            _check(v is None or 0 < v < 1, f"monitor.{key} must be in (0, 1) or null, got {v}")
        for key in ("label_deadline", "delivery_deadline"):
            v = getattr(self, key)
            _check(v is None or _offset(v) >= pd.Timedelta(0), f"monitor.{key} must be a duration >= 0")
        if self.label_deadline is not None:
            _check(
                _offset(self.label_deadline) >= _offset(self.label_delay),
                f"monitor.label_deadline ({self.label_deadline}) must be >= label_delay ({self.label_delay})",
            )
        _check(self.min_positives >= 1, f"monitor.min_positives must be >= 1, got {self.min_positives}")
        _check(0 < self.ci_level < 1, f"monitor.ci_level must be in (0, 1), got {self.ci_level}")
        _check(
            self.selection_metric in SELECTION_METRICS,
            f"monitor.selection_metric must be one of {SELECTION_METRICS}, got {self.selection_metric!r}",
        )
        _check(len(self.methods) >= 1, "monitor.methods is empty: name at least one challenger method")
        known = set(C.available())
        bad = [m for m in self.methods if m not in known]
        _check(not bad, f"monitor.methods: unknown calibrator(s) {bad}; available: {sorted(known)}")
        seg = [m for m in self.methods if "segments" in C.get_class(m).needs]
        _check(not seg, f"monitor.methods: {seg} need segments; list them under monitor.segmented_methods")
        not_seg = [
            m for m in self.segmented_methods if m not in known or "segments" not in C.get_class(m).needs
        ]
        _check(
            not not_seg,
            f"monitor.segmented_methods: {not_seg} are not segmented calibrators "
            f"(those: {sorted(m for m in known if 'segments' in C.get_class(m).needs)}); [] turns them off",
        )
        if self.floor_ratio is not None:
            lo, hi = self.floor_ratio
            _check(0 <= lo < 1 < hi, f"monitor.floor_ratio must be [lo, hi] with lo < 1 < hi, got {lo, hi}")

    @classmethod
    def from_params(cls, section: dict[str, Any] | None) -> MonitorConfig:
        """Build from a params mapping; an unknown key is an error naming it (typos never pass silently)."""
        section = dict(section or {})
        names = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(section) - names)
        _check(not unknown, f"monitor: unknown key(s) {unknown}; known: {sorted(names)}")
        for key in ("floor_ratio",):
            if section.get(key) is not None:
                section[key] = tuple(float(v) for v in section[key])
        for key in ("methods", "segmented_methods"):
            if key in section:
                section[key] = tuple(section[key] or ())
        return cls(**section)


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


def _origin(text: str) -> pd.Timestamp:
    try:
        t = pd.Timestamp(text)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"monitor.origin is not a timestamp: {text!r} (e.g. 2026-01-05: Mondays)") from exc
    return t.tz_convert(None) if t.tzinfo is not None else t


def _offset(text: str) -> pd.Timedelta:
    try:
        return pd.Timedelta(text)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not a duration: {text!r} (use e.g. '1D', '2D', '6h')") from exc


# ---------------------------------------------------------------------------------------------------
# Windows
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    start: pd.Timestamp
    end: pd.Timestamp  # exclusive

    @property
    def key(self) -> str:
        return self.start.isoformat()


def window_of(t: pd.Timestamp, period: str, origin: pd.Timestamp) -> Window:
    step = _offset(period)
    k = math.floor((t - origin) / step)
    start = origin + k * step
    return Window(start, start + step)


def window_index(times: pd.Series, cfg: MonitorConfig) -> NDArray[np.int64]:
    """Each timestamp's window number on the fixed grid ``origin + k * period``."""
    t = pd.to_datetime(times)
    step = _offset(cfg.period)
    return np.floor((t - _origin(cfg.origin)) / step).to_numpy(dtype=float).astype(np.int64)


def window_keys(times: pd.Series, cfg: MonitorConfig) -> NDArray[np.object_]:
    """Each timestamp's window key, vectorised: one ``window_at`` per distinct window, not per row."""
    if len(times) == 0:
        return np.array([], dtype=object)
    ks, inverse = np.unique(window_index(times, cfg), return_inverse=True)
    keys = np.array([window_at(int(k), cfg).key for k in ks], dtype=object)
    return keys[inverse.reshape(-1)]


def window_at(k: int, cfg: MonitorConfig) -> Window:
    step = _offset(cfg.period)
    start = _origin(cfg.origin) + int(k) * step
    return Window(start, start + step)


def matured_windows(times: pd.Series, now: pd.Timestamp, cfg: MonitorConfig) -> list[Window]:
    """Complete windows whose labels have matured: ``end + label_delay <= now``; oldest first.

    Windows sit on the fixed grid ``origin + k * period`` (UTC-naive), so a daily period is the calendar
    day and removing old files never moves a window. A window that holds no row is not listed.
    """
    if len(times) == 0:
        return []
    delay = _offset(cfg.label_delay)
    out = [window_at(int(k), cfg) for k in np.unique(window_index(times, cfg))]
    return [w for w in out if w.end + delay <= pd.Timestamp(now)]


def pending_windows(
    times: pd.Series, now: pd.Timestamp, cfg: MonitorConfig, state: MonitorState
) -> list[Window]:
    """Matured windows not in ``state`` (a resumed run picks up exactly these), from ``state.start_at``."""
    done = set(state.processed)
    start = pd.Timestamp(state.start_at) if state.start_at else None
    return [
        w
        for w in matured_windows(times, now, cfg)
        if w.key not in done and (start is None or w.start >= start)
    ]


# ---------------------------------------------------------------------------------------------------
# Scores of one calibrator on one window
# ---------------------------------------------------------------------------------------------------
def bootstrap_ratio_ci(
    y: NDArray[np.float64], p: NDArray[np.float64], n_boot: int, level: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile interval of ``sum p / sum y`` over row resamples (chunked: bounded memory at 1e6 rows)."""

    def ratio(idx: np.ndarray) -> np.ndarray:
        sy, sp = y[idx].sum(axis=1), p[idx].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(sy > 0, sp / sy, np.inf)

    ratios = row_resamples(y.size, n_boot, rng, ratio)
    a = (1 - level) / 2
    lo, hi = np.quantile(ratios, [a, 1 - a])
    return float(lo), float(hi)


def ratio_se(y: NDArray[np.float64], p: NDArray[np.float64], ratio: float) -> float:
    """Standard error of ``sum p / sum y`` over row resamples (delta method: ``sd(p - R y) sqrt(n) / sum y``),
    the spread the bootstrap interval estimates, in closed form so that far tails need no draws."""
    return float(np.sqrt(y.size * np.var(p - ratio * y)) / y.sum())


def score(
    y: NDArray[np.float64], p: NDArray[np.float64], cfg: MonitorConfig, rng: np.random.Generator
) -> dict[str, Any]:
    """The champion's metric row on one (window, segment): ratio with interval, ECE, log loss, Brier."""
    pos = float(y.sum())
    row: dict[str, Any] = {"n": int(y.size), "positives": int(pos)}
    if pos < cfg.min_positives:
        row["skipped"] = f"{int(pos)} labelled positive(s) < min_positives={cfg.min_positives}: not judged"
        return row
    lo, hi = bootstrap_ratio_ci(y, p, cfg.n_bootstrap, cfg.ci_level, rng)
    ratio = float(p.sum() / pos)
    row.update(
        calibration_ratio=ratio,
        ratio_low=lo,
        ratio_high=hi,
        ratio_se=ratio_se(y, p, ratio),
        ece=M.ece(y, p, cfg.n_bins),
        ece_null=ece_null(p, cfg.n_bins),
        log_loss=M.log_loss(y, p),
        brier=M.brier(y, p),
        skipped="",
    )
    row.update(calibration_slope(y, p))
    return row


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
    one class, constant logits, a singular information."""
    n, pos = np.bincount(code, w, m), np.bincount(code, w * y, m)
    with np.errstate(invalid="ignore", divide="ignore"):
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


# ---------------------------------------------------------------------------------------------------
# The gate
# ---------------------------------------------------------------------------------------------------
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


def keeps_ranking(cal: C.BaseCalibrator, scores: NDArray[np.float64], score_kind: str) -> bool:
    """Monotone: the class says so and predictions on the sorted user scores never decrease."""
    if not getattr(type(cal), "monotone", False):
        return False
    p = S.calibrate_scores(cal, np.sort(scores), score_kind)
    return bool(np.all(np.diff(p) >= -1e-12))


def keeps_ranking_within(cal: C.BaseCalibrator, frame: pd.DataFrame, score_kind: str) -> bool:
    """A per-segment map keeps the ranking inside every cell of its segment columns (across cells the
    order may change, as select's segmented calibrators do): predictions on each cell's sorted scores
    never decrease."""
    names = [str(c) for c in getattr(cal, "segment_names_", [])]
    if not len(frame):
        return True
    cells = (
        frame.groupby(names, dropna=False, sort=True).ngroup().to_numpy() if names else np.zeros(len(frame))
    )
    order = np.lexsort((frame["score"].to_numpy(float), cells))
    p = predict_frame(cal, frame.iloc[order], score_kind)
    same = cells[order][1:] == cells[order][:-1]
    return bool(np.all(np.diff(p)[same] >= -1e-12))


def fit_challenger(
    method: str,
    input_kind: str,
    scores: NDArray[np.float64],
    y: NDArray[np.float64],
    score_kind: str,
    segments: dict[str, NDArray[Any]] | None = None,
) -> C.BaseCalibrator:
    """``method`` fitted on the user's scores converted to ``input_kind``, recording ``score_kind``;
    a segmented method also gets the ``segments`` columns."""
    x = S.calibrator_input(scores, score_kind, input_kind)
    cal = C.make(method, input=input_kind)
    cal = cal.fit(x, y, segments=segments) if segments is not None else cal.fit(x, y)
    return S.record_score_kind(cal, score_kind)


def _candidates(cfg: MonitorConfig, segments: tuple[str, ...], frame: pd.DataFrame) -> list[str]:
    """Global methods, plus the segmented ones when the source declares segments that the rows carry."""
    seg = bool(segments) and all(c in frame.columns for c in segments)
    return [*cfg.methods, *(cfg.segmented_methods if seg else ())]


def challenge(
    champion: C.BaseCalibrator,
    calib: pd.DataFrame,
    held_out: pd.DataFrame,
    cfg: MonitorConfig,
    rng: np.random.Generator,
    score_kind: str | None = None,
    pinned: int | None = None,
    segments: tuple[str, ...] = (),
    worse_before: int | list[tuple[float, float]] = 0,
    patch: tuple[C.BaseCalibrator | None, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], C.BaseCalibrator | None]:
    """Fit the challengers on ``calib``, compare the best with the champion on ``held_out``.

    ``score`` columns are the user's scores of ``score_kind`` (default: the champion's recorded kind).
    With ``segments`` (the source's declared columns) the segmented methods compete too, under the same
    paired test, Bonferroni level and ``min_gain``; their ranking check is within each segment cell.
    ``min_gain`` is a share of the champion's loss on the rows the challenger changes (its logit moves by
    more than ``CHANGE_TOL``), so a one-segment fix is judged on that segment, not diluted by the whole
    source. ``worse_before``: the (gain, standard error) of the consecutive earlier gates (same champion)
    whose best monotone challenger was better on average (an int: that many windows like this one). When
    this window makes ``replace_after`` in a row and the pooled gain's interval over them (same level)
    excludes 0, the champion is replaced whatever ``min_gain`` says: a small but sure bias is served every
    day, and one segment's 160 positives a day rarely exclude 0 on one window alone.
    ``patch``: while segment levels have open drift incidents (``patch_targets``), the segmented methods
    do not refit every level: ``PATCH_METHOD`` competes as this ``patch_challenger`` result (the champion
    with only those levels refitted; none yet while it waits for data) and the others sit out.
    Returns the gate record (every challenger's metric, the best, the paired interval, the decision and
    its reason) and the fitted best challenger when it is to be promoted, else None.
    """
    kind = score_kind or getattr(champion, "score_kind_", None)
    _check(kind is not None, "the champion records no score_kind and none was given")
    ys, ss = calib["label"].to_numpy(float), calib["score"].to_numpy(float)
    yh, sh = held_out["label"].to_numpy(float), held_out["score"].to_numpy(float)
    metric = cfg.selection_metric
    p_champ = predict_frame(champion, held_out, kind)
    champ_loss = per_row_loss(yh, p_champ, metric)
    rec: dict[str, Any] = {"metric": metric, "champion": float(champ_loss.mean()), "challengers": {}}
    fitted: dict[str, tuple[C.BaseCalibrator, NDArray[np.float64], NDArray[np.float64]]] = {}
    for m in _candidates(cfg, segments, calib):
        per_seg = "segments" in C.get_class(m).needs
        cols = {c: calib[c].to_numpy(dtype=object) for c in segments} if per_seg else None
        if per_seg and patch is not None:
            if m != PATCH_METHOD or patch[0] is None:
                why = "waiting for data on the drifted levels" if m == PATCH_METHOD else "a patch competes"
                rec["challengers"][m] = {"skipped": why, "patch": patch[1]}
                continue
            cal = patch[0]
        else:
            try:
                cal = fit_challenger(m, str(champion.input_kind), ss, ys, kind, cols)
            except ValueError as exc:  # e.g. a method that cannot fit this window; recorded, never silent
                rec["challengers"][m] = {"error": str(exc)}
                continue
        p_new = predict_frame(cal, held_out, kind)
        loss = per_row_loss(yh, p_new, metric)
        if per_seg:
            both = pd.concat([calib[["score", *segments]], held_out[["score", *segments]]], ignore_index=True)
            mono = keeps_ranking_within(cal, both, kind)
        else:
            mono = keeps_ranking(cal, np.concatenate([ss, sh]), kind)
        rec["challengers"][m] = {"value": float(loss.mean()), "monotone": mono, "segmented": per_seg}
        if per_seg and patch is not None:
            rec["challengers"][m]["patch"] = patch[1]
        fitted[m] = (cal, loss, p_new)
    if not fitted:
        rec.update(best=None, promoted=False, reason="no challenger could be fitted")
        return rec, None
    best = min(fitted, key=lambda k: rec["challengers"][k]["value"])
    level = 1 - (1 - cfg.ci_level) / len(fitted)  # Bonferroni: the best of m is picked on this window
    delta, lo, hi = paired_mean_interval(champ_loss - fitted[best][1], cfg.n_bootstrap, level, rng)
    mono = rec["challengers"][best]["monotone"]
    changed = _changed_rows(p_champ, fitted[best][2])
    need = cfg.min_gain * float(champ_loss[changed].sum()) / max(champ_loss.size, 1)
    z = float(stats.norm.isf((1 - level) / 2))
    se = max((hi - lo) / (2 * z), 1e-12)
    worse = bool(delta > 0 and mono)  # the champion is worse on average on this window
    prev = worse_before if isinstance(worse_before, list) else [(delta, se)] * int(worse_before)
    run = [*prev, (delta, se)] if worse else []
    pooled = sum(d for d, _ in run)
    pooled_lo = pooled - z * math.sqrt(sum(e * e for _, e in run)) if run else 0.0
    streak = len(run)
    by_gain = bool(lo > 0 and mono) and delta >= need and pinned is None
    by_streak = worse and streak >= cfg.replace_after and pooled_lo > 0 and pinned is None
    promoted = by_gain or by_streak
    if by_gain:
        reason = f"{best} better by {delta:.5f} {metric}, {level:.3f} interval [{lo:.5f}, {hi:.5f}] > 0"
    elif by_streak:
        reason = (
            f"{best} better by {delta:.5f} {metric} ({level:.3f} interval [{lo:.5f}, {hi:.5f}]): the "
            f"champion was found worse on {streak} consecutive windows (replace_after={cfg.replace_after}; "
            f"pooled gain {pooled:.5f}, interval above 0), so it is replaced although the gain is under "
            f"min_gain ({need:.5f}) or one window's interval includes 0"
        )
    elif not mono:
        reason = f"{best} would reverse the ranking (not monotone): kept the champion"
    elif lo <= 0:
        reason = f"{best} not better: {level:.3f} interval [{lo:.5f}, {hi:.5f}] includes or is below 0"
    elif delta < need:
        reason = f"{best} better by {delta:.5f} only, under min_gain ({need:.5f}): kept the champion"
    else:
        reason = f"{best} better by {delta:.5f}, but a rollback pins v{pinned}: kept the champion"
    rec.update(best=best, delta=delta, delta_ci=[lo, hi], ci_level=level, promoted=promoted, reason=reason)
    rec.update(min_gain_needed=need, changed_share=float(changed.mean()) if changed.size else 0.0)
    rec.update(champion_worse=worse, worse_streak=streak, delta_se=se)
    return rec, (fitted[best][0] if promoted else None)


def _changed_rows(p_old: NDArray[np.float64], p_new: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Rows whose prediction a challenger moves by more than ``CHANGE_TOL`` on the logit scale."""
    a, b = M.clip_probability(p_old), M.clip_probability(p_new)
    moved = np.abs((np.log(b) - np.log1p(-b)) - (np.log(a) - np.log1p(-a)))
    return moved > CHANGE_TOL


# ---------------------------------------------------------------------------------------------------
# State and one window's step
# ---------------------------------------------------------------------------------------------------
@dataclass
class MonitorState:
    """Everything the monitor knows about one source; ``to_json``/``from_json`` (no pickle)."""

    source: str
    versions: list[dict[str, Any]] = field(default_factory=list)  # calibrator JSON + provenance
    champion: int = 1  # version number (1-based) in office
    processed: list[str] = field(default_factory=list)  # window keys, oldest first
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per (window, segment)
    gates: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    score_kind: str = "score"  # the scale of the source's score column (every version records it too)
    windows: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> fingerprint, rows, champion
    pinned: int | None = None  # a rollback's version: kept in office, no promotion, until released
    start_at: str | None = None  # windows before this are never scored (``--start``)
    grid: dict[str, str] = field(default_factory=dict)  # origin and period the keys were cut on
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # delivered file -> digest, windows
    # Windows waiting (labels not in, no delivery, behind a pending one): key -> what, since, deadline;
    # kept after they resolve only when they went past their deadline (an incident's record).
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def start_with(
        cls, source: str, champion: C.BaseCalibrator, provenance: dict[str, Any], score_kind: str
    ) -> MonitorState:
        """Version 1 = ``champion``; it must agree with the source's ``score_kind`` (recorded if absent)."""
        recorded = getattr(champion, "score_kind_", None)
        _check(
            recorded in (None, score_kind),
            f"monitor: the initial champion of source {source!r} was fitted on {recorded} scores but the "
            f"source declares score_kind: {score_kind}; rerun `calibflow run` or fix score_kind",
        )
        S.record_score_kind(champion, score_kind)
        v = {"version": 1, "method": champion.name, "calibrator": champion.to_json(), **provenance}
        return cls(source=source, versions=[v], champion=1, score_kind=score_kind)

    @classmethod
    def start(cls, source: str, champion: C.BaseCalibrator, provenance: dict[str, Any]) -> MonitorState:
        """Version 1 = ``champion`` on its recorded score kind (``score`` when it records none)."""
        kind = getattr(champion, "score_kind_", None) or "score"
        return cls.start_with(source, champion, provenance, kind)

    def calibrator(self, version: int | None = None) -> C.BaseCalibrator:
        return C.from_json(self.versions[(version or self.champion) - 1]["calibrator"])

    def to_json(self) -> str:
        return json.dumps({"schema": STATE_SCHEMA, **asdict(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> MonitorState:
        d = json.loads(text)
        schema = d.pop("schema", None)
        _check(
            schema == STATE_SCHEMA,
            f"monitor state schema is {schema}, not {STATE_SCHEMA} (written by an older calibflow): "
            "move monitoring/<source>/ aside and rerun to rescore from the start",
        )
        return cls(**d)


def truncate(state: MonitorState, key: str, why: str) -> MonitorState:
    """The state as it was before window ``key``: later windows, gates and alerts dropped.

    Versions promoted from ``key`` on stay listed, marked withdrawn (their numbers, maybe registered and
    served, are never reused); the champion is the one in office after the last kept window.
    """
    kept = [k for k in state.processed if k < key]
    champion = state.windows[kept[-1]]["champion"] if kept else 1
    versions = []
    for v in state.versions:
        v = dict(v)
        if v.get("promoted_after", "") >= key and not v.get("withdrawn") and v["version"] > 1:
            v["withdrawn"] = f"promoted on data rescored from {key}: {why}"
        versions.append(v)
    if state.pinned is not None:
        champion = state.pinned
    out = replace(
        state,
        versions=versions,
        champion=champion,
        processed=kept,
        history=[r for r in state.history if r["window"] < key],
        gates=[g for g in state.gates if g["window"] < key],
        alerts=[a for a in state.alerts if a["window"] < key],
        notes=[*state.notes, f"rescored from {key}: {why}"],
        windows={k: v for k, v in state.windows.items() if k < key},
    )
    return out


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


def _learned(state: MonitorState, segment: str, metric: str, cfg: MonitorConfig) -> list[float]:
    """The current champion's reference; while it fills, the latest earlier complete one (module doc).
    A version whose reference windows are not shown calibrated (``shown_calibrated``) is skipped."""
    for version in range(state.champion, 0, -1):
        rows = _reference_rows(state, segment, version, metric, cfg.reference_windows)
        if len(rows) >= cfg.reference_windows and shown_calibrated(rows):
            return [r[metric] for r in rows]
    return []


def bands(
    state: MonitorState, segment: str, cfg: MonitorConfig, n_segments: int = 1
) -> dict[str, list[float | None]]:
    """Alert band per metric for ``segment`` under the current champion (module doc, step 2);
    ``n_segments`` watched in the window share the band's tail (family-wise over segments)."""
    out: dict[str, list[float | None]] = {}
    lo_f, hi_f = cfg.floor_ratio if cfg.floor_ratio is not None else (None, None)
    r = np.array(_learned(state, segment, "calibration_ratio", cfg))
    e = np.log(np.maximum(np.array(_learned(state, segment, "ece", cfg)), 1e-6))
    lo = hi = top = None
    if r.size:
        q = _pred_quantile(r.size, cfg.band_k, n_segments)
        lo, hi = float(r.mean() - q * r.std(ddof=1)), float(r.mean() + q * r.std(ddof=1))
    if e.size:
        top = float(np.exp(e.mean() + _pred_quantile(e.size, cfg.band_k, n_segments) * e.std(ddof=1)))
        top = min(top, 1.0)  # ECE <= 1: a band above 1 (few references) alerts the same, and the figure reads
    out["calibration_ratio"] = [_tight(lo, lo_f, max), _tight(hi, hi_f, min)]
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


def out_of_band(row: dict[str, Any], band: dict, cfg: MonitorConfig, n_segments: int = 1) -> list[str]:
    """The watched metrics of ``row`` outside their band, or practically off for sure (ratio beyond its
    practical limit by z standard errors, ECE above its absolute limit, slope beyond its limit)."""
    out = [m for m in ("calibration_ratio", "ece") if _outside(row[m], band[m])]
    if practically_off(row, cfg, n_segments) and "calibration_ratio" not in out:
        out.insert(0, "calibration_ratio")
    if ece_off(row, cfg) and "ece" not in out:
        out.append("ece")
    if slope_off(row, cfg, n_segments):
        out.append("calibration_slope")
    return out


def _alerts(state: MonitorState, row: dict[str, Any], band: dict, cfg: MonitorConfig) -> list[dict[str, Any]]:
    """Alerts for ``row``: a metric out of band on this and the ``patience - 1`` previous scored windows."""
    prev = [r for r in state.history if r["segment"] == row["segment"] and not r.get("skipped")]
    prev = prev[len(prev) - (cfg.patience - 1) :] if cfg.patience > 1 else []
    out = []
    for metric in row["out"]:
        if len(prev) < cfg.patience - 1 or not all(metric in r.get("out", []) for r in prev):
            continue
        out.append(
            {
                "source": state.source,
                "window": row["window"],
                "segment": row["segment"],
                "metric": metric,
                "value": row[metric],
                "band": band[metric],
                "version": row["version"],
            }
        )
    return out


def incidents(state: MonitorState, cfg: MonitorConfig) -> list[dict[str, Any]]:
    """Incidents per (segment, metric), derived from the history (module doc, step 3); oldest first.

    Each: ``id`` (source/segment/metric/opening window), ``opened``, ``closed`` (None while open),
    ``windows`` out of band, ``worst`` value, ``reopened`` (alerts within the cooldown of a close).
    """
    alerted = {(a["window"], a["segment"], a["metric"]) for a in state.alerts}
    scored: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in state.history:
        if not r.get("skipped"):
            for m in WATCHED:
                if r.get(m) is not None:
                    scored.setdefault((r["segment"], m), []).append(r)
    found: list[dict[str, Any]] = []
    for (seg, metric), rows in scored.items():
        cur: dict[str, Any] | None = None
        streak = since_close = 0
        for i, r in enumerate(rows):
            out = metric in r.get("out", [])
            if cur is None and (r["window"], seg, metric) in alerted:
                last = found[-1] if found and found[-1]["key"] == (seg, metric) else None
                if last is not None and i - since_close <= cfg.cooldown:
                    cur = last
                    cur["closed"], cur["reopened"] = None, cur["reopened"] + 1
                else:
                    cur = {
                        "id": f"{state.source}/{seg}/{metric}/{r['window']}",
                        "key": (seg, metric),
                        "source": state.source,
                        "segment": seg,
                        "metric": metric,
                        "opened": r["window"],
                        "closed": None,
                        "windows": 0,
                        "worst": r[metric],
                        "reopened": 0,
                        "version": r["version"],
                        "band": _incident_band(metric, r, cfg),
                    }
                    found.append(cur)
                streak = 0
            if cur is None:
                continue
            if out:
                cur["windows"] += 1
                streak = 0
                if _severity(metric, r[metric]) > _severity(metric, cur["worst"]):
                    cur["worst"] = r[metric]
            else:
                streak += 1
                # In band is not enough: the last ``recovery`` windows must be back within the limit.
                if streak >= cfg.recovery and within_limit(metric, rows[i - cfg.recovery + 1 : i + 1], cfg):
                    cur["closed"], cur = r["window"], None
                    since_close = i
    for inc in found:
        inc.pop("key")
    found += wait_incidents(state)
    return sorted(found, key=lambda x: (x["opened"], x["segment"], x["metric"]))


#: A wait's kind -> the metric name of its incident once past its deadline.
WAIT_METRICS = {"labels": "labels_overdue", "delivery": "delivery_missing"}


def wait_incidents(state: MonitorState) -> list[dict[str, Any]]:
    """One incident per window that waited past its deadline (labels or a delivery), closed when the
    window's labels or file arrived."""
    out = []
    for key, w in sorted(state.waits.items()):
        if not w.get("overdue_at") or w["kind"] not in WAIT_METRICS:
            continue
        metric = WAIT_METRICS[w["kind"]]
        out.append(
            {
                "id": f"{state.source}/all/{metric}/{key}",
                "source": state.source,
                "segment": ALL,
                "metric": metric,
                "opened": key,
                "closed": w.get("resolved"),
                "windows": 1,
                "worst": float(w.get("rows") or 0),
                "reopened": 0,
                "version": state.champion,
                "band": [None, None],
                "why": w.get("why", ""),
            }
        )
    return out


def update_waits(
    state: MonitorState, now: pd.Timestamp, waiting: dict[str, dict[str, Any]], cfg: MonitorConfig
) -> list[dict[str, Any]]:
    """Record this run's waiting windows (``waiting``: key -> {kind, rows, why}; kinds ``labels``,
    ``delivery``, ``due`` (labels not due yet), ``blocked`` (behind a pending window)) in
    ``state.waits``: ``since`` kept from the first run that saw it, ``deadline`` from the window's end
    (``label_deadline`` / ``delivery_deadline``), ``overdue_at`` once past it. A wait no longer listed
    is resolved: dropped, or kept with ``resolved`` when it was overdue (its incident closes).
    Returns the current waits, oldest window first."""
    stamp = pd.Timestamp(now).isoformat()
    step = _offset(cfg.period)
    limits = {"labels": cfg.label_deadline, "delivery": cfg.delivery_deadline}
    for key, w in waiting.items():
        old = state.waits.get(key) or {}
        entry = {**w, "since": old.get("since", stamp) if old.get("kind") == w["kind"] else stamp}
        limit = limits.get(w["kind"])
        if limit is not None:
            deadline = pd.Timestamp(key) + step + _offset(limit)
            entry["deadline"] = deadline.isoformat()
            entry["overdue_at"] = old.get("overdue_at") or (stamp if pd.Timestamp(now) >= deadline else None)
        entry["resolved"] = None
        state.waits[key] = entry
    for key in [k for k in state.waits if k not in waiting]:
        w = state.waits[key]
        if w.get("overdue_at"):
            w["resolved"] = w.get("resolved") or stamp
        else:
            del state.waits[key]
    return [dict(state.waits[k], window=k) for k in sorted(waiting)]


def _severity(metric: str, value: float) -> float:
    return value if metric == "ece" else abs(value - 1.0)


def _incident_band(metric: str, row: dict[str, Any], cfg: MonitorConfig) -> list[float | None]:
    if metric == "calibration_ratio":
        return row["band_ratio"]
    if metric == "ece":
        return row["band_ece"]
    ps = cfg.practical_slope
    return [None, None] if ps is None else [1 - ps, 1 + ps]


def process_window(
    state: MonitorState,
    window: Window,
    frame: pd.DataFrame,
    calib: pd.DataFrame,
    cfg: MonitorConfig,
    segments: tuple[str, ...] = (),
    fingerprint: str | None = None,
    scores: dict[str, dict[str, Any]] | None = None,
) -> MonitorState:
    """One window: champion scores + bands + alerts for every segment, then the gate. Returns a new state.

    ``frame``: the window's rows; ``calib``: the rows of the ``calib_windows`` periods before it (the
    challengers' trailing calibration window); both with the user's score on ``state.score_kind``.
    Refuses a window already in the state (no double count) or older than the newest one (``truncate``
    first: a late day is rescored from its window on). ``scores``: the champion's rows per segment name,
    already computed from the window's tables (``monitoring_scale.score_frame``, for large windows).
    """
    if window.key in state.processed:
        raise ValueError(f"window {window.key} already processed for source {state.source!r}")
    if state.processed and window.key < state.processed[-1]:
        raise ValueError(f"window {window.key} is older than the last processed {state.processed[-1]}")
    # One generator per (seed, window): a resumed run draws exactly what an uninterrupted one would.
    rng = np.random.default_rng([cfg.seed, int(window.start.value // 10**9) & 0x7FFFFFFF])
    new = replace(
        state,
        history=list(state.history),
        gates=list(state.gates),
        alerts=list(state.alerts),
        notes=list(state.notes),
        versions=list(state.versions),
        processed=list(state.processed),
        windows=dict(state.windows),
    )
    champ = state.calibrator()
    if scores is None:
        y = frame["label"].to_numpy(float)
        p = predict_frame(champ, frame, state.score_kind) if len(frame) else np.empty(0)
        scores = {seg: score(y[mask], p[mask], cfg, rng) for seg, mask in segment_masks(frame, segments)}
    overall_skipped = False
    masks = list(scores)
    for seg in masks:
        row = {"source": state.source, "window": window.key, "segment": seg, "version": state.champion}
        row.update(scores[seg])
        if row["skipped"]:
            new.notes.append(f"{window.key} {seg}: {row['skipped']}")
            overall_skipped |= seg == ALL
        else:
            band = bands(new, seg, cfg, len(masks))
            row["band_ratio"], row["band_ece"] = band["calibration_ratio"], band["ece"]
            row["out"] = out_of_band(row, band, cfg, len(masks))
            found = _alerts(new, row, band, cfg)
            new.alerts.extend(found)
            row["alert"] = bool(found)
        new.history.append(row)
    # Drifted: out now, or inside an open incident; such a value never enters a reference.
    still_open = {(i["segment"], i["metric"]) for i in incidents(new, cfg) if i["closed"] is None}
    for row in new.history[len(state.history) :]:
        if not row["skipped"]:
            held = {m for m in WATCHED if (row["segment"], m) in still_open}
            row["drifted"] = sorted(set(row["out"]) | held)
    new.processed.append(window.key)
    new.windows[window.key] = {"fingerprint": fingerprint, "rows": int(len(frame))}
    rec = _gate(new, state, window, frame, calib, cfg, rng, champ, overall_skipped, segments)
    new.gates.append(rec)
    new.windows[window.key]["champion"] = new.champion
    return new


def _gate(
    new: MonitorState,
    state: MonitorState,
    window: Window,
    frame: pd.DataFrame,
    calib: pd.DataFrame,
    cfg: MonitorConfig,
    rng: np.random.Generator,
    champ: C.BaseCalibrator,
    overall_skipped: bool,
    segments: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The gate's record for ``window``; a promotion is added to ``new`` (versions, champion)."""
    if overall_skipped:
        return {"window": window.key, "promoted": False, "reason": "window skipped: too few positives"}
    targets = patch_targets(new, cfg, segments) if all(c in frame.columns for c in segments) else {}
    if targets and drifted_rows(calib, targets).mean() > 0.5:
        targets = {}  # most of the source drifted: a global change, the global challengers' to fix
    patch = patch_challenger(champ, calib, targets, cfg, state.score_kind) if targets else None
    if targets:
        # Only segment levels drifted: the global challengers learn the undrifted rows (the whole trailing
        # window: those rows did not change); fitted on all rows, a global map spread the drifted level's
        # change over every segment (+3% on every unshifted country after a one-country shift).
        calib, since = calib[~drifted_rows(calib, targets)], None
    else:
        calib, since = _since_change(new, calib, cfg)
    n_calib_windows = int(np.unique(window_index(calib["time"], cfg)).size) if len(calib) else 0
    if n_calib_windows < cfg.min_calib_windows or calib["label"].sum() < cfg.min_positives:
        return {
            "window": window.key,
            "promoted": False,
            "reason": f"trailing calibration window too small ({n_calib_windows} period(s))",
        }
    rec, winner = challenge(
        champ, calib, frame, cfg, rng, state.score_kind, state.pinned, segments, _worse_streak(new, state),
        patch,
    )
    if patch is not None and patch[0] is not None and rec.get("best") == PATCH_METHOD:
        rec["reason"] += (
            f" (a patch of {', '.join(patch[1]['patched'])} only: every other row keeps the champion's"
            " prediction)"
        )
    rec["window"] = window.key
    rec["champion_version"] = state.champion
    if since is not None:
        rec["fitted_since"] = since
        rec["reason"] += f" (challengers fitted on the windows since the incident of {since[:10]})"
    if winner is not None:
        t = pd.to_datetime(calib["time"])
        version = len(new.versions) + 1
        new.versions.append(
            {
                "version": version,
                "method": winner.name,
                "calibrator": winner.to_json(),
                "fitted_on": [t.min().isoformat(), t.max().isoformat()],
                "fitted_rows": int(len(calib)),
                "judged_on": [window.start.isoformat(), window.end.isoformat()],
                "judged": {k: rec[k] for k in ("metric", "champion", "delta", "delta_ci", "ci_level")},
                "promoted_after": window.key,
                "replaces": state.champion,
            }
        )
        new.champion = version
        rec["new_version"] = version
    return rec


def _since_change(
    new: MonitorState, calib: pd.DataFrame, cfg: MonitorConfig
) -> tuple[pd.DataFrame, str | None]:
    """While drift incidents are open, the challengers are fitted on the windows since the newest one
    that has half the trailing window's periods behind it (at least ``min_calib_windows``, with
    ``min_positives``): the trailing window's older days describe the world before the change, and a map
    fitted half on them serves half the bias; fewer windows (three days) fitted per-segment maps so noisily
    that unshifted countries moved by 7-10%. The newest change first: an older incident still open (a
    small segment's) says less about today's world."""
    opened = sorted(
        {i["opened"] for i in incidents(new, cfg) if i["closed"] is None and i["metric"] in WATCHED},
        reverse=True,
    )
    if not opened or not len(calib):
        return calib, None
    need = max(cfg.min_calib_windows, cfg.calib_windows // 2)
    times = pd.to_datetime(calib["time"])
    for since in opened:
        recent = calib[times >= pd.Timestamp(since)]
        n = int(np.unique(window_index(recent["time"], cfg)).size) if len(recent) else 0
        if n >= need and recent["label"].sum() >= cfg.min_positives and len(recent) < len(calib):
            return recent, since
    return calib, None


def _worse_streak(new: MonitorState, state: MonitorState) -> list[tuple[float, float]]:
    """(gain, se) of the consecutive latest gates that found the champion in office worse on average."""
    out: list[tuple[float, float]] = []
    for g in reversed(new.gates):
        if not g.get("champion_worse") or g.get("champion_version") != state.champion or "delta_se" not in g:
            break
        out.append((float(g["delta"]), float(g["delta_se"])))
    return out[::-1]


# ---------------------------------------------------------------------------------------------------
# A segment's fix where the change is: the champion patched on the drifted segment levels only
# ---------------------------------------------------------------------------------------------------
#: The segmented method a patch is written as (its state holds a global map and per-level terms).
PATCH_METHOD = "partial_pooling"


def patch_targets(state: MonitorState, cfg: MonitorConfig, segments: tuple[str, ...]) -> dict[str, str]:
    """``{"country=DE": opened}``: the declared segment levels with an open drift incident, and the window
    the earliest of them opened. Empty while the whole source (``all``) has one open: a global change is
    the global challengers' and the full segmented refit's to fix, not a patch's."""
    if not segments:
        return {}
    found = [i for i in incidents(state, cfg) if i["closed"] is None and i["metric"] in WATCHED]
    if any(i["segment"] == ALL for i in found):
        return {}
    out: dict[str, str] = {}
    for i in found:
        col, _, level = str(i["segment"]).partition("=")
        if col in segments and level:
            out[i["segment"]] = min(out.get(i["segment"], i["opened"]), i["opened"])
    return out


def drifted_rows(frame: pd.DataFrame, targets: dict[str, str]) -> NDArray[np.bool_]:
    """Rows of the drifted segment levels (``patch_targets``), whatever their time."""
    out = np.zeros(len(frame), dtype=bool)
    for seg in targets:
        col, _, label = seg.partition("=")
        if col in frame.columns:
            out |= frame[col].astype(str).to_numpy() == label
    return out


def _as_pooled(champion: C.BaseCalibrator) -> Any | None:
    """The champion as a partial-pooling map with the same predictions (a copy), or None when its form has
    no such writing: Platt ``expit(coef * z + intercept)`` is the pooled map with no levels, ``a =
    intercept``, ``b = log coef``, ``c = 0``."""
    if champion.name == PATCH_METHOD:
        return C.from_json(champion.to_json())
    if champion.name != "platt" or not float(getattr(champion, "coef_", 0.0)) > 0:
        return None
    pp = C.make(PATCH_METHOD, input=str(champion.input_kind))
    pp.global_ = np.array([float(champion.intercept_), math.log(float(champion.coef_)), 0.0])
    pp.segment_names_, pp.vocab_, pp.blocks_, pp.pair_tests_ = [], [], [], []
    pp.n_sweeps_, pp.converged_, pp.fitted_ = 0, True, True
    kind = getattr(champion, "score_kind_", None)
    return S.record_score_kind(pp, kind) if kind else pp


def _level_index(pp: Any, col: str, level: str) -> tuple[int, int] | None:
    """(block index, level index) of ``col``'s ``level`` in the pooled map, added with zero terms when
    new; None where a pair block would need re-keying (the column's vocabulary is then fixed)."""
    if col not in pp.segment_names_:
        pp.segment_names_.append(col)
        pp.vocab_.append([])
    k = pp.segment_names_.index(col)
    blocks = [i for i, b in enumerate(pp.blocks_) if [int(c) for c in b["columns"]] == [k]]
    if not blocks:
        pp.blocks_.append({"columns": [k], "keys": None, "offset": np.zeros(len(pp.vocab_[k])),
                           "log_slope": np.zeros(len(pp.vocab_[k])), "tau2": 0.0, "sigma2": 0.0})
        blocks = [len(pp.blocks_) - 1]
    b = pp.blocks_[blocks[0]]
    if level not in pp.vocab_[k]:
        if any(k in [int(c) for c in x["columns"]] and len(x["columns"]) == 2 for x in pp.blocks_):
            return None
        at = int(np.searchsorted(np.array(pp.vocab_[k], dtype=object), level)) if pp.vocab_[k] else 0
        pp.vocab_[k].insert(at, level)
        b["offset"] = np.insert(np.asarray(b["offset"], dtype=np.float64), at, 0.0)
        b["log_slope"] = np.insert(np.asarray(b["log_slope"], dtype=np.float64), at, 0.0)
    return blocks[0], pp.vocab_[k].index(level)


def _fit_level(pp: Any, rows: pd.DataFrame, score_kind: str, at: tuple[int, int]) -> dict[str, float]:
    """Refit one level's offset and log-slope on ``rows`` (maximum likelihood, Fisher scoring; a unit
    normal prior on the log-slope keeps a few rows' fit finite), every other term of the map held fixed."""
    blk, i = pp.blocks_[at[0]], at[1]
    off, ls = np.asarray(blk["offset"], dtype=np.float64), np.asarray(blk["log_slope"], dtype=np.float64)
    off[i], ls[i] = 0.0, 0.0
    blk["offset"], blk["log_slope"] = off, ls
    segs = {c: rows[c].to_numpy(dtype=object) for c in pp.segment_names_}
    x = S.calibrator_input(rows["score"].to_numpy(float), score_kind, str(pp.input))
    z = pp._convert(np.asarray(x, dtype=np.float64))
    rest_off, rest_ls = _level_terms(pp, segs, z.size)  # this level's terms are 0 now: the rest of the map
    a, b, c = (float(v) for v in pp.global_)
    base, u = a + rest_off, np.exp(b + rest_ls) * (z - c)
    y = rows["label"].to_numpy(float)
    d = g = 0.0
    for _ in range(100):
        v = math.exp(g) * u
        p = special.expit(base + d + v)
        r, w = y - p, p * (1 - p)
        grad = np.array([r.sum(), r @ v - g])
        h = np.array([[w.sum(), w @ v], [w @ v, w @ (v * v) + 1.0]]) + 1e-9 * np.eye(2)
        step = np.clip(np.linalg.solve(h, grad), -2.0, 2.0)
        d, g = d + float(step[0]), g + float(step[1])
        if float(np.abs(step).max()) < 1e-8:
            break
    off[i], ls[i] = d, g
    return {"offset": d, "log_slope": g, "positives": float(y.sum()), "rows": int(y.size)}


def _level_terms(pp: Any, segs: dict[str, Any], n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per row, the sums of the pooled map's level offsets and log-slopes (its ``predict``, in parts)."""
    cols = aligned(segs, list(pp.segment_names_), n)
    codes = [level_codes(c, v) for c, v in zip(cols, pp.vocab_, strict=True)]
    off, ls = np.zeros(n), np.zeros(n)
    for blk in pp.blocks_:
        idx = pp._block_codes(blk, codes)
        seen = idx >= 0
        off[seen] += np.asarray(blk["offset"], dtype=np.float64)[idx[seen]]
        ls[seen] += np.asarray(blk["log_slope"], dtype=np.float64)[idx[seen]]
    return off, ls


def patch_challenger(
    champion: C.BaseCalibrator,
    calib: pd.DataFrame,
    targets: dict[str, str],
    cfg: MonitorConfig,
    score_kind: str,
) -> tuple[C.BaseCalibrator | None, dict[str, Any]]:
    """The champion with only the drifted levels (``patch_targets``) refitted, each on its own rows since
    its incident opened; every other row keeps the champion's prediction exactly.

    Why: a full segmented refit re-estimates every level from the few windows since the change, and its
    noise (and a between-level variance inflated by the one shifted level) moved unshifted countries by
    6-10%. A level is patched once it has ``max(min_calib_windows, calib_windows // 2)`` periods and
    ``min_positives`` positives since its incident (the rule the global challengers follow). Returns the
    patch (None when no level is ready or the champion is not Platt or partial pooling) and a record."""
    pp = _as_pooled(champion)
    rec: dict[str, Any] = {"targets": dict(targets), "patched": {}, "waiting": {}}
    if pp is None:  # e.g. an isotonic champion: the patch sits on a Platt map of the undrifted rows
        rest = calib[~drifted_rows(calib, targets)]
        if rest["label"].sum() < cfg.min_positives:
            rec["reason"] = "too few undrifted rows for a Platt map under the patch"
            return None, rec
        platt = fit_challenger("platt", str(champion.input_kind), rest["score"].to_numpy(float),
                               rest["label"].to_numpy(float), score_kind)
        pp = _as_pooled(platt)
        rec["base"] = f"platt on the undrifted rows (the champion, {champion.name}, has no per-level form)"
    if pp is None:
        rec["reason"] = "no increasing Platt map on the undrifted rows to patch"
        return None, rec
    need = max(cfg.min_calib_windows, cfg.calib_windows // 2)
    times = pd.to_datetime(calib["time"])
    for seg, since in sorted(targets.items()):
        col, _, label = seg.partition("=")
        m = (calib[col].astype(str).to_numpy() == label) & (times >= pd.Timestamp(since)).to_numpy()
        rows = calib[m]
        n = int(np.unique(window_index(rows["time"], cfg)).size) if len(rows) else 0
        if n < need or rows["label"].sum() < cfg.min_positives:
            rec["waiting"][seg] = f"{n} period(s), {int(rows['label'].sum())} positives since {since[:10]}"
            continue
        at = _level_index(pp, col, str(as_levels(rows[col].to_numpy(dtype=object))[0]))
        if at is None:
            rec["waiting"][seg] = "a pair block fixes the column's levels"
            continue
        rec["patched"][seg] = _fit_level(pp, rows, score_kind, at)
    if not rec["patched"]:
        return None, rec
    return S.record_score_kind(pp, score_kind), rec


def history_frame(state: MonitorState) -> pd.DataFrame:
    """The history as a flat table (one row per window and segment), for CSV metrics and plots."""
    cols = [
        "window",
        "segment",
        "version",
        "n",
        "positives",
        "calibration_ratio",
        "ratio_low",
        "ratio_high",
        "ece",
        "calibration_slope",
        "log_loss",
        "brier",
        "alert",
        "skipped",
    ]
    df = pd.DataFrame(state.history)
    for c in cols:
        if c not in df:
            df[c] = pd.NA
    return df[cols]
