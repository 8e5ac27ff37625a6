"""The reviewer's three daily streams (issue "The daily monitor on real deliveries"), re-created, and the
checks the issue's "Done means" names, computed from what the monitor wrote.

Streams (``rows`` a day, four countries of different click rates, a model score ``p_model`` that is an
over-confident, too-high probability, so select's calibrator has work to do):

- ``stable``: nothing changes;
- ``fr_shift``: from ``shift_day`` on, the click rate in FR is 30% higher (``p_true * 1.3``);
- ``slope``: from ``shift_day`` on, the true logit slope in the score is ``slope_after`` times the old
  one, with the intercept re-solved so that the overall click rate is unchanged.

Day ``d`` is a Parquet file ``day=<date>.parquet`` with ``ts``, ``country``, ``p_model``, ``clicked``.
Days ``-history .. -1`` are known when ``calibflow run`` fits the first champion; days ``0 ..`` are
delivered one at a time (the driver is ``benchmarks/monitor_streams.py``). Pure numpy/pandas: no
Prefect, no DVC.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import expit

from calibflow import monitor as mon

STREAMS = ("stable", "fr_shift", "slope")
COUNTRIES = ("FR", "DE", "US", "UK")
OFFSET = {"FR": 0.3, "DE": -0.3, "US": 0.0, "UK": 0.1}  # per-country logit offsets of the truth
A, B = -3.0, 1.0  # true logit = A + B x + offset: about 6% clicks
START = pd.Timestamp("2026-03-01")


def _slope_intercept(slope_after: float, seed: int = 0) -> float:
    """The intercept that keeps the overall click rate when the slope becomes ``slope_after * B``."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=400_000)
    off = np.array([OFFSET[c] for c in rng.choice(np.array(COUNTRIES), size=x.size)])
    target = expit(A + B * x + off).mean()
    return float(brentq(lambda a: expit(a + slope_after * B * x + off).mean() - target, A - 5, A + 5))


def day_frame(
    stream: str, day: int, rows: int, seed: int, shift_day: int = 30, slope_after: float = 0.6,
    a_after: float | None = None,
) -> pd.DataFrame:
    """One day's rows of ``stream``."""
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {STREAMS}, got {stream!r}")
    rng = np.random.default_rng([seed, STREAMS.index(stream), day + 10_000])
    country = rng.choice(np.array(COUNTRIES), size=rows)
    x = rng.normal(size=rows)
    off = np.array([OFFSET[c] for c in country])
    z = A + B * x + off
    p_true = expit(z)
    after = day >= shift_day
    if after and stream == "fr_shift":
        p_true = np.where(country == "FR", np.minimum(1.3 * p_true, 1.0), p_true)
    if after and stream == "slope":
        a2 = _slope_intercept(slope_after) if a_after is None else a_after
        p_true = expit(a2 + slope_after * B * x + off)
    t = START + pd.Timedelta(days=day) + pd.to_timedelta(np.sort(rng.uniform(0, 86_399, rows)), unit="s")
    return pd.DataFrame(
        {
            "ts": t,
            "country": country,
            "p_model": expit(1.5 * z + 0.7),  # what the model says: over-confident and too high
            "clicked": (rng.random(rows) < p_true).astype(np.int64),
        }
    )


def deliver(folder: Path, stream: str, day: int, rows: int, seed: int, **kw: Any) -> Path:
    """Write day ``day`` of ``stream`` as ``folder/day=<date>.parquet`` (atomically: a reader never sees
    half a file); returns the path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"day={(START + pd.Timedelta(days=day)).date()}.parquet"
    tmp = path.with_suffix(".tmp")
    day_frame(stream, day, rows, seed, **kw).to_parquet(tmp, index=False)
    tmp.replace(path)
    return path


def served_ratio(
    calibrator_json: str, frame: pd.DataFrame, score_kind: str = "probability"
) -> dict[str, float]:
    """``sum p / sum y`` of a served champion on one day's rows, overall and per country (the conversion
    select, ``apply`` and the monitor share)."""
    from calibflow import calibrators as C

    cal = C.from_json(calibrator_json)
    rows = frame.rename(columns={"p_model": "score"})
    p = mon.predict_frame(cal, rows, score_kind)
    y = frame["clicked"].to_numpy(float)
    out = {"all": float(p.sum() / y.sum())}
    for c in COUNTRIES:
        m = frame["country"].to_numpy() == c
        out[c] = float(p[m].sum() / y[m].sum())
    return out


def day_of(key: str) -> int:
    return int((pd.Timestamp(key) - START).days)


def incident_rows(state: dict[str, Any], cfg: mon.MonitorConfig) -> list[dict[str, Any]]:
    """The incidents of a saved state (``monitoring/<source>/state.json``), days counted from START."""
    st = mon.MonitorState.from_json(json.dumps(state))
    return [
        {
            "segment": i["segment"],
            "metric": i["metric"],
            "opened": day_of(i["opened"]),
            "closed": None if i["closed"] is None else day_of(i["closed"]),
            "windows": i["windows"],
            "worst": round(float(i["worst"]), 4),
        }
        for i in mon.incidents(st, cfg)
    ]


def facts(
    states: dict[str, dict[str, Any]], cfg: mon.MonitorConfig, plan: dict[str, Any], res: dict[str, Any]
) -> dict[str, Any]:
    """The issue's "Done means", per source, from the saved states (``monitoring/<source>/state.json``)
    and the served ratios."""
    late = (START + pd.Timedelta(days=plan["late_day"])).isoformat()
    out: dict[str, Any] = {"plan": plan, "sources": {}}
    for name in (*STREAMS, "broken"):
        state = states[name]
        stable_days = range(plan["days"]) if name in ("stable", "broken") else range(plan["shift_day"])
        ratios = {d: r["all"] for d, r in res["served"][name].items() if d in stable_days}
        quiet = 10 if name in ("stable", "broken") else min(10, plan["shift_day"])  # stable windows 0-9
        early = sorted({day_of(a["window"]) for a in state["alerts"] if day_of(a["window"]) < quiet})
        incs = incident_rows(state, cfg)
        out["sources"][name] = {
            "windows_scored": len(state["processed"]),
            "alert_windows_0_9": early,
            "served_ratio_stable_days_max_dev": round(max(abs(v - 1) for v in ratios.values()), 4),
            "served_ratio_stable_days": [round(min(ratios.values()), 4), round(max(ratios.values()), 4)],
            "late_day_scored": late in state["processed"],
            "rescored_notes": [n for n in state["notes"] if n.startswith("rescored from")],
            "incidents": incs,
            "promotions": [(day_of(v["promoted_after"]), v["method"]) for v in state["versions"][1:]
                           if not v.get("withdrawn")],
            "served_fr_after_shift": {
                d: round(r["FR"], 3) for d, r in res["served"][name].items() if d >= plan["shift_day"]
            },
        }
    bad = [r for r in res["runs"] if r["rc"] != 0]
    out["runs"] = {
        "count": len(res["runs"]),
        "failed": [{"day": r["day"], "rc": r["rc"], "tail": r["output"][-600:]} for r in bad],
        "seconds_median": float(np.median([r["seconds"] for r in res["runs"]])),
        "max_stderr_lines": max(r["stderr_lines"] for r in res["runs"]),
    }
    return out


def markdown(f: dict[str, Any]) -> str:
    p = f["plan"]
    rows = [
        "| source | windows scored | alerts in windows 0-9 | served sum p / sum y, stable days [min, max] | "
        "late day scored | incidents (segment metric opened-closed, worst) | promotions (day method) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in f["sources"].items():
        incs = "; ".join(
            f"{i['segment']} {i['metric']} {i['opened']}-{'open' if i['closed'] is None else i['closed']} "
            f"({i['worst']})"
            for i in s["incidents"]
        ) or "none"
        promos = ", ".join(f"{d} {m}" for d, m in s["promotions"]) or "none"
        late = "yes" if s["late_day_scored"] else "no"
        if name in ("slope", "broken"):
            late = "–"
        lo, hi = s["served_ratio_stable_days"]
        rows.append(
            f"| {name} | {s['windows_scored']} | {s['alert_windows_0_9'] or 'none'} | [{lo:.3f}, {hi:.3f}] | "
            f"{late} | {incs} | {promos} |"
        )
    r = f["runs"]
    rows += [
        "",
        f"{p['days']} days of {p['rows']:,} rows a source, {r['count']} daily `calibflow monitor run`s "
        f"(median {r['seconds_median']:.0f} s each, loaded shared machine); runs that exited non-zero: "
        + (", ".join(f"day {x['day']} (rc {x['rc']})" for x in r["failed"]) or "none"),
    ]
    return "\n".join(rows)
