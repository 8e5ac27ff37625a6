"""One reader of time columns: the run's split (``calibflow.timesplit``) and the monitor's windows
(``calibflow.monitor.deliveries``) place epoch times in seconds, milliseconds, microseconds and nanoseconds
at the same instants."""

from __future__ import annotations

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
