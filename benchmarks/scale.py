"""Scale benchmark: fit and evaluate N Parquet rows from one streaming DuckDB pass.

    python -m benchmarks scale                       # defaults below
    python -m benchmarks.scale --rows 100000000 --parts 10 --replicates 8 --peer-rows 10000000

Generates the data with DuckDB ``COPY ... TO`` in parts under /tmp (in a child process; deleted
afterwards), then times: a plain read of the same columns (the floor), the aggregate pass (bucket table +
exact log loss + Poisson replicates), every score+label calibrator fitted from the table, all metrics
with intervals; the same table by DuckDB's GROUP BY (the reference engine: the peer of the pass); the
Dask LocalCluster (2 workers) on the same files and its equality with DuckDB; and in a child process
capped at 6 GB (``RLIMIT_AS``), scikit-learn's IsotonicRegression / LogisticRegression and betacal on
``--peer-rows`` rows in memory. Peak memory is ``ru_maxrss`` of the process (or child), taken after
the pass, fits and metrics.
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

METHODS = [
    "platt",
    "temperature",
    "beta",
    "spline",
    "gaussian",
    "gamma",
    "isotonic",
    "histogram",
    "scaling_binning",
    "bbq",
]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def generate(folder: str, rows: int, parts: int, con) -> list[str]:
    per = rows // parts
    out = []
    for i in range(parts):
        path = os.path.join(folder, f"part-{i:04d}.parquet")
        con.execute(
            f"COPY (SELECT CAST(1 / (1 + exp(-z)) AS FLOAT) AS score,"
            f" CAST(random() < 1 / (1 + exp(-(0.8 * z - 0.3))) AS TINYINT) AS label,"
            f" CAST(range % 7 AS TINYINT) AS seg FROM (SELECT range,"
            f" sqrt(-2 * ln(random())) * cos(2 * pi() * random()) * 1.5 - 1 AS z FROM range({per})))"
            f" TO '{path}' (FORMAT parquet)"
        )
        out.append(path)
    return out


def peer(kind: str, folder: str, rows: int) -> dict:
    """One in-memory peer fit on the first ``rows`` rows (run in a child under a 6 GB cap)."""
    import duckdb
    import numpy as np

    t0 = time.perf_counter()
    tab = (
        duckdb.connect()
        .execute(
            "SELECT score, label FROM read_parquet($p) LIMIT $n", {"p": f"{folder}/*.parquet", "n": rows}
        )
        .fetchnumpy()
    )
    s = tab["score"].astype(np.float64)
    y = tab["label"].astype(np.float64)
    t1 = time.perf_counter()
    if kind == "sklearn_isotonic":
        from sklearn.isotonic import IsotonicRegression

        IsotonicRegression(out_of_bounds="clip").fit(s, y)
    elif kind == "sklearn_logistic":
        from sklearn.linear_model import LogisticRegression

        z = np.log(s / (1 - s))
        LogisticRegression(C=1e10).fit(z[:, None], y)
    else:
        from betacal import BetaCalibration

        BetaCalibration(parameters="abm").fit(s[:, None], y)
    return {
        "peer": kind,
        "rows": rows,
        "read_s": t1 - t0,
        "fit_s": time.perf_counter() - t1,
        "peak_mb": _rss_mb(),
    }


def run_peer(kind: str, folder: str, rows: int) -> dict:
    code = (
        "import resource, json, sys; resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30));"
        "from benchmarks.scale import peer;"
        "print(json.dumps(peer(sys.argv[1], sys.argv[2], int(sys.argv[3]))))"
    )
    r = subprocess.run([sys.executable, "-c", code, kind, folder, str(rows)], capture_output=True, text=True)
    if r.returncode != 0:
        return {"peer": kind, "rows": rows, "failed": (r.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--peer-rows", type=int, default=2_000_000, help="0: skip the in-memory peers")
    ap.add_argument("--dask-rows", type=int, default=0, help="0: skip the Dask comparison")
    ap.add_argument("--no-sql-pass", dest="sql_pass", action="store_false",
                    help="skip the reference DuckDB GROUP BY pass (the peer of the kernel pass)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--accuracy-rows", type=int, default=0, help="only max |p_agg - p_exact| at this size")
    ap.add_argument("--methods", default="", help="methods for --accuracy-rows (comma-separated)")
    a = ap.parse_args(argv)
    if a.accuracy_rows:
        print(json.dumps(accuracy(a.accuracy_rows, [m for m in a.methods.split(",") if m]), indent=1))
        return
    import duckdb

    from calibflow.aggregate import fit_from_table, metrics_from_table
    from calibflow.aggregate.options import PassOptions, TableRows
    from tests.helpers.table_reference import aggregate_duckdb  # the first builder: the pass's peer

    seg_rows = TableRows("score", "label", segments=("seg",))

    free = shutil.disk_usage("/tmp").free
    need = a.rows * 6  # ~5 bytes/row compressed: float32 + int8 + int8
    if free < 3 * need:
        raise SystemExit(f"/tmp has {free / 1e9:.1f} GB free, need ~{3 * need / 1e9:.1f} GB: lower --rows")
    folder = tempfile.mkdtemp(prefix="calibflow_scale_", dir="/tmp")
    res: dict = {"rows": a.rows, "parts": a.parts, "replicates": a.replicates, "threads": a.threads}
    try:
        t = time.perf_counter()
        files = generate_in_child(folder, a.rows, a.parts, a.threads)
        res["generate_s"] = time.perf_counter() - t
        res["disk_mb"] = sum(os.path.getsize(f) for f in files) / 1e6
        con = duckdb.connect()
        con.execute(f"SET threads TO {a.threads}")
        con.execute("SET memory_limit = '4GB'")
        t = time.perf_counter()
        # The floor: read the same three columns and reduce them to a number each (no hash table).
        con.execute("SELECT sum(score), sum(label), max(seg) FROM read_parquet($f)", {"f": files}).fetchall()
        res["plain_read_s"] = time.perf_counter() - t
        t = time.perf_counter()
        table = aggregate_duckdb(files, seg_rows, PassOptions(replicates=a.replicates), con=con)
        res["pass_s"] = time.perf_counter() - t
        res["table_rows"] = len(table)
        t = time.perf_counter()
        fits = {m: fit_from_table(table, m) for m in METHODS}
        res["fit_all_s"] = time.perf_counter() - t
        t = time.perf_counter()
        met = metrics_from_table(table)
        res["metrics_s"] = time.perf_counter() - t
        res["end_to_end_s"] = res["pass_s"] + res["fit_all_s"] + res["metrics_s"]
        res["peak_mb"] = _rss_mb()  # before the reference GROUP BY below, which holds its own hash table
        res["ns_per_row_pass"] = 1e9 * res["pass_s"] / a.rows
        res["ns_per_row_read"] = 1e9 * res["plain_read_s"] / a.rows
        res["pass_over_read"] = res["pass_s"] / res["plain_read_s"]
        o = met["overall"]
        res["overall"] = {
            k: o[k] for k in ("log_loss", "brier", "calibration_ratio", "ece", "auc", "auc_tie_bound")
        }
        res["overall_ci"] = o.get("ci")
        res["platt"] = fits["platt"].to_json()
        if a.sql_pass:
            t = time.perf_counter()
            ref = aggregate_duckdb(files, seg_rows, con=con, engine="sql")
            res["sql_group_by_s"] = time.perf_counter() - t
            res["sql_over_pass"] = res["sql_group_by_s"] / res["pass_s"]
            res["sql_counts_equal"] = bool((ref["n"].to_numpy() == table["n"].to_numpy()).all())
        if a.dask_rows:
            res["dask"] = dask_compare(files, a, table_rows=a.dask_rows, con=con)
        res["peers"] = [
            run_peer(k, folder, a.peer_rows) for k in ("sklearn_isotonic", "sklearn_logistic", "betacal")
        ] if a.peer_rows else []
        print(json.dumps(res, indent=1, default=float))
        print(f"ratio pass/plain read: {res['pass_over_read']:.2f}x (aim: 1)")
        if a.sql_pass:
            print(f"ratio DuckDB GROUP BY/pass: {res['sql_over_pass']:.2f}x")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def generate_in_child(folder: str, rows: int, parts: int, threads: int) -> list[str]:
    """``generate`` in a child process, so the parent's peak memory is the pass's alone."""
    code = (
        "import duckdb, json, sys; from benchmarks.scale import generate; con = duckdb.connect();"
        f"con.execute('SET threads TO {int(threads)}');"
        "print(json.dumps(generate(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), con)))"
    )
    cmd = [sys.executable, "-c", code, folder, str(rows), str(parts)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def dask_compare(files, a, table_rows: int, con) -> dict:
    """Dask LocalCluster (2 worker processes) vs DuckDB on the first parts covering ``table_rows``."""
    from distributed import Client, LocalCluster

    from calibflow.aggregate.options import PassOptions, TableRows
    from tests.helpers.table_reference import aggregate_dask, aggregate_duckdb

    seg_rows = TableRows("score", "label", segments=("seg",))

    k = max(1, round(len(files) * table_rows / a.rows))
    sub = files[:k]
    t = time.perf_counter()
    how = PassOptions(replicates=a.replicates)
    ref = aggregate_duckdb(sub, seg_rows, how, con=con)
    t_duck = time.perf_counter() - t
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cl, Client(cl) as c:
        t = time.perf_counter()
        dk = aggregate_dask(sub, seg_rows, how, client=c)
        t_dask = time.perf_counter() - t
    ints = ["n"] + [x for x in ref.columns if x.startswith("b") and x[1:].isdigit()]
    import numpy as np

    return {
        "rows": table_rows,
        "files": k,
        "duckdb_s": t_duck,
        "dask_s": t_dask,
        "overhead": t_dask / t_duck,
        "keys_equal": bool((dk.iloc[:, :3].to_numpy() == ref.iloc[:, :3].to_numpy()).all()),
        "counts_equal": bool((dk[ints].to_numpy() == ref[ints].to_numpy()).all()),
        "max_rel_float": float(
            max(np.max(np.abs(dk[c] / ref[c] - 1)) for c in ("sum_z", "sum_q", "sum_ll", "sum_q2"))
        ),
    }


def accuracy(rows: int, methods: list[str] | None = None) -> dict:
    """max |p_agg - p_exact| per method at ``rows`` rows: on a 2001-point grid and on the rows themselves.

    Two tables of the same files: the 65,536-cell logit grid (``distinct_max=0``) and one group per
    distinct score (``scale.distinct_max``'s default, used when the source's distinct scores fit under it).
    """
    import duckdb
    import numpy as np
    import pyarrow.parquet as pq

    from calibflow.aggregate import fit_from_table
    from calibflow.aggregate.options import PassOptions, TableRows
    from calibflow.aggregate.switch import ScaleConfig
    from calibflow.calibrators import make
    from tests.helpers.table_reference import aggregate_duckdb

    seg_rows = TableRows("score", "label", segments=("seg",))

    folder = tempfile.mkdtemp(prefix="calibflow_acc_", dir="/tmp")
    try:
        files = generate(folder, rows, 2, duckdb.connect())
        cols = [pq.read_table(f, columns=["score", "label"]) for f in files]
        s = np.concatenate([c["score"].to_numpy() for c in cols]).astype(np.float64)
        y = np.concatenate([c["label"].to_numpy() for c in cols]).astype(np.float64)
        grid = np.linspace(s.min(), s.max(), 2001)
        out: dict = {"rows": rows, "distinct_scores": int(np.unique(s).size)}
        tables = {}
        for mode, dmax in (("grid", 0), ("distinct", ScaleConfig().distinct_max)):
            t0 = time.perf_counter()
            tables[mode] = aggregate_duckdb(files, seg_rows, PassOptions(distinct_max=dmax))
            out[f"{mode}_table"] = {
                "rows": len(tables[mode]),
                "per_score": "score_probability" in tables[mode].columns,
                "seconds": round(time.perf_counter() - t0, 2),
            }
        for m in methods or METHODS:
            ex = make(m, input="probability").fit(s, y)
            pg, ps = ex.predict(grid), ex.predict(s)
            for mode, table in tables.items():
                agg = fit_from_table(table, m)
                d = np.abs(agg.predict(s) - ps)
                out.setdefault(m, {})[mode] = {
                    "grid": float(np.abs(agg.predict(grid) - pg).max()),
                    "rows": float(d.max()),
                    "rows_p99": float(np.quantile(d, 0.99)),
                }
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)

if __name__ == "__main__":
    main()
