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
:func:`paired_log_loss` is the paired test that decides between a global and a segmented calibrator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from calibflow.metrics import row_log_loss

#: The level a null segment value gets (its own level: rows with no country are a segment too).
NULL_LEVEL = "(null)"
#: The label of the pooled row of a column's values past the ``top`` largest.
OTHER_LEVEL = "(other values)"


def as_levels(values: ArrayLike) -> NDArray[np.object_]:
    """Segment values as text levels (see the module docstring); nulls become :data:`NULL_LEVEL`."""
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


def _ci(values: NDArray[np.float64], level: float) -> list[float] | None:
    v = values[np.isfinite(values)]
    if not v.size:
        return None
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(v, [tail, 1.0 - tail])
    return [float(lo), float(hi)]


def _ratio_boot(
    y: NDArray[np.float64], ps: list[NDArray[np.float64]], n_boot: int, rng: np.random.Generator
) -> list[NDArray[np.float64]]:
    """Bootstrap ``sum p / sum y`` of each of ``ps`` on the same resamples of the rows."""
    n = y.size
    out = [np.empty(n_boot) for _ in ps]
    for b in range(n_boot):
        c = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        sy = c @ y
        for k, p in enumerate(ps):
            out[k][b] = c @ p / sy if sy > 0 else np.nan
    return out


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
    """Per segment value: ``n``, ``positives``, ``sum p / sum y`` before and after, intervals, ``flagged``.

    ``flagged`` is True where the interval of the ratio after calibration excludes 1 (the calibrated
    probabilities are off on that segment beyond sampling noise). Per column, the ``top`` largest values and
    every flagged value get a row each, the rest one :data:`OTHER_LEVEL` row, so each column's ``n`` adds up
    to the rows. Intervals: percentile bootstrap over the segment's rows (``n_boot`` resamples, seeded per
    column and value).
    """
    yy = np.asarray(y, dtype=np.float64)
    pb, pa = np.asarray(p_before, dtype=np.float64), np.asarray(p_after, dtype=np.float64)
    names, cols = segment_matrix(segments, yy.size)
    rows: list[dict[str, Any]] = []
    for j, (name, col) in enumerate(zip(names, cols, strict=True)):
        counts = pd.Series(col).value_counts(sort=True)
        per_value = []
        for i, value in enumerate(counts.index):
            m = col == value
            rng = np.random.default_rng([seed, j, i])
            per_value.append(_segment_row(name, str(value), yy[m], pb[m], pa[m], n_boot, rng, level))
        shown = [r for k, r in enumerate(per_value) if k < top or r["flagged"]]
        rest = [str(r["value"]) for k, r in enumerate(per_value) if not (k < top or r["flagged"])]
        if rest:
            m = np.isin(col, rest)
            rng = np.random.default_rng([seed, j, len(per_value)])
            label = f"{OTHER_LEVEL} x{len(rest)}"
            shown.append(_segment_row(name, label, yy[m], pb[m], pa[m], n_boot, rng, level))
            pooled = set(rest)
            tested = [r["ratio_ci"] is not None for r in per_value if str(r["value"]) in pooled]
            shown[-1]["tested"] = sum(tested)
        rows.extend(shown)
    return rows


def _segment_row(
    name: str,
    value: str,
    y: NDArray[np.float64],
    pb: NDArray[np.float64],
    pa: NDArray[np.float64],
    n_boot: int,
    rng: np.random.Generator,
    level: float,
) -> dict[str, Any]:
    pos = float(y.sum())
    boot_b, boot_a = _ratio_boot(y, [pb, pa], n_boot, rng) if n_boot > 0 and pos > 0 else ([], [])
    ci_a = _ci(np.asarray(boot_a), level) if pos > 0 else None
    return {
        "column": name,
        "value": value,
        "n": int(y.size),
        "positives": int(pos),
        "ratio_uncalibrated": float(pb.sum() / pos) if pos else None,
        "ratio_uncalibrated_ci": _ci(np.asarray(boot_b), level) if pos > 0 else None,
        "ratio": float(pa.sum() / pos) if pos else None,
        "ratio_ci": ci_a,
        "flagged": bool(ci_a is not None and (ci_a[0] > 1.0 or ci_a[1] < 1.0)),
    }


def flag_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per flagged segment, worst first: ``country = BR: sum p / sum y 0.756 [0.70, 0.81] ...``."""
    flagged = [r for r in rows if r.get("flagged")]
    flagged.sort(key=lambda r: -abs(float(r["ratio"]) - 1.0))
    return [
        f"{r['column']} = {r['value']}: sum p / sum y {r['ratio']:.3f} "
        f"[{r['ratio_ci'][0]:.3f}, {r['ratio_ci'][1]:.3f}] after calibration "
        f"({r['n']:,} rows, {r['positives']:,} positives)"
        for r in flagged
    ]


def worst_segments(rows: list[dict[str, Any]], k: int = 4, min_positives: int = 20) -> list[dict[str, Any]]:
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
    """How many ratio intervals were tested to find the flags: every row's own interval, plus the values a
    pooled row (:data:`OTHER_LEVEL`) holds, each tested on its own before it was pooled (``tested``)."""
    return sum(int(r.get("ratio_ci") is not None) + int(r.get("tested") or 0) for r in rows)


def chance_flags(rows: list[dict[str, Any]], level: float) -> float:
    """How many of the intervals tested a perfectly calibrated model would still flag, on average
    (``1 - level`` each). Counted over every value tested, not the rows shown: the shown rows are the
    largest values and the flagged ones, so counting them alone would understate what chance explains."""
    return (1.0 - level) * tested_intervals(rows)


def _nll(y: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.float64]:
    return row_log_loss(y, p)


def paired_log_loss(
    y: ArrayLike, p_a: ArrayLike, p_b: ArrayLike, *, n_boot: int = 200, seed: int = 0, level: float = 0.95
) -> dict[str, Any]:
    """Test log loss of ``p_b`` minus ``p_a`` with a paired percentile-bootstrap interval over rows.

    ``better``: the interval lies below 0 (``p_b`` has the lower log loss beyond resampling noise).
    """
    yy = np.asarray(y, dtype=np.float64)
    d = _nll(yy, np.asarray(p_b, dtype=np.float64)) - _nll(yy, np.asarray(p_a, dtype=np.float64))
    rng = np.random.default_rng(seed)
    n = yy.size
    boot = np.array([d[rng.integers(0, n, size=n)].mean() for _ in range(n_boot)]) if n_boot else np.array([])
    ci = _ci(boot, level)
    return {
        "log_loss_a": float(_nll(yy, np.asarray(p_a, dtype=np.float64)).mean()),
        "log_loss_b": float(_nll(yy, np.asarray(p_b, dtype=np.float64)).mean()),
        "delta": float(d.mean()),
        "delta_ci": ci,
        "better": bool(ci is not None and ci[1] < 0),
    }


def __getattr__(name: str):
    # SEGMENTED_METHODS: the segmented methods the pipeline fits for a source that declares segments
    # (``calibrate.segmented``), from the calibrator registry (lazy: the calibrators import this module)
    if name == "SEGMENTED_METHODS":
        from calibflow.calibrators import segmented_methods

        return segmented_methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fit_segmented(
    method: str,
    fit: dict[str, Any],
    test: dict[str, Any],
    input_kind: str = "logit",
    options: dict[str, Any] | None = None,
) -> tuple[str, NDArray[np.float64], dict[str, int]]:
    """Fit a segmented calibrator on ``fit``, predict ``test``: its JSON, test probabilities, unseen counts.

    ``fit`` and ``test`` hold ``scores``, ``segments`` (a dict of columns) and, for ``fit``, ``y`` and an
    optional ``weight``. The JSON is reloaded and must reproduce the test probabilities exactly, so the
    artifact written from it is known usable.
    """
    from calibflow.calibrators import from_json, get_class, make, segmented_methods

    if "segments" not in get_class(method).needs:
        known = ", ".join(segmented_methods())
        raise ValueError(f"{method!r} is not a segmented calibrator (those: {known})")
    cal = make(method, **{"input": input_kind, **(options or {})})
    cal.fit(fit["scores"], fit["y"], sample_weight=fit.get("weight"), segments=fit["segments"])
    prob = cal.predict(test["scores"], segments=test["segments"])
    text = cal.to_json()
    again = from_json(text).predict(test["scores"], segments=test["segments"])
    if not np.array_equal(prob, again):
        raise ValueError(f"{method}: the saved JSON does not reproduce its predictions")
    return text, prob, cal.unseen_counts(test["segments"], len(prob))
