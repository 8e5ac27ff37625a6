"""A large monitor window read only by DuckDB: its checks, its tables' FROM items and a bounded gate sample.

``calibflow.monitor.deliveries.load`` reads a window's rows (and its trailing calibration windows') into
pandas, so the memory of a run grows with the rows of a day. For a window of ``monitor.scale.AGGREGATE_ROWS``
rows or more (by the inventory's count, known before anything is loaded) the stage uses this module:

- :func:`window_parts`: one DuckDB FROM item per delivered file, the rows of ``[lo, hi)`` as ``time,
  score, label, <segments>`` with the semantics of ``deliveries.load`` (label 0/1 through ``positive``,
  NULL kept; segments as text, NULL as ``<missing>``; times UTC-naive, numbers as epochs in the unit of
  the file's largest magnitude, as ``timesplit.epoch_unit``). Only typed times (TIMESTAMP, DATE, numbers)
  and Parquet files stream; anything else returns None and the window keeps the row path.
- :func:`window_counts`: rows per file in the window, which the stage compares with the inventory's
  (pandas) placement before trusting the SQL time filter; a difference sends the window to the rows.
- :func:`check_window`: ``deliveries.check_matured`` as counts (labels outside {0, 1}, non-finite or
  out-of-range scores, NULL labels): the same held windows and the same lines.
- :func:`sample_frame`: the gate's rows, a seeded Bernoulli sample of at most about ``rows`` usable rows
  (``hash(file, row number, seed)``: the same rows whatever the threads), read into pandas. The gate
  (challengers fitted on the trailing windows, paired bootstrap on this window) then runs on the sample,
  so its memory is bounded by ``rows``, not by the day; its interval is the sample's (it holds at its
  level but is wider than the whole window's, so a small real gain can go unpromoted).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from calibflow import sources as S
from calibflow import timesplit
from calibflow.aggregate.tables import Part, _union
from calibflow.source_rules import pending_label_sql, time_sql
from calibflow.sources import SourceSpec, quote_ident, quote_literal

MISSING = "<missing>"  # a NULL segment value, as deliveries.load writes it


def _ts(t: pd.Timestamp) -> str:
    return f"TIMESTAMP '{pd.Timestamp(t).isoformat(sep=' ')}'"


def _types(con: duckdb.DuckDBPyConnection, path: str) -> dict[str, str]:
    rows = con.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM read_parquet($p))",
                       {"p": path}).fetchall()
    return {str(c): str(t) for c, t in rows}


def file_time_sql(con: duckdb.DuckDBPyConnection, path: str, col: str, typ: str) -> str | None:
    """The time column of one file as a UTC-naive TIMESTAMP, as ``deliveries.to_times`` reads it
    (``source_rules.time_sql`` in UTC, numbers in the unit ``timesplit.epoch_unit`` finds in this file);
    None for text (pandas parses text per value; DuckDB's reading of it is not the same)."""
    per_us = None
    if S.is_numeric_type(typ):
        c = quote_ident(col)
        top = con.execute(f"SELECT max(abs(CAST({c} AS DOUBLE))) FROM read_parquet($p)", {"p": path})
        unit = timesplit.epoch_unit([top.fetchone()[0] or 0.0])
        per_us = {"s": 1e6, "ms": 1e3, "us": 1.0, "ns": 1e-3}[unit]
    elif not typ.upper().startswith(("TIMESTAMP", "DATE")):
        return None
    return time_sql(col, typ, zone="UTC", epoch_per_us=per_us)


def _label_sql(spec: SourceSpec, typ: str) -> str:
    """The label as 0/1 (NULL: not known yet; -1: a value that is no label): ``source_rules``' rule."""
    return pending_label_sql(spec.label or "", typ, spec.positive)


def _segment_sql(col: str, typ: str) -> str:
    c = quote_ident(col)
    if typ.upper() == "BOOLEAN":  # pandas writes True/False, DuckDB true/false
        return f"coalesce(CASE WHEN {c} THEN 'True' ELSE 'False' END, {quote_literal(MISSING)})"
    return f"coalesce(CAST({c} AS VARCHAR), {quote_literal(MISSING)})"


def file_rows_sql(spec: SourceSpec, con: duckdb.DuckDBPyConnection, path: str) -> str | None:
    """``SELECT time, score, label, <segments>, _rn`` over one Parquet file (``_rn``: its row number), or
    None when the file cannot stream (not Parquet, a text time column)."""
    if S._fmt(path) != "parquet":
        return None
    types = _types(con, path)
    t = file_time_sql(con, path, spec.time or "", types[spec.time or ""])
    if t is None:
        return None
    segs = [f"{_segment_sql(c, types[c])} AS {quote_ident(c)}" for c in spec.segments]
    cols = [f"{t} AS time", f"TRY_CAST({quote_ident(spec.score or '')} AS DOUBLE) AS score",
            f"{_label_sql(spec, types[spec.label])} AS label", *segs, "file_row_number AS _rn"]
    return f"SELECT {', '.join(cols)} FROM read_parquet($path, file_row_number = true)"


def connect() -> duckdb.DuckDBPyConnection:
    """The one-thread connection a large window is read with (``release_memory``)."""
    return release_memory(S.connect(1))


def release_memory(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` with DuckDB's allocator purging freed memory in background threads: without them the
    memory a query freed stayed resident (a window's 1e6-row gate sample left the process 270 MB larger,
    with them 120 MB), and the monitor's peak on a day of 1e7 rows was these leftovers added up. The
    setting is DuckDB's allocator's, for the whole process: a connection opened later with the default
    switches it off again, so it is set on the connection about to allocate."""
    con.execute("SET allocator_background_threads = true")
    return con


def window_parts(
    spec: SourceSpec, files: Sequence[Any], lo: pd.Timestamp, hi: pd.Timestamp, usable: bool = True,
    con: duckdb.DuckDBPyConnection | None = None,
) -> list[Part] | None:
    """One FROM item per delivered file (``deliveries.DayFile``): its rows with ``lo <= time < hi``
    (``usable``: only labels in {0, 1} and finite scores, the rows the row path keeps); a file written
    k times over (``DayFile.repeated``) gives each row once, as ``deliveries.load`` does; None when a file
    cannot stream."""
    con = con or S.connect(1)
    parts = []
    keep = " AND label IN (0, 1) AND isfinite(score)" if usable else ""
    for f in files:
        path = f.path
        sql = file_rows_sql(spec, con, path)
        if sql is None:
            return None
        if f.repeated > 1:  # the first copy of each row, by row number
            roles = ", ".join(["time", "score", "label", *(quote_ident(c) for c in spec.segments)])
            sql = f"SELECT DISTINCT ON ({roles}) * FROM ({sql}) ORDER BY _rn"
        where = f"time >= {_ts(lo)} AND time < {_ts(hi)}{keep}"
        parts.append(Part(f"(SELECT * FROM ({sql}) WHERE {where})", {"path": path}))
    return parts


def window_counts(parts: Sequence[Part], con: duckdb.DuckDBPyConnection) -> list[int]:
    """Rows of each part (the stage compares them with the inventory's placement)."""
    return [int(con.execute(f"SELECT count(*) FROM {p.sql}", p.params).fetchone()[0]) for p in parts]


def check_window(
    spec: SourceSpec, key: str, parts: Sequence[Part], rels: Sequence[str], con: duckdb.DuckDBPyConnection
) -> tuple[bool, list[str], dict[str, dict[str, Any]]]:
    """``deliveries.check_matured`` for one window from counts: (held, refusal lines, pending labels)."""
    bad_s = "NOT coalesce(isfinite(score), false)"
    what_s = "score(s) not finite"
    if spec.score_kind == "probability":
        bad_s += " OR score < 0 OR score > 1"
        what_s += " or outside [0, 1]"
    counts = []
    for p in parts:
        counts.append(con.execute(
            f"SELECT count(*) FILTER (WHERE label IS NOT NULL AND label NOT IN (0, 1)), "
            f"count(*) FILTER (WHERE {bad_s}), count(*) FILTER (WHERE label IS NULL) FROM {p.sql}",
            p.params).fetchone())
    lines = []
    for i, (col, what) in enumerate(((spec.label, "label value(s) outside {0, 1}"), (spec.score, what_s))):
        for rel, c in sorted(zip(rels, counts, strict=True)):
            if c[i]:
                lines.append(f"source {spec.name!r}: file {rel}: column {col!r} has {int(c[i])} {what}; fix "
                             f"the file (window(s) {key[:10]} stay pending)")
    if lines:
        return True, lines, {}
    unknown = sum(int(c[2]) for c in counts)
    if unknown:  # pending (labels not all in), a state and not a refusal
        files = sorted(r for r, c in zip(rels, counts, strict=True) if c[2])
        return True, [], {key: {"rows": unknown, "files": files}}
    return False, [], {}


def _salt(seed: int, rel: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{rel}".encode()).digest()[:8], "little") >> 1


def sample_frame(
    spec: SourceSpec, parts: Sequence[Part], rels: Sequence[str], total: int, rows: int, seed: int,
    con: duckdb.DuckDBPyConnection,
) -> pd.DataFrame:
    """A seeded Bernoulli sample (rate ``rows / total``, all rows when ``total <= rows``) of the parts'
    rows as ``time, score, label, <segments>, file``, sorted as ``deliveries.load`` sorts."""
    release_memory(con)  # again: a connection opened since (the pass's) may have switched it off
    rate = 1.0 if total <= rows else rows / total
    cut = f"hash(xor(hash(_rn), CAST($salt AS UBIGINT))) < {rate * 2.0**64!r}" if rate < 1 else "true"
    # Each file by its rank among the names (a small integer, not the name on every row): the rows are
    # put in ``deliveries.load``'s order (time, file, row) by numpy, and DuckDB sorts nothing. Sorting and
    # naming every one of a 1e6-row sample in SQL was the peak of a day of 1e7 rows.
    names = np.array(sorted(set(rels)), dtype=object)
    rank = {rel: i for i, rel in enumerate(names)}
    sampled = [Part(f"(SELECT *, {rank[rel]} AS _file FROM {p.sql} WHERE {cut})",
                    {**p.params, **({"salt": _salt(seed, rel)} if rate < 1 else {})})
               for p, rel in zip(parts, rels, strict=True)]
    cols = ["time", "score", "label", *spec.segments, "file"]
    if not sampled:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in cols})
    whole = _union(sampled)
    sel = ", ".join(quote_ident(c) for c in ["time", "score", "label", *spec.segments, "_file", "_rn"])
    df = con.execute(f"SELECT {sel} FROM {whole.sql}", whole.params).df()
    df["time"] = pd.to_datetime(df["time"]).astype("datetime64[ns]")
    order = np.lexsort((df["_rn"].to_numpy(), df["_file"].to_numpy(), df["time"].to_numpy().view(np.int64)))
    df = df.take(order).reset_index(drop=True)
    df["file"] = names[df.pop("_file").to_numpy()]
    df = df.drop(columns="_rn")
    df["label"] = df["label"].astype(float)
    for c in spec.segments:
        df[c] = df[c].astype(str)
    return df[cols]


def files_in(inv_good: Sequence, lo: pd.Timestamp, hi: pd.Timestamp) -> list:
    """The inventory's good files with rows in ``[lo, hi)`` (as ``deliveries.load`` picks them)."""
    lo_k, hi_k = lo.isoformat(), hi.isoformat()
    return [f for f in inv_good if any(lo_k <= k < hi_k for k in f.windows)]

