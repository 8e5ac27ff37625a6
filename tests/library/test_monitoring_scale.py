"""The monitor's window scored from its tables (one pass, Poisson replicates) against the row path
(``scoring.score`` on the rows, row bootstrap), on a window small enough for both: the same segment
names, counts, positives; ratio, log loss and Brier equal to summation order; ECE within the grid's bound;
the ratio's interval close (same large-sample law, not the same draws)."""

from __future__ import annotations

import pandas as pd
import pytest

from calibflow import calibrators as C
from calibflow import monitor as mon
from calibflow.experiments.monitoring import DAY0, simulate_stream
from calibflow.monitor import scale as MS
from calibflow.monitor.scoring import unjudged
from calibflow.pipeline import monitor as stage

#: One interval on both paths (``intervals.ratio_interval`` from the counts): equal, not merely close.
EXACT = ("calibration_ratio", "ratio_low", "ratio_high", "ratio_se", "log_loss", "brier",
         "expected_positives")


@pytest.fixture(scope="module")
def window():
    df = simulate_stream("stable", 3, days=1, rows=200_000, warmup=1)
    warm, day = df[df["day"] < 0], df[df["day"] == 0].reset_index(drop=True)
    champ = C.make("platt").fit(warm["score"].to_numpy()[:5000], warm["label"].to_numpy()[:5000])
    return day, champ, mon.Window(DAY0, DAY0 + pd.Timedelta(days=1))


def _row_scores(day, champ, cfg, segments, kind="score"):
    p = mon.predict_frame(champ, day, kind)
    y = day["label"].to_numpy(float)
    return {s: mon.score(y[m], p[m], cfg) for s, m in mon.segment_masks(day, segments)}


def test_table_scores_equal_the_row_scores(window):
    day, champ, _ = window
    cfg = mon.MonitorConfig(n_bootstrap=200)
    rows = _row_scores(day, champ, cfg, ("segment",))
    tabs = MS.score_frame(day, champ, "score", cfg, ("segment",), seed=1)
    assert list(tabs) == list(rows) == ["all", "segment=A", "segment=B"]
    for seg, r in rows.items():
        t = tabs[seg]
        assert t["n"] == r["n"] and t["positives"] == r["positives"] and t["skipped"] == r["skipped"] == ""
        for k in EXACT:
            assert t[k] == pytest.approx(r[k], rel=1e-12), (seg, k)
        assert abs(t["ece"] - r["ece"]) < 1e-3
        assert t["ratio_low"] < t["calibration_ratio"] < t["ratio_high"]


def test_table_scores_are_seeded_and_skip_as_the_rows_do(window):
    day, champ, _ = window
    cfg = mon.MonitorConfig(n_bootstrap=50, min_positives=10**6)
    a = MS.score_frame(day, champ, "score", cfg, ("segment",), seed=4)
    rows = _row_scores(day, champ, cfg, ("segment",))
    assert a.keys() == rows.keys()
    for seg in rows:  # every window too small: the same counts, and the same note from the gate's rule
        assert (a[seg]["n"], a[seg]["positives"]) == (rows[seg]["n"], rows[seg]["positives"])
        assert a[seg]["expected_positives"] == pytest.approx(rows[seg]["expected_positives"], rel=1e-9)
        assert "not judged" in unjudged(rows[seg], [], cfg)
        assert unjudged(a[seg], [], cfg) == unjudged(rows[seg], [], cfg)
    cfg = mon.MonitorConfig(n_bootstrap=50)
    b, c = (MS.score_frame(day, champ, "score", cfg, (), seed=s) for s in (4, 5))
    assert b == MS.score_frame(day, champ, "score", cfg, (), seed=4)
    # the ratio interval is exact (intervals.ratio_interval, issue 36): nothing left depends on the seed
    assert b == c and b["all"]["ratio_low"] < b["all"]["calibration_ratio"] < b["all"]["ratio_high"]


def test_stage_switch_scores_large_windows_from_tables(window, monkeypatch):
    """Below ``AGGREGATE_ROWS`` the stage keeps the row path; at or above it ``process_window`` gets the
    tables' scores, and the history it writes has the row path's counts and ratios."""
    day, champ, w = window
    cfg = mon.MonitorConfig(n_bootstrap=100)
    state = mon.MonitorState.start("s", champ, {})
    assert stage._scores_from_tables(state, w, day, cfg, ("segment",)) is None
    monkeypatch.setattr(MS, "AGGREGATE_ROWS", len(day))
    scores = stage._scores_from_tables(state, w, day, cfg, ("segment",))
    assert scores is not None
    big = mon.process_window(state, w, day, day.iloc[:0], cfg, ("segment",), None, scores)
    small = mon.process_window(state, w, day, day.iloc[:0], cfg, ("segment",))
    assert [r["segment"] for r in big.history] == [r["segment"] for r in small.history]
    for rb, rs in zip(big.history, small.history, strict=True):
        assert rb["n"] == rs["n"] and rb["positives"] == rs["positives"]
        assert rb["calibration_ratio"] == pytest.approx(rs["calibration_ratio"], rel=1e-12)
        assert rb["log_loss"] == pytest.approx(rs["log_loss"], rel=1e-12)
