"""The window grid: fixed windows ``origin + k * period``, which are matured and which pending.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from calibflow.monitor.config import MonitorConfig, _offset, _origin
from calibflow.monitor.state import MonitorState


@dataclass(frozen=True)
class Window:
    start: pd.Timestamp
    end: pd.Timestamp  # exclusive

    @property
    def key(self) -> str:
        return self.start.isoformat()


def window_of(t: pd.Timestamp, period: str, origin: pd.Timestamp) -> Window:
    step = _offset(period)
    k = math.floor((t - origin) / step)
    start = origin + k * step
    return Window(start, start + step)


def window_index(times: pd.Series, cfg: MonitorConfig) -> NDArray[np.int64]:
    """Each timestamp's window number on the fixed grid ``origin + k * period``."""
    t = pd.to_datetime(times)
    step = _offset(cfg.period)
    return np.floor((t - _origin(cfg.origin)) / step).to_numpy(dtype=float).astype(np.int64)


def window_keys(times: pd.Series, cfg: MonitorConfig) -> NDArray[np.object_]:
    """Each timestamp's window key, vectorised: one ``window_at`` per distinct window, not per row."""
    if len(times) == 0:
        return np.array([], dtype=object)
    ks, inverse = np.unique(window_index(times, cfg), return_inverse=True)
    keys = np.array([window_at(int(k), cfg).key for k in ks], dtype=object)
    return keys[inverse.reshape(-1)]


def window_at(k: int, cfg: MonitorConfig) -> Window:
    step = _offset(cfg.period)
    start = _origin(cfg.origin) + int(k) * step
    return Window(start, start + step)


def matured_windows(times: pd.Series, now: pd.Timestamp, cfg: MonitorConfig) -> list[Window]:
    """Complete windows whose labels have matured: ``end + label_delay <= now``; oldest first.

    Windows sit on the fixed grid ``origin + k * period`` (UTC-naive), so a daily period is the calendar
    day and removing old files never moves a window. A window that holds no row is not listed.
    """
    if len(times) == 0:
        return []
    delay = _offset(cfg.label_delay)
    out = [window_at(int(k), cfg) for k in np.unique(window_index(times, cfg))]
    return [w for w in out if w.end + delay <= pd.Timestamp(now)]


def pending_windows(
    times: pd.Series, now: pd.Timestamp, cfg: MonitorConfig, state: MonitorState
) -> list[Window]:
    """Matured windows not in ``state`` (a resumed run picks up exactly these), from ``state.start_at``."""
    done = set(state.processed)
    start = pd.Timestamp(state.start_at) if state.start_at else None
    return [
        w
        for w in matured_windows(times, now, cfg)
        if w.key not in done and (start is None or w.start >= start)
    ]
