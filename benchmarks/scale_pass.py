"""The pass against a plain read of the same columns, interleaved in one run (issue 25's "<= 6x").

    python -m benchmarks.scale_pass --rows 10000000 --parts 8 --reps 5
    python -m benchmarks.scale_pass --folder /tmp/data --reps 3      # existing parts (benchmark generator)
    /usr/bin/time -v python -m benchmarks.scale_pass --folder /tmp/c8 --once country,seg7,campaign  # memory

Data: ``benchmarks.scale_segments.generate`` (float64 ``score``, int8 ``label``, a 200-value string
``country``, an int8 ``seg7``). Each repetition runs, in turn: the plain read (DuckDB, ``sum``/``max`` of the
four columns, 2 threads), the pass with two workers and with one (``tables.aggregate_files`` with both
segment columns, no replicates), and the pass's SQL alone (its projection drained to NumPy, no kernel).
Medians of wall and process CPU seconds, and the ratios to the read's medians from the same repetitions:
on a shared machine only the ratios mean something. ``--once COLS``: one pass (two workers, 8 replicates)
over those segment columns, its wall and CPU seconds, table sizes and the process's peak RSS (for
``/usr/bin/time -v`` at 1e5 campaign values: generate with ``benchmarks.scale_segments.generate``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import tempfile
import time


def _timed(fn) -> tuple[float, float]:
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def _drain(con, sql: str, params: dict) -> None:
    for batch in con.sql(sql, params=params).to_arrow_reader(1 << 20):
        for col in batch.columns:
            col.to_numpy(zero_copy_only=False)


def measure(files: list[str], reps: int, segments: list[str]) -> dict:
    import duckdb

    from calibflow.aggregate import tables as T

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    cols = ", ".join(["sum(score)", "sum(label)", *[f"max({s})" for s in segments]])
    read = f"SELECT {cols} FROM read_parquet($f)"
    T.aggregate_files(files[:1], "score", "label", segments=segments, threads=1)  # compile, warm
    whole = T.file_parts(files, 1)[0]
    spec_tabs = T.levels_and_hashes(con, whole, segments)
    spec = T._Spec("score", "label", "probability", tuple(segments), None, T.DEFAULT_GRID,
                   spec_tabs[0], None, None, spec_tabs[1])
    steps = {
        "plain_read": lambda: con.execute(read, {"f": files}).fetchall(),
        "pass_2_workers": lambda: T.aggregate_files(files, "score", "label", segments=segments, threads=2),
        "pass_1_worker": lambda: T.aggregate_files(files, "score", "label", segments=segments, threads=1),
        "pass_sql_only": lambda: _drain(con, T._projection(whole, spec), whole.params),
    }
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in steps}
    for _ in range(reps):
        for k, fn in steps.items():
            times[k].append(_timed(fn))
    out: dict = {}
    for k, ts in times.items():
        out[f"{k}_wall_s"] = statistics.median(t[0] for t in ts)
        out[f"{k}_cpu_s"] = statistics.median(t[1] for t in ts)
    for k in steps:
        if k != "plain_read":
            out[f"{k}_over_read_wall"] = out[f"{k}_wall_s"] / out["plain_read_wall_s"]
            out[f"{k}_over_read_cpu"] = out[f"{k}_cpu_s"] / out["plain_read_cpu_s"]
    return out


def once(files: list[str], segments: list[str]) -> dict:
    from calibflow.aggregate import tables as T

    t, c = time.perf_counter(), time.process_time()
    tabs = T.aggregate_files(files, "score", "label", segments=segments, threads=2, replicates=8)
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
            "table_rows": {k: len(v) for k, v in tabs.segments.items()},
            "cells": {k: int(v.size) for k, v in tabs.starts.items()}, "table_mb": T.table_bytes(tabs) / 1e6,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> None:
    from benchmarks.scale_segments import generate

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--folder", help="existing Parquet parts from the generator (not deleted)")
    ap.add_argument("--once", help="comma-separated segment columns: one pass, its peak memory")
    a = ap.parse_args(argv)
    folder = a.folder or tempfile.mkdtemp(prefix="calibflow_pass_", dir="/tmp")
    try:
        files = sorted(glob.glob(os.path.join(folder, "*.parquet"))) if a.folder else generate(
            folder, a.rows, a.parts, 200, 0, 2)
        res = {"files": len(files), "reps": a.reps, "load_before": os.getloadavg()}
        res.update(once(files, a.once.split(",")) if a.once else measure(files, a.reps, ["country", "seg7"]))
        res["load_after"] = os.getloadavg()
        print(json.dumps(res, indent=1))
    finally:
        if not a.folder:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
