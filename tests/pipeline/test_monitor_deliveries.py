"""Deliveries as they happen: late, replaced, duplicated and broken day files; NULL labels; time columns.

Every test runs the real stage (``calibflow.pipeline.monitor``) on a folder of daily Parquet files. The
reference for "rescored from there" is a fresh run on the final files: the rescored history and gates must
equal it exactly (the bootstrap draws are seeded per window, so they can).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import yaml
from helpers.monitor_data import make_project, write_days

from calibflow import monitor as mon
from calibflow.experiments.monitoring import DAY0
from calibflow.pipeline import monitor as tm

NOW = DAY0 + pd.Timedelta(days=14)  # days 0..11 have matured (label_delay 2D)


def _state(root) -> dict:
    return json.loads((root / "monitoring/ads/state.json").read_text())


def _run(root, **kw) -> dict:
    return tm.run(
        root, tm.load_params(root / "params.yaml"), "ads", now=kw.pop("now", NOW), render=False, **kw
    )


def _day(root, d: int):
    return root / "data" / "stream" / f"day={d:03d}.parquet"


VERSION_KEYS = {"version", "champion_version", "new_version"}


def _scores(root) -> tuple[list, list]:
    """History and gates without version numbers (a rescore never reuses a withdrawn version's number)."""
    s = _state(root)
    strip = [{k: v for k, v in r.items() if k not in VERSION_KEYS} for r in s["history"]]
    return strip, [{k: v for k, v in g.items() if k not in VERSION_KEYS} for g in s["gates"]]


def _fresh(tmp_path, name: str, df: pd.DataFrame) -> tuple[list, list]:
    """The history and gates of one run from scratch on ``df``'s days (the rescoring reference)."""
    ref = tmp_path / name
    ref.mkdir()
    make_project(ref, "base_rate", days=12, shift_day=6)
    shutil.rmtree(ref / "data" / "stream")
    write_days(ref, df)
    _run(ref)
    return _scores(ref)


def test_late_day_is_scored_and_later_windows_rescored(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    df = make_project(root, "base_rate", days=12, shift_day=6)
    late = _day(root, 5)
    keep = late.read_bytes()
    late.unlink()
    first = _run(root)
    assert len(first["windows"]) == 11 and (DAY0 + pd.Timedelta(days=5)).isoformat() not in first["windows"]
    late.write_bytes(keep)  # the day arrives after days 6..11 were scored
    second = _run(root)
    assert second["windows"][0] == (DAY0 + pd.Timedelta(days=5)).isoformat() and len(second["windows"]) == 7
    assert any("delivered late" in n for n in second["notices"])
    assert _scores(root) == _fresh(tmp_path, "ref", df[df["day"] >= 0])


def test_replaced_scored_day_is_detected_and_rescored(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    df = make_project(root, "base_rate", days=12, shift_day=6)
    _run(root)
    new = df[df["day"] >= 0].copy()
    flip = new.index[(new["day"] == 3) & (new["label"] == 0)][:40]
    new.loc[flip, "label"] = 1.0  # a corrected delivery of day 3
    write_days(root, new[new["day"] == 3])
    res = _run(root)
    assert res["windows"][0] == (DAY0 + pd.Timedelta(days=3)).isoformat() and len(res["windows"]) == 9
    assert any("files of window 2026-01-04 changed (day=003.parquet)" in n for n in res["notices"])
    assert _scores(root) == _fresh(tmp_path, "ref", new)
    # Nothing changed since: nothing is rescored.
    assert _run(root)["windows"] == []


def test_duplicate_day_file_is_ignored_not_counted_twice(tmp_path):
    make_project(tmp_path, "stable", days=8)
    shutil.copy(_day(tmp_path, 4), tmp_path / "data/stream/day=004 (copy).parquet")
    res = _run(tmp_path, now=DAY0 + pd.Timedelta(days=10))
    assert any("byte-identical copy of day=004" in n and "ignored" in n for n in res["notices"])
    row = next(
        r
        for r in _state(tmp_path)["history"]
        if r["window"].startswith("2026-01-05") and r["segment"] == "all"
    )
    assert row["n"] == 800  # not 1,600


def test_broken_day_is_refused_in_one_line_and_stays_pending(tmp_path, capsys):
    df = make_project(tmp_path, "stable", days=10)
    bad = df[df["day"] == 6][["time", "score", "label"]]  # the segment column is missing
    bad.to_parquet(_day(tmp_path, 6), index=False)
    labels = df[df["day"] == 7][["time", "score", "label", "segment"]].copy()
    labels.loc[labels.index[:3], "label"] = 2.0
    labels.to_parquet(_day(tmp_path, 7), index=False)
    argv = ["--root", str(tmp_path), "--params", str(tmp_path / "params.yaml"), "--now", "2026-01-13"]
    assert tm.main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert "source 'ads': file day=006.parquet: column 'segment' is missing (800 rows" in err[0]
    assert "source 'ads': file day=007.parquet: column 'label' has 3 label value(s) outside {0, 1}" in err[1]
    assert "Traceback" not in "".join(err)
    done = [pd.Timestamp(k).day - 1 for k in _state(tmp_path)["processed"]]
    assert done == [0, 1, 2, 3, 4, 5, 8, 9]  # days 6 and 7 pending, the rest scored
    write_days(tmp_path, df[df["day"].isin([6, 7])])  # fixed deliveries
    assert tm.main(argv) == 0
    assert [pd.Timestamp(k).day - 1 for k in _state(tmp_path)["processed"]] == list(range(10))


def test_null_labels_mean_not_known_yet(tmp_path, capsys):
    df = make_project(tmp_path, "stable", days=10)
    days = df[df["day"] >= 0].copy()
    days.loc[days["day"] >= 8, "label"] = np.nan  # days 8, 9: labels not in yet (not matured either)
    days.loc[days.index[days["day"] == 5][:10], "label"] = np.nan  # a matured day missing 10 labels
    write_days(tmp_path, days)
    argv = ["--root", str(tmp_path), "--params", str(tmp_path / "params.yaml"), "--now", "2026-01-10"]
    # Issue 38: labels not in yet are a state (pending), not an error: exit 0, one line per window.
    assert tm.main(argv) == 0  # day 5 held; days 8-9 not matured, not checked
    cap = capsys.readouterr()
    assert cap.err == ""
    assert "pending 2026-01-06: 10 row(s) without a label yet in day=005.parquet" in cap.out
    assert "other than 0/1" not in cap.out
    # Day 6 waits behind day 5 (scored in order: never scored twice when day 5's labels arrive).
    assert [pd.Timestamp(k).day - 1 for k in _state(tmp_path)["processed"]] == [0, 1, 2, 3, 4]


def test_text_and_integer_time_columns_give_the_same_windows(tmp_path):
    ref = tmp_path / "ref"
    ref.mkdir()
    df = make_project(ref, "stable", days=8)
    _run(ref, now=DAY0 + pd.Timedelta(days=10))
    want = _scores(ref)
    for kind in ("iso", "epoch_s", "epoch_ms"):
        root = tmp_path / kind
        root.mkdir()
        make_project(root, "stable", days=8)
        days = df[df["day"] >= 0].copy()
        t = days["time"]
        days["time"] = {
            "iso": t.dt.strftime("%Y-%m-%dT%H:%M:%S.%f"),
            "epoch_s": (t.astype("int64") // 10**9).astype("int64"),
            "epoch_ms": (t.astype("int64") // 10**6).astype("int64"),
        }[kind]
        write_days(root, days)
        _run(root, now=DAY0 + pd.Timedelta(days=10))
        got = _scores(root)
        if kind == "epoch_s":  # whole seconds: the same windows and counts, scores may differ by nothing
            assert [(r["window"], r["segment"], r["n"]) for r in got[0]] == [
                (r["window"], r["segment"], r["n"]) for r in want[0]
            ]
        else:
            assert got == want, kind


def test_quoted_time_column_and_fixed_grid_survive_retention(tmp_path):
    make_project(tmp_path, "stable", days=21, monitor={"period": "7D", "origin": "2025-12-29"})
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["sources"]["ads"]["time"] = 'my"ts'
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for f in sorted((tmp_path / "data/stream").iterdir()):
        pd.read_parquet(f).rename(columns={"time": 'my"ts'}).to_parquet(f, index=False)
    first = _run(tmp_path, now=DAY0 + pd.Timedelta(days=21))
    assert all(pd.Timestamp(k).dayofweek == 0 for k in first["windows"])  # Mondays: the origin's grid
    for d in range(3):  # retention drops the oldest days
        _day(tmp_path, d).unlink()
    again = _run(tmp_path, now=DAY0 + pd.Timedelta(days=30))
    assert again["windows"] == ["2026-01-19T00:00:00"] and not again["notices"]  # no rescore, same grid
    assert _state(tmp_path)["processed"] == [*first["windows"], "2026-01-19T00:00:00"]


def test_rescore_and_start_from_the_command_line(tmp_path, capsys):
    make_project(tmp_path, "base_rate", days=12, shift_day=6)
    base = ["--root", str(tmp_path), "--params", str(tmp_path / "params.yaml"), "--now", "2026-01-15"]
    assert tm.main([*base, "--start", "2026-01-03"]) == 0
    state = _state(tmp_path)
    assert state["processed"][0].startswith("2026-01-03") and len(state["processed"]) == 10
    before = _scores(tmp_path)
    capsys.readouterr()
    assert tm.main([*base, "--rescore-from", "2026-01-08T12:00"]) == 0
    out = capsys.readouterr().out
    assert "rescoring from 2026-01-08: rescore asked" in out and "5 window(s)" in out
    assert _scores(tmp_path) == before  # deterministic: the same numbers again
    assert mon.MonitorState.from_json((tmp_path / "monitoring/ads/state.json").read_text()).start_at
