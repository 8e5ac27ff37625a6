"""Which (window, segment) the monitor judges: on the positives it expects, never on the window's own.

A segment judged only when its labels reach ``min_positives`` is judged on its luckiest days, and a
calibrated one then reads low (issue 38's stable study paged on two such countries at 0.49).
"""

from __future__ import annotations

import numpy as np

from calibflow import monitor as mon
from calibflow.monitor.scoring import unjudged

CFG = mon.MonitorConfig(min_positives=30, calib_windows=14, min_calib_windows=3)


def _row(positives: int, expected: float) -> dict:
    return {"n": 10_000, "positives": positives, "expected_positives": expected, "skipped": ""}


def test_a_small_segment_on_its_lucky_day_is_not_judged():
    why = unjudged(_row(36, 17.2), [17, 19, 16, 18, 20], CFG)
    assert why.startswith("17.2 expected positive(s), 18.0 a window before < min_positives=30")
    assert "(36 labelled)" in why


def test_a_segment_the_champion_under_predicts_by_half_is_judged_on_its_history():
    assert unjudged(_row(25, 20.0), [40, 41, 39], CFG) == ""
    assert unjudged(_row(25, 20.0), [40, 41], CFG) != ""  # fewer than min_calib_windows: no history yet


def test_a_segment_expected_to_reach_min_positives_is_judged_on_an_unlucky_day():
    assert unjudged(_row(22, 31.0), [], CFG) == ""


def test_a_window_without_positives_keeps_its_own_note():
    assert unjudged({"n": 5, "positives": 0, "skipped": "0 labelled positive(s): not judged"}, [], CFG) \
        == "0 labelled positive(s): not judged"


def test_judged_windows_of_a_calibrated_segment_are_not_selected_low():
    """A calibrated segment expecting 29 positives a day, 6,000 days: the windows the rule judges pool to
    sum p / sum y within 0.02 of 1. Judging on the window's own positives (the old rule) pools to about
    0.83 on the same days: the control that shows the test can tell the two apart."""
    rng = np.random.default_rng(7)
    y = rng.poisson(29.0, 6000)
    judged = np.array([unjudged(_row(int(y[t]), 29.0), list(y[:t]), CFG) == "" for t in range(y.size)])
    assert 0.2 < judged.mean() < 0.8  # the history sometimes clears 30, sometimes not
    assert abs(29.0 * judged.sum() / y[judged].sum() - 1) < 0.02
    old = y >= CFG.min_positives
    assert 29.0 * old.sum() / y[old].sum() < 0.9


def _scored(ratio: float, low: float, high: float) -> dict:
    return {"calibration_ratio": ratio, "ratio_low": low, "ratio_high": high, "ece": 0.01}


def test_the_floor_is_judged_on_the_interval_the_learned_band_on_the_value():
    from calibflow.monitor.thresholds import ratio_outside

    cfg = mon.MonitorConfig(floor_ratio=(0.5, 2.0))
    no_band = {"calibration_ratio": [0.5, 2.0], "learned_ratio": [None, None], "ece": [None, None]}
    # 14 positives where 29 were expected: past the floor by value, but the interval says it may be 1
    assert not ratio_outside(_scored(2.07, 1.2, 3.7), no_band, cfg)
    assert ratio_outside(_scored(2.6, 2.1, 3.2), no_band, cfg)  # wholly past the floor
    assert ratio_outside(_scored(0.4, 0.3, 0.48), no_band, cfg)
    learned = {**no_band, "calibration_ratio": [0.8, 1.2], "learned_ratio": [0.8, 1.2]}
    assert ratio_outside(_scored(1.25, 0.9, 1.7), learned, cfg)  # the learned band: the value


def test_a_calibrated_30_positive_segment_rarely_breaches_the_floor_by_its_interval():
    """Windows of a calibrated segment expecting 30 positives: the value passes the floor 2 about once in
    1,000 windows (at 14 positives or fewer); its interval lies wholly past the floor in none of 20,000."""
    from calibflow.intervals import ratio_interval
    from calibflow.monitor.thresholds import ratio_outside

    cfg = mon.MonitorConfig(floor_ratio=(0.5, 2.0))
    band = {"calibration_ratio": [0.5, 2.0], "learned_ratio": [None, None], "ece": [None, None]}
    y = np.random.default_rng(3).poisson(30.0, 20_000).astype(float)
    y = y[y > 0]
    lo, hi = ratio_interval(y, 30.0, 30.0 * (1 - 0.01), 0.95)
    by_value = np.mean(30.0 / y > 2.0)
    assert 3e-4 < by_value < 3e-3  # the control: the value alone does breach it
    outs = [ratio_outside(_scored(30.0 / k, a, b), band, cfg) for k, a, b in zip(y, lo, hi, strict=True)]
    assert sum(outs) == 0


def test_one_click_on_a_row_served_zero_does_not_make_a_slope_alert():
    """An isotonic champion serves exactly 0 to its bottom block. A calibrated segment-window of 3,000
    rows with 30 such rows and one click among them: the slope stays near 1 (the logits are cut at
    ``logit(1 / 2n)``); fitted on the raw logits (the control) that one row pulls it far under 1."""
    from sklearn.linear_model import LogisticRegression

    from calibflow import metrics as M
    from calibflow.monitor.thresholds import slope_off

    rng = np.random.default_rng(11)
    p = 1 / (1 + np.exp(-rng.normal(-3.5, 0.7, 3000)))
    y = (rng.random(3000) < p).astype(float)
    p[:30], y[:30] = 0.0, 0.0
    y[0] = 1.0
    row = mon.calibration_slope(y, p)
    assert abs(row["calibration_slope"] - 1) < 0.35
    assert not slope_off(row, mon.MonitorConfig(), n_segments=10)
    z = np.log(M.clip_probability(p)) - np.log1p(-M.clip_probability(p))
    raw = LogisticRegression(C=1e9, max_iter=1000).fit(z[:, None], y).coef_[0, 0]
    assert raw < 0.6
