"""Issue 41: the pass on Spark against DuckDB, in the same run, on the same Parquet parts.

``nice python -m benchmarks.spark --rows 1e7 [--standalone]`` generates ``--rows`` rows (DuckDB, seeded:
float64 ``score`` = sigmoid(z), z ~ N(-2.5, 1.5^2); int8 ``label`` from sigmoid(0.8 z - 0.3); a 200-value
string ``country`` with 1% NULLs) in ``--parts`` Parquet files, then times, each on the same files:

- ``duckdb``: ``tables.aggregate_files`` (the default engine, two worker threads);
- ``spark parts``: the same parts as Spark tasks (``scale.engine: spark`` on paths) on ``local[2]``;
- ``spark sql``: the pass's GROUP BY in Spark SQL (``sql_pass.pass_sql``, the Spark-table route);
- ``--standalone``: ``spark parts`` on a standalone cluster on this machine (a master and two one-core
  workers on 127.0.0.1, started and stopped here).

Wall and CPU seconds (the CPU of this process and every process under it: the JVM and Spark's Python
workers), the ratio to DuckDB, and whether the tables equal DuckDB's (keys and counts exactly, the largest
relative difference of a float sum). The session's start is timed apart. Say the load (``uptime``) beside
any number quoted: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import psutil

from calibflow.aggregate import tables as T
from calibflow.aggregate.spark_engine import SparkClient, spark_session, spark_table_tables

SEGS = ["country"]
ROWS = T.TableRows("score", "label", segments=SEGS)


def generate(folder: Path, rows: int, parts: int) -> list[str]:
    con = duckdb.connect()
    con.execute("SET threads TO 2")
    paths = []
    per = rows // parts
    for i in range(parts):
        con.execute(f"SELECT setseed({(i + 1) / (parts + 2)})")
        p = str(folder / f"part-{i:03d}.parquet")
        con.execute(f"""COPY (
          WITH g AS (SELECT -2.5 + 1.5 * sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) AS z,
                            random() AS u, random() AS v, random() AS w FROM range({per}))
          SELECT 1 / (1 + exp(-z)) AS score,
                 CAST(u < 1 / (1 + exp(-(0.8 * z - 0.3))) AS TINYINT) AS label,
                 CASE WHEN w < 0.01 THEN NULL ELSE 'c' || CAST(floor(v * 200) AS INTEGER) END AS country
          FROM g) TO '{p}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)""")
        paths.append(p)
    return paths


def _cpu() -> float:
    """CPU seconds of this process and all its descendants alive now (user + system)."""
    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def timed(fn):
    c0, t0 = _cpu(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, _cpu() - c0


def _diff(a: T.Tables, b: T.Tables, text: bool = False) -> str:
    """'equal counts, max rel diff X' or what differs."""
    worst = 0.0
    pairs = [(a.fine, b.fine, ["bucket", "label"])]
    pairs += [(a.segments[c], b.segments[c], ["seg_0", "bucket", "label"]) for c in a.segments]
    for x, y, keys in pairs:
        if len(x) != len(y):
            return f"DIFFERENT: {len(x)} vs {len(y)} rows"
        for k in keys:
            kx = [None if v is None or v != v else str(v) for v in x[k]] if text else x[k].tolist()
            ky = [None if v is None or v != v else str(v) for v in y[k]] if text else y[k].tolist()
            if kx != ky:
                return f"DIFFERENT keys {k}"
        if not (x["n"].to_numpy() == y["n"].to_numpy()).all():
            return "DIFFERENT counts"
        for s in ("sum_z", "sum_q", "sum_ll", "sum_q2"):
            u, v = x[s].to_numpy(), y[s].to_numpy()
            worst = max(worst, float(np.max(np.abs(u - v) / np.maximum(np.abs(u), 1e-300))))
    return f"keys and counts equal; max rel diff of a sum {worst:.1e}"


def _standalone(master_port: int = 7077) -> list[subprocess.Popen]:
    import pyspark

    cls = str(Path(pyspark.__file__).parent / "bin" / "spark-class")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    procs = [subprocess.Popen([cls, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(master_port), "--webui-port", "0"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    _wait_port(master_port)
    for _ in range(2):
        procs.append(subprocess.Popen([cls, "org.apache.spark.deploy.worker.Worker",
                                       f"spark://127.0.0.1:{master_port}", "--cores", "1", "--memory", "2g",
                                       "--webui-port", "0"], env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    time.sleep(20)  # the workers register with the master
    return procs


def _wait_port(port: int, timeout: float = 180.0) -> None:
    import socket

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(1)
    raise RuntimeError(f"the Spark master did not open port {port} in {timeout:.0f} s")


def _standalone_runs(paths: list[str], duck: T.Tables, base: float) -> None:
    """Two runs of the parts route on a standalone cluster on this machine, started and stopped here."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver on the address the master and workers use
    procs = _standalone()
    try:
        with spark_session("spark://127.0.0.1:7077") as spark:
            spark.sparkContext.setLogLevel("ERROR")
            for rep in (1, 2):
                client = SparkClient(spark)
                got, wall, cpu = timed(lambda c=client: T.aggregate_files(paths, ROWS, client=c))
                print(f"| spark parts, standalone 2 workers x 1 core, run {rep} | {wall:.2f} | "
                      f"{cpu:.2f} | {wall / base:.2f} | {_diff(got, duck)} |", flush=True)
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(30)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--no-sql", action="store_true", help="skip the Spark SQL route")
    ap.add_argument("--no-local", action="store_true", help="skip the local session (with --standalone)")
    args = ap.parse_args(argv)
    rows = int(args.rows)
    print(f"load before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as d:
        paths = generate(Path(d), rows, args.parts)
        print(f"{rows:,} rows in {args.parts} parts, {sum(os.path.getsize(p) for p in paths) / 1e6:.0f} MB",
              flush=True)
        duck, wall, cpu = timed(lambda: T.aggregate_files(paths, ROWS, T.PassOptions(threads=2)))
        base = wall
        print(f"| duckdb (2 threads) | {wall:.2f} | {cpu:.2f} | 1.00 | reference |", flush=True)
        if args.no_local:
            return _standalone_runs(paths, duck, base) if args.standalone else None
        w0 = time.perf_counter()
        spark_cm = spark_session("local[2]")
        spark = spark_cm.__enter__()
        spark.sparkContext.setLogLevel("ERROR")
        print(f"spark session start: {time.perf_counter() - w0:.1f} s wall", flush=True)
        try:
            for rep in (1, 2):  # the first pays the Python workers' imports and the kernel's load
                got, wall, cpu = timed(lambda: T.aggregate_files(paths, ROWS, client=SparkClient(spark)))
                print(f"| spark parts local[2], run {rep} | {wall:.2f} | {cpu:.2f} | {wall / base:.2f} | "
                      f"{_diff(got, duck)} |", flush=True)
            if not args.no_sql:
                df = spark.read.parquet(*paths)
                got, wall, cpu = timed(lambda: spark_table_tables(spark, df, ROWS))
                print(f"| spark sql local[2] | {wall:.2f} | {cpu:.2f} | {wall / base:.2f} | "
                      f"{_diff(got, duck, text=True)} |", flush=True)
        finally:
            spark_cm.__exit__(None, None, None)
        if args.standalone:
            _standalone_runs(paths, duck, base)
    print(f"load after: {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
