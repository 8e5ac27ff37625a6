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
