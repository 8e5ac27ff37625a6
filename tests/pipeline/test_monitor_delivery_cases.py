"""Issue 39's delivery cases the hostile rounds did not reach: rows repeated inside a day's file, a day
replaced with another schema, time-zone-aware times and a daylight-saving day. Each runs the real stage
(``calibflow.pipeline.monitor``) on a folder of daily Parquet files; nothing is double counted, a bad day
is refused in one line and recovers, and the served champion is unaffected."""

from __future__ import annotations

import json
import shutil

import pandas as pd
from helpers.monitor_data import make_project, write_days

from calibflow.experiments.monitoring import DAY0
from calibflow.pipeline import monitor as tm

NOW = DAY0 + pd.Timedelta(days=10)  # days 0..7 have matured


def _state(root) -> dict:
    return json.loads((root / "monitoring/ads/state.json").read_text())


def _argv(root, now=NOW) -> list[str]:
    now = pd.Timestamp(now).isoformat()
    return ["--root", str(root), "--params", str(root / "params.yaml"), "--now", now]


def _day(root, d: int):
    return root / "data" / "stream" / f"day={d:03d}.parquet"


def _run(root, now=NOW, **kw) -> dict:
    """The stage's work without the page (the command's lines and exit code are under test only where
    ``tm.main`` is called)."""
    return tm.run(root, tm.load_params(root / "params.yaml"), "ads", now=now, render=False, **kw)


def _all_rows(root) -> dict[str, int]:
    return {r["window"][:10]: r["n"] for r in _state(root)["history"] if r["segment"] == "all"}


def test_a_file_written_twice_over_counts_each_row_once_on_both_paths(tmp_path):
    rows_path, tables_path = tmp_path / "rows", tmp_path / "tables"
    rows_path.mkdir()
    make_project(rows_path, "stable", days=8)
    d4 = pd.read_parquet(_day(rows_path, 4))
    pd.concat([d4, d4.sample(frac=1.0, random_state=3)]).to_parquet(_day(rows_path, 4), index=False)
    shutil.copytree(rows_path, tables_path)
    for root, kw in ((rows_path, {}), (tables_path, {"table_rows": 100, "gate_rows": 10**9})):
        res = _run(root, **kw)
        assert _all_rows(root)["2026-01-05"] == len(d4) == 800  # not 1,600
        note = "day=004.parquet holds each of its rows 2 times"
        assert any(note in n for n in res["notices"]), res["notices"]
    one, two = (_state(r)["history"] for r in (rows_path, tables_path))
    key = (DAY0 + pd.Timedelta(days=4)).isoformat()
    a, b = ([h for h in hist if h["window"] == key and h["segment"] == "all"][0] for hist in (one, two))
    assert abs(a["calibration_ratio"] - b["calibration_ratio"]) < 1e-9


def test_scattered_repeats_are_counted_as_delivered_and_named(tmp_path):
    make_project(tmp_path, "stable", days=8)
    d4 = pd.read_parquet(_day(tmp_path, 4))
    pd.concat([d4, d4.iloc[:25]]).to_parquet(_day(tmp_path, 4), index=False)
    res = _run(tmp_path)
    assert _all_rows(tmp_path)["2026-01-05"] == 825  # real logs can repeat rows: never silently dropped
    assert any("day=004.parquet: 25 row(s) repeat another row of the file exactly" in line
               for line in tm.report_lines(res)), res["notices"]


def test_a_day_replaced_with_another_schema_is_refused_in_one_line_and_recovers(tmp_path, capsys):
    make_project(tmp_path, "stable", days=8)
    assert tm.main(_argv(tmp_path)) == 0
    before = _state(tmp_path)
    served = (tmp_path / "monitoring/ads/calibrator.json").read_bytes()
    capsys.readouterr()
    good = pd.read_parquet(_day(tmp_path, 4))
    good.rename(columns={"label": "clicked"}).to_parquet(_day(tmp_path, 4), index=False)
    assert tm.main(_argv(tmp_path, NOW + pd.Timedelta(days=1))) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "file day=004.parquet: column 'label' is missing (800 rows)" in err[0], err
    after = _state(tmp_path)
    assert after["champion"] == before["champion"] and after["versions"] == before["versions"]
    assert (tmp_path / "monitoring/ads/calibrator.json").read_bytes() == served
    assert _all_rows(tmp_path)["2026-01-05"] == 800  # the refused file's scores are kept, not doubled
    good.to_parquet(_day(tmp_path, 4), index=False)  # fixed: the same rows again
    assert tm.main(_argv(tmp_path, NOW + pd.Timedelta(days=1))) == 0
    assert _all_rows(tmp_path)["2026-01-05"] == 800


def test_time_zone_aware_and_daylight_saving_times_are_placed_in_utc_windows_once(tmp_path):
    naive, aware, local = (tmp_path / n for n in ("naive", "aware", "local"))
    for root in (naive, aware, local):
        root.mkdir()
        df = make_project(root, "stable", days=8)
    days = df[df["day"] >= 0].copy()
    utc = pd.to_datetime(days["time"]).dt.tz_localize("UTC")
    write_days(aware, days.assign(time=utc.dt.tz_convert("Europe/Berlin")))
    # Wall-clock times in Berlin across the change to summer time (2026-03-29): 23- and 24-hour days.
    shift = pd.Timestamp("2026-03-25") - DAY0
    berlin = (utc + shift).dt.tz_convert("Europe/Berlin")
    write_days(local, days.assign(time=berlin))
    for root, now in ((naive, NOW), (aware, NOW), (local, NOW + shift)):
        assert not _run(root, now)["refused"]
    assert _all_rows(aware) == _all_rows(naive)  # an aware time is its UTC instant
    moved = {(pd.Timestamp(k) + shift).strftime("%Y-%m-%d"): v for k, v in _all_rows(naive).items()}
    assert _all_rows(local) == moved  # the DST day neither loses nor doubles an hour's rows
