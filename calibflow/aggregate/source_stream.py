"""A score source above ``scale.row_threshold`` through the pipeline's first stages without pandas.

Three streaming DuckDB queries on the source, each bounded in memory whatever the row count:

- :func:`raw_profile`: one scan computing the raw checks' counts (labels outside {0, 1}, non-finite
  scores, probabilities outside [0, 1], bad weights, unparseable times, positives) and, only for a check
  that fails, its first offending row numbers. Great Expectations then runs on this one-row table.
- :func:`write_split`: ``COPY (SELECT ...) TO`` a Parquet file in the predictions layout (``row``,
  ``split``, ``y``, ``margin``, ``prob``, the carried ``weight``/``time``/``treatment`` and ``s:<segment>``),
  the split drawn per row from a hash of (row number, seed) or from the time windows.
- :func:`split_profile`: per split the rows and positives of that file (validate@prepared's checks).

Row numbers are the row's position in the source, as on the row path: a Parquet file's
``file_row_number`` plus the rows of the files before it (their footers), so no window function holds the
rows. The random split is not the row path's stratified ``split_indices`` draw: each row goes to a split
by ``hash(hash(row) xor seed)`` (DuckDB's hash; fixed for a DuckDB version), so the fractions hold to
sampling error
(about 1e-4 at 1e8 rows) rather than exactly. Same source and seed give the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from calibflow import sources as src
from calibflow import timesplit
from calibflow.sources import SourceSpec, quote_ident

#: Offending row numbers quoted per failed check.
EXAMPLES = 5
#: The prefix of the segment columns in the written file (as ``calibflow.pipeline._sources``).
SEGMENT_PREFIX = "s:"
#: Probability clip before the logit, as ``calibflow.sources.to_margin``.
EPS = 1e-15


def _rows_from(spec: SourceSpec, con: duckdb.DuckDBPyConnection) -> tuple[str, dict[str, Any]]:
    """A FROM item over the source with a ``_row`` column (the row's position), and its parameters."""
    found = src.files(spec.path)
    if src._fmt(found[0]) != "parquet":
        # CSV has no file_row_number: DuckDB's row_number() keeps one ordered column of row ids.
        return "(SELECT *, row_number() OVER () - 1 AS _row FROM read_csv($f, union_by_name = true))", {
            "f": found
        }
    offsets, total = [], 0
    for f in found:
        offsets.append((f, total))
        total += pq.ParquetFile(f).metadata.num_rows
    con.execute("CREATE OR REPLACE TEMP TABLE _offsets (filename VARCHAR, start BIGINT)")
    con.executemany("INSERT INTO _offsets VALUES (?, ?)", offsets)
    return (
        "(SELECT r.*, o.start + r.file_row_number AS _row FROM read_parquet($f, filename = true, "
        "file_row_number = true, union_by_name = true) r JOIN _offsets o USING (filename))",
        {"f": found},
    )


def source_rows(spec: SourceSpec) -> int:
    """The source's row count (Parquet footers; a CSV is counted by a scan)."""
    found = src.files(spec.path)
    if src._fmt(found[0]) == "parquet":
        return sum(pq.ParquetFile(f).metadata.num_rows for f in found)
    con = src.connect()
    try:
        return int(con.execute("SELECT count(*) FROM read_csv($f, union_by_name = true)", {"f": found})
                   .fetchone()[0])
    finally:
        con.close()


def _types(con: duckdb.DuckDBPyConnection, from_item: str, params: dict[str, Any]) -> dict[str, str]:
    rows = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {from_item})", params)
    return {str(c): str(t) for c, t in rows.fetchall()}


def _label_sql(spec: SourceSpec, types: Mapping[str, str]) -> tuple[str, str]:
    """(SQL: the row's label is usable, SQL: the label as 0/1) as ``_sources.labels01`` reads it."""
    lab = quote_ident(spec.label)
    if spec.positive is not None:
        pos = spec.positive
        numeric = src.is_numeric_type(types[spec.label]) and isinstance(pos, int | float)
        hit = f"({lab} = {float(pos)!r})" if numeric else f"(CAST({lab} AS VARCHAR) = {_text(pos)})"
        return f"({lab} IS NOT NULL)", f"coalesce(CAST({hit} AS INTEGER), 0)"
    if types[spec.label].upper() == "BOOLEAN":
        return f"({lab} IS NOT NULL)", f"coalesce(CAST({lab} AS INTEGER), 0)"
    v = f"TRY_CAST({lab} AS DOUBLE)"
    return f"coalesce({v} IN (0, 1), false)", f"coalesce(CAST({v} = 1 AS INTEGER), 0)"


def _text(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _time_sql(spec: SourceSpec, types: Mapping[str, str]) -> str:
    """The time column as a TIMESTAMP (NULL where it does not parse)."""
    col = quote_ident(spec.time or "")
    if any(k in types[spec.time or ""].upper() for k in ("TIMESTAMP", "DATE")):
        return f"CAST({col} AS TIMESTAMP)"
    if spec.time_format and spec.time_format.upper() != "ISO8601":
        return f"try_strptime(CAST({col} AS VARCHAR), {_text(spec.time_format)})"
    return f"TRY_CAST({col} AS TIMESTAMP)"


def _numeric_type_check(spec: SourceSpec, types: Mapping[str, str]) -> None:
    for role, col in (("score", spec.score), ("weight", spec.weight)):
        if col is not None and not src.is_numeric_type(types[col]):
            raise ValueError(
                f"source {spec.name!r}: {role} column {col!r} has type {types[col]}, expected numbers "
                f"(convert it, or declare another column)"
            )


def _checks(spec: SourceSpec, types: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Per raw check: (source column, SQL true where the row is fine); the names of ``validate_sources``."""
    ok_label, _ = _label_sql(spec, types)
    out = {"label_binary": (spec.label, ok_label)}
    if spec.score is not None:
        s = f"CAST({quote_ident(spec.score)} AS DOUBLE)"
        out["score_finite"] = (spec.score, f"coalesce(isfinite({s}), false)")
        if spec.score_kind == "probability":
            out["score_in_01"] = (spec.score, f"coalesce(NOT isfinite({s}) OR ({s} >= 0 AND {s} <= 1), true)")
    if spec.weight is not None:
        w = f"CAST({quote_ident(spec.weight)} AS DOUBLE)"
        out["weight_ok"] = (spec.weight, f"coalesce(isfinite({w}) AND {w} >= 0, false)")
    if spec.time is not None:
        out["time_parses"] = (spec.time, f"({_time_sql(spec, types)} IS NOT NULL)")
    return out


def raw_profile(spec: SourceSpec) -> dict[str, Any]:
    """The raw checks of a source in one scan: ``rows``, ``positives``, and per check its column, the
    count of offending rows and (for a failing check only) the first :data:`EXAMPLES` row numbers."""
    rel_cols = src.relation(spec).columns
    src.check_columns(spec, rel_cols, spec.role_columns())
    con = src.connect()
    try:
        from_item, params = _rows_from(spec, con)
        types = _types(con, from_item, params)
        _numeric_type_check(spec, types)
        checks = _checks(spec, types)
        ok_label, y01 = _label_sql(spec, types)
        sel = ", ".join(f"count(*) FILTER (WHERE NOT {ok}) AS {k}" for k, (_, ok) in checks.items())
        row = con.execute(
            f"SELECT count(*) AS rows, sum(CASE WHEN {ok_label} THEN {y01} ELSE 0 END) AS positives, {sel} "
            f"FROM {from_item}",
            params,
        ).fetchone()
        n, pos = int(row[0]), int(row[1] or 0)
        out: dict[str, Any] = {"rows": n, "positives": pos, "checks": {}}
        for (k, (col, ok)), bad in zip(checks.items(), row[2:], strict=True):
            rec: dict[str, Any] = {"column": col, "bad": int(bad), "examples": [], "values": []}
            if bad:
                got = con.execute(
                    f"SELECT _row, CAST({quote_ident(col)} AS VARCHAR) FROM {from_item} WHERE NOT {ok} "
                    f"ORDER BY _row LIMIT {EXAMPLES}",
                    params,
                ).fetchall()
                rec["examples"] = [int(r) for r, _ in got]
                rec["values"] = list(dict.fromkeys("null" if v is None else v for _, v in got))
            out["checks"][k] = rec
        return out
    finally:
        con.close()


def _split_sql(spec: SourceSpec, types: Mapping[str, str], seed: int, con, from_item: str,
               params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """SQL giving each row its split name ('' after the test window), and the split's record."""
    cfg = {k: v for k, v in spec.split.items() if k != "kind"}
    if spec.split.get("kind") == "time":
        t = _time_sql(spec, types)
        lo, hi = con.execute(f"SELECT min({t}), max({t}) FROM {from_item}", params).fetchone()
        w = timesplit.time_windows(lo, hi, cfg)
        edges = [pd.Timestamp(x).tz_localize(None) for x in (w.calib_start, w.test_start, w.test_end)]
        a, b, c = (f"TIMESTAMP '{e.isoformat(sep=' ')}'" for e in edges)
        sql = (f"CASE WHEN {t} < {a} THEN 'train' WHEN {t} < {b} THEN 'calib' WHEN {t} < {c} THEN 'test' "
               "ELSE '' END")
        return sql, {"kind": "time", **w.as_dict()}
    fractions = {k: float(v) for k, v in (cfg.get("fractions") or src.SCORE_FRACTIONS).items()}
    total = sum(fractions.values())
    # hash(row, seed) would combine the two hashes almost linearly (a 50/50 split then takes one of two
    # partitions whatever the seed): the seed goes into the hashed value instead.
    u = f"(hash(xor(hash(_row), CAST({int(seed)} AS UBIGINT))) / {float(2**64)!r})"
    parts, acc = [], 0.0
    for k, f in fractions.items():
        acc += f / total
        parts.append(f"WHEN {u} < {acc!r} THEN {_text(k)}")
    sql = "CASE " + " ".join(parts[:-1]) + f" ELSE {_text(list(fractions)[-1])} END"
    return sql, {"kind": "random", "fractions": fractions, "draw": "hash(hash(row) xor seed)"}


def _score_sql(spec: SourceSpec) -> tuple[str, str]:
    """(margin, prob) of the score as ``calibflow.sources.to_margin`` computes them."""
    s = f"CAST({quote_ident(spec.score or '')} AS DOUBLE)"
    if spec.score_kind == "probability":
        c = f"least(greatest({s}, {EPS!r}), {1.0 - EPS!r})"
        return f"ln({c}) - ln(1 - {c})", s
    return s, f"1 / (1 + exp(-{s}))"


def write_split(spec: SourceSpec, seed: int, out: str | Path, threads: int | None = None) -> dict[str, Any]:
    """Write the source's split rows to ``out`` (Parquet, zstd) with one DuckDB ``COPY``; its record.

    The caller passes a temporary path and swaps it in (``calibflow.io``): a failed copy leaves the last
    good file. Rows after the test window are not written.
    """
    con = src.connect(threads)
    try:
        from_item, params = _rows_from(spec, con)
        types = _types(con, from_item, params)
        _numeric_type_check(spec, types)
        split, rec = _split_sql(spec, types, seed, con, from_item, params)
        _, y01 = _label_sql(spec, types)
        margin, prob = _score_sql(spec)
        cols = ["_row AS row", f"{split} AS split", f"{y01} AS y", f"{margin} AS margin", f"{prob} AS prob"]
        roles = {"weight": spec.weight, "time": spec.time, "treatment": spec.treatment}
        cols += [f"{quote_ident(c)} AS {k}" for k, c in roles.items() if c is not None]
        cols += [f"{quote_ident(c)} AS {quote_ident(SEGMENT_PREFIX + c)}" for c in spec.segments]
        query = f"SELECT {', '.join(cols)} FROM {from_item}"
        con.execute(
            f"COPY (SELECT * FROM ({query}) WHERE split <> '') TO $out "
            "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 1048576)",
            {**params, "out": str(out)},
        )
        n_source = int(con.execute(f"SELECT count(*) FROM {from_item}", params).fetchone()[0]) if (
            "read_csv" in from_item
        ) else sum(pq.ParquetFile(f).metadata.num_rows for f in params["f"])
    finally:
        con.close()
    return {"split": rec, "n_rows_source": n_source, **split_profile(out, threads)}


def split_profile(path: str | Path, threads: int | None = None) -> dict[str, Any]:
    """Per split of a written file: rows, positives, positive rate, and an order-free digest of its row
    numbers (``bit_xor`` of ``hash(row)``: a changed split changes it)."""
    con = src.connect(threads)
    try:
        got = con.execute(
            "SELECT split, count(*), sum(y), bit_xor(hash(row)) FROM read_parquet($p) GROUP BY split "
            "ORDER BY split",
            {"p": str(path)},
        ).fetchall()
    finally:
        con.close()
    counts = {s: int(n) for s, n, _, _ in got}
    positives = {s: int(p or 0) for s, _, p, _ in got}
    return {
        "n_rows": sum(counts.values()),
        "counts": counts,
        "positives": positives,
        "positive_rate": {s: positives[s] / counts[s] if counts[s] else None for s in counts},
        "rows_digest": {s: f"{int(d):016x}" for s, _, _, d in got},
    }

