"""One reader of time columns: the run's split (``calibflow.timesplit``) and the monitor's windows
(``calibflow.monitor.deliveries``) place epoch times in seconds, milliseconds, microseconds and nanoseconds
at the same instants."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from calibflow import monitor as mon
from calibflow import timesplit
from calibflow.monitor import deliveries as D

TRUE = pd.Series(pd.date_range("2026-03-01 00:00:01", periods=96, freq="45min")).astype("datetime64[ns]")
PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _epoch(unit: str) -> pd.Series:
    return (TRUE.astype("int64") // (10**9 // PER_SECOND[unit])).astype("int64")  # ns since 1970


@pytest.mark.parametrize("unit", list(PER_SECOND))
def test_run_and_monitor_read_each_epoch_unit_alike(unit):
    col = _epoch(unit)
    assert timesplit.epoch_unit(col) == unit
    run_t = timesplit.to_datetime(col)
    monitor_t = D.to_times(col)
    assert run_t.tolist() == TRUE.tolist()
    assert monitor_t.tolist() == TRUE.tolist()
    cfg = mon.MonitorConfig()
    assert mon.window_index(monitor_t, cfg).tolist() == mon.window_index(TRUE, cfg).tolist()
    w = timesplit.time_windows(run_t.min(), run_t.max(), {"test_last": "1d", "calib_last": "1d"})
    assert timesplit.assign_splits(run_t, w).tolist() == timesplit.assign_splits(TRUE, w).tolist()


@pytest.mark.parametrize("unit", ["s", "ms"])
def test_float_epochs_with_nulls_keep_their_unit(unit):
    col = _epoch(unit).astype(float)
    col.iloc[3] = np.nan
    if unit == "s":
        col = col + 0.5  # fractional seconds
    t = timesplit.to_datetime(col)
    assert pd.isna(t.iloc[3])
    want = TRUE + (pd.Timedelta("500ms") if unit == "s" else pd.Timedelta(0))
    assert t.drop(index=3).tolist() == want.drop(index=3).tolist()
    assert D.to_times(col).drop(index=3).tolist() == want.drop(index=3).tolist()


def test_zoned_text_keeps_its_zone_for_the_run_and_is_utc_for_the_monitor():
    text = pd.Series(["2026-03-01T09:00:00+02:00", "2026-03-01T10:00:00+02:00"])
    assert str(timesplit.to_datetime(text).dt.tz) == "UTC+02:00"
    assert D.to_times(text).tolist() == [pd.Timestamp("2026-03-01 07:00"), pd.Timestamp("2026-03-01 08:00")]


_SPLITS = """
import json, sys
from calibflow import sources as S
from calibflow.aggregate import source_stream
out = {}
for col in ("ts_utc", "ts_paris"):
    spec = S.parse_source("ads", {"path": sys.argv[1], "score": "p", "label": "y", "time": col,
                                  "split": {"test_start": "2026-09-08", "calib_last": "3d"}})
    rec = source_stream.write_split(spec, 0, f"{sys.argv[2]}.{col}.parquet")
    out[col] = {"counts": rec["counts"], "digest": rec["rows_digest"], "split": rec["split"]}
print(json.dumps(out, default=str))
"""


def test_the_time_split_of_a_zoned_column_is_the_rows_split_on_a_machine_in_any_zone(tmp_path):
    """The same file and params split the same rows whatever the machine's time zone, and the streamed
    split (SQL) is the row reader's (``timesplit``: whole days in the column's own zone, docs/sources.md).
    DuckDB took the system's zone (``TZ``): on a machine in Berlin a UTC column's split moved by two hours
    (calib/test/train 72/74/94 rows instead of 72/72/96), and a Paris column split in the machine's days."""
    n = 24 * 10
    rng = np.random.default_rng(0)
    t = pd.Series(pd.date_range("2026-09-01", periods=n, freq="h", tz="UTC"))
    frame = pd.DataFrame({"ts_utc": t, "ts_paris": t.dt.tz_convert("Europe/Paris"),
                          "p": rng.uniform(0.01, 0.5, n), "y": rng.integers(0, 2, n)})
    path = tmp_path / "d.parquet"
    frame.to_parquet(path)
    got = {}
    for machine, tz in (("this machine", None), ("Berlin", "Europe/Berlin")):
        env = {**os.environ, **({"TZ": tz} if tz else {})}
        run = subprocess.run([sys.executable, "-c", _SPLITS, str(path), str(tmp_path / machine)], env=env,
                             capture_output=True, text=True, check=True)
        got[machine] = json.loads(run.stdout)
    read = pd.read_parquet(path)
    for col in ("ts_utc", "ts_paris"):
        w = timesplit.time_windows(read[col].min(), read[col].max(), {"test_start": "2026-09-08",
                                                                      "calib_last": "3d"})
        by_rows = pd.Series(timesplit.assign_splits(read[col], w))
        by_rows = by_rows[by_rows != ""]
        for machine, out in got.items():
            assert out[col]["counts"] == by_rows.value_counts().to_dict(), (col, machine, out[col])
            rows = pd.read_parquet(tmp_path / f"{machine}.{col}.parquet", columns=["row", "split"])
            assert (rows.set_index("row")["split"].sort_index() == by_rows).all(), (col, machine)
        assert got["Berlin"][col] == got["this machine"][col], col
    assert got["Berlin"]["ts_utc"]["counts"] == {"calib": 72, "test": 72, "train": 96}  # the UTC days
    assert got["Berlin"]["ts_paris"]["counts"] != got["Berlin"]["ts_utc"]["counts"]  # Paris days differ
