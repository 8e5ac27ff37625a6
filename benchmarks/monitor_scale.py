"""One monitor window scored from its tables against the row path, same run.

    python -m benchmarks.monitor_scale --rows 10000000 --row-rows 1000000

Data: ``calibflow.experiments.monitoring.simulate_stream`` ("stable", one day of ``--rows`` rows, two
segment values), a Platt champion fitted on 5,000 rows of a warm-up day. Timed: the table path
(``monitoring_scale.score_frame``: one pass applying the champion per batch, overall + per-segment rows,
``n_bootstrap`` Poisson replicates) on ``--rows``; the row path (``monitoring.predict_frame`` +
``monitoring.score`` per segment mask, ``n_bootstrap`` row resamples) on the first ``--row-rows`` rows of
the same window, and the table path on those rows too, so the two paths compare on equal rows. Wall and
process CPU seconds; peak RSS of the process at the end.
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


def main(argv: list[str] | None = None) -> None:
    import numpy as np

    from calibflow import calibrators as C
    from calibflow import monitoring as mon
    from calibflow import monitoring_scale as MS
    from calibflow.experiments.monitoring import simulate_stream

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--row-rows", type=int, default=1_000_000)
    ap.add_argument("--bootstrap", type=int, default=200)
    a = ap.parse_args(argv)
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
        rng = np.random.default_rng(0)
        p = mon.predict_frame(champ, small, "score")
        y = small["label"].to_numpy(float)
        return {s: mon.score(y[m], p[m], cfg, rng) for s, m in mon.segment_masks(small, segs)}

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
