"""Simulation study of the monitor: does the drift alert fire, and does the gate help?

    python -m calibflow.experiments.monitoring [--seeds 20] [--days 60] [--rows 2000] [--out DIR]

A known model: a raw score ``x ~ N(0, 1)`` and ``P(y=1 | x) = sigmoid(a + b x)``, ``a = -2.5``, ``b = 1.2``
(about 10% positives). Three streams of ``days`` daily windows, ``rows`` rows a day:

- ``stable``: nothing changes;
- ``base_rate``: from day ``shift_day`` on, ``a`` rises by ``base_shift`` (the base rate roughly doubles);
- ``slope``: from day ``shift_day`` on, ``b`` becomes ``slope_after`` (scores over-confident);
- ``segment_shift``: from day ``shift_day`` on, ``a`` rises by ``base_shift`` in segment ``A`` only (half
  the rows): the overall window moves half as much, so the per-segment watch matters.

Every segment is watched (``all``, ``segment=A``, ``segment=B``): false alarms and incidents count alerts
on any of them. The source declares ``segment``, so the gate's candidates include the segmented methods of
``MonitorConfig.segmented_methods`` (``--segmented-methods`` with no name: the global-only control); the
gated champion's served ``sum p / sum y`` per segment, pooled from ``SETTLED`` days after the shift, says
whether an unshifted segment stays calibrated once challengers are promoted.

The initial champion is Platt scaling fitted on 14 warm-up days before day 0 (pre-shift). Every day the
monitor (``calibflow.monitor.process_window``) scores the champion, learns bands, alerts and runs the gate.
Labels mature after ``label_delay`` days, so the calibrator decided after window w serves from day
``w + 1 + label_delay`` on. Served log loss on each day is compared for three policies, on the same rows:

- ``gated``: the monitor's champion (promotion only through the paired-bootstrap gate);
- ``never``: the initial champion forever;
- ``daily``: every day the best challenger (same candidates, same selection) replaces the champion, no gate.

Reported over seeds (mean and a 95% t-interval): detection delay of the first alert after the shift (in
windows; streams with no alert by the end counted apart), false alarms (alerts before the shift, or any on the
stable stream, per eligible window and per stream), promotions before/after the shift, and each policy's
served log loss in excess of the true probabilities' (the oracle) after the shift, with paired differences.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow import monitor as mon
from calibflow.segments import SEGMENTED_METHODS as SEGMENTED

SCENARIOS = ("stable", "base_rate", "slope", "segment_shift")
SEGMENTS = ("segment",)
SEGMENT_VALUES = ("A", "B")
SETTLED = 7  # served ratios per segment are pooled from shift_day + SETTLED on (after the first promotions)
DAY0 = pd.Timestamp("2026-01-01")
DETECT_WITHIN = 7  # windows after the shift in which a first alert counts as a detection (docs table)


def simulate_stream(
    scenario: str,
    seed: int,
    days: int = 60,
    rows: int = 2000,
    warmup: int = 14,
    shift_day: int = 30,
    a: float = -2.5,
    b: float = 1.2,
    base_shift: float = 0.7,
    slope_after: float = 0.6,
) -> pd.DataFrame:
    """Rows of days ``-warmup .. days-1``: time, score, label, true probability, day index, segment."""
    if scenario not in SCENARIOS:
        raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
    rng = np.random.default_rng([seed, SCENARIOS.index(scenario)])
    day = np.repeat(np.arange(-warmup, days), rows)
    x = rng.normal(0.0, 1.0, day.size)
    after = day >= shift_day
    u = rng.random(day.size)  # drawn in the original order (x, u, t, segment): old streams unchanged
    t = DAY0 + pd.to_timedelta(day, unit="D") + pd.to_timedelta(rng.uniform(0, 86_399, day.size), unit="s")
    seg = np.where(rng.random(day.size) < 0.5, "A", "B")
    shifted = after & ((scenario == "base_rate") | ((scenario == "segment_shift") & (seg == "A")))
    aa = np.where(shifted, a + base_shift, a)
    bb = np.where(after & (scenario == "slope"), slope_after, b)
    p = expit(aa + bb * x)
    y = (u < p).astype(float)
    return pd.DataFrame({"time": t, "score": x, "label": y, "p_true": p, "day": day, "segment": seg})


def _served(cal: C.BaseCalibrator, day_frame: pd.DataFrame) -> np.ndarray:
    """The calibrator's probabilities for one day (a per-segment one reads the segment column)."""
    return mon.predict_frame(cal, day_frame, getattr(cal, "score_kind_", None) or "score")


def _refit(method: str, champion: C.BaseCalibrator, calib: pd.DataFrame) -> C.BaseCalibrator:
    """The daily policy's refit of the gate's best candidate (segmented ones with the segment column)."""
    segs = {c: calib[c].to_numpy(dtype=object) for c in SEGMENTS} if method in SEGMENTED else None
    return mon.fit_challenger(
        method, str(champion.input_kind), calib["score"].to_numpy(), calib["label"].to_numpy(), "score", segs
    )


def run_stream(
    df: pd.DataFrame, cfg: mon.MonitorConfig, days: int, warmup: int, delay: int
) -> dict[str, Any]:
    """The monitor over one stream plus the served log loss of the three policies per day, and the gated
    champion's served sum p and sum y per segment per day."""
    by_day = {d: g for d, g in df.groupby("day")}
    warm = df[df["day"] < 0]
    champion = C.make("platt", input="score").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    state = mon.MonitorState.start("sim", champion, {"fitted_on": ["warmup"]})
    decided: dict[int, C.BaseCalibrator] = {}  # calibrator each policy holds after window w
    daily: dict[int, C.BaseCalibrator] = {}
    daily_cal = champion
    for d in range(days):
        w = mon.Window(DAY0 + pd.Timedelta(days=d), DAY0 + pd.Timedelta(days=d + 1))
        calib = df[(df["day"] >= d - cfg.calib_windows) & (df["day"] < d)]
        state = mon.process_window(state, w, by_day[d], calib, cfg, SEGMENTS)
        decided[d] = state.calibrator()
        gate = state.gates[-1]
        if gate.get("best"):  # no gate: the best challenger always takes over
            daily_cal = _refit(gate["best"], champion, calib)
        daily[d] = daily_cal
    served: dict[str, list[float]] = {"gated": [], "never": [], "daily": [], "oracle": []}
    seg_sums: dict[str, list[list[float]]] = {v: [] for v in SEGMENT_VALUES}
    for d in range(days):
        src = d - 1 - delay  # the last window whose labels had matured when day d was served
        g = by_day[d]
        y = g["label"].to_numpy()
        p_gated = _served(decided[src] if src >= 0 else champion, g)
        served["gated"].append(M.log_loss(y, p_gated))
        served["daily"].append(M.log_loss(y, _served(daily[src] if src >= 0 else champion, g)))
        served["never"].append(M.log_loss(y, _served(champion, g)))
        served["oracle"].append(M.log_loss(y, g["p_true"].to_numpy()))
        for v in SEGMENT_VALUES:
            m = g["segment"].to_numpy() == v
            seg_sums[v].append([float(p_gated[m].sum()), float(y[m].sum())])

    def day_of(key: str) -> int:
        return int((pd.Timestamp(key) - DAY0).days)

    alerts = sorted({day_of(a["window"]) for a in state.alerts})  # any segment
    by_segment = {
        seg: sorted({day_of(a["window"]) for a in state.alerts if a["segment"] == seg})
        for seg in ("all", *(f"segment={v}" for v in SEGMENT_VALUES))
    }
    incs = mon.incidents(state, cfg)
    opened = sorted(day_of(i["opened"]) for i in incs)
    promos = [day_of(v["promoted_after"]) for v in state.versions[1:]]
    return {
        "alerts": alerts,
        "alerts_by_segment": by_segment,
        "incidents": opened,
        "incident_detail": [
            {k: i[k] for k in ("opened", "closed", "segment", "metric", "worst", "band", "windows")}
            for i in incs
        ],
        "promotions": promos,
        "promoted_methods": [v["method"] for v in state.versions[1:]],
        "served": served,
        "segment_sums": seg_sums,
    }


def _t_interval(x: np.ndarray) -> list[float]:
    x = np.asarray(x, float)
    if x.size < 2:
        return [float("nan"), float("nan")]
    h = stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return [float(x.mean() - h), float(x.mean() + h)]


def summarise(
    runs: list[dict[str, Any]], scenario: str, shift_day: int, ref: int, days: int
) -> dict[str, Any]:
    """Figures of one scenario over seeds (module doc)."""
    shifted = scenario != "stable"
    cut = shift_day if shifted else days
    eligible = max(cut - ref, 1)  # windows where a learned band can exist before the shift
    fa_windows = np.array([sum(1 for w in r["alerts"] if ref <= w < cut) / eligible for r in runs])
    fa_any = np.array([any(w < cut for w in r["alerts"]) for r in runs], float)
    pager = np.array([100 * sum(1 for w in r["incidents"] if ref <= w < cut) / eligible for r in runs])
    out: dict[str, Any] = {
        "scenario": scenario,
        "seeds": len(runs),
        "false_alarm_rate_per_window": float(fa_windows.mean()),
        "false_alarm_rate_per_window_ci": _t_interval(fa_windows),
        "streams_with_false_alarm": float(fa_any.mean()),
        "incidents_per_100_windows": float(pager.mean()),
        "incidents_per_100_windows_ci": _t_interval(pager),
        "promotions_before_shift": float(np.mean([sum(p < cut for p in r["promotions"]) for r in runs])),
        "promotions_after_shift": float(np.mean([sum(p >= cut for p in r["promotions"]) for r in runs])),
    }
    if shifted:
        out["delay_by_segment"] = {
            seg: [
                min((w for w in r["alerts_by_segment"][seg] if w >= shift_day), default=None) for r in runs
            ]
            for seg in ("all", "segment=A", "segment=B")
        }
        delays = [min((w for w in r["alerts"] if w >= shift_day), default=None) for r in runs]
        found = np.array([d - shift_day for d in delays if d is not None], float)
        out["detected"] = int(found.size)
        out["detection_delay_mean"] = float(found.mean()) if found.size else None
        out["detection_delay_ci"] = _t_interval(found) if found.size > 1 else None
        out["detection_delay_median"] = float(np.median(found)) if found.size else None
        out["promoted_after_shift_share"] = float(
            np.mean([any(p >= cut for p in r["promotions"]) for r in runs])
        )
    out.update(_segment_figures(runs, shift_day if shifted else ref, days))
    start = shift_day if shifted else 0
    excess = {
        k: np.array([np.mean(np.subtract(r["served"][k], r["served"]["oracle"])[start:]) for r in runs])
        for k in ("gated", "never", "daily")
    }
    out["served_excess_log_loss"] = {k: [float(v.mean()), *_t_interval(v)] for k, v in excess.items()}
    for other in ("never", "daily"):
        d = excess["gated"] - excess[other]
        p = float(stats.ttest_1samp(d, 0.0).pvalue) if d.std() > 0 else float("nan")
        out[f"gated_minus_{other}"] = [float(d.mean()), *_t_interval(d), p]
    return out


def _segment_figures(runs: list[dict[str, Any]], start: int, days: int) -> dict[str, Any]:
    """Per segment: the gated champion's served sum p / sum y pooled over days ``start + SETTLED`` to the
    end (one value per stream; mean and t-interval over streams), the share of streams within 0.1 of 1,
    and that segment's alerts per stream over those days."""
    lo = start + SETTLED
    out: dict[str, Any] = {"served_ratio_from_day": lo, "served_ratio": {}, "late_alerts_per_stream": {}}
    for v in SEGMENT_VALUES:
        r = np.array([np.sum(np.array(x["segment_sums"][v][lo:]), axis=0) for x in runs], float)
        ratio = r[:, 0] / r[:, 1]
        within = float(np.mean(abs(ratio - 1) <= 0.1))
        out["served_ratio"][v] = [float(ratio.mean()), *_t_interval(ratio), within]
        late = [sum(1 for w in x["alerts_by_segment"][f"segment={v}"] if lo <= w < days) for x in runs]
        out["late_alerts_per_stream"][v] = float(np.mean(late))
    per_stream = [sum(m in SEGMENTED for m in x["promoted_methods"]) for x in runs]
    out["segmented_promotions"] = float(np.mean(per_stream))
    return out


def run(
    seeds: int = 20,
    days: int = 60,
    rows: int = 2000,
    warmup: int = 14,
    shift_day: int = 30,
    cfg: mon.MonitorConfig | None = None,
    delay: int = 2,
    scenarios: tuple[str, ...] = SCENARIOS,
    first_seed: int = 0,
    partial: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    cfg = cfg or mon.MonitorConfig(n_bootstrap=100, label_delay=f"{delay}D")
    out: dict[str, Any] = {"config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}, "scenarios": {}}
    out["design"] = {
        "seeds": seeds,
        "first_seed": first_seed,
        "days": days,
        "rows": rows,
        "warmup": warmup,
        "shift_day": shift_day,
        "label_delay_days": delay,
    }
    keep = ("alerts", "alerts_by_segment", "incidents", "incident_detail", "promotions")
    keep += ("promoted_methods", "served", "segment_sums")  # what merge() needs to re-summarise
    for sc in scenarios:
        runs = []
        for s in range(first_seed, first_seed + seeds):
            df = simulate_stream(sc, s, days=days, rows=rows, warmup=warmup, shift_day=shift_day)
            runs.append(run_stream(df, replace(cfg, seed=s), days, warmup, delay))
            out["scenarios"][sc] = summarise(runs, sc, shift_day, cfg.reference_windows, days)
            out["scenarios"][sc]["runs"] = [{k: r[k] for k in keep} for r in runs]
            out["design"]["seeds_done"] = {k: len(v["runs"]) for k, v in out["scenarios"].items()}
            if partial is not None:  # a long study keeps what it has after every stream
                partial(out)
    return out


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One study from several runs over disjoint seeds (each (scenario, seed) is independent and seeded,
    so the merge equals one run over all seeds); scenarios summarised again over all their runs."""
    design = dict(parts[0]["design"])
    cfg = parts[0]["config"]
    out: dict[str, Any] = {"config": cfg, "design": design, "scenarios": {}}
    runs: dict[str, list[dict[str, Any]]] = {}
    for part in parts:
        if part["config"] != cfg:
            raise ValueError("merge: the parts were run with different monitor configurations")
        for sc, r in part["scenarios"].items():
            runs.setdefault(sc, []).extend(r["runs"])
    for sc in [s for s in SCENARIOS if s in runs]:
        out["scenarios"][sc] = summarise(
            runs[sc], sc, design["shift_day"], cfg["reference_windows"], design["days"]
        )
        out["scenarios"][sc]["runs"] = runs[sc]
    design["seeds"] = max(len(r) for r in runs.values())
    design.pop("first_seed", None)
    design.pop("seeds_done", None)
    return out


def _f(v: float, d: int = 4) -> str:
    return "–" if v is None else f"{v:.{d}f}"


def markdown_table(res: dict[str, Any]) -> str:
    """The docs table (docs/monitoring.md) from a study JSON: one row per scenario."""
    head = (
        "| stream | false-alarm windows / window, any segment [95% CI] | incidents / 100 windows [95% CI] | "
        "streams with a false alarm | promotions before / after shift |\n|---|---|---|---|---|"
    )
    rows = [head]
    for sc, r in res["scenarios"].items():
        lo, hi = r["false_alarm_rate_per_window_ci"]
        plo, phi = r["incidents_per_100_windows_ci"]
        rows.append(
            f"| {sc} | {_f(r['false_alarm_rate_per_window'], 3)} [{_f(lo, 3)}, {_f(hi, 3)}] | "
            f"{_f(r['incidents_per_100_windows'], 2)} [{_f(plo, 2)}, {_f(phi, 2)}] | "
            f"{r['streams_with_false_alarm']:.2f} | "
            f"{r['promotions_before_shift']:.2f} / {r['promotions_after_shift']:.2f} |"
        )
    rows += [
        "",
        "| stream | segment | detected within 7 windows | delay median (min-max) |",
        "|---|---|---|---|",
    ]
    shift = res["design"]["shift_day"]
    for sc, r in res["scenarios"].items():
        if sc == "stable":
            continue
        for seg, firsts in r["delay_by_segment"].items():
            # Detected = a first alert within DETECT_WITHIN windows of the shift; a later one is noise.
            found = [d - shift for d in firsts if d is not None and d - shift < DETECT_WITHIN]
            dl = f"{np.median(found):g} ({min(found)}-{max(found)})" if found else "–"
            rows.append(f"| {sc} | {seg} | {len(found)}/{r['seeds']} | {dl} |")
    rows += [
        "",
        "| stream | segment | served sum p / sum y from the settle day [95% CI] | streams within 0.1 of 1 | "
        "alerts on it per stream from then | segmented promotions per stream |",
        "|---|---|---|---|---|---|",
    ]
    for sc, r in res["scenarios"].items():
        if "served_ratio" not in r:
            continue
        for v, (m, lo, hi, share) in r["served_ratio"].items():
            rows.append(
                f"| {sc} (day {r['served_ratio_from_day']}+) | segment={v} | {m:.3f} [{lo:.3f}, {hi:.3f}] | "
                f"{share:.2f} | {r['late_alerts_per_stream'][v]:.2f} | {r['segmented_promotions']:.2f} |"
            )
    rows += [
        "",
        "| stream | excess log loss: gated | never | daily (no gate) | gated - never [95% CI], p | "
        "gated - daily [95% CI], p |",
        "|---|---|---|---|---|---|",
    ]
    for sc, r in res["scenarios"].items():
        ex = r["served_excess_log_loss"]
        cells = [
            f"{_f(ex[k][0], 5)} [{_f(ex[k][1], 5)}, {_f(ex[k][2], 5)}]" for k in ("gated", "never", "daily")
        ]
        diffs = [
            f"{_f(d[0], 5)} [{_f(d[1], 5)}, {_f(d[2], 5)}], p={d[3]:.2g}"
            for d in (r["gated_minus_never"], r["gated_minus_daily"])
        ]
        rows.append(f"| {sc} | " + " | ".join(cells + diffs) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--band-k", type=float, default=3.0)
    ap.add_argument("--patience", type=int, default=1)
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS))
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    ap.add_argument(
        "--segmented-methods", nargs="*", default=list(mon.MonitorConfig.segmented_methods),
        help="segment-aware challengers (none: the global-only control)",
    )
    ap.add_argument("--out", default="reports/monitoring-study.json")
    ap.add_argument("--table", help="print the docs table of an existing study JSON and exit")
    ap.add_argument("--merge", nargs="+", help="study JSONs over disjoint seeds: merged into --out")
    a = ap.parse_args(argv)
    if a.merge:
        res = merge([json.loads(Path(f).read_text()) for f in a.merge])
        Path(a.out).write_text(json.dumps(res, indent=1, default=str))
        print(markdown_table(res))
        return
    if a.table:
        print(markdown_table(json.loads(Path(a.table).read_text())))
        return
    cfg = mon.MonitorConfig(
        n_bootstrap=100, band_k=a.band_k, patience=a.patience, segmented_methods=tuple(a.segmented_methods)
    )
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)

    def save(res: dict[str, Any]) -> None:
        tmp = Path(a.out).with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1, default=str))
        tmp.replace(a.out)

    res = run(a.seeds, a.days, a.rows, cfg=cfg, scenarios=tuple(a.scenarios), first_seed=a.first_seed,
              partial=save)
    save(res)
    for r in res["scenarios"].values():
        print(json.dumps({k: v for k, v in r.items() if k != "runs"}))


if __name__ == "__main__":
    main()
