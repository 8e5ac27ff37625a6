"""Fine where it matters, coarse where it is enough: one pass, two kinds of table.

- ``fine``: the global (bucket, label) table on the fine logit grid (``BucketGrid``, 65,536 cells), no
  segment. Fits and every global metric read it, exactly as they read the first builder's table
  (tests/helpers/table_reference.py).
- ``segments[col]``: per segment column, a (value, coarse cell, label) table. A coarse cell is a run of
  consecutive fine buckets (``coarse_lut``): a few hundred cells per value, with the edges
  ``k / ece_bins`` of the uniform ECE bins among them, so a per-segment ECE needs no rows across a bin
  edge except those of the one fine bucket holding the edge. Counts, ``sum p / sum y``, log loss and
  Brier of a segment are sums of the pass: exact whatever the cells.

Why. The previous table keyed each segment value by the fine grid: 200 countries made 26 million keys
(over ``KEYS_MAX``, so DuckDB's GROUP BY built a 1.4 million row table for 2 million rows) and even 7
values made the kernel's accumulator 36 MB, every row's add a cache miss. Here the fine accumulator is 5 MB
and a segment's cells are ``values x cells x 2`` keys, so memory is independent of the rows and bounded by
``SEG_KEYS_MAX``: with many values (1e5 campaigns) the cells per value shrink to fit it, and only values
that have rows come out in the tables.

Both cores. The source is cut into parts (``file_parts``: Parquet row ranges, which DuckDB prunes to their
row groups), each worker thread streams its parts through its own DuckDB cursor into its own
accumulators (``kernel.accumulate_tables``, GIL released), and the accumulators are summed at the end in a
fixed order. The Dask engine runs the same parts as tasks and sums the same accumulators, so the two
engines compute one table (counts equal, float sums to summation order).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from calibflow.aggregate.grid import SUMS
from calibflow.aggregate.options import CELLS, DEFAULT_PASS, PassOptions, TableRows
from calibflow.aggregate.table import (
    BATCH_ROWS,
    DEFAULT_GRID,
    BucketGrid,
    _check_bad,
    _check_columns,
    _sql_pass,
    add_replicates,
    expand,
    is_distinct,
)
from calibflow.sources import connect, parquet_rows, quote_ident, register_stores

#: Coarse keys (values x cells x 2 labels, all segment columns, all workers) kept in memory at once:
#: 2^22 keys of 5 sums are 168 MB, the pass's memory cap beyond the fine table and the batches. More
#: values than fit at ``cells`` get fewer cells each; when even ``MIN_CELLS`` do not fit two workers'
#: accumulators, one worker runs (1e5 values: ~20 cells per value, one worker).
SEG_KEYS_MAX = 1 << 22
MIN_CELLS = 16
#: Values of one segment column beyond which the pass refuses (at MIN_CELLS cells they alone fill
#: SEG_KEYS_MAX: 2^17 x 16 x 2 keys): an id-like column is not a segment.
SEG_VALUES_MAX = 1 << 17
#: The column of a split pass's parts holding each row's split code (``aggregate_split_tables``).
SPLIT_COLUMN = "_sp"
_UNIT = np.empty(0)


@dataclass(frozen=True)
class Part:
    """A DuckDB FROM item and its query parameters: one unit of work for a thread or a Dask task."""

    sql: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Tables:
    """The pass's output: ``fine`` (bucket, label) and per segment column a coarse (seg_0, bucket, label)
    table; ``starts[col][c]``: the first fine bucket of the column's coarse cell ``c``."""

    fine: pd.DataFrame
    segments: dict[str, pd.DataFrame]
    starts: dict[str, np.ndarray]
    grid: BucketGrid = DEFAULT_GRID

    def calibrated_segments(self, cal: Any, kind: str) -> dict[str, pd.DataFrame]:
        """Each segment table under calibrator ``cal`` (``segments.calibrated_segment_table``)."""
        from calibflow.aggregate.segments import calibrated_segment_table

        return {c: calibrated_segment_table(t, self.fine, self.starts[c], cal, kind, self.grid)
                for c, t in self.segments.items()}


def coarse_lut(grid: BucketGrid, cells: int = CELLS, ece_bins: int = 15) -> tuple[np.ndarray, np.ndarray]:
    """Fine bucket -> coarse cell (int64 array of ``grid.n_buckets``) and each cell's first fine bucket.

    Edges: the probabilities ``k / ece_bins`` (so a per-segment ECE with those bins, or any divisor of them,
    is computed within whole cells) and a uniform logit spacing over [-10, 10] for the rest, every edge
    snapped to a fine bucket boundary. At most ``cells`` cells.
    """
    # Fewer cells than ECE bins (very many values): equal-width probability cells only.
    ece_bins = max(int(ece_bins), 1) if cells > ece_bins else cells
    k = np.arange(1, ece_bins)
    prob_edges = np.log(k / (ece_bins - k)) if ece_bins > 1 else np.empty(0)
    n_uniform = cells - ece_bins
    z_edges = np.r_[prob_edges, np.linspace(-10.0, 10.0, n_uniform + 1)[1:-1] if n_uniform > 1 else []]
    idx = np.rint((np.clip(z_edges, -grid.z_max, grid.z_max) + grid.z_max) / grid.width).astype(np.int64)
    idx = np.unique(idx[(idx > 0) & (idx < grid.n_buckets)])
    starts = np.r_[0, idx]
    lut = np.searchsorted(idx, np.arange(grid.n_buckets), side="right").astype(np.int64)
    return lut, starts


def _row_ranges(files: list[str], n: int) -> list[list[tuple[str, int, int]]]:
    """``files`` cut into ``n`` runs of about equal rows: per run, (file, first row, end row) pieces."""
    counts = [parquet_rows(f) for f in files]
    total = sum(counts)
    bounds = [round(total * i / n) for i in range(n + 1)]
    runs: list[list[tuple[str, int, int]]] = [[] for _ in range(n)]
    start = 0
    for f, c in zip(files, counts, strict=True):
        for r in range(n):
            lo, hi = max(bounds[r], start), min(bounds[r + 1], start + c)
            if hi > lo:
                runs[r].append((f, lo - start, hi - start))
        start += c
    return [r for r in runs if r]


def file_parts(
    paths: str | Sequence[str], n: int, where: str = "", params: dict[str, Any] | None = None
) -> list[Part]:
    """Parquet ``paths`` as ``n`` parts of about equal rows (whole files where they fit, row ranges of a
    file otherwise, which DuckDB prunes to the row groups they touch); ``where``: a filter on the rows
    with its ``params`` (e.g. ``split = $split``)."""
    files = expand(paths)
    parts = []
    for run in _row_ranges(files, max(int(n), 1)):
        whole = [f for f, lo, hi in run if lo == 0 and hi == parquet_rows(f)]
        pieces, prm = [], dict(params or {})
        if whole:
            pieces.append("SELECT * FROM read_parquet($whole)")
            prm["whole"] = whole
        for j, (f, lo, hi) in enumerate((f, lo, hi) for f, lo, hi in run if f not in whole):
            prm[f"f{j}"] = f
            pieces.append(
                f"SELECT * EXCLUDE (file_row_number) FROM read_parquet($f{j}, file_row_number = true)"
                f" WHERE file_row_number >= {lo} AND file_row_number < {hi}"
            )
        body = " UNION ALL ".join(pieces)
        parts.append(Part(f"(SELECT * FROM ({body}){f' WHERE {where}' if where else ''})", prm))
    return parts


def _union(parts: Sequence[Part]) -> Part:
    """All parts as one FROM item (parameters renamed apart), for the levels and the distinct count."""
    sqls, prm = [], {}
    for i, p in enumerate(parts):
        sql = p.sql
        for name in sorted(p.params, key=len, reverse=True):
            sql = sql.replace(f"${name}", f"$u{i}_{name}")
            prm[f"u{i}_{name}"] = p.params[name]
        sqls.append(f"SELECT * FROM {sql}")
    return Part(f"({' UNION ALL '.join(sqls)})", prm)


def levels_of(con: duckdb.DuckDBPyConnection, part: Part, segments: Sequence[str]) -> list[pa.Array]:
    """Each segment column's distinct values (sorted, NULL last) as an Arrow array: a value's index is its
    code in the pass. Only values that occur: the tables keep only segments that have rows."""
    return levels_and_hashes(con, part, segments)[0]


def levels_and_hashes(
    con: duckdb.DuckDBPyConnection, part: Part, segments: Sequence[str]
) -> tuple[list[pa.Array], list[np.ndarray]]:
    """:func:`levels_of` and each level's DuckDB ``hash()`` (uint64), read in the same query: the pass
    projects ``hash(column)`` for a non-integer segment column instead of its values (a string column
    materialised in Arrow and looked up with ``index_in`` cost more than the rest of the pass's SQL)."""
    levels, hashes = [], []
    for c in segments:
        # hash() on the distinct values, not in the DISTINCT (3x the query's cost on every row)
        sql = (f"SELECT v, hash(v) AS h FROM (SELECT DISTINCT {quote_ident(c)} AS v FROM {part.sql})"
               " ORDER BY 1 NULLS LAST")
        t = con.sql(sql, params=part.params).to_arrow_table()
        levels.append(t["v"].combine_chunks())
        hashes.append(t["h"].to_numpy().astype(np.uint64))
    return levels, hashes


def cells_for(n_values: Sequence[int], cells: int, workers: int) -> list[int]:
    """Cells per value of each segment column, so that all coarse accumulators (every column, every
    worker) fit ``SEG_KEYS_MAX`` keys: columns with few values take ``cells``, the budget left is shared
    by the others (water-filling, fewest values first), never under ``MIN_CELLS``."""
    out = [cells] * len(n_values)
    left, workers = SEG_KEYS_MAX, max(workers, 1)
    order = sorted(range(len(n_values)), key=lambda i: n_values[i])
    for j, i in enumerate(order):
        share = left // (len(order) - j)
        out[i] = int(min(cells, max(MIN_CELLS, share // (2 * workers * max(n_values[i], 1)))))
        left -= out[i] * 2 * workers * n_values[i]
    return out


def _projection(part: Part, spec: _Spec) -> str:
    """Per row for ``kernel.accumulate_tables``: the segment columns ``g0..`` (an integer column as itself,
    others as their ``hash()``, see ``_Spec.coder``), the label ``y`` (a numeric label as itself, see
    ``_Spec.label_raw``, else as a double), the score ``s`` as a double[, ``w``]. The logarithms are the
    kernel's."""
    def seg(i: int, c: str) -> str:
        return f"hash({quote_ident(c)})" if spec.coder(i)[0] == "hash" else quote_ident(c)

    segs = "".join(f"{seg(i, c)} AS g{i}, " for i, c in enumerate(spec.segments))
    w = f", CAST({quote_ident(spec.weight)} AS DOUBLE) AS w" if spec.weight else ""
    w += f", CAST({quote_ident(SPLIT_COLUMN)} AS INTEGER) AS sp" if spec.splits else ""
    y = quote_ident(spec.label) if spec.label_raw else f"CAST({quote_ident(spec.label)} AS DOUBLE)"
    return f"SELECT {segs}{y} AS y, CAST({quote_ident(spec.score)} AS DOUBLE) AS s{w} FROM {part.sql}"


#: Label types the kernel reads as they are: an int8 label is 1 byte a row to cast, move and read, against
#: 8 as a double; each value compares with 0 and 1 as its double would, and a NULL among integers arrives
#: as NaN (Arrow's conversion). Others (BOOLEAN: an object array where NULLs are) are cast in SQL.
RAW_LABEL_TYPES = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT",
                             "UINTEGER", "UBIGINT", "FLOAT", "DOUBLE"})


def label_is_raw(con: duckdb.DuckDBPyConnection, part: Part, label: str) -> bool:
    """Whether the pass can project ``label`` as it is (:data:`RAW_LABEL_TYPES`) rather than cast."""
    row = con.execute(f"DESCRIBE SELECT {quote_ident(label)} FROM {part.sql}", part.params).fetchall()[0]
    return str(row[1]).upper() in RAW_LABEL_TYPES


@dataclass
class _Spec:
    """What every worker (thread or Dask task) needs to run a part."""

    score: str
    label: str
    kind: str
    segments: tuple[str, ...]
    weight: str | None
    grid: BucketGrid
    levels: list[pa.Array]
    lut: np.ndarray  # (columns, n_buckets): fine bucket -> coarse cell
    cells: np.ndarray  # cells per value, per column
    hashes: list[np.ndarray] | None = None  # each level's DuckDB hash(), per column
    #: Applied to each batch's scores before the kernel (``kind`` then describes its output): the monitor
    #: sums a champion's calibrated probabilities, computed per row (``calibflow.monitor.scale``).
    transform: Any = None
    #: Split names (a split pass, :func:`aggregate_split_tables`): the part's ``_sp`` column holds the
    #: row's split code (an index into them, -1: no split); the first ``n_tab`` get tables.
    splits: tuple[str, ...] = ()
    n_tab: int = 0
    #: The label is projected as it is (``label_is_raw``), not cast to a double in SQL.
    label_raw: bool = False

    @property
    def dense(self) -> list[tuple[int, np.ndarray] | None]:
        if not hasattr(self, "_dense"):
            self._dense = [dense_lookup(v) for v in self.levels]
        return self._dense

    def coder(self, i: int) -> tuple[str, Any]:
        """How column ``i``'s values become codes: ``("dense", (min, lookup))`` for a compact integer
        column, ``("hash", slots)`` where its levels' hashes are distinct (a collision among the levels
        falls back to the values), else ``("values", None)`` (Arrow ``index_in``)."""
        if not hasattr(self, "_coders"):
            self._coders = {}
        if i not in self._coders:
            h = None if self.hashes is None else self.hashes[i]
            if self.dense[i] is not None:
                self._coders[i] = ("dense", self.dense[i])
            elif h is not None and np.unique(h).size == h.size == len(self.levels[i]):
                from calibflow.aggregate import kernel

                self._coders[i] = ("hash", kernel.hash_slots(h))
            else:
                self._coders[i] = ("values", None)
        return self._coders[i]

    @property
    def base(self) -> np.ndarray:
        """Each column's first key in the coarse accumulator (and the total, last)."""
        sizes = [len(v) * int(c) * 2 for v, c in zip(self.levels, self.cells, strict=True)]
        return np.r_[0, np.cumsum(sizes)].astype(np.int64)

    def new_accumulators(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        seg_keys = int(self.base[-1])
        if self.splits:  # one table per split with tables; rows and positives of every split after bad's two
            return (np.zeros((self.n_tab * self.grid.n_buckets * 2, 5)), np.zeros((self.n_tab * seg_keys, 5)),
                    np.zeros(2 + 2 * len(self.splits), np.int64))
        return (np.zeros((self.grid.n_buckets * 2, 5)), np.zeros((seg_keys, 5)), np.zeros(2, np.int64))


#: An integer segment column whose values span at most this many integers gets its codes from a lookup
#: array (value - min -> code: ~10x cheaper per row than a hash lookup); others from ``pc.index_in``.
DENSE_SPAN_MAX = 1 << 24


def dense_lookup(values: pa.Array) -> tuple[int, np.ndarray] | None:
    """``(min, lookup)`` with ``lookup[v - min]`` = the code of integer value ``v``, or None (not an
    integer column, a NULL among the values, or a span over ``DENSE_SPAN_MAX``)."""
    if not pa.types.is_integer(values.type) or values.null_count or len(values) == 0:
        return None
    v = values.to_numpy().astype(np.int64)
    lo, span = int(v.min()), int(v.max()) - int(v.min()) + 1
    if span > DENSE_SPAN_MAX:
        return None
    lookup = np.full(span, -1, np.int64)
    lookup[v - lo] = np.arange(v.size)
    return lo, lookup


def _changed(spec: _Spec, i: int) -> ValueError:
    return ValueError(f"segment column {spec.segments[i]!r} changed while it was read; run again")


def _codes(batch: pa.RecordBatch, spec: _Spec) -> np.ndarray:
    """The batch's segment values as codes (their index among the levels), one row per column."""
    from calibflow.aggregate import kernel  # numba: imported where a pass runs, not with the module

    # int32 codes (at most SEG_VALUES_MAX values) and an int32 ``lut``: half the bytes the kernel streams
    # per row and per fine bucket next to its scattered adds (measured ~10% of the kernel)
    out = np.empty((len(spec.segments), batch.num_rows), np.int32)
    for i, values in enumerate(spec.levels):
        col = batch.column(f"g{i}")
        how, arg = spec.coder(i)
        if how == "hash":
            if col.null_count or not kernel.hashed_codes(col.to_numpy(), *arg, out[i]):
                raise _changed(spec, i)
            continue
        if how == "dense" and col.null_count == 0:
            if not kernel.dense_codes(col.to_numpy(), *arg, out[i]):
                raise _changed(spec, i)
            continue
        idx = pc.index_in(col, value_set=values, skip_nulls=False)
        if idx.null_count:  # a value outside the levels: the source changed between the two reads
            raise _changed(spec, i)
        out[i] = idx.to_numpy(zero_copy_only=False)
    return out


def run_parts(parts: Sequence[Part], spec: _Spec, con: duckdb.DuckDBPyConnection | None = None):
    """Stream ``parts`` one after another through one DuckDB connection into one set of accumulators."""
    from calibflow.aggregate import kernel  # numba: imported where a pass runs, not with the module

    con = con or register_stores(connect(), [p.params for p in parts])
    fine, seg, bad = spec.new_accumulators()
    base, logit_kind = spec.base, spec.kind != "probability"
    scratch = np.empty((3, BATCH_ROWS))  # q, a, b of a batch (kernel.row_logs)
    for part in parts:
        for batch in con.sql(_projection(part, spec), params=part.params).to_arrow_reader(BATCH_ROWS):
            y, s = (batch.column(n).to_numpy(zero_copy_only=False) for n in ("y", "s"))
            w = batch.column("w").to_numpy(zero_copy_only=False) if spec.weight else _UNIT
            if spec.transform is not None:
                s = np.asarray(spec.transform(s), dtype=np.float64)
            if batch.num_rows > scratch.shape[1]:
                scratch = np.empty((3, batch.num_rows))
            q, a, b = scratch[:, : batch.num_rows]
            kernel.row_logs(s, logit_kind, q, a, b)
            args = (_codes(batch, spec), base, spec.cells, y, w, s, q if logit_kind else s, a, b, logit_kind,
                    spec.grid.z_max, spec.grid.n_buckets, spec.lut, fine, seg, bad)
            if spec.splits:
                sp = batch.column("sp").to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
                kernel.accumulate_split_tables(sp, spec.n_tab, *args)
            else:
                kernel.accumulate_tables(*args)
    return fine, seg, bad


def _part_task(parts: Sequence[Part], spec: _Spec):
    """A Dask task: its parts on the worker, DuckDB on one thread (Dask does the parallelism)."""
    con = register_stores(connect(), [p.params for p in parts])  # an s3:// part, on the worker
    con.execute("SET threads TO 1")
    return run_parts(parts, spec, con)


def _fine_frame(acc: np.ndarray) -> pd.DataFrame:
    keys = np.flatnonzero(acc[:, 0] != 0)
    out = {"bucket": (keys // 2).astype(np.int32), "label": (keys % 2).astype(np.int32)}
    out.update({name: acc[keys, j] for j, name in enumerate(SUMS)})
    return pd.DataFrame(out, copy=False)


def _segment_frame(rows: np.ndarray, keys: np.ndarray, values: pa.Array, n_cells: int) -> pd.DataFrame:
    """One column's (value, cell, label) rows that hold any weight (``keys``, their sums ``rows``): values
    without rows never appear. The sums are views of ``rows``, not copies."""
    code, rest = np.divmod(keys, 2 * n_cells)
    out = {"seg_0": values.take(pa.array(code)).to_pandas(), "code": code,
           "bucket": (rest // 2).astype(np.int32), "label": (rest % 2).astype(np.int32)}
    out.update({name: rows[:, j] for j, name in enumerate(SUMS)})
    return pd.DataFrame(out, copy=False)  # no consolidating copy of the sums (1e5 values: 130 MB)


def _segment_tables(seg: np.ndarray, keys: np.ndarray, spec: _Spec) -> dict[str, pd.DataFrame]:
    """Each segment column's table from the coarse accumulator compacted to its non-empty ``keys``."""
    base, out = spec.base, {}
    for i, c in enumerate(spec.segments):
        lo, hi = np.searchsorted(keys, base[i : i + 2])
        out[c] = _segment_frame(seg[lo:hi], keys[lo:hi] - base[i], spec.levels[i], int(spec.cells[i]))
    return out


def _workers(threads: int | None) -> int:
    return max(1, int(threads) if threads else min(os.cpu_count() or 1, 8))


def _make_spec(
    con, parts, whole: Part, rows: TableRows, how: PassOptions, client, splits: tuple[str, ...] = (),
    n_tab: int = 0,
) -> tuple[_Spec, int, list]:
    """The pass's spec (levels, coarse cells within ``SEG_KEYS_MAX``, lookup tables), its worker count and
    each column's ``coarse_lut``. A split pass keeps ``n_tab`` tables per worker: the budget counts them."""
    segments, grid, cells = rows.segments, how.grid, how.cells
    levels, hashes = levels_and_hashes(con, whole, segments)
    for c, v in zip(segments, levels, strict=True):
        if len(v) > SEG_VALUES_MAX:
            raise ValueError(f"segment column {c!r} has {len(v):,} values (at most {SEG_VALUES_MAX:,}):"
                             " group it into fewer values, or leave it out of the segments")
    copies = max(n_tab, 1)
    workers = min(_workers(how.threads), len(parts)) if client is None else 1
    n_cells = cells_for([len(v) for v in levels], cells, workers * copies)
    per_worker = sum(len(v) * c * 2 * copies for v, c in zip(levels, n_cells, strict=True))
    # so many values that even MIN_CELLS per value overflows the budget: one accumulator, not two
    if workers > 1 and per_worker * workers > SEG_KEYS_MAX:
        workers = 1
        n_cells = cells_for([len(v) for v in levels], cells, workers * copies)
    keys = sum(len(v) * c * 2 * copies for v, c in zip(levels, n_cells, strict=True))
    if keys > SEG_KEYS_MAX:  # several large columns at MIN_CELLS each: the cap holds, one line says so
        cap = SEG_KEYS_MAX // (2 * MIN_CELLS)
        raise ValueError(f"segment columns {', '.join(map(repr, segments))} have {sum(map(len, levels)):,}"
                         f" values together, over the pass's memory cap ({cap:,}): group them into fewer"
                         " values, or leave some out of the segments")
    luts = [coarse_lut(grid, c, how.ece_bins) for c in n_cells]
    lut = np.stack([lt for lt, _ in luts]) if luts else np.zeros((0, grid.n_buckets), np.int64)
    spec = _Spec(rows.score, rows.label, rows.kind, segments, rows.weight, grid, levels,
                 lut.astype(np.int32), np.array([st.size for _, st in luts], np.int64), hashes,
                 rows.transform, tuple(splits), n_tab, label_is_raw(con, whole, rows.label))
    return spec, workers, luts


def aggregate_tables(
    parts: Sequence[Part],
    rows: TableRows,
    how: PassOptions = DEFAULT_PASS,
    client: Any = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> Tables:
    """The fine global table and the coarse per-segment tables of ``parts`` in one pass: the sums of
    ``rows`` (columns, score scale, segments, weight, transform), the pass run as ``how`` says.

    ``how.threads`` workers (default: the cores) each take a share of the parts; ``client``: a
    ``distributed.Client`` runs each part as a Dask task instead. ``how.distinct_max`` > 0 (DuckDB engine
    only): when the source holds at most that many distinct scores, the fine table has one group per
    distinct score (DuckDB's GROUP BY, ``table.aggregate_sql``) and the kernel pass runs only for the
    segment tables.
    Replicates (``b0..``) are drawn on the fine table; per-segment intervals draw theirs from the segment
    tables (``calibflow.aggregate.segments``). ``rows.transform``: a function of a batch's score array
    whose result (on ``kind``'s scale) is what the tables sum, e.g. a calibrator's probabilities row by row.
    """
    score, label, kind, segments, grid = rows.score, rows.label, rows.kind, rows.segments, how.grid
    con = con or register_stores(connect(), [p.params for p in parts])
    whole = _union(parts)
    _check_columns(con, whole.sql, whole.params, rows.columns)
    # The distinct-score table is DuckDB's GROUP BY over all rows: one machine only (on Dask the client
    # would read every row), so the Dask engine keeps the logit grid, as the first aggregate engine did.
    distinct = client is None and rows.transform is None and is_distinct(con, whole.sql, whole.params, score,
                                                                          how.distinct_max)
    spec, workers, luts = _make_spec(con, parts, whole, rows, how, client)
    if segments or not distinct:
        fine, seg, bad = _run(parts, spec, workers, client, con)
        _check_bad(bad, score, label, kind)
    if distinct:
        fine_t = _sql_pass(con, whole.sql, whole.params, score, label, kind, (), rows.weight, grid, True)
    else:
        fine_t = _fine_frame(fine)
    seg_tables = {}
    if segments:
        # The summed coarse accumulator compacted in place to its non-empty keys and shrunk (a realloc, no
        # copy): the tables' sums are views of it, so the pass's peak is the accumulator or the tables, not
        # both (1e5 values: 168 MB and 190 MB). Here, where ``seg`` has no other reference.
        keys = np.flatnonzero(seg[:, 0] != 0)
        from calibflow.aggregate import kernel

        kernel.compact_rows(seg, keys)
        try:
            seg.resize((keys.size, seg.shape[1]), refcheck=True)
        except ValueError:  # another reference to it (a debugger, a tracer): copy instead
            seg = seg[: keys.size].copy()
        seg_tables = _segment_tables(seg, keys, spec)
    starts = {c: st for c, (_, st) in zip(segments, luts, strict=True)}
    return Tables(add_replicates(fine_t, how.replicates, how.seed), seg_tables, starts, grid)


def _run(parts, spec: _Spec, workers: int, client, con):
    """Every part into accumulators (threads or Dask tasks), summed in part-share order."""
    if client is not None:
        futures = client.map(_part_task, [[p] for p in parts], spec=spec, pure=False)
        results = iter(client.gather(f) for f in futures)
    else:
        shares = [list(parts[i::workers]) for i in range(min(workers, len(parts)))]
        if len(shares) == 1:
            results = iter([run_parts(shares[0], spec, con)])
        else:
            with ThreadPoolExecutor(max_workers=len(shares)) as pool:
                futs = [pool.submit(run_parts, s, spec, con.cursor()) for s in shares]
                results = iter([f.result() for f in futs])
    fine, seg, bad = next(results)
    for f2, s2, b2 in results:
        fine += f2
        seg += s2
        bad += b2
    return fine, seg, bad


def aggregate_files(
    paths: str | Sequence[str],
    rows: TableRows,
    how: PassOptions = DEFAULT_PASS,
    client: Any = None,
    where: str = "",
    where_params: dict[str, Any] | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> Tables:
    """:func:`aggregate_tables` of Parquet ``paths`` (file, folder, glob or list), cut into one part per
    worker (threads) or per file (Dask; at least two per worker); ``where``: a row filter (with its
    ``where_params``)."""
    if client is None:
        n = _workers(how.threads)
    else:
        n = max(len(expand(paths)), 2 * max(len(client.scheduler_info().get("workers", {})), 1))
    parts = file_parts(paths, n, where, where_params)
    return aggregate_tables(parts, rows, how, client, con)


def table_bytes(t: Tables) -> int:
    """Memory the tables hold (for the benchmarks' bound checks)."""
    frames = [t.fine, *t.segments.values()]
    return int(sum(f.memory_usage(deep=True).sum() for f in frames))



def _split_segments(seg: np.ndarray, spec: _Spec, k: int) -> dict[str, pd.DataFrame]:
    """Split ``k``'s segment tables out of a split pass's coarse accumulator (its block of keys)."""
    size = int(spec.base[-1])
    block = seg[k * size : (k + 1) * size]
    keys = np.flatnonzero(block[:, 0] != 0)
    return _segment_tables(block[keys], keys, spec)


def _distinct_split_fine(
    con: duckdb.DuckDBPyConnection, whole: Part, rows: TableRows, grid: BucketGrid, n_tab: int
) -> list[pd.DataFrame]:
    """Per split with tables, the distinct-score fine table (DuckDB's GROUP BY with the split as a key),
    its ``bucket`` renumbered within the split, as a pass over that split alone numbers it."""
    tabbed = Part(f"(SELECT * FROM {whole.sql} WHERE {quote_ident(SPLIT_COLUMN)} BETWEEN 0 AND {n_tab - 1})",
                  whole.params)
    t = _sql_pass(con, tabbed.sql, tabbed.params, rows.score, rows.label, rows.kind, (SPLIT_COLUMN,),
                  rows.weight, grid, True)
    out = []
    for k in range(n_tab):
        part = t[t["seg_0"] == k].drop(columns="seg_0").reset_index(drop=True)
        part["bucket"] = (part["bucket"].rank(method="dense") - 1).astype(np.int32)
        out.append(part)
    return out


def aggregate_split_tables(  # noqa: PLR0913
    parts: Sequence[Part],
    rows: TableRows,
    splits: Sequence[str],
    n_tab: int,
    how: PassOptions = DEFAULT_PASS,
    client: Any = None,
    con: duckdb.DuckDBPyConnection | None = None,
    distinct_of: tuple[Part, str] | None = None,
) -> tuple[dict[str, Tables], dict[str, dict[str, int]]]:
    """:func:`aggregate_tables` of every split in ONE pass: the parts carry each row's split code in
    ``SPLIT_COLUMN`` (an index into ``splits``; -1 for none), the first ``n_tab`` splits get their
    tables (no replicates: drawn from the table by its reader, ``add_replicates``), and every split its
    rows and positives (unweighted). Returns ``({split: Tables}, {split: {"rows", "positives"}})``.
    ``rows.transform`` and ``how.replicates`` are refused: the split pass sums the scores as they are.

    A distinct-score fine table (``distinct_max``, DuckDB only) is one GROUP BY keyed by the split too.
    ``distinct_of``: (FROM item, column) whose distinct count decides it, e.g. the source's raw score
    column (a one-column read, where the parts' score would cost its logarithms and the split's hash
    per row again); default: the parts' score on the rows with tables.
    """
    if rows.transform is not None or how.replicates:
        raise ValueError("a split pass sums the scores as they are and draws no replicates (its reader"
                         " draws them: add_replicates): build it without a transform or replicates")
    score, label, kind, segments, grid = rows.score, rows.label, rows.kind, rows.segments, how.grid
    con = con or register_stores(connect(), [p.params for p in parts])
    splits = tuple(splits)
    whole = _union(parts)
    _check_columns(con, whole.sql, whole.params, [*rows.columns[:2], SPLIT_COLUMN, *rows.columns[2:]])
    tabbed = f"(SELECT * FROM {whole.sql} WHERE {quote_ident(SPLIT_COLUMN)} BETWEEN 0 AND {n_tab - 1})"
    of, col, prm = (tabbed, score, whole.params) if distinct_of is None else (
        distinct_of[0].sql, distinct_of[1], distinct_of[0].params)
    distinct = client is None and is_distinct(con, of, prm, col, how.distinct_max)
    spec, workers, luts = _make_spec(con, parts, whole, rows, how, client, splits, n_tab)
    fine, seg, bad = _run(parts, spec, workers, client, con)
    _check_bad(bad[:2], score, label, kind)
    size = grid.n_buckets * 2
    fines = (_distinct_split_fine(con, whole, rows, grid, n_tab) if distinct
             else [_fine_frame(fine[k * size : (k + 1) * size]) for k in range(n_tab)])
    starts = {c: st for c, (_, st) in zip(segments, luts, strict=True)}
    tables = {
        splits[k]: Tables(fines[k], _split_segments(seg, spec, k) if segments else {}, dict(starts), grid)
        for k in range(n_tab)
    }
    counts = {s: {"rows": int(bad[2 + 2 * k]), "positives": int(bad[3 + 2 * k])}
              for k, s in enumerate(splits)}
    return tables, counts


#: A stored :class:`Tables` (``save_tables``): ``fine.parquet``, ``segment.<i>.parquet``, ``meta.json``.
TABLES_META = "meta.json"


def save_tables(t: Tables, folder: str | os.PathLike[str], meta: dict[str, Any] | None = None) -> None:
    """Write ``t`` under ``folder`` (Parquet tables, the cells' starts and ``meta`` in JSON), each file
    atomically; the caller swaps the folder in (``calibflow.io.atomic_dir`` style) for an all-or-nothing
    update."""
    from pathlib import Path

    from calibflow.io import atomic_path, write_json

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "fine.parquet") as tmp:
        t.fine.to_parquet(tmp, index=False)
    cols = list(t.segments)
    for i, c in enumerate(cols):
        with atomic_path(out / f"segment.{i}.parquet") as tmp:
            t.segments[c].to_parquet(tmp, index=False)
    write_json(out / TABLES_META, {
        "segments": cols, "starts": {c: [int(x) for x in t.starts[c]] for c in cols},
        "grid": {"z_max": t.grid.z_max, "n_buckets": t.grid.n_buckets}, **(meta or {}),
    })


def load_tables(folder: str | os.PathLike[str]) -> tuple[Tables, dict[str, Any]]:
    """:func:`save_tables`' tables and its meta record."""
    from pathlib import Path

    from calibflow.io import read_json

    f = Path(folder)
    meta = read_json(f / TABLES_META)
    segs = {c: pd.read_parquet(f / f"segment.{i}.parquet") for i, c in enumerate(meta["segments"])}
    starts = {c: np.asarray(v, np.int64) for c, v in meta["starts"].items()}
    grid = BucketGrid(z_max=float(meta["grid"]["z_max"]), n_buckets=int(meta["grid"]["n_buckets"]))
    return Tables(pd.read_parquet(f / "fine.parquet"), segs, starts, grid), meta
