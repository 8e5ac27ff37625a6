"""Great Expectations suites generated from a source's declaration (used by ``calibflow.pipeline.validate``).

Raw phase, on the declared columns read by DuckDB: the label is binary (0/1 or boolean, or ``positive``
names the value counting as 1), scores are finite and, for probabilities, in [0, 1], weights are finite and
>= 0, times parse, and the whole table has at least ``validate.min_class_count`` positives and negatives.
Prepared phase: every split the source uses has that many positives and negatives. Each check runs as a GX
expectation on a per-row flag column (True = the row is fine; the frame's index is the source's row number)
so a failure can name the source, the column, the count and the first offending rows in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from calibflow import source_rules as rules
from calibflow import sources as src
from calibflow import timesplit
from calibflow.sources import SourceSpec

#: Offending row numbers quoted in a message.
EXAMPLES = 5


@dataclass(frozen=True)
class Check:
    """One expectation's meaning: the source column it is about, and the message when it fails."""

    column: str
    problem: str
    fix: str


def _gxe():
    import great_expectations.expectations as gxe

    return gxe


def _numeric(spec: SourceSpec, s: pd.Series, role: str) -> np.ndarray:
    """The column as float64; a non-numeric type is a one-line error (types must be usable)."""
    if pd.api.types.is_bool_dtype(s) or not pd.api.types.is_numeric_dtype(s):
        raise ValueError(
            f"source {spec.name!r}: {role} column {s.name!r} has type {s.dtype}, expected numbers "
            f"(convert it, or declare another column)"
        )
    return s.to_numpy(dtype=np.float64, na_value=np.nan)


def _label_ok(spec: SourceSpec, s: pd.Series) -> np.ndarray:
    """Where the label is usable: ``calibflow.source_rules``' one rule."""
    from calibflow.source_rules import label_array

    return label_array(s, spec.positive)[0]


def _values_seen(bad: pd.Series) -> str:
    """`` (values seen: 2, 'Y', null)``: the distinct offending values (a few), for the one-line message."""
    if bad.empty:
        return ""
    shown = [
        ("null" if pd.isna(v) else repr(v) if isinstance(v, str) else str(v)) for v in bad.unique()[:EXAMPLES]
    ]
    return f" (values seen: {', '.join(shown)}{', ...' if bad.nunique(dropna=False) > EXAMPLES else ''})"


#: Per raw check (the flag's name): the problem and the fix a failure message states.
PROBLEMS = {
    "label_binary": (
        "label(s) missing or not in {0, 1}",
        "use 0/1 or true/false, or set `positive:` to the value that counts as 1",
    ),
    "score_finite": ("score(s) not finite (NaN or inf)", "fix or drop those rows"),
    "score_in_01": ("probabilit(ies) outside [0, 1]", "set `score_kind: logit` or `score` if it is not one"),
    "weight_ok": ("weight(s) not finite or negative", "weights must be >= 0"),
    "time_parses": ("time value(s) do not parse as dates", "use ISO dates"),
}


def _check(flag: str, column: str, seen: str = "") -> Check:
    problem, fix = PROBLEMS[flag]
    return Check(column, problem + seen, fix)


def raw_suite(spec: SourceSpec, min_count: int) -> tuple[pd.DataFrame, list[Any], dict[str, Check]]:
    """The raw suite of one source: (flag frame, expectations, {flag column: Check})."""
    gxe = _gxe()
    rel_cols = src.relation(spec).columns
    src.check_columns(spec, rel_cols, spec.role_columns())
    src.check_columns(spec, rel_cols, src.feature_columns(spec, rel_cols))
    raw = src.scan(spec, spec.role_columns()).to_pandas()
    flags: dict[str, np.ndarray] = {}
    checks: dict[str, Check] = {}
    lab = raw[spec.label]
    flags["label_binary"] = _label_ok(spec, lab)
    checks["label_binary"] = _check("label_binary", spec.label, _values_seen(lab[~flags["label_binary"]]))
    if spec.score is not None:  # the checks' one definition: calibflow.source_rules
        s = _numeric(spec, raw[spec.score], "score")
        flags["score_finite"] = rules.score_finite_array(s)
        checks["score_finite"] = _check("score_finite", spec.score)
        if spec.score_kind == "probability":
            flags["score_in_01"] = rules.score_in_01_array(s)
            checks["score_in_01"] = _check("score_in_01", spec.score)
    if spec.weight is not None:
        w = _numeric(spec, raw[spec.weight], "weight")
        flags["weight_ok"] = rules.weight_ok_array(w)
        checks["weight_ok"] = _check("weight_ok", spec.weight)
    if spec.time is not None:
        flags["time_parses"] = timesplit.to_datetime(raw[spec.time], spec.time_format).notna().to_numpy()
        checks["time_parses"] = _check("time_parses", spec.time)
    frame = pd.DataFrame(flags)
    y = np.where(flags["label_binary"], _y01(spec, lab), 0)
    frame["y01"] = y
    n = len(frame)
    exps: list[Any] = [gxe.ExpectTableRowCountToBeBetween(min_value=2 * min_count)]
    exps += [gxe.ExpectColumnValuesToBeInSet(column=f, value_set=[True]) for f in flags]
    exps.append(gxe.ExpectColumnSumToBeBetween(column="y01", min_value=min_count, max_value=n - min_count))
    checks["y01"] = Check(spec.label, "", "")
    return frame, exps, checks


def _y01(spec: SourceSpec, lab: pd.Series) -> np.ndarray:
    """The label as 0/1 (``calibflow.source_rules``; 0 where unusable: the label check flags those)."""
    from calibflow.source_rules import label_array

    return label_array(lab, spec.positive)[1]


def split_suites(
    name: str, df: pd.DataFrame, splits: list[str], min_count: int
) -> list[tuple[str, pd.DataFrame, list[Any]]]:
    """One suite per split a source uses: at least ``min_count`` positives and negatives."""
    gxe = _gxe()
    out = []
    for split in splits:
        part = df.loc[df["split"] == split, ["y"]]
        exps = [
            gxe.ExpectColumnSumToBeBetween(column="y", min_value=min_count, max_value=len(part) - min_count),
            gxe.ExpectColumnValuesToBeInSet(column="y", value_set=[0, 1]),
        ]
        out.append((f"prepared.{name}.{split}", part, exps))
    return out


def raw_message(spec: SourceSpec, frame: pd.DataFrame, failure: dict[str, Any], check: Check, k: int) -> str:
    """One line for a failed raw expectation: source, column, count, first offending rows, fix."""
    col = failure["kwargs"].get("column")
    n = len(frame)
    if col == "y01" or col is None:
        pos = int(frame["y01"].sum())
        what = "only one class" if pos in (0, n) else "too few of one class"
        return (
            f"source {spec.name!r}: column {spec.label!r}: {what} ({pos} positives, {n - pos} negatives "
            f"in {n} rows); each class needs at least {k} (validate.min_class_count)"
        )
    bad = np.flatnonzero(~frame[col].to_numpy(dtype=bool))
    rows = ", ".join(str(int(frame.index[i])) for i in bad[:EXAMPLES])
    more = ", ..." if bad.size > EXAMPLES else ""
    return (
        f"source {spec.name!r}: column {check.column!r}: {bad.size} {check.problem} of {n} rows, "
        f"e.g. rows {rows}{more} ({check.fix})"
    )


def split_message(name: str, split: str, part: pd.DataFrame, k: int, windows: dict[str, Any] | None) -> str:
    pos = int(part["y"].sum())
    return _split_line(name, split, pos, len(part) - pos, k, windows)


def _split_line(name: str, split: str, pos: int, neg: int, k: int, windows: dict[str, Any] | None) -> str:
    where = ""
    if windows and split in windows:
        where = f" [{windows[split][0]} .. {windows[split][1]})"
    return (
        f"source {name!r}: split {split!r}{where} has {pos} positives and {neg} negatives; "
        f"each needs at least {k} (widen the window, or lower validate.min_class_count)"
    )


# ---- the streaming path (a score source above scale.row_threshold): suites on DuckDB's aggregates


def raw_suite_streaming(
    spec: SourceSpec, min_count: int
) -> tuple[pd.DataFrame, list[Any], dict[str, Any]]:
    """The raw suite on the source's one-scan profile: a one-row frame (rows, positives, negatives, each
    check's offending count), expectations that each count is 0 and each class has ``min_count`` rows."""
    from calibflow.pipeline import _streaming

    gxe = _gxe()
    frame, prof = _streaming.raw_frame(spec)
    exps: list[Any] = [gxe.ExpectColumnValuesToBeBetween(column="rows", min_value=2 * min_count)]
    exps += [gxe.ExpectColumnValuesToBeBetween(column=k, min_value=0, max_value=0) for k in prof["checks"]]
    exps += [_at_least(gxe, c, min_count) for c in ("positives", "negatives")]
    return frame, exps, prof


def _at_least(gxe: Any, column: str, k: int) -> Any:
    return gxe.ExpectColumnValuesToBeBetween(column=column, min_value=k)


def raw_message_streaming(spec: SourceSpec, prof: dict[str, Any], failure: dict[str, Any], k: int) -> str:
    """The row path's one line for a failed check, from the profile (counts and first rows)."""
    col = failure["kwargs"].get("column")
    n, pos = prof["rows"], prof["positives"]
    if col not in prof["checks"]:
        what = "only one class" if pos in (0, n) else "too few of one class"
        return (
            f"source {spec.name!r}: column {spec.label!r}: {what} ({pos} positives, {n - pos} negatives "
            f"in {n} rows); each class needs at least {k} (validate.min_class_count)"
        )
    c = prof["checks"][col]
    seen = ""
    if col == "label_binary" and c["values"]:
        seen = f" (values seen: {', '.join(map(str, c['values']))})"
    check = _check(col, c["column"], seen)
    rows = ", ".join(str(r) for r in c["examples"]) + (", ..." if c["bad"] > EXAMPLES else "")
    return (
        f"source {spec.name!r}: column {check.column!r}: {c['bad']} {check.problem} of {n} rows, "
        f"e.g. rows {rows} ({check.fix})"
    )


def split_suites_streaming(
    name: str, frame: pd.DataFrame, splits: list[str], min_count: int
) -> list[tuple[str, pd.DataFrame, list[Any]]]:
    """Per split a source uses: its one-row count frame must exist and hold ``min_count`` of each class."""
    gxe = _gxe()
    out = []
    for split in splits:
        part = frame[frame["split"] == split].reset_index(drop=True)
        exps = [gxe.ExpectTableRowCountToEqual(value=1)]
        exps += [_at_least(gxe, c, min_count) for c in ("positives", "negatives")]
        out.append((f"prepared.{name}.{split}", part, exps))
    return out


def split_message_streaming(
    name: str, split: str, part: pd.DataFrame, k: int, windows: dict[str, Any] | None
) -> str:
    pos, neg = int(part["positives"].sum()), int(part["negatives"].sum())
    return _split_line(name, split, pos, neg, k, windows)
