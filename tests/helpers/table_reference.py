"""The first generation of the bucket table builder, kept as the tests' and benchmarks' control.

The library builds its tables one way: ``calibflow.aggregate.tables`` (Parquet parts on threads or Dask
tasks: ``aggregate_files`` / ``aggregate_tables``, what ``calibflow fit`` and the pipeline's aggregate stages
call) and ``calibflow.aggregate.source_stream`` (the one path from a user source). This module is the
builder before them, code for code: one fine table per (segments..., bucket, label), by DuckDB's GROUP BY
(``table.aggregate_sql``, the SQL reference) or by the per-row kernel (``kernel.accumulate``), and the same
table summed over a Dask cluster's partitions. The equivalence tests compare the pass against it on the same
rows; the scale benchmarks use it as the peer. No stage or command imports it. It takes the pass's own
arguments (``options.TableRows``, ``options.PassOptions``), so a test builds both sides from one pair of
values; of ``PassOptions`` it reads the grid, ``distinct_max``, the replicates and their seed (it has one
fine table, no coarse cells, one thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from calibflow.aggregate import kernel
from calibflow.aggregate.grid import BucketGrid
from calibflow.aggregate.options import DEFAULT_PASS, PassOptions, TableRows
from calibflow.aggregate.table import (
    BATCH_ROWS,
    _check_bad,
    _check_columns,
    _sql_pass,
    add_replicates,
    clip_sql,
    expand,
    is_distinct,
)
from calibflow.sources import quote_ident

# The flat accumulator's size limit (keys = segment codes x buckets x 2 labels): 4M keys are 160 MB per
# thread. Above it (many segment values) the reference is DuckDB's GROUP BY.
KEYS_MAX = 1 << 22
_UNIT = np.empty(0)  # no weight column: unit weights


def _seg_list(segments: Sequence[str]) -> str:
    return ", ".join(f"seg_{i}" for i in range(len(segments)))


def _kernel_sql(
    source: str, score: str, label: str, kind: str, segments: Sequence[str], weight: str | None
) -> str:
    """Per row, for ``kernel.accumulate``: code, y, s, [q,] a, b[, w] (see its docstring)."""
    s = f"CAST({quote_ident(score)} AS DOUBLE)"
    if kind == "probability":
        pc = f"greatest(least({s}, 1 - 1e-12), 1e-12)"
        cols = f"{s} AS s, ln({pc}) AS a, ln(1 - {pc}) AS b"
    else:
        q = f"(1 / (1 + exp(-{s})))"
        qc = clip_sql(q)
        cols = f"{s} AS s, {q} AS q, ln({qc}) AS a, ln(1 - {qc}) AS b"
    cols = f"CAST({quote_ident(label)} AS DOUBLE) AS y, {cols}"
    if weight:
        cols += f", CAST({quote_ident(weight)} AS DOUBLE) AS w"
    if not segments:
        return f"SELECT CAST(0 AS BIGINT) AS code, {cols} FROM {source}"
    seg = ", ".join(f"{quote_ident(c)} AS seg_{i}" for i, c in enumerate(segments))
    on = " AND ".join(f"r.seg_{i} IS NOT DISTINCT FROM l.seg_{i}" for i in range(len(segments)))
    return f"SELECT l.code, r.* EXCLUDE ({_seg_list(segments)}) FROM (SELECT {seg}, {cols} FROM {source}) r" \
        f" JOIN calibflow_levels l ON {on}"


def _levels(con: duckdb.DuckDBPyConnection, source: str, params: dict, segments: Sequence[str]):
    """The segment columns' distinct value tuples, sorted (their row index is the segment code)."""
    cols = ", ".join(f"{quote_ident(c)} AS seg_{i}" for i, c in enumerate(segments))
    return con.sql(f"SELECT DISTINCT {cols} FROM {source} ORDER BY ALL", params=params).df()


def _stream_into(reader, kind: str, grid: BucketGrid, acc: np.ndarray, bad: np.ndarray) -> None:
    """Sum each Arrow batch into ``acc`` on a worker thread while DuckDB produces the next one."""
    logit_kind = kind != "probability"
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = None
        for batch in reader:
            col = {name: batch.column(name).to_numpy(zero_copy_only=False) for name in batch.schema.names}
            args = (
                col["code"], col["y"], col.get("w", _UNIT), col["s"], col.get("q", col["s"]), col["a"],
                col["b"], logit_kind, grid.z_max, grid.n_buckets, acc, bad,
            )
            if pending is not None:
                pending.result()
            pending = pool.submit(kernel.accumulate, *args)
        if pending is not None:
            pending.result()


def _table_from(
    acc: np.ndarray, levels: pd.DataFrame, segments: Sequence[str], n_buckets: int
) -> pd.DataFrame:
    """The non-empty keys of the accumulator as the table (sorted by segment code, bucket, label)."""
    keys = np.flatnonzero(acc[:, 0] != 0)
    code, rest = np.divmod(keys, 2 * n_buckets)
    out = {f"seg_{i}": levels[f"seg_{i}"].to_numpy()[code] for i in range(len(segments))}
    out["bucket"] = (rest // 2).astype(np.int32)
    out["label"] = (rest % 2).astype(np.int32)
    out.update({name: acc[keys, j] for j, name in enumerate(kernel.SUMS)})
    return pd.DataFrame(out)


def _kernel_pass(
    con: duckdb.DuckDBPyConnection,
    source: str,
    params: dict,
    score: str,
    label: str,
    kind: str,
    segments: Sequence[str],
    weight: str | None,
    grid: BucketGrid,
    levels: pd.DataFrame,
) -> pd.DataFrame:
    n_codes = max(len(levels), 1)
    acc, bad = kernel.new_accumulator(n_codes * grid.n_buckets * 2)
    if segments:
        con.register("calibflow_levels", levels.assign(code=np.arange(len(levels), dtype=np.int64)))
    sql = _kernel_sql(source, score, label, kind, segments, weight)
    try:
        _stream_into(con.sql(sql, params=params).to_arrow_reader(BATCH_ROWS), kind, grid, acc, bad)
    finally:
        if segments:
            con.unregister("calibflow_levels")
    _check_bad(bad, score, label, kind)
    return _table_from(acc, levels, segments, grid.n_buckets)


def aggregate_query(
    source: str,
    params: dict,
    rows: TableRows,
    how: PassOptions = DEFAULT_PASS,
    con: duckdb.DuckDBPyConnection | None = None,
    engine: str = "auto",
) -> pd.DataFrame:
    """The bucket table of DuckDB FROM item ``source`` (with its query ``params``) in one pass.

    ``how.distinct_max`` > 0: when the source holds at most that many distinct scores
    (``table.is_distinct``: exact), one group per distinct score (``aggregate_sql(distinct=True)``).
    ``engine``: "auto" (the per-row kernel when the key space fits ``KEYS_MAX``, else the GROUP BY),
    "kernel" or "sql". ``rows.transform`` is the pass's alone: refused.
    """
    if engine not in ("auto", "kernel", "sql"):
        raise ValueError(f"engine must be auto, kernel or sql, got {engine!r}")
    if rows.transform is not None:
        raise ValueError("the reference builder sums the scores as they are: no transform")
    score, kind, segments, grid = rows.score, rows.kind, rows.segments, how.grid
    con = con or duckdb.connect()
    _check_columns(con, source, params, rows.columns)
    distinct = is_distinct(con, source, params, score, how.distinct_max)
    levels = _levels(con, source, params, segments) if segments and not distinct and engine != "sql" else None
    keys = (len(levels) if levels is not None else 1) * grid.n_buckets * 2
    args = (con, source, params, score, rows.label, kind, segments, rows.weight, grid)
    if distinct or engine == "sql" or (engine == "auto" and keys > KEYS_MAX):
        table = _sql_pass(*args, distinct=distinct)
    else:
        table = _kernel_pass(*args, levels if levels is not None else pd.DataFrame())
    return add_replicates(table, how.replicates, how.seed)


def aggregate_duckdb(
    paths: str | Sequence[str],
    rows: TableRows,
    how: PassOptions = DEFAULT_PASS,
    con: duckdb.DuckDBPyConnection | None = None,
    engine: str = "auto",
) -> pd.DataFrame:
    """:func:`aggregate_query` of Parquet ``paths`` (a file, folder, glob or list) in one pass (bounded
    memory)."""
    return aggregate_query("read_parquet($files)", {"files": expand(paths)}, rows, how, con, engine)


def _partition(path: str, rows: TableRows, how: PassOptions) -> pd.DataFrame:
    con = duckdb.connect()
    con.execute("SET threads TO 1")  # one partition per worker thread: Dask does the parallelism
    return aggregate_duckdb(path, rows, how, con=con)


def aggregate_dask(
    paths: str | Sequence[str],
    rows: TableRows,
    how: PassOptions = DEFAULT_PASS,
    client: Any = None,
) -> pd.DataFrame:
    """``aggregate_duckdb``'s table on a Dask cluster (``client``; the default one if None): one partition
    per Parquet file reduced on a worker by ``aggregate_duckdb`` itself, the partial tables summed by Dask,
    the replicates drawn from the summed table on the client. Counts (and so the replicate draws) equal
    ``aggregate_duckdb``'s exactly; float sums to summation order (~1e-12 relative). The library's own Dask
    engine is ``tables.aggregate_files(client=...)``."""
    import dask.dataframe as dd

    files = expand(paths)
    # the partitions' tables on the grid alone (no distinct-score groups, no replicates): as before
    part_how = PassOptions(grid=how.grid)
    # Dask's meta (column names and dtypes): the pass over no rows of the first file.
    empty = "(SELECT * FROM read_parquet($files) LIMIT 0)"
    meta = aggregate_query(empty, {"files": files[:1]}, rows, part_how)
    parts = dd.from_map(partial(_partition, rows=rows, how=part_how), files, enforce_metadata=False,
                        meta=meta)
    keys = [f"seg_{i}" for i in range(len(rows.segments))] + ["bucket", "label"]
    reduced = parts.groupby(keys, sort=False).sum(split_out=1)
    out = reduced.compute() if client is None else client.compute(reduced).result()
    table = out.reset_index().sort_values(keys, kind="stable").reset_index(drop=True)
    return add_replicates(table[meta.columns], how.replicates, how.seed)
