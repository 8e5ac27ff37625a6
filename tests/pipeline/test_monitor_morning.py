"""The monitor a team reads every morning (issue 38): deliveries by content, a missing day, pending as a
state, 30 mornings with label delays of 1-3 days. Every test runs the real stage
(``calibflow.pipeline.monitor``) on a folder of daily Parquet files."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from helpers.monitor_data import make_project, write_days

from calibflow.experiments.monitoring import DAY0
from calibflow.pipeline import monitor as tm


def _state(root) -> dict:
    return json.loads((root / "monitoring/ads/state.json").read_text())


def _argv(root, now) -> list[str]:
    now = pd.Timestamp(now).isoformat()
    return ["--root", str(root), "--params", str(root / "params.yaml"), "--now", now]


def _day(root, d: int):
    return root / "data" / "stream" / f"day={d:03d}.parquet"


def _n(root, d: int) -> int:
    key = (DAY0 + pd.Timedelta(days=d)).isoformat()
    return next(r["n"] for r in _state(root)["history"] if r["window"] == key and r["segment"] == "all")


def test_a_reexported_day_under_another_name_and_compression_is_counted_once(tmp_path):
    df = make_project(tmp_path, "stable", days=8)
    day4 = df[df["day"] == 4][["time", "score", "label", "segment"]]
    # The same rows, shuffled, another codec, another name: not byte-identical, same content.
    copy = tmp_path / "data/stream/export-2026-01-05.parquet"
    day4.sample(frac=1.0, random_state=1).to_parquet(copy, index=False, compression="gzip")
    assert copy.read_bytes() != _day(tmp_path, 4).read_bytes()
    res = tm.run(tmp_path, tm.load_params(tmp_path / "params.yaml"), "ads", now=DAY0 + pd.Timedelta(days=10),
                 render=False)
    assert _n(tmp_path, 4) == 800  # not 1,600
    notes = [n for n in res["notices"] if "same rows" in n]
    assert len(notes) == 1, res["notices"]
    # The copy is the newer file: the note names it as the copy, the original as the original.
    assert "file export-2026-01-05.parquet is the same rows" in notes[0] and "of day=004.parquet" in notes[0]


def test_the_copy_named_is_the_later_file_even_when_it_sorts_first(tmp_path):
    make_project(tmp_path, "stable", days=8)
    copy = tmp_path / "data/stream/day=004 (copy).parquet"  # sorts before day=004.parquet
    copy.write_bytes(_day(tmp_path, 4).read_bytes())
    res = tm.run(tmp_path, tm.load_params(tmp_path / "params.yaml"), "ads", now=DAY0 + pd.Timedelta(days=10),
                 render=False)
    assert any("file day=004 (copy).parquet is a byte-identical copy of day=004.parquet" in n
               for n in res["notices"]), res["notices"]
    assert _n(tmp_path, 4) == 800


def test_a_missing_day_is_a_line_and_past_its_deadline_an_incident(tmp_path, capsys):
    make_project(tmp_path, "stable", days=10)
    _day(tmp_path, 5).unlink()
    assert tm.main(_argv(tmp_path, DAY0 + pd.Timedelta(days=6, hours=6))) == 0  # day 5 just ended
    out = capsys.readouterr().out
    assert "MISSING 2026-01-06: no rows delivered" in out and "INCIDENT" not in out
    assert tm.main(_argv(tmp_path, DAY0 + pd.Timedelta(days=12))) == 0  # past delivery_deadline (2D)
    out = capsys.readouterr().out
    assert "MISSING 2026-01-06" in out and "INCIDENT" in out
    assert "INCIDENT opened 2026-01-06 all delivery_missing" in out
    page = (tmp_path / "reports/pages/monitoring-ads.html").read_text()
    assert "no file delivered for window 2026-01-06" in page


def test_late_labels_are_pending_one_line_each_and_exit_0(tmp_path, capsys):
    df = make_project(tmp_path, "stable", days=10)
    days = df[df["day"] >= 0].copy()
    days.loc[days.index[days["day"] == 5][:10], "label"] = np.nan  # a matured day missing 10 labels
    write_days(tmp_path, days)
    assert tm.main(_argv(tmp_path, DAY0 + pd.Timedelta(days=10))) == 0
    cap = capsys.readouterr()
    assert cap.err == ""
    lines = [ln.strip() for ln in cap.out.splitlines() if ln.strip().startswith("pending")]
    assert lines[0].startswith("pending 2026-01-06: 10 row(s) without a label yet in day=005.parquet")
    assert any(ln.startswith("pending 2026-01-07: scored after window 2026-01-06") for ln in lines)
    assert any(ln.startswith("pending 2026-01-09: labels due by") for ln in lines)  # not matured
    assert len(lines) == 5  # days 5 (labels), 6, 7 (behind it), 8, 9 (not due)
    assert [pd.Timestamp(k).day - 1 for k in _state(tmp_path)["processed"]] == [0, 1, 2, 3, 4]
    page = (tmp_path / "reports/pages/monitoring-ads.html").read_text()
    assert "10 row(s) without a label yet" in page and "waits for an earlier window" in page
    # Past monitor.label_deadline (7D) the window is an incident and the later windows are scored.
    assert tm.main(_argv(tmp_path, DAY0 + pd.Timedelta(days=13, hours=1))) == 0
    out = capsys.readouterr().out
    assert "INCIDENT opened 2026-01-06 all labels_overdue" in out
    assert [pd.Timestamp(k).day - 1 for k in _state(tmp_path)["processed"]] == [0, 1, 2, 3, 4, 6, 7, 8, 9]


def test_thirty_mornings_with_label_delays_of_1_to_3_days_exit_0_and_score_each_window_once(tmp_path, capsys):
    """Each day's rows arrive the next morning with labels missing; each label arrives 1-3 days after
    its day ends. Every morning: exit 0, each waiting window named on the console and the page; in the
    end every window is scored exactly once, in order, none rescored."""
    df = make_project(tmp_path, "stable", days=30, rows=400, monitor={"label_delay": "1D"})
    for f in (tmp_path / "data/stream").glob("*.parquet"):
        f.unlink()
    days = df[df["day"] >= 0].copy()
    rng = np.random.default_rng(3)
    days["arrives"] = days["day"] + 1 + rng.integers(1, 4, len(days))  # labels in 1-3 days after the day
    seen: list[str] = []
    for d in range(30):
        morning = d + 1  # day d's file arrives the morning after it
        out = days[days["day"] <= d].copy()
        out.loc[out["arrives"] > morning, "label"] = np.nan
        write_days(tmp_path, out)
        assert tm.main(_argv(tmp_path, DAY0 + pd.Timedelta(days=morning, hours=6))) == 0, d
        cap = capsys.readouterr()
        assert "refused" not in cap.err and "Traceback" not in cap.err
        state = _state(tmp_path)
        waiting = {k for k, w in state["waits"].items() if not w.get("resolved")}
        for k in waiting:
            assert f"pending {k[:10]}" in cap.out, (d, k, cap.out)
        page = (tmp_path / "reports/pages/monitoring-ads.html").read_text()
        assert all(k[:10] in page for k in waiting)
        # Scored windows and waiting ones never overlap; nothing between them is lost.
        assert not waiting & set(state["processed"])
        assert set(state["processed"]) | waiting == {(DAY0 + pd.Timedelta(days=i)).isoformat()
                                                      for i in range(d + 1)}
        seen = state["processed"]
    state = _state(tmp_path)
    assert not any(n.startswith("rescored from") for n in state["notes"]), state["notes"]
    assert len(seen) == len(set(seen)) == 27  # days 0..26 (labels of 27-29 can still be missing)
    assert seen == sorted(seen)


def test_monitor_status_speaks_in_lines_not_one_json_line():
    from calibflow.cli.monitor import status_lines

    s = {"prod": 2, "windows": 12, "champion_version": 2, "promotions": 1, "incidents": 3,
         "open_incidents": 1, "pending": 2, "window": "2026-01-12T00:00:00", "calibration_ratio": 0.98765,
         "ece": 0.0123, "positives": 80, "n": 800}
    lines = status_lines("ads", s)
    assert lines[0] == "ads: champion v2 serves (registry prod: 2); 12 window(s) scored, 1 promotion(s)"
    assert "1 open of 3; 2 window(s) pending" in lines[1]
    assert "newest window 2026-01-12: sum p / sum y 0.988, ECE 0.0123, 80 positives of 800 rows" in lines[2]
    assert lines[-1] == "  page: reports/pages/monitoring-ads.html"
    assert status_lines("ads", {"prod": None}) == ["ads: no monitor run yet (calibflow monitor run)"]


def test_future_rows_a_one_class_day_and_an_empty_day_are_named_never_double_counted(tmp_path, capsys):
    """Issue 39's delivery cases: rows stamped in the future wait as pending (never scored early), a day
    with no positive is skipped with its reason, an empty day file is a missing day; exit 0."""
    df = make_project(tmp_path, "stable", days=8)
    days = df[df["day"] >= 0].copy()
    days.loc[days["day"] == 3, "label"] = 0.0  # one class
    future = days[days["day"] == 2].copy()
    future["time"] = future["time"] + pd.Timedelta(days=30)  # a clock gone wrong: 30 days ahead
    future["day"] = 99
    write_days(tmp_path, pd.concat([days, future]))
    empty = days[days["day"] == 5].iloc[:0]
    empty[["time", "score", "label", "segment"]].to_parquet(_day(tmp_path, 5), index=False)
    assert tm.main(_argv(tmp_path, DAY0 + pd.Timedelta(days=10))) == 0
    out = capsys.readouterr().out
    assert "MISSING 2026-01-06: no rows delivered" in out  # the empty file holds no row of its day
    assert "pending 2026-02-02: labels due by" in out  # the future rows wait; nothing scored early
    state = _state(tmp_path)
    assert "2026-02-02T00:00:00" not in state["processed"]
    assert any("2026-01-04" in n and "0 labelled positive(s)" in n for n in state["notes"])
    assert sorted(state["processed"]) == state["processed"] and len(set(state["processed"])) == 7


def test_a_window_past_its_deadline_has_its_own_event_not_a_drift_event():
    from calibflow.flows.monitor import ARRIVED, EVENT, incident_event

    inc = {"id": "ads/all/labels_overdue/2026-01-06T00:00:00", "source": "ads", "segment": "all",
           "metric": "labels_overdue", "opened": "2026-01-06T00:00:00", "closed": None, "windows": 1,
           "worst": 10.0, "reopened": 0, "version": 1, "band": [None, None]}
    ev = incident_event(inc)
    assert ev["event"] == "calibflow.monitor.labels_overdue" != EVENT
    assert incident_event({**inc, "closed": "2026-01-15T00:00:00"}, closed=True)["event"] == ARRIVED
    missing = incident_event({**inc, "metric": "delivery_missing"})
    assert missing["event"] == "calibflow.monitor.delivery_missing"
