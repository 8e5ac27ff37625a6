"""The daily monitor on the issue's scenarios (issue "The monitor a team reads every morning"), in process.

A known truth in the shape of a real log: ``rows`` a day, a 30-value ``country`` segment (Zipf-like
shares, ``DE`` about 8% of rows, small countries with a handful of positives) and a 3-value ``device``
segment, about 4% positives; the model's score ``p_model`` is an over-confident, too-high probability,
so the first champion (Platt, fitted on ``warmup`` days) has work to do. From ``shift_day`` on:

- ``stable``: nothing changes;
- ``global``: the true probability is 1.3 times the old one everywhere (a global +30%);
- ``one_country``: the true logit of ``DE`` rises by 0.5;
- ``slope``: the score becomes over-confident: its logit is 1.5 times the old one, the intercept re-solved
  so that the mean score is unchanged (the truth does not move).

Every morning the monitor (``calibflow.monitoring.process_window``) scores the windows whose labels
matured (``label_delay`` days), and the champion decided then serves the next day. What is recorded:
the first alert per segment, promotions, incidents, and the served ``sum p / sum y`` per day overall
and per country (against the never-recalibrated first champion). Pure numpy/pandas: no Prefect, no DVC.

    python -m calibflow.experiments.monitor_scenarios --scenario global [--rows 40000] [--days 60]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import monitoring as mon

SCENARIOS = ("stable", "global", "one_country", "slope")
COUNTRIES = tuple(["DE", "FR", "US", "UK", "IT", "ES"] + [f"C{i:02d}" for i in range(24)])
DEVICES = ("mobile", "desktop", "tablet")
SEGMENTS = ("country", "device")
DAY0 = pd.Timestamp("2026-01-01")
_SHARE = 1 / np.arange(2, len(COUNTRIES) + 2) ** 0.9
SHARE = _SHARE / _SHARE.sum()  # DE ~ 8% ... the smallest ~1%
OFFSET = np.linspace(-0.4, 0.4, len(COUNTRIES))
DEVICE_OFFSET = {"mobile": 0.1, "desktop": -0.1, "tablet": 0.0}
A, B = -3.6, 1.0  # true logit = A + B x + offsets: about 4% positives


def _slope_shift(seed: int = 0) -> float:
    """The intercept that keeps the mean score when the score's logit is multiplied by 1.5."""
    rng = np.random.default_rng(seed)
    z = _model_logit(rng.normal(size=200_000), np.zeros(200_000))
    target = expit(z).mean()
    return float(brentq(lambda c: expit(1.5 * z + c).mean() - target, -10, 10))


def _model_logit(x: np.ndarray, off: np.ndarray) -> np.ndarray:
    return 1.4 * (A + B * x + off) + 0.8  # over-confident and too high


def day_frame(scenario: str, day: int, rows: int, seed: int, shift_day: int = 30) -> pd.DataFrame:
    """One day's rows: time, score (a probability), label, country, device, the true probability."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
    rng = np.random.default_rng([seed, SCENARIOS.index(scenario), day + 10_000])
    ci = rng.choice(len(COUNTRIES), size=rows, p=SHARE)
    country = np.array(COUNTRIES, dtype=object)[ci]
    device = np.array(DEVICES, dtype=object)[rng.choice(3, size=rows, p=[0.6, 0.3, 0.1])]
    x = rng.normal(size=rows)
    off = OFFSET[ci] + np.array([DEVICE_OFFSET[d] for d in device])
    z = A + B * x + off
    zm = _model_logit(x, off)
    after = day >= shift_day
    if after and scenario == "one_country":
        z = np.where(country == "DE", z + 0.5, z)
    p_true = expit(z)
    if after and scenario == "global":
        p_true = np.minimum(1.3 * p_true, 1.0)
    if after and scenario == "slope":
        zm = 1.5 * zm + _slope_shift()
    t = DAY0 + pd.Timedelta(days=day) + pd.to_timedelta(np.sort(rng.uniform(0, 86_399, rows)), unit="s")
    return pd.DataFrame(
        {"time": t, "score": expit(zm), "label": (rng.random(rows) < p_true).astype(float),
         "country": country, "device": device, "p_true": p_true}
    )


def _ratios(p: np.ndarray, frame: pd.DataFrame) -> dict[str, list[float]]:
    """``[sum p, sum y, sum p_true]`` overall and per country: the served sums beside the truth's (the
    true probabilities' own ratio is the noise floor a served ratio is judged against)."""
    y, t = frame["label"].to_numpy(float), frame["p_true"].to_numpy(float)
    out = {"all": [float(p.sum()), float(y.sum()), float(t.sum())]}
    c = frame["country"].to_numpy()
    for v in COUNTRIES:
        m = c == v
        out[v] = [float(p[m].sum()), float(y[m].sum()), float(t[m].sum())]
    return out


def run(
    scenario: str,
    seed: int = 0,
    days: int = 60,
    rows: int = 40_000,
    shift_day: int = 30,
    warmup: int = 14,
    delay: int = 2,
    cfg: mon.MonitorConfig | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The monitor over one scenario, day by day (module doc)."""
    cfg = cfg or mon.MonitorConfig(n_bootstrap=100)
    frames = {d: day_frame(scenario, d, rows, seed, shift_day) for d in range(-warmup, days)}
    warm = pd.concat([frames[d] for d in range(-warmup, 0)], ignore_index=True)
    first = C.make("platt", input="probability").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    state = mon.MonitorState.start_with(scenario, first, {"fitted_on": ["warmup"]}, "probability")
    decided: dict[int, Any] = {}
    for d in range(days):
        w = mon.Window(DAY0 + pd.Timedelta(days=d), DAY0 + pd.Timedelta(days=d + 1))
        calib = pd.concat([frames[k] for k in range(d - cfg.calib_windows, d)], ignore_index=True)
        state = mon.process_window(state, w, frames[d], calib, cfg, SEGMENTS)
        decided[d] = state.calibrator()
        if progress:
            print(f"{scenario} day {d}: champion v{state.champion} {state.gates[-1].get('reason', '')[:90]}",
                  flush=True)
    served: dict[int, dict[str, list[float]]] = {}
    never: dict[int, dict[str, list[float]]] = {}
    for d in range(days):
        src = d - 1 - delay  # the newest window whose labels had matured when day d was served
        cal = decided[src] if src >= 0 else first
        served[d] = _ratios(mon.predict_frame(cal, frames[d], "probability"), frames[d])
        never[d] = _ratios(mon.predict_frame(first, frames[d], "probability"), frames[d])

    def day_of(key: str) -> int:
        return int((pd.Timestamp(key) - DAY0).days)

    first_alert: dict[str, int] = {}
    for a in state.alerts:
        first_alert.setdefault(f"{a['segment']} {a['metric']}", day_of(a["window"]))
    return {
        "scenario": scenario,
        "seed": seed,
        "shift_day": shift_day,
        "first_alert": first_alert,
        "alert_days": sorted({day_of(a["window"]) for a in state.alerts}),
        "promotions": [(day_of(v["promoted_after"]), v["method"]) for v in state.versions[1:]],
        "reasons": [g["reason"] for g in state.gates if g.get("promoted")],
        "incidents": [
            {k: i[k] for k in ("segment", "metric", "opened", "closed", "worst")}
            for i in mon.incidents(state, cfg)
        ],
        "served": served,
        "never": never,
        "state": state,
    }


def pooled(sums: dict[int, dict[str, list[float]]], lo: int, hi: int) -> dict[str, dict[str, float]]:
    """``sum p / sum y`` and positives pooled over days ``lo .. hi - 1``, per key (all, countries)."""
    out = {}
    for key in sums[lo]:
        p, y, t = (sum(sums[d][key][i] for d in range(lo, hi) if d in sums) for i in range(3))
        out[key] = {
            "ratio": p / y if y else float("nan"),
            "truth": t / y if y else float("nan"),  # the true probabilities' ratio on the same rows
            "vs_truth": p / t if t else float("nan"),  # served against the truth: the bias itself
            "positives": y,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=SCENARIOS, default="global")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--shift-day", type=int, default=30)
    a = ap.parse_args(argv)
    res = run(a.scenario, a.seed, a.days, a.rows, a.shift_day, progress=True)
    tail = pooled(res["served"], max(a.days - 15, 0), a.days)
    res.pop("state")
    print(json.dumps({k: res[k] for k in ("first_alert", "promotions", "incidents")}, default=str, indent=1))
    print("served, last 15 days:", json.dumps({k: round(v["ratio"], 3) for k, v in tail.items()}))
    print("served / truth, last 15 days:", json.dumps({k: round(v["vs_truth"], 3) for k, v in tail.items()}))
    print("positives:", json.dumps({k: int(v["positives"]) for k, v in tail.items()}))


if __name__ == "__main__":
    main()
