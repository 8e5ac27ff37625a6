"""The 20-seed study's reduction and tables (``monitor_scenarios.summary`` / ``table``) on runs whose
numbers are known: the delay is the first alert on the target segment on or after the shift (not an
earlier false alarm), stable incidents count only windows before the shift, and the tables carry the
controls and the paired tests."""

from __future__ import annotations

import math

from calibflow.experiments import monitor_scenarios as X


def _sums(ratio: float, truth: float = 1.0) -> dict[int, dict[str, list[float]]]:
    """Ten days where every key serves ``ratio`` times the labels and the truth is ``truth`` times them."""
    return {d: {k: [ratio * 100, 100.0, truth * 100] for k in ("all", *X.COUNTRIES)} for d in range(10)}


def _run(scenario: str, seed: int, served: float) -> dict:
    w = [f"2026-01-{d + 1:02d}T00:00:00" for d in range(10)]
    return {
        "scenario": scenario, "seed": seed, "shift_day": 5,
        "alerts": [(2, "all", "ece"), (7, "country=DE", "calibration_ratio"), (8, "all", "ece"),
                   (6, "all", "calibration_ratio")],
        "alert_days": [2, 6, 7],
        "incidents": [{"opened": w[2]}, {"opened": w[6]}],
        "promotions": [(6, "platt")],
        "served": _sums(served), "never": _sums(0.75), "always": _sums(0.97),
    }


def test_summary_counts_the_first_alert_after_the_shift_and_stable_windows_before_it():
    s = X.summary(_run("global", 0, 1.0), days=10, last=5)
    assert s["delay"] == 1  # the alert on day 2 is a false alarm before the shift; day 6 detects
    assert s["stable_windows"] == 5 and s["stable_incidents"] == 1
    assert math.isclose(s["never"]["all"]["vs_truth"], 0.75)
    one = X.summary(_run("one_country", 0, 1.0), days=10, last=5)
    assert one["delay"] == 2  # DE's own first alert, day 7
    stable = X.summary(_run("stable", 0, 1.0), days=10, last=5)
    assert stable["delay"] is None and stable["stable_windows"] == 10 and stable["stable_incidents"] == 2


def test_table_reports_intervals_and_paired_tests_against_both_controls():
    runs = [X.summary(_run("global", s, 1.0 + 0.01 * (s % 3 - 1)), days=10, last=5) for s in range(6)]
    text = X.table(runs)
    assert "| global | all | 6/6 | 1.00 [1.00, 1.00] |" in text
    row = next(x for x in text.splitlines() if x.startswith("| global | all | 1.000"))
    assert "p = " in row and "0.750" in row and "0.970" in row  # the never and always controls
    assert "exact Poisson 95% upper bound" in text


def test_each_stable_incident_names_the_rule_that_opened_it():
    """The study says which rule opened each incident on a stable window: outside the learned band, the
    practical limit on one window, or that limit only on the segment's last windows pooled."""
    from calibflow import monitor as mon

    cfg = mon.MonitorConfig()
    w = "2026-01-03T00:00:00"
    state = mon.MonitorState(source="s")
    base = {"window": w, "version": 1, "skipped": None, "band_ratio": [0.8, 1.2], "band_ece": [0.0, 0.05],
            "ece": 0.01, "out": ["calibration_ratio"], "positives": 100.0}
    state.history = [
        {**base, "segment": "all", "calibration_ratio": 0.7, "ratio_se": 0.2},  # outside its band
        {**base, "segment": "country=DE", "calibration_ratio": 0.82, "ratio_se": 0.005},  # 16 se under 0.9
        {**base, "segment": "country=FR", "calibration_ratio": 0.85, "ratio_se": 0.05},  # 1 se: pooled only
    ]
    got = {r["segment"]: X.fired_by(state, {"opened": w, "segment": r["segment"],
                                            "metric": "calibration_ratio"}, cfg) for r in state.history}
    assert got == {"all": "band", "country=DE": "practical, one window", "country=FR": "pooled windows"}
    assert X.fired_by(state, {"opened": w, "segment": "all", "metric": "calibration_slope"}, cfg) == "limit"


def test_a_study_without_the_always_control_says_so_in_its_tables():
    runs = []
    for s in range(4):
        r = _run("one_country", s, 1.0)
        del r["always"]
        runs.append(X.summary(r, days=10, last=5))
    assert all("always" not in r for r in runs)
    text = X.table(runs)
    row = next(x for x in text.splitlines() if x.startswith("| one_country | DE | 1.000"))
    assert "not run" in row and "0.750" in row
