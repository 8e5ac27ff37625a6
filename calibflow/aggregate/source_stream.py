"""A score source above ``scale.row_threshold`` through the pipeline's first stages without pandas.

Streaming DuckDB queries on the source, each bounded in memory whatever the row count:

- :func:`raw_profile`: one scan computing the raw checks' counts (labels outside {0, 1}, non-finite
  scores, probabilities outside [0, 1], bad weights, unparseable times, positives) and, only for a check
  that fails, its first offending row numbers. Great Expectations then runs on this one-row table.
- :func:`split_tables`: prepare's ONE pass (``tables.aggregate_split_tables``, the kernel pass of
  ``calibflow fit`` with the split as the outer key): the calib and test splits' fine and coarse
  per-segment tables and every split's rows and positives, the split drawn per row from a hash of (row
  number, seed) or from the time windows (:func:`split_parts`).
- :func:`write_split`: the same split as a Parquet copy of the rows in the predictions layout (``row``,
  ``split``, ``y``, ``margin``, ``prob``, the carried ``weight``/``time``/``treatment`` and ``s:<segment>``),
  and :func:`split_profile`, its per-split counts: the previous prepare, kept as the reference the one-pass
  tables are tested against (tests/pipeline/test_streaming_pipeline.py).

Row numbers are the row's position in the source, as on the row path: a Parquet file's
``file_row_number`` plus the rows of the files before it (their footers), so no window function holds the
rows. The random split is not the row path's stratified ``split_indices`` draw: each row goes to a split
by ``hash(hash(row) xor seed)`` (DuckDB's hash; fixed for a DuckDB version), so the fractions hold to
sampling error
(about 1e-4 at 1e8 rows) rather than exactly. Same source and seed give the same split.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow.parquet as pq

from calibflow import source_rules as rules
from calibflow import sources as src
from calibflow import timesplit
from calibflow.aggregate.tables import Part, Tables, _row_ranges
from calibflow.source_rules import duckdb_zone, label_sql, time_sql
from calibflow.sources import SourceSpec, parquet_rows, quote_ident, quote_literal

#: Offending row numbers quoted per failed check.
EXAMPLES = 5
#: The prefix of the segment columns in the written file (as ``calibflow.pipeline._sources``).
SEGMENT_PREFIX = "s:"
#: Probability clip before the logit, as ``calibflow.sources.to_margin``.
EPS = 1e-15


def _read_csv(spec: SourceSpec) -> str:
    """``read_csv`` over ``$f``, the columns of ``sources.text_columns`` typed as text."""
    types = ", ".join(f"{quote_literal(c)}: 'VARCHAR'" for c in src.text_columns(spec))
    return f"read_csv($f, union_by_name = true{f', types = {{{types}}}' if types else ''})"


def _rows_from(spec: SourceSpec, con: duckdb.DuckDBPyConnection) -> tuple[str, dict[str, Any]]:
    """A FROM item over the source with a ``_row`` column (the row's position), and its parameters."""
    found = src.files(spec.path)
    if src._fmt(found[0]) != "parquet":
        # CSV has no file_row_number: DuckDB's row_number() keeps one ordered column of row ids.
        return f"(SELECT *, row_number() OVER () - 1 AS _row FROM {_read_csv(spec)})", {"f": found}
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
        return int(con.execute(f"SELECT count(*) FROM {_read_csv(spec)}", {"f": found}).fetchone()[0])
    finally:
        con.close()


def _types(con: duckdb.DuckDBPyConnection, from_item: str, params: dict[str, Any]) -> dict[str, str]:
    rows = con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {from_item})", params)
    return {str(c): str(t) for c, t in rows.fetchall()}


def _label_sql(spec: SourceSpec, types: Mapping[str, str]) -> tuple[str, str]:
    """(SQL: the row's label is usable, SQL: the label as 0/1): ``calibflow.source_rules``' one rule."""
    return label_sql(spec.label, types[spec.label], spec.positive)


def _column_zone(spec: SourceSpec) -> str:
    """The zone a zoned Parquet time column was written in (its first file's schema); UTC where there is
    none (CSV: DuckDB's zoned types come from offsets, not zones)."""
    found = src.files(spec.path)
    if src._fmt(found[0]) != "parquet":
        return "UTC"
    return duckdb_zone(getattr(pq.read_schema(found[0]).field(spec.time or "").type, "tz", None))


def _time_sql(spec: SourceSpec, types: Mapping[str, str]) -> str:
    """The time column as a TIMESTAMP (NULL where it does not parse): ``source_rules.time_sql`` in the
    column's own zone, as ``timesplit.to_datetime`` reads it for the rows (DuckDB keeps a zoned column's
    instant only, so the zone comes from the Parquet schema). Numbers are refused by ``init``."""
    typ = types[spec.time or ""]
    zone = _column_zone(spec) if "TIME ZONE" in typ.upper() or typ.upper() == "TIMESTAMPTZ" else "UTC"
    return time_sql(spec.time or "", typ, spec.time_format, zone) or "CAST(NULL AS TIMESTAMP)"


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
        out["score_finite"] = (spec.score, rules.score_finite_sql(spec.score))
        if spec.score_kind == "probability":
            out["score_in_01"] = (spec.score, rules.score_in_01_sql(spec.score))
    if spec.weight is not None:
        out["weight_ok"] = (spec.weight, rules.weight_ok_sql(spec.weight))
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
        return sql, {"kind": "time", **w.as_dict(), "time_range": _iso_range(lo, hi)}
    fractions = {k: float(v) for k, v in (cfg.get("fractions") or src.SCORE_FRACTIONS).items()}
    total = sum(fractions.values())
    # hash(row, seed) would combine the two hashes almost linearly (a 50/50 split then takes one of two
    # partitions whatever the seed): the seed goes into the hashed value instead.
    u = f"(hash(xor(hash(_row), CAST({int(seed)} AS UBIGINT))) / {float(2**64)!r})"
    parts, acc = [], 0.0
    for k, f in fractions.items():
        acc += f / total
        parts.append(f"WHEN {u} < {acc!r} THEN {quote_literal(k)}")
    sql = "CASE " + " ".join(parts[:-1]) + f" ELSE {quote_literal(list(fractions)[-1])} END"
    rec: dict[str, Any] = {"kind": "random", "fractions": fractions, "draw": "hash(hash(row) xor seed)"}
    if spec.time is not None:  # the source's time span, as the row path recorded it
        t = _time_sql(spec, types)
        rec["time_range"] = _iso_range(*con.execute(f"SELECT min({t}), max({t}) FROM {from_item}", params)
                                       .fetchone())
    return sql, rec


def _iso_range(lo: Any, hi: Any) -> list[str] | None:
    """[first, last] time as ISO text (None when no time parses)."""
    if lo is None or hi is None:
        return None
    return [pd.Timestamp(lo).isoformat(), pd.Timestamp(hi).isoformat()]


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



#: The splits whose tables a split pass keeps (the calibrators fit on calib, everything else reads test).
TABLE_SPLITS = ("calib", "test")


def _parquet_parts(files: list[str], n: int, inner_cols: str, outer_cols: str) -> list[Part]:
    """``files`` as ``n`` parts of about equal rows, each row with ``_row`` (its position in the source:
    the rows of the files before it plus ``file_row_number``), then ``inner_cols`` (which may read
    ``_row``), then ``outer_cols`` (which may read those)."""
    offsets, total = {}, 0
    for f in files:
        offsets[f] = total
        total += parquet_rows(f)
    parts = []
    for run in _row_ranges(files, max(int(n), 1)):
        pieces, prm = [], {}
        for j, (f, lo, hi) in enumerate(run):
            prm[f"f{j}"] = f
            pieces.append(
                f"SELECT *, {offsets[f]} + file_row_number AS _row"
                f" FROM read_parquet($f{j}, file_row_number = true)"
                f" WHERE file_row_number >= {lo} AND file_row_number < {hi}"
            )
        body = " UNION ALL BY NAME ".join(pieces)
        parts.append(Part(f"(SELECT {outer_cols} FROM (SELECT *, {inner_cols} FROM ({body})))", prm))
    return parts


def split_parts(
    spec: SourceSpec, seed: int, input_kind: str, n: int, with_prob: bool = False
) -> tuple[list[Part], dict[str, Any], str | None]:
    """The source as parts for ``tables.aggregate_split_tables``: per row its split code (``_sp``: the
    index into the split names, -1 after the test window), label ``_y`` (0/1), the score the calibrators
    receive ``_s`` (``margin``, or ``prob`` for ``input_kind`` "probability", as :func:`write_split`
    computes them), the weight ``_w`` (the declared weight on calib rows, 1 elsewhere: the fit is weighted,
    the evaluation is not) and the segment columns. Also the split's record and the weight column (or
    None). The split is :func:`write_split`'s, expression for expression. ``with_prob``: also the
    uncalibrated probability ``_p`` (:func:`write_split`'s ``prob``) and the row's position ``_row``, for a
    pass that scores the rows (and may sample them by position)."""
    con = src.connect()
    try:
        from_item, params = _rows_from(spec, con)
        types = _types(con, from_item, params)
        _numeric_type_check(spec, types)
        split, rec = _split_sql(spec, types, seed, con, from_item, params)
    finally:
        con.close()
    names = list(TABLE_SPLITS) + [k for k in (rec.get("fractions") or {"train": 0}) if k not in TABLE_SPLITS]
    code = " ".join(f"WHEN _split = {quote_literal(k)} THEN {i}" for i, k in enumerate(names))
    code = f"CASE {code} ELSE -1 END"
    _, y01 = _label_sql(spec, types)
    margin, prob = _score_sql(spec)
    inner = f"{split} AS _split"
    outer = [f"{code} AS _sp", f"{y01} AS _y", f"{prob if input_kind == 'probability' else margin} AS _s"]
    outer += [f"{prob} AS _p", "_row"] if with_prob else []
    weight = None
    if spec.weight is not None:
        weight = "_w"
        w = f"CAST({quote_ident(spec.weight)} AS DOUBLE)"
        outer.append(f"CASE WHEN _split = 'calib' THEN {w} ELSE 1.0 END AS _w")
    outer += [quote_ident(c) for c in spec.segments]
    found = src.files(spec.path)
    if src._fmt(found[0]) == "parquet":
        parts = _parquet_parts(found, n, inner, ", ".join(outer))
    else:  # CSV: row_number() keeps the rows in one ordered stream, one part
        parts = [Part(f"(SELECT {', '.join(outer)} FROM (SELECT *, {inner} FROM {from_item}))", params)]
    return parts, {**rec, "names": names}, weight


def split_tables(
    spec: SourceSpec, seed: int, input_kind: str, engine: str = "duckdb", dask_address: str | None = None,
    threads: int | None = None, **options: Any,
) -> tuple[dict[str, Tables], dict[str, Any]]:
    """Prepare's one pass over a streamed source: the calib and test splits' tables (``options``:
    ``options.PassOptions``' grid, cells, distinct_max) and the split's record (per split the
    rows and positives; the row numbers never leave DuckDB). ``calibflow fit``'s code path
    (``calibflow.aggregate.run.split_tables_for``) on ``engine``."""
    from calibflow.aggregate.options import PassOptions, TableRows
    from calibflow.aggregate.run import split_tables_for
    from calibflow.aggregate.tables import _workers

    n = _workers(threads) if engine == "duckdb" else max(len(src.files(spec.path)), 4)
    parts, rec, weight = split_parts(spec, seed, input_kind, n)
    names = rec.pop("names")
    kind = "probability" if input_kind == "probability" else "logit"
    found = src.files(spec.path)
    # the raw score column's distinct count (one column read) decides the distinct-score table: the
    # margin is a one-to-one map of it up to rounding and the clip, so it has at most as many values
    raw = Part("read_parquet($f, union_by_name = true)" if src._fmt(found[0]) == "parquet"
               else _read_csv(spec), {"f": found})
    rows = TableRows("_s", "_y", kind, tuple(spec.segments), weight)
    tables, counts = split_tables_for(parts, rows, names, len(TABLE_SPLITS),
                                      PassOptions(threads=threads, **options), engine, dask_address,
                                      distinct_of=(raw, spec.score or ""))
    kept = {k: c for k, c in counts.items() if c["rows"] or k in TABLE_SPLITS}
    rows = {k: c["rows"] for k, c in kept.items()}
    pos = {k: c["positives"] for k, c in kept.items()}
    record = {
        "split": rec,
        "n_rows_source": source_rows(spec),
        "n_rows": sum(rows.values()),
        "counts": rows,
        "positives": pos,
        "positive_rate": {k: pos[k] / rows[k] if rows[k] else None for k in rows},
    }
    return tables, record
