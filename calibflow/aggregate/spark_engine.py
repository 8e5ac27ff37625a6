"""The pass on Spark (``scale.engine: spark``, ``calibflow fit --engine spark``): the same tables, built
where a team's logs live.

Two routes, one definition each time:

- **Parquet paths** (:class:`SparkClient`): Spark runs the pass's own parts as tasks, exactly as the Dask
  engine does (``tables.aggregate_files`` with a ``client``): each task streams its row range through
  DuckDB (one thread) into the compiled kernel's accumulators, and the executors sum the accumulators
  (``treeReduce``), so only one fine table (5 MB) and one coarse table per segment column reach the driver
  whatever the number of tasks. The split of a streamed source (prepare's seeded hash), the coarse cells
  and the buckets are the pass's own code, so the tables equal DuckDB's: counts exactly, float sums to
  summation order (~1e-15 relative). The Poisson replicates are drawn from the summed table on the driver
  (``table.add_replicates``), as every engine draws them. Every executor must open the paths (a shared
  filesystem or an object store) and have calibflow installed (``pip install calibflow[spark]``).
- **A Spark table** (a catalog name, Delta included: :func:`spark_table_tables`): Spark SQL runs the pass's
  GROUP BY (``sql_pass.pass_sql`` in Spark's dialect, the query ``calibflow fit --emit-sql`` prints) on the
  table where it lives; the result is the same tables with the segment values as text.

A local session (``local[2]``) by default, the cluster at ``spark_master`` (``spark://host:7077``,
``yarn``...), or the session already active in the process (a notebook's ``spark``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from calibflow.aggregate.options import DEFAULT_PASS, PassOptions, TableRows

DEFAULT_MASTER = "local[2]"
_JAVA_FIX = ("Spark needs Java 17 or newer: install a headless JRE (Debian: apt-get install "
             "openjdk-17-jre-headless) or set JAVA_HOME")


def _pyspark() -> Any:
    try:
        import pyspark  # noqa: F401
        from pyspark.sql import SparkSession
    except ImportError:
        raise ValueError("engine spark needs PySpark: pip install 'calibflow[spark]'") from None
    return SparkSession


@contextlib.contextmanager
def spark_session(master: str | None = None) -> Iterator[Any]:
    """The active Spark session (when ``master`` is None or is its master), else a new one on ``master``
    (default :data:`DEFAULT_MASTER`), stopped on exit. Tests share one session (a fixture) this way."""
    session_cls = _pyspark()
    active = session_cls.getActiveSession()
    if active is not None and master in (None, active.sparkContext.master):
        yield active
        return
    if active is not None:  # one SparkContext per process: getOrCreate would hand back this one
        raise ValueError(f"a Spark session on {active.sparkContext.master} is already active in this process;"
                         f" leave out the Spark master ({master}) to use it, or stop it first")
    # the executors' Python is this one (a local session; on a cluster the workers' own)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (session_cls.builder.master(master or DEFAULT_MASTER).appName("calibflow")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.shuffle.partitions", "8")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    try:
        spark = builder.getOrCreate()
    except Exception as exc:  # pyspark's "Java gateway process exited" when no JVM starts
        if "gateway process exited" in str(exc).lower() or "java_home" in str(exc).lower():
            raise ValueError(_JAVA_FIX) from None
        raise
    try:
        yield spark
    finally:
        spark.stop()


def _sum3(a: tuple, b: tuple) -> tuple:
    """Two parts' accumulators (fine, coarse, invalid counts) summed in place."""
    for x, y in zip(a, b, strict=True):
        x += y
    return a


class SparkClient:
    """The two calls ``tables.aggregate_files`` makes of a Dask client, on a Spark session: ``map`` runs
    each part as a Spark task and sums the accumulators on the executors (one result comes back), and
    ``scheduler_info`` names the cores so the source is cut into at least two parts per core."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def scheduler_info(self) -> dict[str, Any]:
        return {"workers": dict.fromkeys(range(self.spark.sparkContext.defaultParallelism))}

    def map(self, fn: Callable, items: Iterable[Any], pure: bool = False, **kwargs: Any) -> list[Any]:
        # At most two partitions per core: a partition's parts are summed where they ran (treeReduce
        # reduces each partition first), so what moves is ~2 accumulators per core, not one per part.
        items = list(items)
        slices = max(min(len(items), 2 * self.spark.sparkContext.defaultParallelism), 1)
        rdd = self.spark.sparkContext.parallelize(items, slices)
        return [rdd.map(functools.partial(fn, **kwargs)).treeReduce(_sum3, depth=2)]

    def gather(self, result: Any) -> Any:
        return result


@contextlib.contextmanager
def spark_client(master: str | None = None) -> Iterator[SparkClient]:
    with spark_session(master) as spark:
        yield SparkClient(spark)


_TABLE_NAME = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*){0,2}$")


def is_table_name(source: str) -> bool:
    """Whether ``source`` names a Spark catalog table (``db.events``) rather than a path: no such path
    exists and it reads as a dotted identifier."""
    return bool(_TABLE_NAME.match(source)) and not os.path.exists(source)


def _n_values(spark: Any, segments: Sequence[str]) -> list[int]:
    """Each segment column's distinct values, NULL counted as one (the pass's levels)."""
    if not segments:
        return []
    cols = ", ".join(
        f"count(DISTINCT `{c}`) + max(CASE WHEN `{c}` IS NULL THEN 1 ELSE 0 END)" for c in segments
    )
    row = spark.sql(f"SELECT {cols} FROM calibflow_source").collect()[0]
    return [int(v) for v in row]


def spark_table_tables(spark: Any, source: Any, rows: TableRows, how: PassOptions = DEFAULT_PASS) -> Any:
    """The tables of a Spark table (a name, or a DataFrame) by Spark SQL running ``sql_pass.pass_sql``
    (Spark's dialect); segment values as text. Coarse cells per value as the pass sizes them
    (``tables.cells_for`` with one accumulator). ``how``'s threads and distinct_max are the DuckDB
    engine's: Spark runs its own tasks on the logit grid; ``rows.transform`` is the row pass's: refused."""
    from calibflow.aggregate.sql_pass import SOURCE, pass_sql, tables_from_result
    from calibflow.aggregate.table import add_replicates
    from calibflow.aggregate.tables import cells_for
    from calibflow.sources import require_columns

    if rows.transform is not None:
        raise ValueError("a Spark table's pass runs in Spark SQL: it cannot apply a Python transform")
    df = spark.table(source) if isinstance(source, str) else source
    require_columns(df.columns, rows.columns, where=" in the table")
    df.createOrReplaceTempView(SOURCE)
    per_col = cells_for(_n_values(spark, rows.segments), how.cells, 1)
    sql = pass_sql(rows.score, rows.label, rows.kind, rows.segments, rows.weight, how.grid, per_col,
                   how.ece_bins, "spark", pretty=False)
    result = spark.sql(sql).toPandas()
    tabs, _ = tables_from_result(result)
    tabs.fine = add_replicates(tabs.fine, how.replicates, how.seed)
    return tabs


def spark_apply_rows(cal: Any, kind: str, score: str, seg_cols: list[str], column: str) -> Callable:
    """A ``mapInPandas`` function adding ``column``: calibflow's own ``apply`` batch function
    (``apply._calibrate_batch``) on each Arrow batch Spark hands the Python worker, so every row gets what
    ``calibflow apply`` gives it (NULL where the score is NULL or NaN)."""

    def run(frames: Iterator[Any]) -> Iterator[Any]:
        from calibflow.apply import _calibrate_batch, _check_batch

        for frame in frames:
            x = frame[score].to_numpy(dtype=np.float64, na_value=np.nan)
            _check_batch(x, kind, score, 0)
            # as apply reads a batch: Arrow -> pandas -> object (a NULL integer arrives as NaN both ways)
            segs = {c: frame[c].to_numpy(dtype=object) for c in seg_cols} if seg_cols else None
            out = _calibrate_batch(cal, x, kind, segs)
            yield frame.assign(**{column: out.to_numpy(zero_copy_only=False)})

    return run


def apply_spark(  # noqa: PLR0913
    calibrator: Any,
    input_path: str,
    score: str | None,
    output: Any,
    score_kind: str | None = None,
    column: str = "calibrated",
    on_null: str = "fail",
    master: str | None = None,
) -> int:
    """``calibflow apply --engine spark``: Parquet ``input_path`` (file, folder or glob) scored on Spark by
    calibflow's own batch function (:func:`spark_apply_rows`, segments included) and written as a Parquet
    folder ``output`` (part files; replaced all at once: a failed run leaves the previous one). The rows
    written."""
    import shutil
    from pathlib import Path

    import pyarrow.parquet as pq
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import DoubleType, StructField, StructType

    from calibflow import apply as ap
    from calibflow import sources as src
    from calibflow.aggregate.table import expand

    if on_null not in ("fail", "pass"):
        raise ValueError(f"--on-null {on_null!r} is not one of fail|pass")
    output = Path(output)
    if ap.output_format(output) != "parquet":
        raise ValueError(f"--output {output}: --engine spark writes Parquet (a folder of part files); "
                         "name it .parquet")
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output {output} is a file; --engine spark writes a folder of part files")
    cal = ap.load_calibrator(Path(calibrator))
    kind = src.score_kind_of(cal, score_kind)
    score = ap.score_column(cal, Path(calibrator), score)
    seg_cols = ap.segment_columns(cal)
    files = expand(input_path)
    con = src.connect()
    try:  # apply's own checks of the input's columns and types (DuckDB reads the footers only)
        ap._check_input(ap._relation(input_path, con), input_path, score, seg_cols, column)
    finally:
        con.close()
    with spark_session(master) as spark:
        df = spark.read.parquet(*files)
        s = F.col(f"`{score}`").cast("double")
        if on_null == "fail":
            bad = df.filter(s.isNull() | F.isnan(s)).count()
            if bad:
                raise ValueError(f"column {score!r}: {bad:,} null or NaN score(s); drop them, or pass "
                                 f"--on-null pass to leave {column!r} empty on those rows")
        # apply's batch checks, counted over the whole input here (a task's batch knows no row numbers)
        inf = F.abs(s) == float("inf")
        # Spark orders NaN above every number: a NaN (passed through as NULL) is not "outside [0, 1]"
        out = ~F.isnan(s) & ((s < 0) | (s > 1)) if kind == "probability" else F.lit(False)
        n_inf, n_out = df.select(F.sum(inf.cast("long")), F.sum((out & ~inf).cast("long"))).first()
        if n_inf or n_out:
            what = "infinite" if n_inf else ("outside [0, 1] (use --score-kind logit or score if these are "
                                             "not probabilities)")
            raise ValueError(f"column {score!r}: {n_inf or n_out:,} score(s) {what}")
        schema = StructType([*df.schema.fields, StructField(column, DoubleType(), True)])
        scored = df.mapInPandas(spark_apply_rows(cal, kind, score, seg_cols, column), schema)
        tmp = output.with_name(f".{output.name}.spark-tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        scored.write.mode("overwrite").parquet(str(tmp))
    old = output.with_name(f".{output.name}.spark-old")
    shutil.rmtree(old, ignore_errors=True)
    if output.exists():
        output.rename(old)
    tmp.rename(output)
    shutil.rmtree(old, ignore_errors=True)
    return int(sum(pq.ParquetFile(f).metadata.num_rows for f in output.glob("*.parquet")))
