"""How a source's columns are read and checked, written once (issue 35): the label rule below, the score
and weight checks, and the time column (its section at the end), each in the forms calibflow needs.

The rule. Without ``positive:``, a label is usable when it is a boolean or a number (or numeric text) 0 or 1,
and it is 1 when it is true or 1; anything else (null, 2, "yes") is unusable. With ``positive:``, every
non-null label is usable and it is 1 when it equals ``positive``: as numbers when the column holds numbers and
``positive`` is a number; otherwise as text, the value's text as DuckDB writes it (``CAST(v AS VARCHAR)``:
``true``/``false`` for booleans, ``1.0`` for a double 1), compared with ``positive``'s text, case-blind when
``positive`` is itself a boolean (YAML's ``positive: true`` is Python's ``True``, whose ``str`` is "True").

The forms: :func:`label_sql` (SQL expressions over a column, for DuckDB: the one-pass prepare, validate@raw's
profile, the row sample), :func:`label_array` (arrays over a pandas column: a features source's prepared rows
and its validation), :func:`label_value` (one Python value: ``init``'s checks on the distinct values), and the
monitor's pair :func:`pending_label_sql` / :func:`pending_label_array` (a NULL label is "not known yet").
``tests/library/test_source_rules.py`` runs the three on the same values, NULL and odd types included, and
checks they agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from calibflow.sources import is_numeric_type, quote_ident, quote_literal


def _positive_text(positive: Any) -> str:
    """``positive`` as the text a value is compared with (a boolean as DuckDB writes one)."""
    return str(positive).lower() if isinstance(positive, bool | np.bool_) else str(positive)


def _numeric_positive(positive: Any) -> bool:
    number = isinstance(positive, int | float | np.integer | np.floating)
    return number and not isinstance(positive, bool | np.bool_)


def label_sql(column: str, duckdb_type: str, positive: Any | None) -> tuple[str, str]:
    """(SQL true where the label of ``column`` (``duckdb_type``) is usable, SQL of it as 0/1)."""
    lab = quote_ident(column)
    if positive is not None:
        if is_numeric_type(duckdb_type) and _numeric_positive(positive):
            hit = f"({lab} = {float(positive)!r})"
        elif isinstance(positive, bool | np.bool_):
            hit = f"(lower(CAST({lab} AS VARCHAR)) = {quote_literal(_positive_text(positive))})"
        else:
            hit = f"(CAST({lab} AS VARCHAR) = {quote_literal(_positive_text(positive))})"
        return f"({lab} IS NOT NULL)", f"coalesce(CAST({hit} AS INTEGER), 0)"
    if str(duckdb_type).upper() == "BOOLEAN":
        return f"({lab} IS NOT NULL)", f"coalesce(CAST({lab} AS INTEGER), 0)"
    v = f"TRY_CAST({lab} AS DOUBLE)"
    return f"coalesce({v} IN (0, 1), false)", f"coalesce(CAST({v} = 1 AS INTEGER), 0)"


def _text(values: pd.Series) -> pd.Series:
    """Each value's text as DuckDB's ``CAST(v AS VARCHAR)`` writes it (booleans lower case, floats with a
    decimal point); None for a null."""
    if pd.api.types.is_bool_dtype(values):
        return values.map(lambda v: None if pd.isna(v) else ("true" if v else "false"))
    if pd.api.types.is_float_dtype(values):
        return values.map(lambda v: None if pd.isna(v) else repr(float(v)))
    return values.map(lambda v: None if pd.isna(v) else _value_text(v))


def _value_text(v: Any) -> str:
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, float | np.floating):
        return repr(float(v))
    return str(v)


def label_array(values: pd.Series, positive: Any | None) -> tuple[np.ndarray, np.ndarray]:
    """(usable: bool per row, the label as 0/1: int64 per row, 0 where unusable) for a pandas column."""
    notna = values.notna().to_numpy()
    if positive is not None:
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values) \
                and _numeric_positive(positive):
            hit = values.to_numpy(dtype=np.float64, na_value=np.nan) == float(positive)
        else:
            text = _text(values)
            want = _positive_text(positive)
            if isinstance(positive, bool | np.bool_):
                text = text.map(lambda t: t.lower() if isinstance(t, str) else None)
            hit = (text == want).to_numpy(dtype=bool)
        return notna, (hit & notna).astype(np.int64)
    if pd.api.types.is_bool_dtype(values):
        return notna, values.fillna(False).to_numpy(dtype=bool).astype(np.int64)
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    ok = (v == 0) | (v == 1)
    return ok, (v == 1).astype(np.int64)


def pending_label_sql(column: str, duckdb_type: str, positive: Any | None) -> str:
    """The monitor's form of :func:`label_sql`: 0/1, NULL while a label is not known yet, -1 for a value
    that is no label (its file is refused)."""
    usable, y = label_sql(column, duckdb_type, positive)
    lab = quote_ident(column)
    return f"CASE WHEN {lab} IS NULL THEN NULL WHEN {usable} THEN CAST({y} AS DOUBLE) ELSE -1.0 END"


def pending_label_array(values: pd.Series, positive: Any | None) -> np.ndarray:
    """:func:`pending_label_sql` on a pandas column (float: NaN for NULL, -1 for no label)."""
    ok, y = label_array(values, positive)
    out = np.where(ok, y.astype(np.float64), -1.0)
    out[~values.notna().to_numpy()] = np.nan
    return out


def label_value(v: Any, positive: Any | None) -> tuple[bool, int]:
    """(usable, 0/1) for one value, as :func:`label_array` reads it (``init`` checks distinct values)."""
    ok, y = label_array(pd.Series([v]), positive)
    return bool(ok[0]), int(y[0])


# ---- the score and weight checks (validate@raw on DuckDB's profile, and on a features source's rows) ------


def score_finite_sql(column: str) -> str:
    """SQL true where the score is a finite number (NULL, NaN and inf are not)."""
    s = f"CAST({quote_ident(column)} AS DOUBLE)"
    return f"coalesce(isfinite({s}), false)"


def score_in_01_sql(column: str) -> str:
    """SQL true where a probability score lies in [0, 1] (a non-finite one is the other check's)."""
    s = f"CAST({quote_ident(column)} AS DOUBLE)"
    return f"coalesce(NOT isfinite({s}) OR ({s} >= 0 AND {s} <= 1), true)"


def weight_ok_sql(column: str) -> str:
    """SQL true where the weight is a finite number >= 0."""
    w = f"CAST({quote_ident(column)} AS DOUBLE)"
    return f"coalesce(isfinite({w}) AND {w} >= 0, false)"


def score_finite_array(s: np.ndarray) -> np.ndarray:
    """:func:`score_finite_sql` on a float array (NaN for NULL)."""
    return np.isfinite(s)


def score_in_01_array(s: np.ndarray) -> np.ndarray:
    """:func:`score_in_01_sql` on a float array."""
    return ~np.isfinite(s) | ((s >= 0) & (s <= 1))


def weight_ok_array(w: np.ndarray) -> np.ndarray:
    """:func:`weight_ok_sql` on a float array."""
    return np.isfinite(w) & (w >= 0)


# ---- the time column (the run's split and validation, the monitor's windows) ---------------------------
#
# The row form is ``calibflow.timesplit.to_datetime``; ``tests/library/test_time_units.py`` runs both on
# the same files. The run reads wall-clock time in the column's own zone (``zone``: from the Parquet
# schema, docs/sources.md), the monitor its UTC instant (``zone="UTC"``: its windows are UTC days).


def duckdb_zone(tz: Any) -> str:
    """A zone as DuckDB (ICU) names it: a fixed offset ``+02:00`` is ``UTC+02:00``; none is UTC."""
    tz = str(tz or "UTC")
    return f"UTC{tz}" if tz[:1] in "+-" else tz


def time_sql(column: str, duckdb_type: str, time_format: str | None = None, zone: str = "UTC",
             epoch_per_us: float | None = None) -> str | None:
    """SQL of ``column`` (``duckdb_type``) as a TIMESTAMP, NULL where a value does not parse; None where
    SQL does not read it as the row form does (numbers without ``epoch_per_us``, the microseconds in one
    unit of the column's epoch: ``timesplit.epoch_unit``).

    A zoned timestamp is its wall-clock time in ``zone``; a timestamp or date as it is; text in
    ``time_format`` (strptime codes) or, without one or with ``ISO8601``, ISO 8601 text.
    """
    c, t = quote_ident(column), str(duckdb_type).upper()
    if "WITH TIME ZONE" in t or t == "TIMESTAMPTZ":
        return f"timezone({quote_literal(duckdb_zone(zone))}, {c})"
    if t.startswith(("TIMESTAMP", "DATE")):
        return f"CAST({c} AS TIMESTAMP)"
    if is_numeric_type(duckdb_type):
        if epoch_per_us is None:
            return None
        return f"make_timestamp(CAST(round(CAST({c} AS DOUBLE) * {float(epoch_per_us)!r}) AS BIGINT))"
    if time_format and time_format.upper() != "ISO8601":
        return f"try_strptime(CAST({c} AS VARCHAR), {quote_literal(time_format)})"
    return f"TRY_CAST({c} AS TIMESTAMP)"
