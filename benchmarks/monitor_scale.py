"""One monitor window scored from its tables against the row path, same run.

    python -m benchmarks.monitor_scale --rows 10000000 --row-rows 1000000

Data: ``calibflow.experiments.monitoring.simulate_stream`` ("stable", one day of ``--rows`` rows, two
segment values), a Platt champion fitted on 5,000 rows of a warm-up day. Timed: the table path
(``monitor.scale.score_frame``: one pass applying the champion per batch, overall + per-segment rows,
``n_bootstrap`` Poisson replicates) on ``--rows``; the row path (``monitoring.predict_frame`` +
``scoring.score`` per segment mask, ``n_bootstrap`` row resamples) on the first ``--row-rows`` rows of
the same window, and the table path on those rows too, so the two paths compare on equal rows. Wall and
process CPU seconds; peak RSS of the process at the end.

    python -m benchmarks.monitor_scale --stage /tmp/monproj --rows 10000000 --days 4 \
        --code new=. --code old=/tmp/calibflow-before

The stage from files: ``--days`` daily Parquet files of ``--rows`` rows each (written in 1e6-row chunks,
the "stable" stream's law: score ~ N(0, 1), P(y=1) = sigmoid(-2.5 + 1.2 score), segment A/B), a Platt
champion, then ``python -m calibflow.pipeline.monitor`` scoring the last day only (the others are its
trailing calibration windows) under ``/usr/bin/time -v``, once per ``--code LABEL=PYTHONPATH`` (each on a
fresh ``monitoring/`` folder): wall seconds, peak RSS, and the window's overall scores from the state.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, round(time.perf_counter() - t, 2), round(time.process_time() - c, 2)


def write_day(folder, d: int, rows: int, rng) -> None:
    """Day ``d``'s Parquet file of ``rows`` rows of the "stable" law (module doc), written in 1e6-row
    chunks drawn from ``rng``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from scipy.special import expit

    from calibflow.experiments.monitoring import DAY0

    start0 = np.datetime64(DAY0.to_datetime64(), "us")
    schema = pa.schema([("time", pa.timestamp("us")), ("score", pa.float64()), ("label", pa.int8()),
                        ("segment", pa.string())])
    with pq.ParquetWriter(folder / f"day={d:03d}.parquet", schema) as w:
        for lo in range(0, rows, 1_000_000):
            n = min(1_000_000, rows - lo)
            x = rng.normal(size=n)
            us = (rng.uniform(0, 86_399, n) * 1e6).astype(np.int64)
            t = start0 + np.timedelta64(d, "D") + us.astype("timedelta64[us]")
            y = (rng.random(n) < expit(-2.5 + 1.2 * x)).astype(np.int8)
            seg = np.where(rng.random(n) < 0.5, "A", "B")
            w.write_table(pa.table({"time": t, "score": x, "label": y, "segment": seg}))


def platt_champion(seed: int) -> str:
    """A Platt champion fitted on 5,000 warm-up rows of the same law, as JSON."""
    import numpy as np
    from scipy.special import expit

    from calibflow import calibrators as C

    warm = np.random.default_rng(seed + 1).normal(size=5000)
    yw = (np.random.default_rng(seed + 2).random(5000) < expit(-2.5 + 1.2 * warm)).astype(float)
    return C.make("platt").fit(warm, yw).to_json()


def write_project(root, rows: int, days: int, seed: int = 0) -> None:
    """Daily Parquet files of ``rows`` rows, a Platt champion and params.yaml (skipped when written)."""
    from pathlib import Path

    import numpy as np
    import yaml

    root = Path(root)
    marker = root / f".written-{rows}-{days}-{seed}"
    if marker.exists():
        return
    folder = root / "data" / "stream"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for d in range(days):
        write_day(folder, d, rows, rng)
    (root / "models" / "ads").mkdir(parents=True, exist_ok=True)
    (root / "models" / "ads" / "calibrator.json").write_text(platt_champion(seed))
    params = {"seed": 0, "sources": {"ads": {"path": "data/stream", "label": "label", "score": "score",
                                             "score_kind": "score", "time": "time", "segments": ["segment"]}},
              "monitor": {"sources": ["ads"], "n_bootstrap": 200}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    marker.write_text("")


def run_stage(root, label: str, pythonpath: str, days: int) -> dict:
    """The stage on the last day under ``/usr/bin/time -v`` with ``pythonpath``'s calibflow."""
    import re
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import pandas as pd

    from calibflow.experiments.monitoring import DAY0

    root = Path(root)
    for d in ("monitoring", "plots", "metrics", "reports"):
        shutil.rmtree(root / d, ignore_errors=True)
    last = DAY0 + pd.Timedelta(days=days - 1)
    now = last + pd.Timedelta(days=3)
    env = {**os.environ, "PYTHONPATH": str(Path(pythonpath).resolve())}
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "calibflow.pipeline.monitor", "--source", "ads",
           "--now", now.isoformat(), "--start", last.isoformat(), "--params", str(root / "params.yaml"),
           "--root", str(root)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=root)
    out = {"code": label, "rc": proc.returncode, "wall_s": round(time.perf_counter() - t, 1)}
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    cpu = [float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([\d.]+)", proc.stderr)]
    out.update(peak_mb=int(rss.group(1)) // 1024 if rss else None, cpu_s=round(sum(cpu), 1))
    if proc.returncode != 0:
        out["tail"] = proc.stdout[-1500:] + proc.stderr[-1500:]
        return out
    state = json.loads((root / "monitoring" / "ads" / "state.json").read_text())
    row = next(r for r in state["history"] if r["segment"] == "all")
    win = state["windows"][row["window"]]
    out.update({k: row.get(k) for k in ("n", "calibration_ratio", "ratio_low", "ratio_high", "ece")})
    out.update(scored_from=win.get("scored_from", "rows"), gate=state["gates"][-1].get("reason"),
               gate_sample=state["gates"][-1].get("sample"))
    return out


def stage_main(a) -> None:
    write_project(a.stage, a.rows, a.days)
    res = {"rows_per_day": a.rows, "days": a.days, "load": os.getloadavg(), "runs": []}
    for spec in a.code:
        label, path = spec.split("=", 1)
        res["runs"].append(run_stage(a.stage, label, path, a.days))
        print(json.dumps(res["runs"][-1], default=float), flush=True)
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, indent=1, default=float))


def main(argv: list[str] | None = None) -> None:

    from calibflow import calibrators as C
    from calibflow import monitor as mon
    from calibflow.experiments.monitoring import simulate_stream
    from calibflow.monitor import scale as MS

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--row-rows", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", type=int, default=200)
    ap.add_argument("--stage", help="project folder: run the monitor stage from files (see the docstring)")
    ap.add_argument("--days", type=int, default=4, help="--stage: daily files (the last one is scored)")
    ap.add_argument("--code", action="append", default=[], help="--stage: LABEL=PYTHONPATH, repeatable")
    a = ap.parse_args(argv)
    if a.stage:
        stage_main(a)
        return
    df = simulate_stream("stable", 0, days=1, rows=a.rows, warmup=0)
    champ = C.make("platt").fit(df["score"].to_numpy()[:5000], df["label"].to_numpy()[:5000])
    cfg = mon.MonitorConfig(n_bootstrap=a.bootstrap)
    segs = ("segment",)
    res: dict = {"rows": a.rows, "row_rows": a.row_rows, "bootstrap": a.bootstrap, "load": os.getloadavg()}
    MS.score_frame(df.iloc[:10_000], champ, "score", cfg, segs, 0)  # compile, warm
    big, res["table_path_s"], res["table_path_cpu_s"] = _timed(
        lambda: MS.score_frame(df, champ, "score", cfg, segs, 0))
    small = df.iloc[: a.row_rows]
    t_small, res["table_path_small_s"], res["table_path_small_cpu_s"] = _timed(
        lambda: MS.score_frame(small, champ, "score", cfg, segs, 0))

    def rows():
        p = mon.predict_frame(champ, small, "score")
        y = small["label"].to_numpy(float)
        return {s: mon.score(y[m], p[m], cfg) for s, m in mon.segment_masks(small, segs)}

    r_small, res["row_path_small_s"], res["row_path_small_cpu_s"] = _timed(rows)
    res["row_over_table_same_rows"] = round(res["row_path_small_s"] / res["table_path_small_s"], 1)
    keys = ("calibration_ratio", "ratio_low", "ratio_high", "ece")
    res["all_table"] = {k: big["all"][k] for k in ("n", *keys)}
    res["small_all_table_vs_rows"] = {k: [t_small["all"][k], r_small["all"][k]] for k in keys}
    res["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    res["load_after"] = os.getloadavg()
    print(json.dumps(res, indent=1, default=float))


if __name__ == "__main__":
    main()
