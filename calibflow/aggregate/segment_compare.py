"""The segmented calibrator against the global one on test rows that are never held: one streaming pass.

On the aggregate path the test split lives in the source (prepare streamed it to tables) or in a
predictions file too large to load. A per-segment calibrator's probabilities need each row's score and
segment values, which no bucket table keeps, so select could not compare it with the chosen global
calibrator. :func:`compare` makes ONE DuckDB pass over the test rows (:func:`stream_test_rows`: the split
expression prepare used, ``source_stream.split_parts``; or :func:`file_test_rows`), in Arrow batches, and
per row applies the global calibrator (a function of the score) and every segmented calibrator (score and
segment columns, as ``calibflow apply`` does). It keeps only sums:

- per segmented method, the moments (count, mean, sum of squared deviations) of the per-row log-loss
  difference against the global calibrator and against the uncalibrated scores, and of the Brier
  difference against the uncalibrated scores: ``selection.paired_from_moments`` turns them into the same
  CLT interval ``selection.paired_log_loss`` computes on rows (one formula, ``intervals.moments_interval``);
- every method's log-loss sum;
- per segmented method the fine probability table of its predictions (``kernel.accumulate``, the pass's
  own kernel), from which the card's ECE, Brier, ratio and reliability come as for any aggregate method;
- per value of each segment column: rows, positives, ``sum p`` uncalibrated and per method ``sum p``,
  ``sum p^2``, ``sum p y`` (the per-segment ratios and their large-sample intervals).

Above ``scale.compare_rows`` test rows the pass reads a seeded sample of about that many (:class:`RowSample`:
a hash of the row's position and the seed, computed in DuckDB, so only the sampled rows leave it).

Batches are merged with Chan et al.'s pairwise update of the moments (numerically stable, unlike sums of
squares). Memory: one batch plus the fine tables (5 MB per method) and the values seen. Deterministic:
DuckDB keeps the file order (``preserve_insertion_order``), so the same rows arrive in the same batches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from calibflow import intervals
from calibflow import sources as src
from calibflow.aggregate.segments import records_from_metrics
from calibflow.aggregate.source_stream import split_parts
from calibflow.aggregate.table import BATCH_ROWS, DEFAULT_GRID, BucketGrid
from calibflow.aggregate.tables import Part, _fine_frame
from calibflow.metrics import row_log_loss
from calibflow.segments import segment_matrix
from calibflow.sources import SourceSpec, quote_ident

#: How the per-segment ratio intervals of a pass are computed (stated on the card and in the docs).
RATIO_INTERVAL = (
    "exact Poisson on the positives (Garwood, scaled to sum p(1-p)), from the pass's per-value sums: "
    "the rows' own interval"
)


@dataclass
class Moments:
    """Count, mean and sum of squared deviations of values added batch by batch."""

    n: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, x: np.ndarray) -> None:
        """Merge a batch (Chan, Golub & LeVeque 1979: the batch's own two-pass moments, then the update)."""
        nb = float(x.size)
        if not nb:
            return
        mb = float(x.mean())
        m2b = float(((x - mb) ** 2).sum())
        tot = self.n + nb
        delta = mb - self.mean
        self.mean += delta * nb / tot
        self.m2 += m2b + delta * delta * self.n * nb / tot
        self.n = tot

    def astuple(self) -> tuple[float, float, float]:
        return self.n, self.mean, self.m2


@dataclass
class _Values:
    """Per value of one segment column, the sums of the pass (columns grow as new values arrive)."""

    index: dict[str, int] = field(default_factory=dict)
    sums: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def add(self, codes: np.ndarray, uniq: np.ndarray, cols: np.ndarray) -> None:
        """Add ``cols`` (rows x sums) of rows whose level is ``uniq[codes]``."""
        ids = np.array([self.index.setdefault(str(u), len(self.index)) for u in uniq], dtype=np.int64)
        if self.sums.shape[0] < len(self.index):
            grown = np.zeros((len(self.index), cols.shape[1]))
            grown[: self.sums.shape[0]] = self.sums if self.sums.size else 0.0
            self.sums = grown
        at = ids[codes]
        for j in range(cols.shape[1]):
            self.sums[:, j] += np.bincount(at, weights=cols[:, j], minlength=len(self.index))


@dataclass
class Comparison:
    """What :func:`compare` returns: see the module docstring."""

    n: int
    log_loss_uncalibrated: float
    log_loss_global: float
    log_loss: dict[str, float]
    vs_global: dict[str, Moments]
    vs_uncalibrated: dict[str, Moments]
    brier_vs_uncalibrated: dict[str, Moments]
    tables: dict[str, pd.DataFrame]
    values: dict[str, pd.DataFrame]
    #: The uncalibrated probabilities' fine table on the same rows (``compare(uncalibrated_table=True)``):
    #: a sampled pass's before/after metrics then come from the same rows.
    table_uncalibrated: pd.DataFrame | None = None


#: Low bits of the row hash the sample compares with its threshold (a fraction's resolution: 2^-32).
SAMPLE_BITS = 32
#: Mixed into the sample's seed so that the sample is not the split's own draw: the split keeps a row by
#: ``hash(hash(row) xor seed)``; with the same seed (both default to 0) the sample would take a slice of
#: the test split's hash range instead of a random part of it. (The golden-ratio constant: many bits set.)
SAMPLE_SALT = 0x9E3779B97F4A7C15


@dataclass(frozen=True)
class RowSample:
    """A seeded sample of about ``fraction`` of the rows: a row is kept when
    ``hash(hash(row) xor (seed xor SAMPLE_SALT)) mod 2^SAMPLE_BITS < threshold``, ``row`` its position.
    The same rows and seed give the same sample on any machine (DuckDB's hash is fixed)."""

    fraction: float
    seed: int

    @property
    def threshold(self) -> int:
        return round(min(max(self.fraction, 0.0), 1.0) * 2**SAMPLE_BITS)

    def condition(self, row: str) -> str:
        """SQL true on the sampled rows; ``row`` names the row-position column."""
        key = (int(self.seed) ^ SAMPLE_SALT) & (2**64 - 1)
        return (f"hash(xor(hash({row}), CAST({key} AS UBIGINT))) % {2**SAMPLE_BITS} "
                f"< {self.threshold}")

    def describe(self) -> str:
        return (f"rows kept when hash(hash(row) xor (seed xor {SAMPLE_SALT:#x})) mod 2^{SAMPLE_BITS} < "
                f"{self.threshold} (fraction {self.fraction:.6g}, seed {self.seed})")


def row_sample(compare_rows: int, test_rows: int, seed: int) -> RowSample | None:
    """The sample of about ``compare_rows`` of ``test_rows`` rows, or None (every row) when
    ``compare_rows`` is 0 or the rows are not more than it."""
    if compare_rows <= 0 or test_rows <= compare_rows:
        return None
    return RowSample(compare_rows / test_rows, int(seed))


def plausible_sample_size(n: int, total: int, sample: RowSample) -> bool:
    """Whether ``n`` sampled rows fit ``total`` rows at the sample's fraction (within 6 binomial standard
    deviations, plus one row): a changed test split shows as a count far outside it."""
    f = sample.threshold / 2**SAMPLE_BITS
    return abs(n - f * total) <= 6.0 * float(np.sqrt(total * f * (1.0 - f))) + 1.0


def stream_test_rows(spec: SourceSpec, seed: int, input_kind: str, sample: RowSample | None = None) -> Part:
    """The test rows of a source prepare streamed (its split expression, ``source_stream.split_parts``):
    ``_y`` (0/1), ``_s`` (the score the calibrators receive), ``_p`` (the uncalibrated probability) and
    the segment columns under their own names, in the source's order. ``sample``: only those of the
    sampled rows (``row``: the row's position in the source, the split's own ``_row``)."""
    return stream_split_rows(spec, seed, input_kind, "test", sample)


def stream_split_rows(spec: SourceSpec, seed: int, input_kind: str, split: str,
                      sample: RowSample | None = None, weight: bool = False) -> Part:
    """:func:`stream_test_rows` for any split; ``weight``: also ``_w`` (the declared weight on calib
    rows, 1 elsewhere and without one)."""
    parts, rec, w = split_parts(spec, seed, input_kind, 1, with_prob=True)
    code = rec["names"].index(split)
    segs = "".join(f", {quote_ident(c)}" for c in spec.segments)
    wcol = (", _w" if w else ", 1.0 AS _w") if weight else ""
    keep = f" AND {sample.condition('_row')}" if sample is not None else ""
    return Part(f"(SELECT _y, _s, _p{wcol}{segs} FROM {parts[0].sql} WHERE _sp = {code}{keep})",
                parts[0].params)


def fetch_rows(rows: Part, segments: list[str], threads: int | None = None) -> dict[str, Any]:
    """The rows of a part (``_y``, ``_s``, optional ``_w``, the segment columns) in memory, in the shape
    ``calibrate_segments.fit_segmented`` takes (``scores``, ``y``, ``weight``, ``segments``), each segment
    column read as ``calibflow apply`` reads it (:func:`_levels`). For a bounded sample of rows (a method that
    needs rows), not for a whole split."""
    con = src.connect(threads)
    try:
        t = con.sql(f"SELECT * FROM {rows.sql}", params=rows.params).fetch_arrow_table()
    finally:
        con.close()
    out: dict[str, Any] = {
        "scores": t.column("_s").to_numpy().astype(np.float64),
        "y": t.column("_y").to_numpy().astype(np.float64),
        "segments": {},
    }
    if "_w" in t.column_names:
        out["weight"] = t.column("_w").to_numpy().astype(np.float64)
    for c in segments:
        codes, uniq = _levels(t.column(c))
        out["segments"][c] = uniq[codes]
    return out


def file_test_rows(path: str, label: str, score: str, prob: str, segments: Mapping[str, str],
                   where: str = "", where_params: Mapping[str, Any] | None = None,
                   sample: RowSample | None = None, weight: str | None = None) -> Part:
    """Rows of a Parquet file as :func:`stream_test_rows` gives them; ``segments``: name -> file column.
    ``sample``: only the sampled rows (``row``: the row's position in the file, ``file_row_number``).
    ``weight``: also ``_w``, that column as a double."""
    segs = "".join(f", {quote_ident(c)} AS {quote_ident(n)}" for n, c in segments.items())
    wcol = f", CAST({quote_ident(weight)} AS DOUBLE) AS _w" if weight else ""
    conds = [c for c in (where, sample.condition("file_row_number") if sample is not None else "") if c]
    cond = f" WHERE {' AND '.join(f'({c})' for c in conds)}" if conds else ""
    reader = "read_parquet($path, file_row_number = true)" if sample is not None else "read_parquet($path)"
    sql = (f"(SELECT CAST({quote_ident(label)} AS DOUBLE) AS _y, {quote_ident(score)} AS _s, "
           f"{quote_ident(prob)} AS _p{wcol}{segs} FROM {reader}{cond})")
    return Part(sql, {"path": str(path), **dict(where_params or {})})


def _levels(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A batch's segment column as (code per row, level of each code): ``segments.as_levels`` read on
    the column's distinct values only (Arrow's dictionary), the null level last. The same levels as
    ``calibflow apply`` reads from the same batch (how a number reads depends on the set of values, which
    the dictionary holds), at the cost of a dictionary encode instead of a text conversion per row."""
    enc = pc.dictionary_encode(column)
    if isinstance(enc, pa.ChunkedArray):
        enc = enc.combine_chunks()
    values = enc.dictionary.to_pandas().to_numpy(dtype=object)
    uniq = segment_matrix({"v": np.r_[values, np.array([None], dtype=object)]}, values.size + 1)[1][0]
    codes = pc.fill_null(enc.indices, values.size).to_numpy(zero_copy_only=False).astype(np.int64)
    return codes, uniq


def _probability_table(acc: np.ndarray, y: np.ndarray, p: np.ndarray, grid: BucketGrid) -> None:
    """Add the batch's probabilities ``p`` to the fine table ``acc`` (the pass kernel's row arithmetic)."""
    from calibflow.aggregate import kernel  # numba: imported where a pass runs, not with the module

    a, b = np.empty_like(p), np.empty_like(p)
    kernel.row_logs(p, False, p, a, b)
    bad = np.zeros(2, np.int64)
    kernel.accumulate(np.zeros(p.size, np.int64), y, np.empty(0), p, p, a, b, False, grid.z_max,
                      grid.n_buckets, acc, bad)
    if bad.any():
        raise ValueError(f"{int(bad.sum())} test row(s) with a label outside {{0, 1}} or no probability")


def compare(  # noqa: PLR0913
    rows: Part,
    global_cal: Any | None,
    segmented: Mapping[str, Any],
    segments: Sequence[str],
    grid: BucketGrid = DEFAULT_GRID,
    batch_rows: int = BATCH_ROWS,
    threads: int | None = None,
    uncalibrated_table: bool = False,
) -> Comparison:
    """One pass over ``rows`` (see :func:`stream_test_rows`): each segmented calibrator of ``segmented``
    (method -> fitted calibrator) against ``global_cal`` (None: the uncalibrated ``_p``, the kept
    scores), on the segment columns ``segments``. ``uncalibrated_table``: also the fine table of
    ``_p`` on these rows (``Comparison.table_uncalibrated``)."""
    from calibflow.aggregate import kernel

    methods = list(segmented)
    d_glob = {m: Moments() for m in methods}
    d_unc = {m: Moments() for m in methods}
    d_brier = {m: Moments() for m in methods}
    ll_sum = dict.fromkeys(methods, 0.0)
    ll_unc = ll_glob = 0.0
    accs = {m: kernel.new_accumulator(grid.n_buckets * 2)[0] for m in methods}
    acc_unc = kernel.new_accumulator(grid.n_buckets * 2)[0] if uncalibrated_table else None
    values = {c: _Values() for c in segments}
    n = 0
    con = src.connect(threads)
    try:
        reader = con.sql(f"SELECT * FROM {rows.sql}", params=rows.params).to_arrow_reader(int(batch_rows))
        for batch in reader:
            y = batch.column("_y").to_numpy(zero_copy_only=False).astype(np.float64)
            s = batch.column("_s").to_numpy(zero_copy_only=False).astype(np.float64)
            p_unc = batch.column("_p").to_numpy(zero_copy_only=False).astype(np.float64)
            coded = {c: _levels(batch.column(c)) for c in segments}
            segs = {c: uniq[codes] for c, (codes, uniq) in coded.items()}
            p_glob = p_unc if global_cal is None else np.asarray(global_cal.predict(s), np.float64)
            l_unc, l_glob = row_log_loss(y, p_unc), row_log_loss(y, p_glob)
            b_unc = (p_unc - y) ** 2
            if acc_unc is not None:
                _probability_table(acc_unc, y, p_unc, grid)
            per_value = [np.ones_like(y), y, p_unc, p_unc * p_unc]
            for m in methods:
                p = np.asarray(segmented[m].predict(s, segments=segs), np.float64)
                ll = row_log_loss(y, p)
                d_glob[m].add(ll - l_glob)
                d_unc[m].add(ll - l_unc)
                d_brier[m].add((p - y) ** 2 - b_unc)
                ll_sum[m] += float(ll.sum())
                _probability_table(accs[m], y, p, grid)
                per_value += [p, p * p, p * y]
            stacked = np.column_stack(per_value)
            for c, (codes, uniq) in coded.items():
                values[c].add(codes, uniq, stacked)
            ll_unc += float(l_unc.sum())
            ll_glob += float(l_glob.sum())
            n += y.size
    finally:
        con.close()
    if not n:
        raise ValueError("no test rows to score")
    return Comparison(
        n=n,
        log_loss_uncalibrated=ll_unc / n,
        log_loss_global=ll_glob / n,
        log_loss={m: v / n for m, v in ll_sum.items()},
        vs_global=d_glob,
        vs_uncalibrated=d_unc,
        brier_vs_uncalibrated=d_brier,
        tables={m: _fine_frame(a) for m, a in accs.items()},
        values={c: _values_frame(v, methods) for c, v in values.items()},
        table_uncalibrated=None if acc_unc is None else _fine_frame(acc_unc),
    )


def _values_frame(v: _Values, methods: list[str]) -> pd.DataFrame:
    """One row per value (sorted): ``n``, ``positives``, ``sum_p_unc``, ``sum_p2_unc`` and per method
    ``sum_p:<m>``, ``sum_p2:<m>``, ``sum_py:<m>``."""
    per_method = [f"{k}:{m}" for m in methods for k in ("sum_p", "sum_p2", "sum_py")]
    cols = ["n", "positives", "sum_p_unc", "sum_p2_unc", *per_method]
    frame = pd.DataFrame(v.sums, columns=cols)
    frame.insert(0, "value", list(v.index))
    return frame.sort_values("value", kind="stable").reset_index(drop=True)


def ratio_interval(n: np.ndarray, sy: np.ndarray, sp: np.ndarray, sp2: np.ndarray, spy: np.ndarray,
                   level: float) -> tuple[np.ndarray, np.ndarray]:
    """Interval of ``sum p / sum y`` per value from the pass's sums: the row path's
    (:func:`calibflow.intervals.ratio_interval`, exact Poisson on the positives with the variance
    ``sum p (1 - p) = sum p - sum p^2``). NaN where there is no positive (no ratio); ``n`` and ``spy`` are
    kept for callers (the delta method used them and under-covered at a handful of positives)."""
    del n, spy
    lo, hi = intervals.ratio_interval(sy, sp, np.clip(sp - sp2, 0.0, None), level)
    ok = np.asarray(sy) > 0
    return np.where(ok, lo, np.nan), np.where(ok, hi, np.nan)


def segment_ratio_records(
    res: Comparison, method: str, level: float, top: int | None
) -> list[dict[str, Any]]:
    """The card's per-segment rows (``aggregate.segments.segment_records``' shape and pooling) for
    ``method``'s probabilities, from the pass's per-value sums; intervals: :func:`ratio_interval`."""
    out: list[dict[str, Any]] = []
    for col, v in res.values.items():
        n, sy = v["n"].to_numpy(), v["positives"].to_numpy()
        sp = v[f"sum_p:{method}"].to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            mu = pd.DataFrame({"value": v["value"], "n": n, "positives": sy, "sum_p": v["sum_p_unc"],
                               "calibration_ratio": np.where(sy > 0, v["sum_p_unc"] / sy, np.nan)})
            mc = mu.assign(sum_p=sp, calibration_ratio=np.where(sy > 0, sp / sy, np.nan))
        # before calibration too (the card's "before" interval, as the row path's had it)
        lo_u, hi_u = ratio_interval(n, sy, v["sum_p_unc"].to_numpy(), v["sum_p2_unc"].to_numpy(), sy, level)
        mu = mu.assign(calibration_ratio_low=lo_u, calibration_ratio_high=hi_u)
        lo, hi = ratio_interval(n, sy, sp, v[f"sum_p2:{method}"].to_numpy(), v[f"sum_py:{method}"].to_numpy(),
                                level)
        mc = mc.assign(calibration_ratio_low=lo, calibration_ratio_high=hi)
        out += records_from_metrics(mu, mc, col, top)
    return out
