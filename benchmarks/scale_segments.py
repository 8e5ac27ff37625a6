"""Segment cardinality benchmark: the two-table pass against a plain read and a GROUP BY peer.

    python -m benchmarks.scale_segments --rows 10000000 --parts 8 --values 200
    python -m benchmarks.scale_segments --rows 100000000 --parts 20 --campaigns 100000 --no-peer
    python -m benchmarks.scale_segments --rows 2000000 --parts 2 --cli     # + `calibflow fit` end to end
    python -m benchmarks.scale_segments --rows 1000000 --accuracy          # coarse tables vs the rows

Data (DuckDB ``COPY`` in a child process, under /tmp, deleted afterwards): float64 ``score`` =
sigmoid(z), z ~ N(-1, 1.5^2); int8 ``label`` ~ Bernoulli(sigmoid(0.8 z - 0.3)); a ``country`` string
column with ``--values`` values, an int8 ``seg7`` (7 values) and, with ``--campaigns K``, an int32
``campaign`` with K values. Times, all in one run (so ratios compare like with like on a loaded machine):

- the plain read: the same columns reduced to a number each (``sum``/``max``), DuckDB on 2 threads;
- the pass (``tables.aggregate_files``: fine global table + one coarse table per segment column) on one
  worker and on two (the cores);
- the GROUP BY peer: the same three groupings (fine (bucket, label); per segment column (value, cell,
  label)) as one DuckDB ``GROUP BY GROUPING SETS`` over the same per-row SQL;
- fits of every score+label method from the fine table, overall metrics with intervals, per-segment metrics
  with intervals for every value of every column;
- ``--cli``: ``calibflow fit`` in a child process (calib = the first half of the parts, test = the rest),
  wall time and peak RSS from ``/usr/bin/time``-like ``wait4``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.scale import METHODS


def generate(
    folder: str, rows: int, parts: int, values: int, campaigns: int, threads: int, null_every: int = 0
) -> list[str]:
    """``null_every`` > 0: ``country`` is NULL in about one row in that many."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads TO {int(threads)}")
    per, out = rows // parts, []
    camp = f", CAST(hash(range * 7 + 1) % {campaigns} AS INTEGER) AS campaign" if campaigns else ""
    country = f"'c' || CAST(hash(range) % {values} AS VARCHAR)"
    if null_every:
        country = f"CASE WHEN hash(range * 3 + 2) % {int(null_every)} = 0 THEN NULL ELSE {country} END"
    for i in range(parts):
        path = os.path.join(folder, f"part-{i:04d}.parquet")
        con.execute(
            f"COPY (SELECT 1 / (1 + exp(-z)) AS score,"
            f" CAST(random() < 1 / (1 + exp(-(0.8 * z - 0.3))) AS TINYINT) AS label,"
            f" CAST(range % 7 AS TINYINT) AS seg7, {country} AS country"
            f"{camp} FROM (SELECT range, sqrt(-2 * ln(random())) * cos(2 * pi() * random()) * 1.5 - 1 AS z"
            f" FROM range({i * per}, {(i + 1) * per}))) TO '{path}' (FORMAT parquet)"
        )
        out.append(path)
    return out


def _generate_in_child(a, folder: str) -> list[str]:
    code = (
        "import json, sys; from benchmarks.scale_segments import generate;"
        "print(json.dumps(generate(sys.argv[1], *map(int, sys.argv[2:]))))"
    )
    args = [folder, a.rows, a.parts, a.values, a.campaigns, a.threads]
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


_CPU: dict[int, float] = {}


def _timed(fn):
    """``fn()`` and its wall seconds; its process CPU seconds (all threads) are left in ``_CPU[0]`` (a
    loaded machine inflates wall time far more than CPU time)."""
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    _CPU[0] = time.process_time() - c
    return out, time.perf_counter() - t


def group_by_peer(con, files: list[str], segments: list[str]) -> float:
    """The pass's groupings by one DuckDB GROUP BY GROUPING SETS over the reference per-row SQL."""
    from calibflow.aggregate.table import DEFAULT_GRID, _row_sql

    rows = _row_sql("read_parquet($f)", "score", "label", "probability", segments, None, DEFAULT_GRID)
    sets = ", ".join(["(bucket, label)", *[f"(seg_{i}, cell, label)" for i in range(len(segments))]])
    seg_cols = "".join(f"seg_{i}, " for i in range(len(segments)))
    sql = f"""{rows}
SELECT {seg_cols}bucket, cell, label, count(*) AS rows, sum(w) AS n, sum(w * z), sum(w * q), sum(w * ll),
  sum(w * q * q)
FROM (SELECT *, CAST(bucket // 256 AS INTEGER) AS cell FROM rows) GROUP BY GROUPING SETS ({sets})"""
    _, secs = _timed(lambda: con.execute(f"SELECT count(*) FROM ({sql})", {"f": files}).fetchall())
    return secs  # its CPU time is left in _CPU[0]


def _cli(files: list[str], segments: list[str], replicates: int) -> dict:
    """``calibflow fit`` in a child: wall seconds and peak RSS (the child's, from wait4)."""
    half = max(len(files) // 2, 1)
    calib, test = files[:half], files[half:] or files[:half]
    folder = tempfile.mkdtemp(prefix="calibflow_seg_cli_", dir="/tmp")
    for name, group in (("calib", calib), ("test", test)):
        os.mkdir(os.path.join(folder, name))
        for f in group:
            os.symlink(f, os.path.join(folder, name, os.path.basename(f)))
    cmd = [sys.executable, "-m", "calibflow.cli", "fit", "--calib", f"{folder}/calib/*.parquet",
           "--test", f"{folder}/test/*.parquet", "--score", "score", "--label", "label",
           "--replicates", str(replicates), "--out", os.path.join(folder, "out")]
    for s in segments:
        cmd += ["--segment", s]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read()
    try:
        with open(os.path.join(folder, "out", "fit.json")) as fh:
            rec = json.load(fh)
    except FileNotFoundError:
        rec = {"error": err.strip().splitlines()[-1:] or ["?"]}
    shutil.rmtree(folder, ignore_errors=True)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "status": status,
        "inner_s": rec.get("seconds"),
        "calib_table_rows": rec.get("calib", {}).get("table_rows"),
        "segment_table_rows": rec.get("test", {}).get("segment_table_rows"),
        "error": rec.get("error"),
    }


def accuracy(rows: int, values: int, threads: int) -> dict:
    """Per value of the ``values``-value segment at ``rows`` rows: |coarse table - rows| for the raw
    scores and for Platt / isotonic / histogram fitted on the fine table (max and median over values)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from calibflow import metrics as M
    from calibflow.aggregate import fit_from_table
    from calibflow.aggregate.metrics import calibrated_table
    from calibflow.aggregate.segments import segment_metrics
    from calibflow.aggregate.tables import PassOptions, TableRows, aggregate_files

    folder = tempfile.mkdtemp(prefix="calibflow_seg_acc_", dir="/tmp")
    try:
        files = generate(folder, rows, 2, values, 0, threads)
        t = pa.concat_tables([pq.read_table(f) for f in files])
        s, y = t["score"].to_numpy(), t["label"].to_numpy().astype(np.float64)
        c = t["country"].to_numpy(zero_copy_only=False)
        tabs = aggregate_files(files, TableRows("score", "label", segments=("country",)),
                               PassOptions(threads=threads))
        st = tabs.segments["country"]
        masks = {v: c == v for v in np.unique(c)}
        out: dict = {"rows": rows, "values": len(masks), "cells": int(tabs.starts["country"].size),
                     "table_rows": len(st)}

        def stat(errs):
            return {"max": float(np.max(errs)), "median": float(np.median(errs))}

        def compare(m, pred) -> dict:
            """|table - rows| per value for the ratio (relative), log loss and ECE."""
            err: dict[str, list[float]] = {"ratio_rel": [], "log_loss": [], "ece": []}
            for i, v in enumerate(m["value"]):
                k = masks[v]
                err["ratio_rel"].append(abs(m["calibration_ratio"][i] / (pred[k].sum() / y[k].sum()) - 1))
                err["log_loss"].append(abs(m["log_loss"][i] - M.log_loss(y[k], pred[k])))
                err["ece"].append(abs(m["ece"][i] - M.ece(y[k], pred[k])))
            return {key: stat(e) for key, e in err.items()}

        m = segment_metrics(st)
        auc = [abs(m["auc"][i] - M.auc(y[masks[v]], s[masks[v]])) for i, v in enumerate(m["value"])]
        out["raw"] = {**compare(m, s), "auc": stat(auc), "auc_tie_bound": stat(m["auc_tie_bound"])}
        for method in ("platt", "isotonic", "histogram"):
            cal = fit_from_table(tabs.fine, method)
            p = cal.predict(s)
            fine_cells = tabs.calibrated_segments(cal, "probability")["country"]
            out[method] = {
                "fine_cells": compare(segment_metrics(fine_cells), p),
                "group_mean": compare(segment_metrics(calibrated_table(st, cal)), p),
            }
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--values", type=int, default=200, help="values of the string segment column")
    ap.add_argument("--campaigns", type=int, default=0, help="add an int segment with this many values")
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-peer", dest="peer", action="store_false", help="skip the GROUP BY peer")
    ap.add_argument("--no-single", dest="single", action="store_false", help="skip the one-worker pass")
    ap.add_argument("--cli", action="store_true", help="also time `calibflow fit` end to end")
    ap.add_argument("--accuracy", action="store_true", help="only the coarse tables' accuracy at --rows")
    a = ap.parse_args(argv)
    if a.accuracy:
        print(json.dumps(accuracy(a.rows, a.values, a.threads), indent=1))
        return
    import duckdb

    from calibflow.aggregate import fit_from_table, metrics_from_table
    from calibflow.aggregate.segments import segment_metrics
    from calibflow.aggregate.tables import PassOptions, TableRows, aggregate_files

    segments = ["country", "seg7"] + (["campaign"] if a.campaigns else [])
    folder = tempfile.mkdtemp(prefix="calibflow_seg_", dir="/tmp")
    res: dict = {"rows": a.rows, "parts": a.parts, "segments": segments, "values": a.values,
                 "campaigns": a.campaigns, "replicates": a.replicates, "load_before": os.getloadavg()}
    try:
        files, res["generate_s"] = _timed(lambda: _generate_in_child(a, folder))
        res["disk_mb"] = sum(os.path.getsize(f) for f in files) / 1e6
        con = duckdb.connect()
        con.execute(f"SET threads TO {a.threads}")
        cols = ", ".join(["sum(score)", "sum(label)", *[f"max({s})" for s in segments]])
        read = f"SELECT {cols} FROM read_parquet($f)"
        con.execute(read, {"f": files[:1]}).fetchall()
        _, res["plain_read_s"] = _timed(lambda: con.execute(read, {"f": files}).fetchall())
        res["plain_read_cpu_s"] = _CPU[0]
        rows = TableRows("score", "label", segments=segments)
        aggregate_files(files[:1], rows, PassOptions(threads=1))  # compile, warm
        tabs, res["pass_2_workers_s"] = _timed(
            lambda: aggregate_files(files, rows, PassOptions(threads=a.threads, replicates=a.replicates))
        )
        res["pass_2_workers_cpu_s"] = _CPU[0]
        res["pass_peak_mb"] = _rss_mb()
        res["table_rows"] = {"fine": len(tabs.fine), **{c: len(t) for c, t in tabs.segments.items()}}
        res["cells"] = {c: int(s.size) for c, s in tabs.starts.items()}
        _, res["fits_s"] = _timed(lambda: {m: fit_from_table(tabs.fine, m) for m in METHODS})
        _, res["overall_metrics_s"] = _timed(lambda: metrics_from_table(tabs.fine))
        _, res["segment_metrics_s"] = _timed(
            lambda: [segment_metrics(t, replicates=a.replicates) for t in tabs.segments.values()]
        )
        res["peak_mb"] = _rss_mb()
        if a.single:
            _, res["pass_1_worker_s"] = _timed(
                lambda: aggregate_files(files, rows, PassOptions(threads=1, replicates=a.replicates))
            )
            res["pass_1_worker_cpu_s"] = _CPU[0]
            res["two_workers_speedup"] = res["pass_1_worker_s"] / res["pass_2_workers_s"]
        if a.peer:
            res["group_by_peer_s"] = group_by_peer(con, files, segments)
            res["group_by_peer_cpu_s"] = _CPU[0]
            res["group_by_over_pass"] = res["group_by_peer_s"] / res["pass_2_workers_s"]
        _, res["plain_read_again_s"] = _timed(lambda: con.execute(read, {"f": files}).fetchall())
        res["plain_read_again_cpu_s"] = _CPU[0]
        floor = min(res["plain_read_s"], res["plain_read_again_s"])
        res["pass_over_read"] = res["pass_2_workers_s"] / floor
        res["pass_over_read_cpu"] = res["pass_2_workers_cpu_s"] / min(
            res["plain_read_cpu_s"], res["plain_read_again_cpu_s"]
        )
        if a.cli:
            res["cli"] = _cli(files, segments, a.replicates)
        res["load_after"] = os.getloadavg()
        print(json.dumps(res, indent=1, default=float))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
