"""What ``calibflow init`` checks in a user's file before declaring it as a source.

The pipeline's raw validation (``calibflow.pipeline.validate_sources``) refuses a label that is not binary, a
single class, non-finite scores, probabilities outside [0, 1], bad weights and times that do not parse. A
user should hear that when declaring the file, not minutes later from a stage: :func:`inspect_source` makes
the same refusals at once, with the values it saw and the fix, plus what only a human can decide (a
duplicated column, an empty file, a text date that reads both day-first and month-first).

Everything is a DuckDB aggregate over the file (a few passes, bounded memory whatever its size); only the
header of a CSV file is read in Python, to see duplicated column names that DuckDB would rename silently.
Nothing here reads params.yaml or writes anything.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
from collections import Counter
from typing import Any

from calibflow import sources as src
from calibflow.source_rules import time_sql
from calibflow.sources import SourceSpec, quote_ident, quote_literal

#: Text date formats tried, day-first and month-first side by side (same meaning in DuckDB and pandas).
TIME_FORMATS = (
    "%d/%m/%Y",
    "%m/%d/%Y",
    "%d/%m/%Y %H:%M",
    "%m/%d/%Y %H:%M",
    "%d/%m/%Y %H:%M:%S",
    "%m/%d/%Y %H:%M:%S",
    "%d/%m/%y",
    "%m/%d/%y",
    "%d.%m.%Y",
    "%d-%m-%Y",
    "%m-%d-%Y",
    "%Y/%m/%d",
)
#: ISO 8601 text (``2026-09-01``, ``2026-09-01 10:00:00``, ``...T10:00:00+02:00``): pandas' ``ISO8601``.
ISO = "ISO8601"
#: Label values quoted in a message.
SHOWN = 6
_NUMERIC = (
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "HUGEINT",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
    "UTINYINT",
    "USMALLINT",
    "UINTEGER",
    "UBIGINT",
    "UHUGEINT",
)
_TEMPORAL = ("DATE", "TIMESTAMP")


def _fail(spec: SourceSpec, message: str) -> ValueError:
    return ValueError(f"source {spec.name!r}: {message}")


# --------------------------------------------------------------------------------------- files, header


def _csv_header(path: str) -> list[str]:
    opener = gzip.open if path.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as fh:
        head = fh.read(1 << 16)
    first = head.splitlines()[0] if head.strip() else ""
    try:
        dialect = csv.Sniffer().sniff(first, delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    return next(csv.reader(io.StringIO(first), dialect), [])


def _columns_of_file(path: str) -> list[str]:
    if src._fmt(path) == "parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    return _csv_header(path)


def check_files(spec: SourceSpec) -> list[str]:
    """The source's files; a ``ValueError`` for an empty (0-byte) file or a column name given twice."""
    found = src.files(spec.path)
    for f in found:
        if os.path.getsize(f) == 0:
            raise _fail(spec, f"{f} is empty (0 bytes): nothing to read (point --data at the file with rows)")
        twice = [c for c, n in Counter(_columns_of_file(f)).items() if n > 1]
        if twice:
            raise _fail(
                spec,
                f"{f} has the column name(s) {', '.join(map(repr, twice))} more than once; rename them so "
                "each column has its own name (calibflow would not know which one you mean)",
            )
    return found


# ------------------------------------------------------------------------------------------------ label


def _is(dtype: str, kinds: tuple[str, ...]) -> bool:
    return dtype.upper().startswith(kinds)


def _label_counts(rel, col: str) -> tuple[list[tuple[Any, int]], int]:
    """The most frequent values (null included) and the number of distinct non-null values, in one pass."""
    q = quote_ident(col)
    grouped = rel.aggregate(f"{q} AS v, count(*) AS n", q)
    top = grouped.project("v, n, count(v) OVER () AS k").order("n DESC, v").limit(SHOWN + 1).fetchall()
    return [(v, int(n)) for v, n, _ in top], int(top[0][2]) if top else 0


def _show(values: list[tuple[Any, int]]) -> str:
    return ", ".join(f"{v!r} ({n:,} rows)" if v is not None else f"null ({n:,} rows)" for v, n in values)


def _binary_value(v: Any) -> bool:
    """What the pipeline accepts without ``positive:`` (``calibflow.source_rules``' one rule)."""
    from calibflow.source_rules import label_value

    return label_value(v, None)[0]


def _same(v: Any, positive: Any) -> bool:
    """Whether ``v`` counts as the positive class (``calibflow.source_rules``' one rule)."""
    from calibflow.source_rules import label_value

    return label_value(v, positive)[1] == 1


def check_label(spec: SourceSpec, rel, dtype: str) -> dict[str, int]:
    """The label's value counts, or a ``ValueError`` naming the values seen and the fix."""
    counts, distinct = _label_counts(rel, spec.label)
    col = f"label column {spec.label!r}"
    nulls = sum(n for v, n in counts if v is None)
    values = [(v, n) for v, n in counts if v is not None]
    more = f" and {distinct - len(values)} more" if distinct > len(values) else ""
    if nulls:
        raise _fail(spec, f"{col} has {nulls:,} null value(s): rows without an outcome (drop them first)")
    if spec.positive is None and not _is(dtype, ("BOOLEAN",)):
        bad = [(v, n) for v, n in values if not _binary_value(v)]
        if bad or distinct > 2:
            hint = f"--positive {values[0][0]!s}" if distinct == 2 else "--positive VALUE"
            raise _fail(
                spec,
                f"{col} has values other than 0/1/true/false: {_show(bad)}{more} (all: {_show(values)}); "
                f"fix those rows, or pass {hint} (the value that counts as 1) for a text label",
            )
    elif spec.positive is not None:
        if not any(_same(v, spec.positive) for v, _ in values):
            raise _fail(
                spec, f"--positive {spec.positive!r} is not among the values of {col}: {_show(values)}{more}"
            )
        if distinct > 2:
            raise _fail(
                spec,
                f"{col} has {distinct} values, a label has two classes: {_show(values)}{more}; fix the "
                "rows with a third value",
            )
    if distinct < 2:
        v, n = values[0]
        raise _fail(spec, f"{col} has one class only ({n:,} rows of {v!r}): calibration needs both outcomes")
    return {str(v): n for v, n in sorted(values, key=lambda x: str(x[0]))}


# ------------------------------------------------------------------------------------------------ score


def score_exprs(spec: SourceSpec) -> dict[str, str]:
    """Aggregates for the shared pass: nulls, NaN, inf and the finite range of the score."""
    x = f"CAST({quote_ident(spec.score)} AS DOUBLE)"
    return {
        "score_null": f"count(*) FILTER (WHERE {x} IS NULL)",
        "score_nan": f"count(*) FILTER (WHERE isnan({x}))",
        "score_inf": f"count(*) FILTER (WHERE isinf({x}))",
        "score_lo": f"min({x}) FILTER (WHERE isfinite({x}))",
        "score_hi": f"max({x}) FILTER (WHERE isfinite({x}))",
    }


def check_score(spec: SourceSpec, st: dict[str, Any], kind: str | None) -> dict[str, Any]:
    """Finite range and guessed kind from the finite values only; a ``ValueError`` for what the run refuses.

    ``kind`` is the declared ``--score-kind`` (None: guess ``probability`` when every finite value lies
    in [0, 1], else ``score``). Non-finite values never decide the guess; they are refused, counted.
    """
    col = f"score column {spec.score!r}"
    lo, hi = st["score_lo"], st["score_hi"]
    guess = "probability" if lo is not None and lo >= 0 and hi <= 1 else "score"
    seen = f"[{lo:.6g}, {hi:.6g}]" if lo is not None else "no finite value"
    bad = st["score_null"] + st["score_nan"] + st["score_inf"]
    if bad:
        raise _fail(
            spec,
            f"{col} has {bad:,} value(s) that are not finite ({st['score_null']} null, "
            f"{st['score_nan']} NaN, {st['score_inf']} inf) in {st['rows']:,} rows; the finite ones lie in "
            f"{seen}; drop or fix those rows",
        )
    if kind == "probability" and guess != "probability":
        raise _fail(
            spec,
            f"{col} lies in {seen}, not in [0, 1]: pass --score-kind logit (or score) if not a probability",
        )
    return {"score_range": [lo, hi], "score_kind": kind or guess}


# ------------------------------------------------------------------------------------------------- time


def detect_time_format(spec: SourceSpec, rel, given: str | None = None) -> str:
    """The one format that reads every text value of the time column (``ISO8601`` or a strptime format).

    Decided from all values: a file whose days never exceed 12 reads both as dd/mm and mm/dd, which is
    ambiguous and refused (pass ``--time-format``); a given format must read every value.
    """
    q = quote_ident(spec.time)
    iso = f"try_cast({q} AS TIMESTAMP) IS NULL AND try_cast({q} AS TIMESTAMPTZ) IS NULL"
    fmts = [given] if given else [ISO, *TIME_FORMATS]
    fails = [iso if f == ISO else f"try_strptime({q}, {quote_literal(f)}) IS NULL" for f in fmts]
    exprs = [f"count(*) FILTER (WHERE {q} IS NOT NULL AND {cond})" for cond in fails]
    # Over the distinct values (a few thousand days), not every row: one cheap pass for all candidates.
    counts = rel.project(q).distinct().aggregate(", ".join(exprs)).fetchall()[0]
    ok = [f for f, c in zip(fmts, counts, strict=True) if c == 0]
    col = f"time column {spec.time!r}"
    if given and not ok:
        ex = _examples(rel, q, fails[0])
        raise _fail(
            spec, f"{col}: {counts[0]:,} distinct value(s) do not match --time-format {given!r}, e.g. {ex}"
        )
    if not ok:
        ex = _examples(rel, q, fails[0])
        raise _fail(
            spec,
            f"{col}: text dates in no format calibflow knows, e.g. {ex}; pass --time-format "
            "(strptime codes, e.g. '%d/%m/%Y %H:%M')",
        )
    if len(ok) > 1 and ISO not in ok:
        raise _fail(
            spec,
            f"{col}: every value reads as {' and as '.join(ok)} (no day above 12): pass "
            f"--time-format {ok[0]!r} or {ok[1]!r}",
        )
    return ISO if ISO in ok else ok[0]


def _examples(rel, q: str, cond: str) -> str:
    rows = rel.filter(f"{q} IS NOT NULL AND {cond}").project(q).distinct().limit(3).fetchall()
    return ", ".join(repr(r[0]) for r in rows)


def time_plan(spec: SourceSpec, rel, dtype: str, given: str | None, con) -> tuple[Any, str, dict[str, Any]]:
    """(relation to read, SQL of the time as a timestamp, {time_format}) after checking the type and format.

    A CSV date column that DuckDB's sniffer typed by itself is looked at as the text it is: the sniffer
    picks day- or month-first on its own. Text that is not ISO 8601 gets an explicit ``time_format``, and
    the pipeline then reads that column as text parsed with it (``sources.relation``).
    """
    q = quote_ident(spec.time)
    out: dict[str, Any] = {}
    if _is(dtype, _TEMPORAL) and src._fmt(src.files(spec.path)[0]) == "csv":
        rel = src.relation_for_path(spec.path, con, [spec.time])
        dtype = "VARCHAR"
    if _is(dtype, ("VARCHAR",)):
        fmt = detect_time_format(spec, rel, given)
        if fmt != ISO or given:  # ISO text needs no format: DuckDB and pandas read it one way
            out["time_format"] = fmt
        return rel, time_sql(spec.time, "VARCHAR", fmt), out  # the run's reading (every value parses)
    if _is(dtype, _TEMPORAL):
        if given:
            raise _fail(spec, f"--time-format is for text dates; column {spec.time!r} is {dtype} already")
        return rel, q, out
    raise _fail(spec, f"time column {spec.time!r} has type {dtype}, expected dates, timestamps or date text")


# -------------------------------------------------------------------------------------------- the whole


def inspect_source(
    spec: SourceSpec, score_kind: str | None = None, time_format: str | None = None
) -> dict[str, Any]:
    """Columns, rows, label balance, score range and kind, time range and format, and notes.

    Raises a one-line ``ValueError`` (naming the source, the column, what was seen and the fix) for
    everything the pipeline would refuse later. ``score_kind``: as declared (None: guessed from the finite
    values). ``time_format``: as given (None: detected from all values when the time column is text).
    Notes (``notes``) are what the run accepts but the user should know: null segment values.
    """
    check_files(spec)
    con = src.connect()
    try:
        rel = src.relation(spec, con)
        src.check_columns(spec, rel.columns, spec.role_columns())
        src.check_columns(spec, rel.columns, src.feature_columns(spec, rel.columns))
        types = dict(zip(rel.columns, [str(t) for t in rel.types], strict=True))
        if not rel.limit(1).fetchall():  # reads the first rows only
            raise _fail(spec, f"{spec.path} has no rows (a header only?): nothing to calibrate")
        if spec.score is not None and not _is(types[spec.score], _NUMERIC):
            raise _fail(
                spec,
                f"score column {spec.score!r} has type {types[spec.score]}, expected numbers (convert it, "
                "or pick another column)",
            )
        out: dict[str, Any] = {"columns": types, "notes": []}
        if time_format and spec.time is None:
            raise _fail(spec, "--time-format given without --time")
        # One pass over the rows for every count and range (a 2 GB CSV is parsed once here, not per check).
        exprs = {"rows": "count(*)"}
        if spec.time is not None:
            rel, t, fmt = time_plan(spec, rel, types[spec.time], time_format, con)
            out.update(fmt)
            q = quote_ident(spec.time)
            exprs.update(
                time_null=f"count(*) FILTER (WHERE {q} IS NULL)", time_lo=f"min({t})", time_hi=f"max({t})"
            )
        if spec.score is not None:
            exprs.update(score_exprs(spec))
        for k, seg in enumerate(spec.segments):
            exprs[f"seg{k}"] = f"count(*) FILTER (WHERE {quote_ident(seg)} IS NULL)"
        if spec.weight is not None:
            w = f"TRY_CAST({quote_ident(spec.weight)} AS DOUBLE)"
            exprs["weight_bad"] = f"count(*) FILTER (WHERE {w} IS NULL OR NOT isfinite({w}) OR {w} < 0)"
        st = dict(zip(exprs, rel.aggregate(", ".join(exprs.values())).fetchall()[0], strict=True))
        rows = out["rows"] = int(st["rows"])
        out["labels"] = check_label(spec, rel, types[spec.label])
        if spec.score is not None:
            out.update(check_score(spec, st, score_kind))
        if spec.time is not None:
            if st["time_null"]:
                raise _fail(
                    spec, f"time column {spec.time!r} has {st['time_null']:,} null value(s) (drop those rows)"
                )
            out["time_range"] = [str(st["time_lo"]), str(st["time_hi"])]
        for k, seg in enumerate(spec.segments):
            if st[f"seg{k}"]:
                out["notes"].append(
                    f"segment column {seg!r}: {st[f'seg{k}']:,} null value(s) of {rows:,} rows"
                )
        if spec.weight is not None and st["weight_bad"]:
            raise _fail(
                spec, f"weight column {spec.weight!r}: {st['weight_bad']:,} value(s) null, not finite or < 0"
            )
        return out
    finally:
        con.close()
