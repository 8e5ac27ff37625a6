"""The pass against a plain read of the same columns, interleaved in one run (issue 25's "<= 6x").

    python -m benchmarks.scale_pass --rows 10000000 --parts 8 --reps 5
    python -m benchmarks.scale_pass --folder /tmp/data --reps 3      # existing parts (benchmark generator)
    /usr/bin/time -v python -m benchmarks.scale_pass --folder /tmp/c8 --once country,seg7,campaign  # memory
    python -m benchmarks.scale_pass --folder /tmp/data --profile --reps 3    # CPU ns per row of each step

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
    rows = T.TableRows("score", "label", segments=segments)
    T.aggregate_files(files[:1], rows, T.PassOptions(threads=1))  # compile, warm
    whole = T.file_parts(files, 1)[0]
    spec_tabs = T.levels_and_hashes(con, whole, segments)
    spec = T._Spec("score", "label", "probability", tuple(segments), None, T.DEFAULT_GRID,
                   spec_tabs[0], None, None, spec_tabs[1], label_raw=T.label_is_raw(con, whole, "label"))
    steps = {
        "plain_read": lambda: con.execute(read, {"f": files}).fetchall(),
        "pass_2_workers": lambda: T.aggregate_files(files, rows, T.PassOptions(threads=2)),
        "pass_1_worker": lambda: T.aggregate_files(files, rows, T.PassOptions(threads=1)),
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


_LIBM_LOOP = []


def _libm_logs(s, q, a, b) -> None:
    """The previous ``kernel.row_logs``: libm's ``log`` twice a row in a numba loop (the peer of the SIMD
    logs in ``--profile``); compiled once."""
    if not _LIBM_LOOP:
        import math

        import numba

        @numba.njit(nogil=True)
        def loop(s, a, b):
            for i in range(s.size):
                pc = min(max(s[i], 1e-12), 1.0 - 1e-12)
                a[i] = math.log(pc)
                b[i] = math.log(1.0 - pc)

        _LIBM_LOOP.append(loop)
    _LIBM_LOOP[0](s, a, b)


def profile(files: list[str], reps: int, segments: list[str]) -> dict:
    """CPU ns per row of each step of one worker's pass, each on all the rows' batches in memory (min of
    ``reps``): DuckDB's projection to Arrow batches, the Arrow -> NumPy conversions, the segment codes, the
    logarithms (SIMD, and libm's loop for comparison), the scattered adds with and without segments."""
    import duckdb
    import numpy as np

    from calibflow.aggregate import kernel
    from calibflow.aggregate import tables as T

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    whole = T.file_parts(files, 1)[0]
    spec = T._make_spec(con, [whole], whole, T.TableRows("score", "label", segments=segments),
                        T.PassOptions(threads=1), None)[0]
    sql = T._projection(whole, spec)
    batches = [b for b in con.sql(sql, params=whole.params).to_arrow_reader(T.BATCH_ROWS)]
    rows = sum(b.num_rows for b in batches)
    ys = [[b.column(n).to_numpy(zero_copy_only=False) for n in ("y", "s")] for b in batches]
    codes = [T._codes(b, spec) for b in batches]
    logs = [np.empty((3, b.num_rows)) for b in batches]
    acc = spec.new_accumulators()

    def add(n_cols: int) -> None:
        for (y, s), (_, a, b), c in zip(ys, logs, codes, strict=True):
            kernel.accumulate_tables(c[:n_cols], spec.base, spec.cells, y, T._UNIT, s, s, a, b, False,
                                     spec.grid.z_max, spec.grid.n_buckets, spec.lut, *acc)

    read = f"SELECT sum(score), sum(label), {', '.join(f'max({c})' for c in segments)} FROM read_parquet($f)"
    steps = {
        "plain_read": lambda: con.execute(read, {"f": files}).fetchall(),
        "projection_to_arrow": lambda: [b for b in con.sql(sql, params=whole.params).to_arrow_reader(
            T.BATCH_ROWS)],
        "arrow_to_numpy": lambda: [[b.column(n).to_numpy(zero_copy_only=False) for n in ("y", "s")]
                                   for b in batches],
        "segment_codes": lambda: [T._codes(b, spec) for b in batches],
        "logs_libm_loop": lambda: [_libm_logs(s, *lg) for (_, s), lg in zip(ys, logs, strict=True)],
        "logs_simd": lambda: [kernel.row_logs(s, False, *lg) for (_, s), lg in zip(ys, logs, strict=True)],
        "adds_fine_only": lambda: add(0),
        "adds_fine_and_segments": lambda: add(len(segments)),
        "levels_query": lambda: T.levels_and_hashes(con, whole, segments),
    }
    for fn in steps.values():
        fn()  # compile, warm
    out: dict = {"rows": rows}
    for k, fn in steps.items():
        best = min(_timed(fn)[1] for _ in range(reps))
        out[f"{k}_cpu_ns_per_row"] = round(best / rows * 1e9, 2)
    return out


def once(files: list[str], segments: list[str]) -> dict:
    from calibflow.aggregate import tables as T

    t, c = time.perf_counter(), time.process_time()
    tabs = T.aggregate_files(files, T.TableRows("score", "label", segments=segments),
                             T.PassOptions(threads=2, replicates=8))
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
    ap.add_argument("--profile", action="store_true", help="CPU ns per row of each step of the pass")
    a = ap.parse_args(argv)
    folder = a.folder or tempfile.mkdtemp(prefix="calibflow_pass_", dir="/tmp")
    try:
        files = sorted(glob.glob(os.path.join(folder, "*.parquet"))) if a.folder else generate(
            folder, a.rows, a.parts, 200, 0, 2)
        res = {"files": len(files), "reps": a.reps, "load_before": os.getloadavg()}
        segs = ["country", "seg7"]
        if a.once:
            res.update(once(files, a.once.split(",")))
        else:
            res.update(profile(files, a.reps, segs) if a.profile else measure(files, a.reps, segs))
        res["load_after"] = os.getloadavg()
        print(json.dumps(res, indent=1))
    finally:
        if not a.folder:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
