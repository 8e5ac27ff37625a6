"""Alerts and incidents: alerts opened, reopened within the cooldown and closed after recovery, derived from
the history; the waits (labels overdue, a delivery missing) as incidents too.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from calibflow.monitor.config import ALL, WATCHED, MonitorConfig, _offset
from calibflow.monitor.state import MonitorState
from calibflow.monitor.thresholds import within_limit


def _alerts(state: MonitorState, row: dict[str, Any], band: dict, cfg: MonitorConfig) -> list[dict[str, Any]]:
    """Alerts for ``row``: a metric out of band on this and the ``patience - 1`` previous scored windows."""
    prev = [r for r in state.history if r["segment"] == row["segment"] and not r.get("skipped")]
    prev = prev[len(prev) - (cfg.patience - 1) :] if cfg.patience > 1 else []
    out = []
    for metric in row["out"]:
        if len(prev) < cfg.patience - 1 or not all(metric in r.get("out", []) for r in prev):
            continue
        out.append(
            {
                "source": state.source,
                "window": row["window"],
                "segment": row["segment"],
                "metric": metric,
                "value": row[metric],
                "band": band[metric],
                "version": row["version"],
            }
        )
    return out


def incidents(state: MonitorState, cfg: MonitorConfig) -> list[dict[str, Any]]:
    """Incidents per (segment, metric), derived from the history (module doc, step 3); oldest first.

    Each: ``id`` (source/segment/metric/opening window), ``opened``, ``closed`` (None while open),
    ``windows`` out of band, ``worst`` value, ``reopened`` (alerts within the cooldown of a close).
    """
    alerted = {(a["window"], a["segment"], a["metric"]) for a in state.alerts}
    scored: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in state.history:
        if not r.get("skipped"):
            for m in WATCHED:
                if r.get(m) is not None:
                    scored.setdefault((r["segment"], m), []).append(r)
    found: list[dict[str, Any]] = []
    for (seg, metric), rows in scored.items():
        cur: dict[str, Any] | None = None
        streak = since_close = 0
        for i, r in enumerate(rows):
            out = metric in r.get("out", [])
            if cur is None and (r["window"], seg, metric) in alerted:
                last = found[-1] if found and found[-1]["key"] == (seg, metric) else None
                if last is not None and i - since_close <= cfg.cooldown:
                    cur = last
                    cur["closed"], cur["reopened"] = None, cur["reopened"] + 1
                else:
                    cur = {
                        "id": f"{state.source}/{seg}/{metric}/{r['window']}",
                        "key": (seg, metric),
                        "source": state.source,
                        "segment": seg,
                        "metric": metric,
                        "opened": r["window"],
                        "closed": None,
                        "windows": 0,
                        "worst": r[metric],
                        "reopened": 0,
                        "version": r["version"],
                        "band": _incident_band(metric, r, cfg),
                    }
                    found.append(cur)
                streak = 0
            if cur is None:
                continue
            if out:
                cur["windows"] += 1
                streak = 0
                if _severity(metric, r[metric]) > _severity(metric, cur["worst"]):
                    cur["worst"] = r[metric]
            else:
                streak += 1
                # In band is not enough: the last ``recovery`` windows must be back within the limit.
                if streak >= cfg.recovery and within_limit(metric, rows[i - cfg.recovery + 1 : i + 1], cfg):
                    cur["closed"], cur = r["window"], None
                    since_close = i
    for inc in found:
        inc.pop("key")
    found += wait_incidents(state)
    return sorted(found, key=lambda x: (x["opened"], x["segment"], x["metric"]))


#: A wait's kind -> the metric name of its incident once past its deadline.
WAIT_METRICS = {"labels": "labels_overdue", "delivery": "delivery_missing"}


def wait_incidents(state: MonitorState) -> list[dict[str, Any]]:
    """One incident per window that waited past its deadline (labels or a delivery), closed when the
    window's labels or file arrived."""
    out = []
    for key, w in sorted(state.waits.items()):
        if not w.get("overdue_at") or w["kind"] not in WAIT_METRICS:
            continue
        metric = WAIT_METRICS[w["kind"]]
        out.append(
            {
                "id": f"{state.source}/all/{metric}/{key}",
                "source": state.source,
                "segment": ALL,
                "metric": metric,
                "opened": key,
                "closed": w.get("resolved"),
                "windows": 1,
                "worst": float(w.get("rows") or 0),
                "reopened": 0,
                "version": state.champion,
                "band": [None, None],
                "why": w.get("why", ""),
            }
        )
    return out


def update_waits(
    state: MonitorState, now: pd.Timestamp, waiting: dict[str, dict[str, Any]], cfg: MonitorConfig
) -> list[dict[str, Any]]:
    """Record this run's waiting windows (``waiting``: key -> {kind, rows, why}; kinds ``labels``,
    ``delivery``, ``due`` (labels not due yet), ``blocked`` (behind a pending window)) in
    ``state.waits``: ``since`` kept from the first run that saw it, ``deadline`` from the window's end
    (``label_deadline`` / ``delivery_deadline``), ``overdue_at`` once past it. A wait no longer listed
    is resolved: dropped, or kept with ``resolved`` when it was overdue (its incident closes).
    Returns the current waits, oldest window first."""
    stamp = pd.Timestamp(now).isoformat()
    step = _offset(cfg.period)
    limits = {"labels": cfg.label_deadline, "delivery": cfg.delivery_deadline}
    for key, w in waiting.items():
        old = state.waits.get(key) or {}
        entry = {**w, "since": old.get("since", stamp) if old.get("kind") == w["kind"] else stamp}
        limit = limits.get(w["kind"])
        if limit is not None:
            deadline = pd.Timestamp(key) + step + _offset(limit)
            entry["deadline"] = deadline.isoformat()
            entry["overdue_at"] = old.get("overdue_at") or (stamp if pd.Timestamp(now) >= deadline else None)
        entry["resolved"] = None
        state.waits[key] = entry
    for key in [k for k in state.waits if k not in waiting]:
        w = state.waits[key]
        if w.get("overdue_at"):
            w["resolved"] = w.get("resolved") or stamp
        else:
            del state.waits[key]
    return [dict(state.waits[k], window=k) for k in sorted(waiting)]


def _severity(metric: str, value: float) -> float:
    return value if metric == "ece" else abs(value - 1.0)


def _incident_band(metric: str, row: dict[str, Any], cfg: MonitorConfig) -> list[float | None]:
    if metric == "calibration_ratio":
        return row["band_ratio"]
    if metric == "ece":
        return row["band_ece"]
    ps = cfg.practical_slope
    return [None, None] if ps is None else [1 - ps, 1 + ps]
