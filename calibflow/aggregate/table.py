"""The bucket table, built by DuckDB in one streaming GROUP BY over Parquet files.

Buckets. One uniform grid on the logit, ``z`` clipped to ``[-z_max, z_max]`` and cut into ``n_buckets``
cells of width ``dz = 2 z_max / n_buckets``. Since ``dp/dz = p (1 - p) <= 1/4``, a logit cell is at
most ``dz / 4`` wide in probability, so the one grid is fine in both scales (logistic family on the
logit, binning methods on the probability): the default ``dz = 32 / 65536 = 4.9e-4`` logit is
<= 1.2e-4 in probability.

Rows per group. Each (segments..., bucket, label) group keeps its summed frequency weight ``n``,
``sum w z``, ``sum w q`` (q the probability), ``sum w ll`` (the exact log loss of each row, as
``calibflow.metrics.log_loss`` with eps 1e-15) and ``sum w q^2`` (Brier exactly), and ``b0..b{R-1}``:
``sum w k_r`` with ``k_r ~ Poisson(1)`` drawn per row and per replicate (the Poisson bootstrap of
Hanley & MacGibbon / Chamandy et al. 2012: no resampled copy of the data, one pass).

Poisson draws. A row's key is ``(file index, row number in the file)``; a fixed integer hash (squaring
modulo the prime 2^31 - 1, all products < 2^62 so BIGINT arithmetic never overflows) maps (key, seed,
r) to a uniform integer, turned into a Poisson(1) count by the inverse CDF (table below, truncated at
9: P(K > 9) = 1.1e-7). The same SQL runs per partition in the Dask engine, so both engines draw the
same weights for the same row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import duckdb
import pandas as pd

P_MOD = 2_147_483_647  # 2^31 - 1
_POISSON_MAX = 9
_KINDS = ("probability", "logit", "score")


@dataclass(frozen=True)
class BucketGrid:
    """The logit grid: ``n_buckets`` cells on ``[-z_max, z_max]`` (rows beyond go to the end cells)."""

    n_buckets: int = 65_536
    z_max: float = 16.0

    def __post_init__(self) -> None:
        if not (isinstance(self.n_buckets, int) and self.n_buckets >= 2):
            raise ValueError(f"scale.buckets must be an integer >= 2, got {self.n_buckets!r}")
        if not (self.z_max > 0 and math.isfinite(self.z_max)):
            raise ValueError(f"scale.z_max must be a finite number > 0, got {self.z_max!r}")

    @property
    def width(self) -> float:
        return 2.0 * self.z_max / self.n_buckets


DEFAULT_GRID = BucketGrid()


def _poisson_thresholds() -> list[int]:
    """Integer thresholds T_k = floor(P(K <= k) P_MOD) of Poisson(1), k = 0.._POISSON_MAX - 1."""
    cdf, term, out = 0.0, math.exp(-1.0), []
    for k in range(_POISSON_MAX):
        cdf += term
        term /= k + 1
        out.append(int(cdf * P_MOD))
    return out


def _poisson_expr(r: int, seed: int) -> str:
    """SQL for replicate r's Poisson(1) count of the row whose mixed key is ``h``."""
    m = 48_271 + 7_919 * r  # a distinct multiplier per replicate (all < 2^31)
    c = (seed * 69_069 + 1_013_904_223 * (r + 1)) % P_MOD
    x = f"(((h * {m} + {c}) % {P_MOD}) * ((h * {m} + {c}) % {P_MOD}) % {P_MOD})"
    cases = " ".join(f"WHEN {x} < {t} THEN {k}" for k, t in enumerate(_poisson_thresholds()))
    return f"(CASE {cases} ELSE {_POISSON_MAX} END)"


def _z_q(kind: str) -> tuple[str, str]:
    """SQL for the logit ``z`` and the probability ``q`` of the double ``s`` (as calibrators convert)."""
    if kind == "probability":
        pc = "greatest(least(s, 1 - 1e-12), 1e-12)"
        return f"(ln({pc}) - ln(1 - {pc}))", "s"
    if kind in ("logit", "score"):
        return "s", "(1 / (1 + exp(-s)))"
    raise ValueError(f"score_kind must be one of {_KINDS}, got {kind!r}")


def aggregate_sql(
    source: str,
    score: str,
    label: str,
    kind: str = "probability",
    segments: Sequence[str] = (),
    weight: str | None = None,
    grid: BucketGrid = DEFAULT_GRID,
    replicates: int = 0,
    seed: int = 0,
    key: str = "k",
    distinct: bool = False,
) -> str:
    """The one GROUP BY of the pass, over ``source`` (a FROM item exposing the columns and ``key``).

    ``key`` is a non-negative BIGINT unique per row (file index and row number), used only for the
    Poisson draws. ``distinct``: one group per distinct score instead of per logit cell (``bucket`` is
    then the score's rank among the distinct scores), so step maps fitted on the table are the row fit's.
    """
    z, q = _z_q(kind)
    seg = "".join(f'"{c}" AS seg_{i}, ' for i, c in enumerate(segments))
    seg_keys = "".join(f"seg_{i}, " for i in range(len(segments)))
    w = f'CAST("{weight}" AS DOUBLE)' if weight else "1.0"
    qc = "greatest(least(q, 1 - 1e-15), 1e-15)"
    boots = "".join(f", sum(w * {_poisson_expr(r, seed)}) AS b{r}" for r in range(replicates))
    mix = f"((({key} % {P_MOD}) * 48271 + {seed % P_MOD}) % {P_MOD})"
    if distinct:
        bucket = "s"
    else:
        bucket = (
            f"CAST(least(greatest(floor((least(greatest(z, -{grid.z_max}), {grid.z_max}) + {grid.z_max})"
            f" * {grid.n_buckets / (2 * grid.z_max)!r}), 0), {grid.n_buckets - 1}) AS INTEGER)"
        )
    sql = f"""
WITH r0 AS (
  SELECT {seg}CAST("{score}" AS DOUBLE) AS s, CAST("{label}" AS INTEGER) AS y, {w} AS w,
         ({mix} * {mix} + 12345) % {P_MOD} AS h
  FROM {source}
), r1 AS (SELECT *, {z} AS z FROM r0), r2 AS (SELECT *, {q} AS q FROM r1)
SELECT {seg_keys}
  {bucket} AS bucket,
  y AS label, sum(w) AS n, sum(w * z) AS sum_z, sum(w * q) AS sum_q,
  sum(w * CASE WHEN y = 1 THEN -ln({qc}) ELSE -ln(1 - {qc}) END) AS sum_ll, sum(w * q * q) AS sum_q2{boots}
FROM r2 GROUP BY ALL ORDER BY ALL"""
    if not distinct:
        return sql
    # The score's rank among the distinct scores (0-based) replaces the score as the integer bucket; the
    # score itself is kept, so fits see the rows' own values (a group mean can differ in the last bit).
    rank = "CAST(dense_rank() OVER (ORDER BY bucket) - 1 AS INTEGER)"
    return f"""
SELECT * REPLACE ({rank} AS bucket), bucket AS {distinct_column(kind)}
FROM ({sql}) ORDER BY ALL"""


def distinct_column(kind: str) -> str:
    """The column of a distinct-score table holding each group's score itself, in the source's ``kind``."""
    return f"score_{kind}"


def distinct_scores_sql(source: str, score: str) -> str:
    """HyperLogLog estimate of the number of distinct scores (constant memory, a few % error)."""
    return f'SELECT approx_count_distinct(CAST("{score}" AS DOUBLE)) FROM {source}'


def expand(paths: str | Sequence[str]) -> list[str]:
    """Parquet files of a path, folder or glob (sorted: the file index is part of each row's key).

    Each path is resolved by :func:`calibflow.sources.files`, the one resolver user sources use; the
    aggregate engines read Parquet only, so a CSV source is refused here with the fix.
    """
    from calibflow.sources import files

    out: list[str] = []
    for p in [paths] if isinstance(paths, str) else list(paths):
        try:
            out += files(str(p))
        except FileNotFoundError as exc:
            raise ValueError(f"no Parquet files at {p!r} ({exc}); give a file, a folder or a glob") from None
    csv = [f for f in out if not f.lower().endswith((".parquet", ".pq", ".parq"))]
    if csv:
        raise ValueError(f"{csv[0]}: the aggregate path reads Parquet only; convert the source to Parquet")
    return out


def aggregate_duckdb(
    paths: str | Sequence[str],
    score: str,
    label: str,
    kind: str = "probability",
    segments: Sequence[str] = (),
    weight: str | None = None,
    grid: BucketGrid = DEFAULT_GRID,
    replicates: int = 0,
    seed: int = 0,
    con: duckdb.DuckDBPyConnection | None = None,
    distinct_max: int = 0,
) -> pd.DataFrame:
    """The bucket table of Parquet ``paths`` in one DuckDB pass (bounded memory: one hash table).

    ``distinct_max`` > 0: when the source holds at most that many distinct scores (estimated first), one
    group per distinct score (``aggregate_sql(distinct=True)``); DuckDB engine only.
    """
    files = expand(paths)
    con = con or duckdb.connect()
    # The file index comes from the (sorted) list of paths, so it matches the Dask engine's partition index.
    src = (
        "(SELECT *, (list_position($files, filename) - 1) * CAST(4294967296 AS BIGINT) + file_row_number AS k"
        " FROM read_parquet($files, filename = true, file_row_number = true))"
    )
    distinct = bool(distinct_max) and (
        con.execute(distinct_scores_sql(src, score), {"files": files}).fetchone()[0] <= distinct_max
    )
    sql = aggregate_sql(src, score, label, kind, segments, weight, grid, replicates, seed, distinct=distinct)
    return con.execute(sql, {"files": files}).df()
