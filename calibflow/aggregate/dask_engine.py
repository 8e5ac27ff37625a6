"""The same bucket table from a Dask cluster: one ``dask.dataframe`` partition per Parquet file.

Each partition is read with pyarrow on a worker, given the same row key as the DuckDB engine (file
index * 2^32 + row number in the file) and reduced with the *same* SQL (``table.aggregate_sql``, DuckDB
embedded in the worker), so the bucket of a score and the Poisson draws of a row are computed by one
definition; the partial tables are then summed by Dask (``groupby().sum()``). Integer counts agree
exactly with ``aggregate_duckdb``; float sums to summation order (~1e-12 relative).

Point it at an existing cluster with ``client = distributed.Client("tcp://scheduler:8786")`` and pass
``client``; every worker must be able to open the source paths (a shared filesystem or an object store
URL pyarrow reads), and must have calibflow, duckdb and pyarrow installed.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from calibflow.aggregate.table import DEFAULT_GRID, BucketGrid, aggregate_sql, expand


def _partition(path: str, index: int, read_columns: list[str], sql_args: dict) -> pd.DataFrame:
    tab = pq.read_table(path, columns=read_columns)
    key = pa.array(range(index << 32, (index << 32) + tab.num_rows), pa.int64())
    part = tab.append_column("k", key)  # noqa: F841 - read by DuckDB's replacement scan below
    con = duckdb.connect()
    con.execute("SET threads TO 1")  # one partition per worker thread: Dask does the parallelism
    return con.execute(aggregate_sql("part", **sql_args)).df()


def aggregate_dask(
    paths: str | Sequence[str],
    score: str,
    label: str,
    kind: str = "probability",
    segments: Sequence[str] = (),
    weight: str | None = None,
    grid: BucketGrid = DEFAULT_GRID,
    replicates: int = 0,
    seed: int = 0,
    client=None,
) -> pd.DataFrame:
    """``aggregate_duckdb``'s table computed on a Dask cluster (``client``; the default one if None)."""
    import dask.dataframe as dd

    files = expand(paths)
    columns = [score, label, *segments, *([weight] if weight else [])]
    args = {
        "score": score,
        "label": label,
        "kind": kind,
        "segments": tuple(segments),
        "weight": weight,
        "grid": grid,
        "replicates": replicates,
        "seed": seed,
    }
    # Dask's meta (column names and dtypes) from the same SQL on an empty table of the first file's schema.
    empty = pq.read_schema(files[0]).empty_table().select(columns)
    part = empty.append_column("k", pa.array([], pa.int64()))  # noqa: F841 - DuckDB replacement scan
    meta = duckdb.connect().execute(aggregate_sql("part", **args)).df()
    parts = dd.from_map(
        _partition,
        files,
        list(range(len(files))),
        read_columns=columns,
        sql_args=args,
        enforce_metadata=False,
        meta=meta,
    )
    keys = [f"seg_{i}" for i in range(len(segments))] + ["bucket", "label"]
    reduced = parts.groupby(keys, sort=False).sum(split_out=1)
    out = reduced.compute() if client is None else client.compute(reduced).result()
    return out.reset_index().sort_values(keys, kind="stable").reset_index(drop=True)
