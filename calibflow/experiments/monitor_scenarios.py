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

Every morning the monitor (``calibflow.monitor.process_window``) scores the windows whose labels
matured (``label_delay`` days), and the champion decided then serves the next day. What is recorded:
the first alert per segment, promotions, incidents, and the served ``sum p / sum y`` per day overall
and per country (against the never-recalibrated first champion). Pure numpy/pandas: no Prefect, no DVC.

    python -m calibflow.experiments.monitor_scenarios --scenario global [--rows 40000] [--days 60]
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import monitor as mon

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
    always: bool = False,
) -> dict[str, Any]:
    """The monitor over one scenario, day by day (module doc). ``always``: also the control that
    recalibrates every day without a gate (the gate's best method refitted on the trailing window)."""
    cfg = cfg or mon.MonitorConfig(n_bootstrap=100)
    frames = {d: day_frame(scenario, d, rows, seed, shift_day) for d in range(-warmup, days)}
    warm = pd.concat([frames[d] for d in range(-warmup, 0)], ignore_index=True)
    first = C.make("platt", input="probability").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    state = mon.MonitorState.start_with(scenario, first, {"fitted_on": ["warmup"]}, "probability")
    decided: dict[int, Any] = {}
    daily: dict[int, Any] = {}
    daily_cal = first
    for d in range(days):
        w = mon.Window(DAY0 + pd.Timedelta(days=d), DAY0 + pd.Timedelta(days=d + 1))
        calib = pd.concat([frames[k] for k in range(d - cfg.calib_windows, d)], ignore_index=True)
        state = mon.process_window(state, w, frames[d], calib, cfg, SEGMENTS)
        decided[d] = state.calibrator()
        best = state.gates[-1].get("best")
        if always and best:
            daily_cal = _refit(best, first, calib)
        daily[d] = daily_cal
        if progress:
            print(f"{scenario} day {d}: champion v{state.champion} {state.gates[-1].get('reason', '')[:90]}",
                  flush=True)
    served: dict[int, dict[str, list[float]]] = {}
    never: dict[int, dict[str, list[float]]] = {}
    daily_sums: dict[int, dict[str, list[float]]] = {}
    for d in range(days):
        src = d - 1 - delay  # the newest window whose labels had matured when day d was served
        cal = decided[src] if src >= 0 else first
        served[d] = _ratios(mon.predict_frame(cal, frames[d], "probability"), frames[d])
        never[d] = _ratios(mon.predict_frame(first, frames[d], "probability"), frames[d])
        if always:
            cal = daily[src] if src >= 0 else first
            daily_sums[d] = _ratios(mon.predict_frame(cal, frames[d], "probability"), frames[d])

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
        "alerts": sorted((day_of(a["window"]), a["segment"], a["metric"]) for a in state.alerts),
        "promotions": [(day_of(v["promoted_after"]), v["method"]) for v in state.versions[1:]],
        "reasons": [g["reason"] for g in state.gates if g.get("promoted")],
        "incidents": [
            {k: i[k] for k in ("segment", "metric", "opened", "closed", "worst")}
            for i in mon.incidents(state, cfg)
        ],
        "served": served,
        "never": never,
        "always": daily_sums,
        "state": state,
        "cfg": cfg,
    }


def _refit(method: str, first: Any, calib: pd.DataFrame) -> Any:
    """The always-recalibrate control: ``method`` refitted on the whole trailing window, every day."""
    segmented = "segments" in C.get_class(method).needs
    cols = {c: calib[c].to_numpy(dtype=object) for c in SEGMENTS} if segmented else None
    return mon.fit_challenger(
        method, str(first.input_kind), calib["score"].to_numpy(float), calib["label"].to_numpy(float),
        "probability", cols,
    )


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


#: The segment whose first alert measures each drift's detection delay.
DETECT = {"global": "all", "one_country": "country=DE", "slope": "all"}
POLICIES = ("served", "never", "always")


def fired_by(state: Any, incident: dict[str, Any], cfg: mon.MonitorConfig) -> str:
    """Which rule opened ``incident`` (its window's history row): ``band`` (outside the learned band),
    ``practical, one window`` (the ratio's practical limit on that window alone), ``pooled windows`` (the
    ratio practically off only with the segment's previous 1-2 windows pooled), ``limit`` (ECE or slope
    beyond its absolute limit)."""
    from calibflow.monitor.thresholds import _outside

    rows = [r for r in state.history if r["window"] == incident["opened"]]
    row = next(r for r in rows if r["segment"] == incident["segment"])
    metric, n = incident["metric"], len(rows)
    if metric == "calibration_ratio":
        if _outside(row[metric], row["band_ratio"]):
            return "band"
        return "practical, one window" if mon.practically_off(row, cfg, n) else "pooled windows"
    if metric == "ece" and _outside(row[metric], row["band_ece"]):
        return "band"
    return "limit"


def summary(res: dict[str, Any], days: int, last: int = 15) -> dict[str, Any]:
    """One run reduced to the study's numbers (JSON): incidents on stable windows (every window of
    ``stable``, the pre-shift windows of the others), the detection delay, and per policy the pooled
    ``sum p / sum y`` over the last ``last`` days, overall and per country, beside the truth's."""
    shift, scen = int(res["shift_day"]), res["scenario"]
    stable_days = days if scen == "stable" else min(shift, days)
    opened = [int((pd.Timestamp(i["opened"]) - DAY0).days) for i in res["incidents"]]
    target = DETECT.get(scen)
    hits = sorted(d for d, seg, _ in res["alerts"] if seg == target and d >= shift)  # first on/after it
    after = [a for a in res["alert_days"] if a >= shift]
    state = res.get("state")
    cfg = res.get("cfg") or mon.MonitorConfig(n_bootstrap=100)
    fired = [
        {"segment": i.get("segment"), "metric": i.get("metric"), "day": d,
         "fired_by": fired_by(state, i, cfg) if state is not None else None}
        for i, d in zip(res["incidents"], opened, strict=True) if d < stable_days
    ]
    out: dict[str, Any] = {
        "scenario": scen, "seed": res["seed"], "days": days, "shift_day": shift,
        "stable_windows": stable_days,
        "stable_incidents": sum(1 for d in opened if d < stable_days),
        "stable_incident_list": fired,
        "delay": (hits[0] - shift) if hits else None,
        "any_alert_delay": (after[0] - shift) if after and scen != "stable" else None,
        "promotions": len(res["promotions"]),
        "methods": [m for _, m in res["promotions"]],
    }
    lo = max(days - last, 0)
    for pol in POLICIES:
        if res.get(pol):
            out[pol] = {k: {m: round(v[m], 6) for m in ("ratio", "vs_truth", "positives")}
                        for k, v in pooled(res[pol], lo, days).items()}
    return out


def study(
    scenarios: list[str], seeds: list[int], days: int, rows: int, shift_day: int, save=None,
    always: bool = True,
) -> list[dict[str, Any]]:
    """Every (scenario, seed) run with the always-recalibrate control (unless ``always`` is False: it
    refits every day and about doubles a run's time), reduced by ``summary``; seed by seed (every
    scenario of a seed, then the next), ``save(runs)`` after each run."""
    out = []
    for seed in seeds:
        for scen in scenarios:
            res = run(scen, seed, days, rows, shift_day, always=always)
            out.append(summary(res, days))
            if save is not None:
                save(out)
            print(f"{scen} seed {seed}: delay {out[-1]['delay']}, stable incidents "
                  f"{out[-1]['stable_incidents']}, promotions {out[-1]['promotions']}", flush=True)
    return out


def _ci(x: list[float], digits: int = 3) -> str:
    from calibflow.experiments.claims import t_interval

    m, lo, hi = t_interval(x)
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _p(d: list[float]) -> str:
    from scipy import stats

    v = np.asarray(d, dtype=float)
    if v.size < 2 or np.allclose(v, v[0]):
        return "p = n/a"
    return f"p = {stats.ttest_1samp(v, 0.0).pvalue:.2g}"


def _policies(runs: list[dict[str, Any]]) -> list[str]:
    """The policies every run of ``runs`` has (``always`` is absent from a study run without it)."""
    return [pol for pol in POLICIES if all(pol in r for r in runs)]


def table(runs: list[dict[str, Any]], big: float = 250) -> str:
    """The study's tables (markdown): t intervals over seeds, paired t-tests against the controls;
    countries judged one by one are those with more than ``big`` positives in the last days."""
    from scipy import stats

    lines = ["| scenario | seeds | stable windows | incidents | incidents / 100 stable windows [95% t CI] | "
             "exact Poisson 95% upper bound / 100 |", "|---|---|---|---|---|---|"]
    groups = {s: [r for r in runs if r["scenario"] == s] for s in SCENARIOS}
    groups = {s: g for s, g in groups.items() if g}
    for s, g in [*groups.items(), ("all (pooled)", runs)]:
        rate = [100 * r["stable_incidents"] / r["stable_windows"] for r in g if r["stable_windows"]]
        k, n = sum(r["stable_incidents"] for r in g), sum(r["stable_windows"] for r in g)
        upper = 100 * stats.chi2.ppf(0.975, 2 * (k + 1)) / 2 / n if n else float("nan")  # Garwood
        lines.append(f"| {s} | {len(g)} | {n} | {k} | {_ci(rate, 2)} | {upper:.2f} |")
    listed = [(r["scenario"], r["seed"], i) for r in runs for i in r.get("stable_incident_list", [])]
    if listed:
        lines += ["", "| stable-window incident: scenario | seed | day | segment | metric | opened by |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s} | {seed} | {i['day']} | {i['segment']} | {i['metric']} | {i['fired_by']} |"
                  for s, seed, i in listed]
    lines += ["", "| drift | segment | detected | delay in windows, mean [95% t CI] | median | max | "
              "within 2 |", "|---|---|---|---|---|---|---|"]
    for s, g in groups.items():
        if s == "stable":
            continue
        d = [r["delay"] for r in g if r["delay"] is not None]
        within = sum(x <= 2 for x in d)
        lines.append(f"| {s} | {DETECT[s]} | {len(d)}/{len(g)} | {_ci(d, 2) if d else '-'} | "
                     f"{np.median(d) if d else '-'} | {max(d) if d else '-'} | {within}/{len(g)} |")
    lines += ["", "| scenario | segment | served / truth: gated | never | always | "
              "abs bias gated - never [95% t CI], p | gated - always, p |", "|---|---|---|---|---|---|---|"]
    for s, g in groups.items():
        keys = ["all", "DE"] if s == "one_country" else ["all"]
        pols = _policies(g)
        for k in keys:
            vals = {pol: [r[pol][k]["vs_truth"] for r in g] for pol in pols}
            bias = {pol: np.abs(np.asarray(v) - 1) for pol, v in vals.items()}
            dn = list(bias["served"] - bias["never"])
            da = list(bias["served"] - bias["always"]) if "always" in pols else None
            alw = (_ci(vals["always"]), f"{_ci(da)}, {_p(da)}") if da is not None else ("not run", "-")
            lines.append(f"| {s} | {k} | {_ci(vals['served'])} | {_ci(vals['never'])} | "
                         f"{alw[0]} | {_ci(dn)}, {_p(dn)} | {alw[1]} |")
    lines += ["", f"| scenario | countries (> {big:g} positives, not the shifted one) | "
              "worst abs(served/truth - 1) per seed: gated | never | always | "
              "seeds with every such country within 0.05: gated | never | "
              "always |", "|---|---|---|---|---|---|---|---|"]
    for s, g in groups.items():
        pols = _policies(g)
        worst: dict[str, list[float]] = {pol: [] for pol in pols}
        for r in g:
            judged = [c for c in COUNTRIES if (c != "DE" or s != "one_country")]
            judged = [c for c in judged if r["served"][c]["positives"] > big]
            for pol in pols:
                worst[pol].append(max((abs(r[pol][c]["vs_truth"] - 1) for c in judged), default=0.0))
        n_big = np.mean([sum(r["served"][c]["positives"] > big for c in COUNTRIES) for r in g])
        ok = {pol: f"{sum(w <= 0.05 for w in worst[pol])}/{len(g)}" for pol in pols}
        ci = {pol: _ci(worst[pol]) for pol in pols}
        lines.append(f"| {s} | {n_big:.1f} | {ci['served']} | {ci['never']} | "
                     f"{ci.get('always', 'not run')} | {ok['served']} | {ok['never']} | "
                     f"{ok.get('always', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=SCENARIOS, default="global")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--shift-day", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", help="the study: these seeds (e.g. $(seq 0 19))")
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--out", help="the study's JSON (one summary per scenario and seed)")
    ap.add_argument("--no-always", action="store_true",
                    help="leave out the always-recalibrate control (it about doubles each run's time)")
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print the study's tables from these files")
    a = ap.parse_args(argv)
    if a.table:
        runs = []
        for f in a.table:
            with open(f, encoding="utf-8") as fh:
                runs += json.load(fh)["runs"]
        print(table(runs))
        return
    if a.seeds:
        args = {k: v for k, v in vars(a).items() if k != "table"}

        def save(runs: list[dict[str, Any]]) -> None:
            if a.out:  # atomic, after every run: a killed study keeps the runs it finished
                tmp = a.out + ".tmp"
                with open(tmp, "w", encoding="utf-8") as fh:
                    json.dump({"args": args, "runs": runs}, fh, indent=1)
                os.replace(tmp, a.out)

        print(table(study(a.scenarios, a.seeds, a.days, a.rows, a.shift_day, save, not a.no_always)))
        return
    res = run(a.scenario, a.seed, a.days, a.rows, a.shift_day, progress=True)
    tail = pooled(res["served"], max(a.days - 15, 0), a.days)
    res.pop("state")
    res.pop("cfg")
    print(json.dumps({k: res[k] for k in ("first_alert", "promotions", "incidents")}, default=str, indent=1))
    print("served, last 15 days:", json.dumps({k: round(v["ratio"], 3) for k, v in tail.items()}))
    print("served / truth, last 15 days:", json.dumps({k: round(v["vs_truth"], 3) for k, v in tail.items()}))
    print("positives:", json.dumps({k: int(v["positives"]) for k, v in tail.items()}))


if __name__ == "__main__":
    main()
