"""The pass as one SQL query for a warehouse (BigQuery, Snowflake, Trino, Spark SQL, DuckDB).

One definition: :func:`pass_sql` writes the query once, in DuckDB's dialect, from the expressions of the
reference GROUP BY (``table._z_q_ll``, ``table._bucket_sql``, the validation of ``table._row_sql`` in a
portable form), and SQLGlot (a maintained transpiler) writes it in the dialect asked for. Nothing is
hand-written per dialect.

The query returns the small tables of :mod:`calibflow.aggregate.tables` in one result (``UNION ALL`` of one
GROUP BY per table over the same rows): the fine global (bucket, label) table (``segment`` NULL) and, per
segment column, its coarse (value, cell, label) table (``segment`` the column's name, ``value`` its value
as text, ``bucket`` the coarse cell). The coarse cell of a fine bucket is ``tables.coarse_lut``'s, as a
binary search of nested CASEs (8 comparisons per row at 256 cells; no join). Invalid rows are groups of
their own (``label`` -1: a label outside {0, 1}; -2: a missing, non-finite or out-of-[0, 1] score), so
:func:`tables_from_result` refuses them with their count, as the pass does. Each row carries ``spec``, the
JSON of what the tables were built with (score, kind, grid, cells), so a result is read back without
guessing (``calibflow fit --from-table``).

Floating point: the warehouse's ``ln`` and ``exp`` may differ from the C library's by an ulp, so its
sums agree with the pass to ~1e-15 relative and a row moves to the neighbouring fine bucket only when its
logit lies within an ulp of a bucket edge (the tests compare counts exactly on 1e6 rows).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from calibflow.aggregate.grid import SUMS
from calibflow.aggregate.table import DEFAULT_GRID, BucketGrid, _bucket_sql, _check_bad, _z_q_ll
from calibflow.aggregate.tables import CELLS, Tables, coarse_lut
from calibflow.sources import quote_ident

DIALECTS = ("duckdb", "spark", "bigquery", "snowflake", "trino")
#: The FROM item of :func:`pass_sql` when no table is named (a Spark temp view, a DuckDB view).
SOURCE = "calibflow_source"
#: The largest double: ``s BETWEEN -_MAX AND _MAX`` is false for NaN and the infinities in every dialect.
_MAX = "1.7976931348623157e308"
_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _ident(name: str) -> str:
    """A column or table name as written in the query: plain where it is a plain word (SQLGlot quotes it
    where the dialect needs: a reserved word), quoted otherwise. Quoting every name would make it
    case-sensitive in Snowflake, where an unquoted ``country`` is stored as ``COUNTRY``."""
    return name if _PLAIN.match(name) else quote_ident(name)


def _cell_case(starts: np.ndarray, lo: int, hi: int) -> str:
    """The coarse cell in ``[lo, hi)`` holding fine ``bucket``: cell ``c`` is buckets ``[starts[c],
    starts[c + 1])``. A balanced tree of CASEs: log2(cells) comparisons per row."""
    if hi - lo == 1:
        return str(lo)
    mid = (lo + hi) // 2
    return (f"CASE WHEN bucket < {int(starts[mid])} THEN {_cell_case(starts, lo, mid)}"
            f" ELSE {_cell_case(starts, mid, hi)} END")


def spec_of(score: str, label: str, kind: str, segments: Sequence[str], weight: str | None,
            grid: BucketGrid, cells: Sequence[int], ece_bins: int) -> dict[str, Any]:
    return {"score": score, "label": label, "kind": kind, "segments": list(segments), "weight": weight,
            "n_buckets": grid.n_buckets, "z_max": grid.z_max, "cells": [int(c) for c in cells],
            "ece_bins": int(ece_bins)}


def _duckdb_sql(source: str, spec: dict[str, Any]) -> str:
    """The query in DuckDB's dialect (SQLGlot's input): rows CTE, then one GROUP BY per table."""
    kind, grid = spec["kind"], BucketGrid(spec["n_buckets"], spec["z_max"])
    z, q, ll = _z_q_ll(kind)
    segs = spec["segments"]
    seg = "".join(f"{_ident(c)} AS seg_{i}, " for i, c in enumerate(segs))
    w = f"CAST({_ident(spec['weight'])} AS DOUBLE)" if spec["weight"] else "CAST(1 AS DOUBLE)"
    valid = "s BETWEEN 0 AND 1" if kind == "probability" else f"s BETWEEN -{_MAX} AND {_MAX}"
    pc = "greatest(least(s, 1 - 1e-12), 1e-12)"
    logs = f", ln({pc}) AS lp, ln(1 - {pc}) AS l1p" if kind == "probability" else ""
    starts = [coarse_lut(grid, c, spec["ece_bins"])[1] for c in spec["cells"]]
    cells = "".join(f", {_cell_case(st, 0, st.size)} AS cell_{i}" for i, st in enumerate(starts))
    sums = ("count(*) AS rows, sum(w) AS n, sum(w * z) AS sum_z, sum(w * q) AS sum_q, sum(w * ll) AS sum_ll,"
            " sum(w * q * q) AS sum_q2")
    tag = json.dumps(spec, sort_keys=True).replace("'", "''")
    selects = [f"SELECT CAST(NULL AS VARCHAR) AS segment, CAST(NULL AS VARCHAR) AS value, bucket, label,"
               f" {sums} FROM rows GROUP BY bucket, label"]
    for i, c in enumerate(segs):
        name = c.replace("'", "''")
        selects.append(f"SELECT '{name}' AS segment, CAST(seg_{i} AS VARCHAR) AS value, cell_{i} AS bucket,"
                       f" label, {sums} FROM rows GROUP BY seg_{i}, cell_{i}, label")
    return f"""WITH r0 AS (
  SELECT {seg}CAST({_ident(spec['score'])} AS DOUBLE) AS s,
    CAST({_ident(spec['label'])} AS DOUBLE) AS y, {w} AS w{logs}
  FROM {source}
), r1 AS (
  SELECT *, {z} AS z, {q} AS q,
    CASE WHEN coalesce(y NOT IN (0, 1), true) THEN 1 WHEN coalesce(NOT ({valid}), true) THEN 2 ELSE 0 END
      AS bad
  FROM r0
), r2 AS (
  SELECT *, {ll} AS ll, CASE WHEN bad = 0 THEN {_bucket_sql(grid)} ELSE 0 END AS bucket,
    CASE WHEN bad = 0 THEN CAST(y AS INTEGER) ELSE -bad END AS label
  FROM r1
), rows AS (
  SELECT *{cells} FROM r2
)
SELECT '{tag}' AS spec, t.* FROM (
{chr(10).join(('UNION ALL ' if k else '') + s for k, s in enumerate(selects))}
) AS t"""


def pass_sql(
    score: str,
    label: str,
    kind: str = "probability",
    segments: Sequence[str] = (),
    weight: str | None = None,
    grid: BucketGrid = DEFAULT_GRID,
    cells: int | Sequence[int] = CELLS,
    ece_bins: int = 15,
    dialect: str = "duckdb",
    table: str | None = None,
    pretty: bool = True,
) -> str:
    """The pass's GROUP BY query over ``table`` (a dotted table name; default :data:`SOURCE`) in
    ``dialect``. ``cells``: coarse cells per value, one number or one per segment column (the pass's
    ``tables.cells_for``: 256 unless a column has thousands of values)."""
    import sqlglot

    if dialect not in DIALECTS:
        raise ValueError(f"--dialect {dialect!r} is not one of {'|'.join(DIALECTS)}")
    _z_q_ll(kind)  # validates kind
    per_col = [int(cells)] * len(segments) if isinstance(cells, int | np.integer) else [int(c) for c in cells]
    if len(per_col) != len(segments):
        raise ValueError("cells: one number, or one per segment column")
    source = ".".join(_ident(p) for p in (table or SOURCE).split("."))
    spec = spec_of(score, label, kind, segments, weight, grid, per_col, ece_bins)
    out = sqlglot.transpile(_duckdb_sql(source, spec), read="duckdb", write=dialect, pretty=pretty)
    return out[0]


def tables_from_result(result: pd.DataFrame) -> tuple[Tables, dict[str, Any]]:
    """The :class:`Tables` of a :func:`pass_sql` result (any engine's; column names in any case) and its
    spec. Invalid rows are refused with their count, as the pass refuses them; groups of zero weight are
    dropped, as the pass keeps only keys holding weight. Segment values come back as text."""
    df = result.rename(columns=str.lower)
    need = {"spec", "segment", "value", "bucket", "label", "rows", *SUMS}
    missing = sorted(need - set(df.columns))
    if missing:
        raise ValueError(f"not a `calibflow fit --emit-sql` result: no column(s) {missing}")
    specs = df["spec"].dropna().unique()
    if len(specs) != 1:
        raise ValueError(f"not one `--emit-sql` result: {len(specs)} different spec values")
    spec = json.loads(specs[0])
    label = df["label"].to_numpy(np.int64)
    fine_rows = df["segment"].isna().to_numpy()
    bad = np.array([df["rows"][fine_rows & (label == -k)].sum() for k in (1, 2)], np.int64)
    _check_bad(bad, spec["score"], spec["label"], spec["kind"])
    grid = BucketGrid(int(spec["n_buckets"]), float(spec["z_max"]))
    sums = {s: df[s].to_numpy(np.float64) for s in SUMS}
    frame = pd.DataFrame({"bucket": df["bucket"].to_numpy(np.int64).astype(np.int32),
                          "label": label.astype(np.int32), **sums})
    keep = sums["n"] != 0
    fine = (frame[fine_rows & keep].sort_values(["bucket", "label"], kind="stable").reset_index(drop=True))
    segments, starts = {}, {}
    for c, n_cells in zip(spec["segments"], spec["cells"], strict=True):
        on = (df["segment"] == c).to_numpy()
        values = df["value"][on].astype(object)
        values = values.where(values.notna(), None)  # NULL as None, whatever pandas read it as
        levels = pd.Series(values.dropna().unique(), dtype=object).sort_values(kind="stable").tolist()
        if values.isna().any():
            levels.append(None)  # NULL last, as the pass's levels
        code = pd.Series(values.to_numpy(object)).map(
            {v: i for i, v in enumerate(levels) if v is not None}).fillna(len(levels) - 1).to_numpy(np.int64)
        part = frame[on].reset_index(drop=True)
        part.insert(0, "code", code)
        part.insert(0, "seg_0", values.to_numpy(object))
        part = part[part["n"] != 0].sort_values(["code", "bucket", "label"], kind="stable")
        segments[c] = part.reset_index(drop=True)
        starts[c] = coarse_lut(grid, int(n_cells), int(spec["ece_bins"]))[1]
    return Tables(fine, segments, starts, grid), spec


#: Rows a ``--from-table`` result may hold (read whole into memory): 1e5 values x 256 cells x 2 labels
#: per segment column fit well within it.
RESULT_ROWS_MAX = 1 << 27


def read_result(path: str, replicates: int = 0, seed: int = 0) -> tuple[Tables, dict[str, Any]]:
    """:func:`tables_from_result` of a result saved as Parquet (a file, folder or glob; its size checked
    from the footers before it is read), with ``replicates`` Poisson columns on the fine table."""
    import pyarrow.parquet as pq

    from calibflow.aggregate.table import add_replicates, expand

    files = expand(path)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    if rows > RESULT_ROWS_MAX:
        raise ValueError(f"{path}: {rows:,} rows, more than a pass result holds ({RESULT_ROWS_MAX:,}); "
                         "is it the rows rather than the query's result?")
    frame = pd.concat([pq.read_table(f).to_pandas() for f in files], ignore_index=True)
    try:
        tabs, spec = tables_from_result(frame)
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a `calibflow fit --emit-sql` result ({exc})") from None
    tabs.fine = add_replicates(tabs.fine, replicates, seed)
    return tabs, spec
