"""The monitor's settings (params.yaml ``monitor:``): ``MonitorConfig``, checked when built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from calibflow import calibrators as C

ALL = "all"
SELECTION_METRICS = ("log_loss", "brier")
WATCHED = ("calibration_ratio", "ece", "calibration_slope")
#: A row whose logit prediction moves by more than this is "changed" by a challenger (min_gain base).
CHANGE_TOL = 0.01


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
    min_positives: int = 30  # a (window, segment) expecting fewer positives: skipped with a note
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


#: The segmented method a patch is written as (its state holds a global map and per-level terms).
PATCH_METHOD = "partial_pooling"
