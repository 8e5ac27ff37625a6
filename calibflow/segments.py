"""Segments (country, device, campaign, ...): how values are read, and calibration measured per segment.

One reading of segment values everywhere (fit, pipeline, ``calibflow apply``), so a value means the same
thing when a calibrator is fitted and when it is served:

- every value becomes text; a float column whose values are whole numbers reads as integers (``3.0`` and
  ``3`` are the same level, whether pandas or Arrow read the file);
- a null (None, NaN, NA) is its own level, :data:`NULL_LEVEL`, never dropped and never merged into "nan".

The per-segment check (:func:`segment_check`) is what the model card and report show: for every value of
every segment column, rows, positives and ``sum p / sum y`` before and after calibration with bootstrap
intervals, a flag where the interval after calibration excludes 1, and row counts adding up to the test
rows (values past the ``top`` largest of a column are pooled into one "other" row, never left out).
The paired test that decides between a global and a segmented calibrator is
computed in one pass by ``calibflow.aggregate.segment_compare.compare`` (the moments form of
``selection.paired_log_loss``, ``selection.paired_from_moments``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: The level a null segment value gets (its own level: rows with no country are a segment too).
NULL_LEVEL = "(null)"
#: Fewest positives for a segment's ratio to be tested (flagged when its interval excludes 1): under it a
#: segment is listed as "too few positives", neither flagged nor hidden. Why 10: the coverage study
#: (benchmarks/segment_coverage.py) meets its targets at any count, but a segment selected for having
#: positives is tested on the lower tail only at a handful of them; at 10 the false-alarm rate among the
#: tested segments stays at or under the stated 5% in every cell, and on a click log an item with 1-9
#: clicks is not called "off" (issue 36).
MIN_POSITIVES = 10
#: The label of the pooled row of a column's values past the ``top`` largest.
OTHER_LEVEL = "(other values)"


def as_levels(values: ArrayLike) -> NDArray[np.object_]:
    """Segment values as text levels (see the module docstring); nulls become :data:`NULL_LEVEL`."""
    import pandas as pd  # here, not at the top: the segmented calibrators' modules (read by the params
    # check for their facts) import this one

    if isinstance(values, pd.Series | pd.Index):
        values = values.to_numpy(dtype=object, na_value=None)
    a = np.asarray(values)
    if a.dtype.kind in "iub":
        return a.astype(str).astype(object)
    a = a.astype(object) if a.dtype != object else a
    null = np.asarray(pd.isna(a), dtype=bool)
    inferred = pd.api.types.infer_dtype(a, skipna=True)
    if inferred == "string":  # already text (the common case): no per-value conversion
        out = a.copy()
    elif inferred in ("floating", "integer", "mixed-integer-float", "decimal"):
        out = _number_levels(a, null)
    else:
        out = np.array([str(v) for v in a], dtype=object)
    out[null] = NULL_LEVEL
    return out


def _number_levels(a: NDArray[np.object_], null: NDArray[np.bool_]) -> NDArray[np.object_]:
    v = np.where(null, np.nan, a).astype(np.float64)
    ok = ~null
    out = np.full(v.size, NULL_LEVEL, dtype=object)
    if np.all(np.isfinite(v[ok])) and np.all(v[ok] == np.round(v[ok])):
        out[ok] = [str(int(x)) for x in v[ok]]
    else:
        out[ok] = [str(x) for x in a[ok]]
    return out


def segment_matrix(segments: Any, n: int) -> tuple[list[str], list[NDArray[np.object_]]]:
    """Segment columns as (names, levels per column); a DataFrame, a dict of columns or a 1-/2-D array.

    The calling convention of every segmented calibrator: ``fit(scores, y, segments=...)``,
    ``predict(scores, segments=...)``.
    """
    if segments is None:
        raise ValueError("segments= is required: one or more columns (country, campaign, ...)")
    if hasattr(segments, "columns"):
        names = [str(c) for c in segments.columns]
        cols = [segments[c] for c in segments.columns]
    elif isinstance(segments, dict):
        names = [str(k) for k in segments]
        cols = list(segments.values())
    else:
        arr = np.asarray(segments, dtype=object)
        arr = arr.reshape(-1, 1) if arr.ndim == 1 else arr
        if arr.ndim != 2:
            raise ValueError(f"segments must be 1-D or 2-D, got shape {arr.shape}")
        names = [f"segment_{i}" for i in range(arr.shape[1])]
        cols = [arr[:, i] for i in range(arr.shape[1])]
    if not cols:
        raise ValueError("segments has no columns")
    out = []
    for name, col in zip(names, cols, strict=True):
        levels = as_levels(col)
        if levels.ndim != 1 or levels.size != n:
            raise ValueError(f"length mismatch: segment column {name!r} has {levels.size} values, scores {n}")
        out.append(levels)
    return names, out


def level_codes(levels: NDArray[np.object_], vocab: list[str]) -> NDArray[np.int64]:
    """Index of each level in ``vocab`` (sorted), -1 for a level not in it (unseen in fitting)."""
    import pandas as pd

    codes, uniques = pd.factorize(levels)  # hash once per row, then look up only the distinct values
    index = {v: k for k, v in enumerate(vocab)}
    lookup = np.array([index.get(u, -1) for u in uniques] + [-1], dtype=np.int64)
    return lookup[codes]  # factorize's -1 (none here: levels hold no null) maps to the appended -1


def aligned(segments: Any, fitted: list[str], n: int) -> list[NDArray[np.object_]]:
    """The segment columns in the order of the ``fitted`` names: by name when every fitted name is given
    (a DataFrame or dict may hold more columns), else by position when the counts agree."""
    names, cols = segment_matrix(segments, n)
    if set(fitted) <= set(names):
        return [cols[names.index(f)] for f in fitted]
    if len(cols) != len(fitted):
        raise ValueError(f"segments has column(s) {names}; this calibrator was fitted on {fitted}")
    return cols


def unseen_counts(names: list[str], vocabs: list[list[str]], segments: Any, n: int) -> dict[str, int]:
    """Per segment column, how many rows hold a value the calibrator never saw (they get the global map)."""
    cols = aligned(segments, names, n)
    return {nm: int((level_codes(c, v) < 0).sum()) for nm, c, v in zip(names, cols, vocabs, strict=True)}


def enough_evidence(positives: float) -> bool:
    """Whether a segment has the positives (:data:`MIN_POSITIVES`) for its ratio to be tested."""
    return positives >= MIN_POSITIVES


def is_flagged(ci: list[float] | None, positives: float) -> bool:
    """Off after calibration: the ratio's interval excludes 1 and the segment has the evidence to tell."""
    return bool(ci is not None and enough_evidence(positives) and (ci[0] > 1.0 or ci[1] < 1.0))


def count_interval(
    y: NDArray[np.float64], p: NDArray[np.float64], level: float
) -> list[float] | None:
    """``sum p / sum y``'s interval on rows ``y``, ``p`` (:func:`calibflow.intervals.ratio_interval`);
    None with no positive (no ratio), the upper end may be ``inf`` only then, so never here."""
    from calibflow.intervals import ratio_interval

    pos = float(y.sum())
    if pos <= 0:
        return None
    lo, hi = ratio_interval(pos, float(p.sum()), float(p @ (1.0 - p)), level)
    return [float(lo), float(hi)] if np.isfinite(lo) else None


def segment_check(
    y: ArrayLike,
    p_before: ArrayLike,
    p_after: ArrayLike,
    segments: Any,
    *,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    top: int = 50,
) -> list[dict[str, Any]]:
    """Per segment value: ``n``, ``positives``, ``sum p / sum y`` before and after, intervals, ``flagged``,
    ``too_few``.

    ``flagged`` is True where the interval of the ratio after calibration excludes 1 and the value has at
    least :data:`MIN_POSITIVES` positives (the calibrated probabilities are off on that segment beyond
    sampling noise); under that the value is ``too_few`` (too few positives to tell), never flagged. Per
    column, the ``top`` largest values and every flagged value get a row each, the rest one
    :data:`OTHER_LEVEL` row, so each column's ``n`` adds up to the rows. Intervals:
    :func:`calibflow.intervals.ratio_interval` (exact Poisson, coverage measured in
    ``benchmarks/segment_coverage.py``); ``n_boot`` and ``seed`` are kept for callers and no longer used
    (a percentile bootstrap of the ratio had no coverage at a handful of positives).
    """
    import pandas as pd

    yy = np.asarray(y, dtype=np.float64)
    pb, pa = np.asarray(p_before, dtype=np.float64), np.asarray(p_after, dtype=np.float64)
    names, cols = segment_matrix(segments, yy.size)
    rows: list[dict[str, Any]] = []
    del n_boot, seed  # kept for callers: the intervals are exact now
    for name, col in zip(names, cols, strict=True):
        counts = pd.Series(col).value_counts(sort=True)
        per_value = []
        for value in counts.index:
            m = col == value
            per_value.append(_segment_row(name, str(value), yy[m], pb[m], pa[m], level))
        shown = [r for k, r in enumerate(per_value) if k < top or r["flagged"]]
        rest = [str(r["value"]) for k, r in enumerate(per_value) if not (k < top or r["flagged"])]
        if rest:
            m = np.isin(col, rest)
            label = f"{OTHER_LEVEL} x{len(rest)}"
            shown.append(_segment_row(name, label, yy[m], pb[m], pa[m], level))
            pooled = set(rest)
            inner = [r for r in per_value if str(r["value"]) in pooled]
            # its values were tested one by one before pooling (the pooled row's own interval is one more)
            shown[-1].update(tested=sum(r["ratio_ci"] is not None and not r["too_few"] for r in inner),
                             too_few_pooled=sum(bool(r["too_few"]) for r in inner))
        rows.extend(shown)
    return rows


def _segment_row(
    name: str,
    value: str,
    y: NDArray[np.float64],
    pb: NDArray[np.float64],
    pa: NDArray[np.float64],
    level: float,
) -> dict[str, Any]:
    pos = float(y.sum())
    ci_a = count_interval(y, pa, level)
    return {
        "column": name,
        "value": value,
        "n": int(y.size),
        "positives": int(pos),
        "ratio_uncalibrated": float(pb.sum() / pos) if pos else None,
        "ratio_uncalibrated_ci": count_interval(y, pb, level),
        "ratio": float(pa.sum() / pos) if pos else None,
        "ratio_ci": ci_a,
        "flagged": is_flagged(ci_a, pos),
        "too_few": not enough_evidence(pos),
    }


def flag_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per flagged segment, furthest off first (``|log(sum p / sum y)|``: 0.5 and 2 are as far
    off): ``country = BR: sum p / sum y 0.756 [0.70, 0.81] ...``."""
    flagged = [r for r in rows if r.get("flagged")]
    flagged.sort(key=lambda r: (-abs(np.log(max(float(r["ratio"]), 1e-300))), r["column"], r["value"]))
    return [
        f"{r['column']} = {r['value']}: sum p / sum y {r['ratio']:.3f} "
        f"[{r['ratio_ci'][0]:.3f}, {r['ratio_ci'][1]:.3f}] after calibration "
        f"({r['n']:,} rows, {r['positives']:,} positives)"
        for r in flagged
    ]


#: The worst segments drawn in the report are chosen among values with at least this many positives.
WORST_MIN_POSITIVES = 20


def worst_segments(
    rows: list[dict[str, Any]], k: int = 4, min_positives: int = WORST_MIN_POSITIVES
) -> list[dict[str, Any]]:
    """The ``k`` worst of :func:`segment_check`'s rows: flagged first, then by ``|sum p / sum y - 1|``;
    pooled rows (:data:`OTHER_LEVEL`) and values with under ``min_positives`` positives (their ratio is
    mostly noise) are left out."""
    cand = [r for r in rows if r.get("ratio") is not None and r.get("positives", 0) >= min_positives
            and not str(r.get("value", "")).startswith(OTHER_LEVEL)]
    cand.sort(key=lambda r: (not r.get("flagged"), -abs(float(r["ratio"]) - 1.0), r["column"], r["value"]))
    return cand[:k]


def segment_reliability(
    y: ArrayLike,
    p: ArrayLike,
    segments: Any,
    rows: list[dict[str, Any]],
    n_bins: int = 10,
    level: float = 0.95,
) -> list[dict[str, Any]]:
    """Reliability bins (equal mass, Jeffreys intervals) of each segment in ``rows`` (``column``, ``value``
    as :func:`segment_check` writes them), on the rows of that value: what the report draws for the worst
    segments."""
    from calibflow.intervals import jeffreys_interval
    from calibflow.metrics import reliability

    yy, pp = np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)
    names, cols = segment_matrix(segments, yy.size)
    out = []
    for r in rows:
        m = cols[names.index(r["column"])] == r["value"]
        rel = reliability(yy[m], pp[m], n_bins=min(n_bins, max(int(m.sum()) // 20, 1)), strategy="quantile")
        ok = rel.count > 0
        pos = np.round(rel.observed[ok] * rel.count[ok])
        lo, hi = jeffreys_interval(pos, rel.count[ok], level)
        cols_ok = (rel.count[ok], rel.mean_pred[ok], rel.observed[ok], lo, hi)
        keys = ("count", "mean_pred", "observed", "low", "high")
        bins = [{k: float(v) for k, v in zip(keys, vals, strict=True)} for vals in zip(*cols_ok, strict=True)]
        out.append({k: r[k] for k in ("column", "value", "n", "positives", "ratio", "ratio_ci", "flagged")}
                   | {"bins": bins})
    return out


def tested_intervals(rows: list[dict[str, Any]]) -> int:
    """How many ratio intervals were tested to find the flags: every row's own interval where the value
    has the evidence (:data:`MIN_POSITIVES`), plus the values a pooled row (:data:`OTHER_LEVEL`) holds,
    each tested on its own before it was pooled (``tested``)."""
    own = sum(int(r.get("ratio_ci") is not None and not _too_few(r)) for r in rows)
    return own + sum(int(r.get("tested") or 0) for r in rows)


def _pooled_row(r: dict[str, Any]) -> bool:
    return str(r.get("value", "")).startswith(OTHER_LEVEL)


def _too_few(r: dict[str, Any]) -> bool:
    # cards written before the rule have no ``too_few``: the positives decide
    return bool(r["too_few"]) if "too_few" in r else not enough_evidence(float(r.get("positives") or 0))


def too_few_values(rows: list[dict[str, Any]]) -> tuple[list[str], int]:
    """The values shown with too few positives to tell (``column = value``) and how many more a pooled row
    holds: what the card lists instead of flagging them."""
    shown = [f"{r['column']} = {r['value']}" for r in rows if not _pooled_row(r) and _too_few(r)]
    return shown, sum(int(r.get("too_few_pooled") or 0) for r in rows)


def too_few_line(rows: list[dict[str, Any]], limit: int = 12) -> str | None:
    """One line naming the values with too few positives (never flagged, never hidden), or None."""
    shown, pooled = too_few_values(rows)
    if not shown and not pooled:
        return None
    names = ", ".join(shown[:limit]) + (f" and {len(shown) - limit} more" if len(shown) > limit else "")
    more = f"{', and ' if shown else ''}{pooled} in the pooled row" if pooled else ""
    return (f"Too few positives to tell (under {MIN_POSITIVES}; not tested, not flagged): "
            f"{names}{more}.")


def chance_flags(rows: list[dict[str, Any]], level: float) -> float:
    """How many of the intervals tested a perfectly calibrated model would still flag, on average
    (``1 - level`` each). Counted over every value tested, not the rows shown: the shown rows are the
    largest values and the flagged ones, so counting them alone would understate what chance explains."""
    return (1.0 - level) * tested_intervals(rows)


def __getattr__(name: str):
    # From the calibrator registry (lazy: the calibrators import this module). SEGMENTED_METHODS: every
    # segmented method (``calibrate.segmented`` may name any); DEFAULT_SEGMENTED_METHODS: those fitted
    # unless it says otherwise (``multicalibration`` is out: its class's ``out_of_defaults`` says why).
    from calibflow import calibrators

    if name == "SEGMENTED_METHODS":
        return calibrators.segmented_methods()
    if name == "DEFAULT_SEGMENTED_METHODS":
        return calibrators.default_segmented_methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
