"""Time splits of a source: fit on the past, calibrate on the recent past, test on the future.

A time split is a mapping (``sources.<name>.split`` in params.yaml) either relative to the end of the data,
``{test_last: 7d, calib_last: 14d}``, or with explicit boundaries, ``{calib_start: 2026-09-01,
test_start: 2026-09-15, test_end: 2026-09-22}`` (the two may be mixed: an explicit ``test_start`` with a
``calib_last``). Windows are half-open ``[start, end)`` and whole periods (``period``, default one day) in
the time column's own time zone: the relative end is the start of the period after the last timestamp.
Rows before the calibration window are ``train`` (a features source trains its base model on them; a score
source does not use them), rows at or after the test end are left out, and no row is in two splits.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
# pandas is imported in the functions that use it: the params check (``check_time_split``, through
# ``calibflow.sources.parse_source``) runs on every ``calibflow run`` and needs no pandas for durations and
# YAML dates.

_DURATION = re.compile(r"^\s*(\d+)\s*(min|h|d|w)\s*$")
_UNITS = {"min": "min", "h": "h", "d": "D", "w": "W"}
DEFAULTS = {"test_last": "7d", "calib_last": "14d", "period": "1d"}


_SECONDS = {"min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest span a ``Timedelta`` holds (int64 nanoseconds): about 292 years.
_MAX_SECONDS = (2**63 - 1) // 10**9


def _duration(value: Any) -> tuple[int, str]:
    """``(n, unit)`` of a duration (an int is days), checked without pandas; else ``ValueError``."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        n, unit = value, "d"
    else:
        m = _DURATION.match(str(value))
        if not m or int(m.group(1)) <= 0:
            raise ValueError(f"{value!r} is not a duration (write e.g. 7d, 12h, 2w or 30min)")
        n, unit = int(m.group(1)), m.group(2)
    if n * _SECONDS[unit] > _MAX_SECONDS:
        raise ValueError(f"{value!r} is longer than the 292 years a duration can span")
    return n, unit


def parse_duration(value: Any) -> pd.Timedelta:
    """``"7d"``, ``"12h"``, ``"2w"``, ``"30min"`` (an int is days) as a ``Timedelta``; else ``ValueError``."""
    import pandas as pd

    n, unit = _duration(value)
    return pd.Timedelta(weeks=n) if unit == "w" else pd.Timedelta(n, unit=_UNITS[unit])


def _timestamp(value: Any, key: str) -> pd.Timestamp:
    import pandas as pd

    try:
        ts = pd.Timestamp(value)
    except (ValueError, TypeError):
        raise ValueError(f"{key}: {value!r} is not a date (write e.g. 2026-09-01)") from None
    if pd.isna(ts):
        raise ValueError(f"{key}: {value!r} is not a date (write e.g. 2026-09-01)")
    return ts


def check_time_split(cfg: Mapping[str, Any]) -> None:
    """Check the keys' values of a time split (durations and dates); a ``ValueError`` names the key."""
    for key in ("test_last", "calib_last", "period"):
        if key in cfg:
            try:
                _duration(cfg[key])
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
    for key in ("calib_start", "test_start", "test_end"):
        value = cfg.get(key)
        if key in cfg and not (isinstance(value, dt.date) and 1678 <= value.year <= 2261):
            _timestamp(value, key)  # text (and a date outside what a Timestamp holds) is pandas' to judge
    if "test_last" in cfg and "test_start" in cfg:
        raise ValueError("give test_last or test_start, not both")
    if "calib_last" in cfg and "calib_start" in cfg:
        raise ValueError("give calib_last or calib_start, not both")


def _like(ts: pd.Timestamp, ref: pd.Timestamp) -> pd.Timestamp:
    """``ts`` in ``ref``'s time zone (explicit boundaries are wall-clock times of the data's zone)."""
    if ref.tzinfo is not None and ts.tzinfo is None:
        return ts.tz_localize(ref.tzinfo)
    if ref.tzinfo is None and ts.tzinfo is not None:
        return ts.tz_convert(None)
    return ts


@dataclass(frozen=True)
class TimeWindows:
    """Half-open ``[start, end)`` calibration and test windows (calibration ends where test starts)."""

    calib_start: pd.Timestamp
    test_start: pd.Timestamp
    test_end: pd.Timestamp

    def as_dict(self) -> dict[str, list[str]]:
        iso = [t.isoformat() for t in (self.calib_start, self.test_start, self.test_end)]
        return {"calib": iso[0:2], "test": iso[1:3]}


def time_windows(t_min: Any, t_max: Any, cfg: Mapping[str, Any]) -> TimeWindows:
    """The windows of a time split for data spanning ``[t_min, t_max]``; ``ValueError`` if one is empty."""
    import pandas as pd

    check_time_split(cfg)
    lo, hi = pd.Timestamp(t_min), pd.Timestamp(t_max)
    period = parse_duration(cfg.get("period", DEFAULTS["period"]))
    if "test_end" in cfg:
        end = _like(_timestamp(cfg["test_end"], "test_end"), hi)
    else:
        end = hi.floor(period) + period  # the last (possibly partial) period is included
    if "test_start" in cfg:
        test_start = _like(_timestamp(cfg["test_start"], "test_start"), hi)
    else:
        test_start = end - parse_duration(cfg.get("test_last", DEFAULTS["test_last"]))
    if "calib_start" in cfg:
        calib_start = _like(_timestamp(cfg["calib_start"], "calib_start"), hi)
    else:
        calib_start = test_start - parse_duration(cfg.get("calib_last", DEFAULTS["calib_last"]))
    if not calib_start < test_start < end:
        raise ValueError(
            f"time split: windows out of order (calib from {calib_start}, test {test_start} to {end})"
        )
    if test_start <= lo or test_start > hi:
        raise ValueError(
            f"time split: the test window starts at {test_start}, outside the data ({lo} to {hi}); "
            "shorten test_last or move test_start"
        )
    return TimeWindows(calib_start, test_start, end)


#: Numeric epoch times: below each magnitude, that unit (seconds up to ~year 5100, then ms, us; else ns).
EPOCH_UNITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"))


def epoch_unit(values: Any) -> str:
    """The unit of numeric epoch times, by the largest magnitude: ``s``, ``ms``, ``us`` or ``ns``.

    One guess for the whole column (not per value), so a column is never read in two units."""
    a = np.abs(np.asarray(values, dtype=float))
    top = float(np.nanmax(a)) if a.size and not np.all(np.isnan(a)) else 0.0
    return next((u for lim, u in EPOCH_UNITS if top < lim), "ns")


def to_datetime(values: Any, fmt: str | None = None, utc_naive: bool = False) -> pd.Series:
    """A time column as pandas datetimes; unparseable values become NaT, never an exception.

    The one reader of time columns (the pipeline's split and validation, the monitor's windows), so a run
    and the monitor place every row at the same time: timestamps and dates as they are; text in ``fmt``
    (``ISO8601`` or strptime codes, a source's ``time_format``, so ``01/02/2026`` reads the same in every
    row) or, without it, as pandas guesses per value (``mixed``); numbers as epoch times in the unit
    ``epoch_unit`` finds (seconds, milliseconds, microseconds or nanoseconds). The pipeline keeps the
    column's own time zone (its splits are wall-clock times there); ``utc_naive`` (the monitor's fixed
    window grid) converts zoned times and text offsets to UTC and drops the zone.
    """
    import pandas as pd

    s = values if isinstance(values, pd.Series) else pd.Series(values)
    if pd.api.types.is_bool_dtype(s):
        t = pd.Series(pd.NaT, index=s.index, dtype="datetime64[ns]")
    elif pd.api.types.is_numeric_dtype(s):
        t = pd.to_datetime(s, unit=epoch_unit(s), errors="coerce")
    elif pd.api.types.is_datetime64_any_dtype(s):
        t = s
    elif utc_naive:
        t = pd.to_datetime(s.astype("string"), errors="coerce", format=fmt or "mixed", utc=True)
    else:
        t = pd.to_datetime(s, errors="coerce", format=fmt or "mixed")
    if utc_naive and getattr(t.dt, "tz", None) is not None:
        t = t.dt.tz_convert("UTC").dt.tz_localize(None)
    return t


def assign_splits(times: Any, windows: TimeWindows) -> np.ndarray:
    """Per row: ``train`` before the calibration window, ``calib``, ``test``, or ``""`` (after test end)."""
    import pandas as pd

    t = to_datetime(times)
    ref = pd.Timestamp(0, tz=t.dt.tz) if t.dt.tz is not None else pd.Timestamp(0)
    lo, mid, hi = (_like(x, ref) for x in (windows.calib_start, windows.test_start, windows.test_end))
    out = np.full(len(t), "", dtype=object)
    out[(t < lo).to_numpy()] = "train"
    out[((t >= lo) & (t < mid)).to_numpy()] = "calib"
    out[((t >= mid) & (t < hi)).to_numpy()] = "test"
    return out.astype(str)


def split_problem(t_min: Any, t_max: Any, cfg: Mapping[str, Any], needs_train: bool = False) -> str | None:
    """Why a time split does not fit data spanning ``[t_min, t_max]`` (one clause), or None when it fits.

    Fits: the windows are in order, the test window starts inside the data and the calibration window holds
    rows; ``needs_train`` (a features source trains its base model on the rows before calibration) also
    wants rows before the calibration window.
    """
    import pandas as pd

    try:
        w = time_windows(t_min, t_max, cfg)
    except ValueError as exc:
        return str(exc).removeprefix("time split: ")
    lo = _like(pd.Timestamp(t_min), w.calib_start)
    if needs_train and w.calib_start <= lo:
        return (
            f"no rows before the calibration window (from {w.calib_start}) to train the base model on; "
            "shorten calib_last"
        )
    return None


def propose_split(t_min: Any, t_max: Any, needs_train: bool = False) -> dict[str, str] | None:
    """``{test_last, calib_last}`` in whole days that fit the data (None when it spans too few days).

    A score source: test on the last third of the days, calibrate on the rest; a features source: test and
    calibrate on a fifth each, the rest trains the base model.
    """
    import pandas as pd

    lo, hi = pd.Timestamp(t_min), pd.Timestamp(t_max)
    day = pd.Timedelta(days=1)
    n = int(((hi.floor(day) + day) - lo.floor(day)) / day)
    if n < (3 if needs_train else 2):
        return None
    test = max(1, n // (5 if needs_train else 3))
    calib = max(1, n // 5) if needs_train else n - test
    cfg = {"test_last": f"{test}d", "calib_last": f"{calib}d"}
    return cfg if split_problem(lo, hi, cfg, needs_train) is None else None


def describe_split(cfg: Mapping[str, Any]) -> str:
    """``calibrate on 14d, then test on the last 7d`` for a relative split (defaults filled in)."""
    keys = ("calib_start", "test_start", "test_end")
    if any(k in cfg for k in keys):
        return ", ".join(f"{k} {cfg[k]}" for k in keys if k in cfg)
    test, calib = (cfg.get(k, DEFAULTS[k]) for k in ("test_last", "calib_last"))
    return f"calibrate on {calib}, then test on the last {test}"
