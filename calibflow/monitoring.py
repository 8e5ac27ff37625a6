"""Calibration over time: matured windows, champion scores, learned bands, and a champion/challenger gate.

Pure library (numpy/pandas and our calibrators; no Prefect, no DVC). A *frame* has the columns ``time``,
``score``, ``label`` and optionally segment columns. One call to ``process_window`` does a day's work for
one window, in this order, and returns a new ``MonitorState`` (JSON round-trip, never pickle):

1. **Score the champion** on the window, overall (segment ``all``) and per segment value: calibration ratio
   ``sum p / sum y`` with a percentile-bootstrap interval (rows resampled), ECE (equal-width bins), log loss
   and Brier. A (window, segment) with fewer than ``min_positives`` labelled positives is *skipped with a
   note* instead of scored; when the overall window is skipped no gate runs either.
2. **Bands** (the alert thresholds) are learned per (segment, metric) from the champion's *reference
   windows*: the first ``reference_windows`` windows it scored after it took office (a fixed reference
   period, as NannyML and Evidently use, reset on every promotion). Rule: mean +- ``band_k`` sample
   standard deviations of the reference windows' values (two-sided for the calibration ratio, upper only for
   ECE). Until the reference is complete only the user's absolute floor applies
   (``floor_ratio = [lo, hi]``, ``floor_ece = max``). An alert fires when a value leaves its band or the
   floor on ``patience`` consecutive scored windows.
3. **The gate.** Each challenger method is fitted on the trailing calibration window (the
   ``calib_windows`` periods just before the window) and scored beside the champion on this, the newest
   held-out window. The best challenger by the selection metric (log loss or Brier: proper scores,
   per-row additive, so the paired bootstrap resamples per-row differences) is compared with the champion by
   a paired bootstrap of ``metric(champion) - metric(challenger)``; the interval level is
   Bonferroni-adjusted for the number of challengers (``1 - (1 - ci_level) / m``) because the best of m is
   picked on the same window. It is promoted only if the whole interval is above zero AND the challenger
   keeps the ranking (its class declares ``monotone`` and its predictions are non-decreasing on the sorted
   scores of both windows).

The history is keyed by (window start, segment): ``process_window`` refuses a window already processed,
so a resumed run never double-counts one, and ``pending_windows`` lists exactly the matured windows not yet
in the state, so none is lost.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from calibflow import calibrators as C
from calibflow import metrics as M

ALL = "all"
SELECTION_METRICS = ("log_loss", "brier")
STATE_SCHEMA = 1
_EPS = 1e-15


# ---------------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MonitorConfig:
    """Every knob of the monitor (params.yaml ``monitor:`` section; see docs/monitoring.md)."""

    period: str = "1D"  # window length, a pandas offset alias (1D daily, 7D weekly, 6h)
    label_delay: str = "2D"  # a window is scored only once window_end + label_delay <= now
    calib_windows: int = 14  # trailing calibration window of the challengers, in periods
    min_calib_windows: int = 3  # fewer trailing periods with data: no challenger this window
    reference_windows: int = 10  # the champion's first N scored windows define its bands
    band_k: float = 3.0  # band = mean +- band_k * sd of the reference windows
    patience: int = 1  # consecutive out-of-band windows before an alert
    floor_ratio: tuple[float, float] | None = (0.5, 2.0)  # absolute calibration-ratio limits (None: off)
    floor_ece: float | None = None  # absolute ECE ceiling (None: off)
    min_positives: int = 30  # fewer labelled positives in a (window, segment): skipped with a note
    methods: tuple[str, ...] = ("platt", "beta", "isotonic")
    selection_metric: str = "log_loss"
    n_bootstrap: int = 200
    ci_level: float = 0.95
    n_bins: int = 15
    seed: int = 0

    def __post_init__(self) -> None:
        _check(_offset(self.period) > pd.Timedelta(0), f"monitor.period must be > 0, got {self.period!r}")
        _check(_offset(self.label_delay) >= pd.Timedelta(0), "monitor.label_delay must be >= 0")
        for k in ("calib_windows", "min_calib_windows", "reference_windows", "patience", "n_bootstrap"):
            _check(int(getattr(self, k)) >= 1, f"monitor.{k} must be an integer >= 1, got {getattr(self, k)}")
        _check(self.min_calib_windows <= self.calib_windows, "monitor.min_calib_windows > calib_windows")
        _check(self.reference_windows >= 2, "monitor.reference_windows must be >= 2 (a band needs a spread)")
        _check(self.band_k > 0, f"monitor.band_k must be > 0, got {self.band_k}")
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
        if "methods" in section:
            section["methods"] = tuple(section["methods"])
        return cls(**section)


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


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


def matured_windows(times: pd.Series, now: pd.Timestamp, cfg: MonitorConfig) -> list[Window]:
    """Complete windows whose labels have matured: ``end + label_delay <= now``; oldest first.

    Windows are aligned on midnight (UTC-naive) of the first timestamp's day, so a daily period is the
    calendar day. A window that holds no row at all is not listed (nothing to score).
    """
    t = pd.to_datetime(times)
    if t.empty:
        return []
    step, delay = _offset(cfg.period), _offset(cfg.label_delay)
    origin = t.min().normalize()
    ks = np.unique(np.floor((t - origin) / step).to_numpy(dtype=float)).astype(int)
    out = [Window(origin + int(k) * step, origin + (int(k) + 1) * step) for k in ks]
    return [w for w in out if w.end + delay <= pd.Timestamp(now)]


def pending_windows(
    times: pd.Series, now: pd.Timestamp, cfg: MonitorConfig, state: MonitorState
) -> list[Window]:
    """Matured windows not yet in ``state`` (a resumed run picks up exactly these)."""
    done = set(state.processed)
    return [w for w in matured_windows(times, now, cfg) if w.key not in done]


# ---------------------------------------------------------------------------------------------------
# Scores of one calibrator on one window
# ---------------------------------------------------------------------------------------------------
def bootstrap_ratio_ci(
    y: NDArray[np.float64], p: NDArray[np.float64], n_boot: int, level: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile interval of ``sum p / sum y`` over row resamples (chunked: bounded memory at 1e6 rows)."""
    n = y.size
    chunk = max(1, min(n_boot, 4_000_000 // max(n, 1)))
    ratios: list[float] = []
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        idx = rng.integers(0, n, size=(b, n))
        sy = y[idx].sum(axis=1)
        sp = p[idx].sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios.extend(np.where(sy > 0, sp / sy, np.inf).tolist())
        done += b
    a = (1 - level) / 2
    lo, hi = np.quantile(np.asarray(ratios), [a, 1 - a])
    return float(lo), float(hi)


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
    row.update(
        calibration_ratio=float(p.sum() / pos),
        ratio_low=lo,
        ratio_high=hi,
        ece=M.ece(y, p, cfg.n_bins),
        log_loss=M.log_loss(y, p),
        brier=M.brier(y, p),
        skipped="",
    )
    return row


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
        pc = np.clip(p, _EPS, 1 - _EPS)
        return -(y * np.log(pc) + (1 - y) * np.log1p(-pc))
    return (p - y) ** 2


def paired_bootstrap(d: NDArray[np.float64], n_boot: int, level: float, rng: np.random.Generator):
    """Mean of per-row differences ``d`` and its percentile interval over row resamples."""
    n = d.size
    chunk = max(1, min(n_boot, 4_000_000 // max(n, 1)))
    means: list[float] = []
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        means.extend(d[rng.integers(0, n, size=(b, n))].mean(axis=1).tolist())
        done += b
    a = (1 - level) / 2
    lo, hi = np.quantile(np.asarray(means), [a, 1 - a])
    return float(d.mean()), float(lo), float(hi)


def keeps_ranking(cal: C.BaseCalibrator, scores: NDArray[np.float64]) -> bool:
    """Monotone: the class says so and predictions on the sorted scores never decrease."""
    if not getattr(type(cal), "monotone", False):
        return False
    p = cal.predict(np.sort(scores))
    return bool(np.all(np.diff(p) >= -1e-12))


def challenge(
    champion: C.BaseCalibrator,
    calib: pd.DataFrame,
    held_out: pd.DataFrame,
    cfg: MonitorConfig,
    rng: np.random.Generator,
) -> tuple[dict[str, Any], C.BaseCalibrator | None]:
    """Fit the challengers on ``calib``, compare the best with the champion on ``held_out``.

    Returns the gate record (every challenger's metric, the best, the paired interval, the decision and
    its reason) and the fitted best challenger when it is to be promoted, else None.
    """
    ys, ss = calib["label"].to_numpy(float), calib["score"].to_numpy(float)
    yh, sh = held_out["label"].to_numpy(float), held_out["score"].to_numpy(float)
    metric = cfg.selection_metric
    champ_loss = per_row_loss(yh, champion.predict(sh), metric)
    rec: dict[str, Any] = {"metric": metric, "champion": float(champ_loss.mean()), "challengers": {}}
    fitted: dict[str, tuple[C.BaseCalibrator, NDArray[np.float64]]] = {}
    for m in cfg.methods:
        try:
            cal = C.make(m, input=champion.input).fit(ss, ys)
        except ValueError as exc:  # e.g. a method that cannot fit this window; recorded, never silent
            rec["challengers"][m] = {"error": str(exc)}
            continue
        loss = per_row_loss(yh, cal.predict(sh), metric)
        mono = keeps_ranking(cal, np.concatenate([ss, sh]))
        rec["challengers"][m] = {"value": float(loss.mean()), "monotone": mono}
        fitted[m] = (cal, loss)
    if not fitted:
        rec.update(best=None, promoted=False, reason="no challenger could be fitted")
        return rec, None
    best = min(fitted, key=lambda k: rec["challengers"][k]["value"])
    level = 1 - (1 - cfg.ci_level) / len(fitted)  # Bonferroni: the best of m is picked on this window
    delta, lo, hi = paired_bootstrap(champ_loss - fitted[best][1], cfg.n_bootstrap, level, rng)
    mono = rec["challengers"][best]["monotone"]
    promoted = lo > 0 and mono
    if promoted:
        reason = f"{best} better by {delta:.5f} {metric}, {level:.3f} interval [{lo:.5f}, {hi:.5f}] > 0"
    elif not mono:
        reason = f"{best} would reverse the ranking (not monotone): kept the champion"
    else:
        reason = f"{best} not better: {level:.3f} interval [{lo:.5f}, {hi:.5f}] includes or is below 0"
    rec.update(best=best, delta=delta, delta_ci=[lo, hi], ci_level=level, promoted=promoted, reason=reason)
    return rec, (fitted[best][0] if promoted else None)


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

    @classmethod
    def start(cls, source: str, champion: C.BaseCalibrator, provenance: dict[str, Any]) -> MonitorState:
        v = {"version": 1, "method": champion.name, "calibrator": champion.to_json(), **provenance}
        return cls(source=source, versions=[v], champion=1)

    def calibrator(self, version: int | None = None) -> C.BaseCalibrator:
        return C.from_json(self.versions[(version or self.champion) - 1]["calibrator"])

    def to_json(self) -> str:
        return json.dumps({"schema": STATE_SCHEMA, **asdict(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> MonitorState:
        d = json.loads(text)
        _check(d.pop("schema", None) == STATE_SCHEMA, f"monitor state schema is not {STATE_SCHEMA}")
        return cls(**d)


def _reference(state: MonitorState, segment: str, version: int, n: int) -> list[dict[str, Any]]:
    rows = [
        r
        for r in state.history
        if r["version"] == version and r["segment"] == segment and not r.get("skipped")
    ]
    return rows[:n]


def bands(state: MonitorState, segment: str, cfg: MonitorConfig) -> dict[str, list[float | None]]:
    """Alert band per metric for ``segment`` under the current champion (module doc, step 2).

    While a newly promoted champion's own reference is incomplete, the band of the latest earlier version
    with a complete reference is kept (a calibrated champion's ratio sits near 1 either way): without it
    a promotion just before a shift left the shift unseen (docs/monitoring.md, first study run).
    """
    ref: list[dict[str, Any]] = []
    for version in range(state.champion, 0, -1):
        ref = _reference(state, segment, version, cfg.reference_windows)
        if len(ref) >= cfg.reference_windows:
            break
    out: dict[str, list[float | None]] = {}
    lo_f, hi_f = cfg.floor_ratio if cfg.floor_ratio is not None else (None, None)
    if len(ref) >= cfg.reference_windows:
        r = np.array([x["calibration_ratio"] for x in ref])
        e = np.array([x["ece"] for x in ref])
        out["calibration_ratio"] = [
            r.mean() - cfg.band_k * r.std(ddof=1),
            r.mean() + cfg.band_k * r.std(ddof=1),
        ]
        out["ece"] = [None, e.mean() + cfg.band_k * e.std(ddof=1)]
    else:
        out["calibration_ratio"] = [None, None]
        out["ece"] = [None, None]
    out["calibration_ratio"] = [
        _tight(out["calibration_ratio"][0], lo_f, max),
        _tight(out["calibration_ratio"][1], hi_f, min),
    ]
    out["ece"] = [None, _tight(out["ece"][1], cfg.floor_ece, min)]
    out["reference"] = [len(ref)]
    return out


def _tight(learned: float | None, floor: float | None, pick) -> float | None:
    """Combine a learned limit and the user's absolute one: whichever fires first."""
    vals = [float(v) for v in (learned, floor) if v is not None]
    return pick(vals) if vals else None


def _outside(value: float, band: list[float | None]) -> bool:
    lo, hi = band
    return (lo is not None and value < lo) or (hi is not None and value > hi)


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


def process_window(
    state: MonitorState,
    window: Window,
    frame: pd.DataFrame,
    calib: pd.DataFrame,
    cfg: MonitorConfig,
    segments: tuple[str, ...] = (),
) -> MonitorState:
    """One window: champion scores + bands + alerts for every segment, then the gate. Returns a new state.

    ``frame``: the window's rows; ``calib``: the rows of the ``calib_windows`` periods before it (the
    challengers' trailing calibration window). Refuses a window already in the state (no double count).
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
    )
    champ = state.calibrator()
    y = frame["label"].to_numpy(float)
    p = champ.predict(frame["score"].to_numpy(float)) if len(frame) else np.empty(0)
    overall_skipped = False
    for seg, mask in segment_masks(frame, segments):
        row = {"source": state.source, "window": window.key, "segment": seg, "version": state.champion}
        row.update(score(y[mask], p[mask], cfg, rng))
        if row["skipped"]:
            new.notes.append(f"{window.key} {seg}: {row['skipped']}")
            overall_skipped |= seg == ALL
        else:
            band = bands(new, seg, cfg)
            row["band_ratio"], row["band_ece"] = band["calibration_ratio"], band["ece"]
            row["out"] = [m for m in ("calibration_ratio", "ece") if _outside(row[m], band[m])]
            found = _alerts(new, row, band, cfg)
            new.alerts.extend(found)
            row["alert"] = bool(found)
        new.history.append(row)
    new.processed.append(window.key)
    if overall_skipped:
        new.gates.append(
            {"window": window.key, "promoted": False, "reason": "window skipped: too few positives"}
        )
        return new
    n_calib_windows = calib["time"].dt.floor(cfg.period).nunique() if len(calib) else 0
    if n_calib_windows < cfg.min_calib_windows or calib["label"].sum() < cfg.min_positives:
        new.gates.append(
            {
                "window": window.key,
                "promoted": False,
                "reason": f"trailing calibration window too small ({n_calib_windows} period(s))",
            }
        )
        return new
    rec, winner = challenge(champ, calib, frame, cfg, rng)
    rec["window"] = window.key
    rec["champion_version"] = state.champion
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
    new.gates.append(rec)
    return new


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
