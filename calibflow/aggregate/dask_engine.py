"""The same bucket table from a Dask cluster: one ``dask.dataframe`` partition per Parquet file.

Each partition is one file reduced on a worker by the single-machine pass itself
(``table.aggregate_duckdb`` on that file: DuckDB embedded in the worker, one thread per task), so a
score's bucket is computed by one definition; Dask sums the partial tables (``groupby().sum()``), and the
Poisson-bootstrap replicates are drawn from the summed table on the client (``table.add_replicates``),
exactly as the single-machine path draws them. Integer counts (and so the replicate draws) agree exactly
with ``aggregate_duckdb``; float sums to summation order (~1e-12 relative).

Point it at an existing cluster with ``client = distributed.Client("tcp://scheduler:8786")`` and pass
``client``; every worker must be able to open the source paths (a shared filesystem or an object store
URL pyarrow reads), and must have calibflow, duckdb and pyarrow installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import duckdb
import pandas as pd

from calibflow.aggregate.table import (
    DEFAULT_GRID,
    BucketGrid,
    add_replicates,
    aggregate_duckdb,
    aggregate_query,
    expand,
)


def _partition(path: str, args: dict) -> pd.DataFrame:
    con = duckdb.connect()
    con.execute("SET threads TO 1")  # one partition per worker thread: Dask does the parallelism
    return aggregate_duckdb(path, con=con, **args)


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
    args = {"score": score, "label": label, "kind": kind, "segments": tuple(segments), "weight": weight,
            "grid": grid}
    # Dask's meta (column names and dtypes): the pass over no rows of the first file.
    empty = "(SELECT * FROM read_parquet($files) LIMIT 0)"
    meta = aggregate_query(empty, {"files": files[:1]}, **args)
    parts = dd.from_map(partial(_partition, args=args), files, enforce_metadata=False, meta=meta)
    keys = [f"seg_{i}" for i in range(len(segments))] + ["bucket", "label"]
    reduced = parts.groupby(keys, sort=False).sum(split_out=1)
    out = reduced.compute() if client is None else client.compute(reduced).result()
    table = out.reset_index().sort_values(keys, kind="stable").reset_index(drop=True)
    return add_replicates(table[meta.columns], replicates, seed)
