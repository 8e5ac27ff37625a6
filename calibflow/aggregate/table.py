"""The bucket table of a score source, built in one streaming pass.

Buckets. One uniform grid on the logit, ``z`` clipped to ``[-z_max, z_max]`` and cut into ``n_buckets``
cells of width ``dz = 2 z_max / n_buckets``. Since ``dp/dz = p (1 - p) <= 1/4``, a logit cell is at
most ``dz / 4`` wide in probability, so the one grid is fine in both scales (logistic family on the
logit, binning methods on the probability): the default ``dz = 32 / 65536 = 4.9e-4`` logit is
<= 1.2e-4 in probability.

Rows per group. Each (segments..., bucket, label) group keeps its summed frequency weight ``n``,
``sum w z``, ``sum w q`` (q the probability), ``sum w ll`` (the exact log loss of each row, as
``calibflow.metrics.log_loss`` with eps 1e-15) and ``sum w q^2`` (Brier exactly), and ``b0..b{R-1}``,
the Poisson-bootstrap replicate counts (:func:`add_replicates`).

The pieces every engine shares. The tables are built by ``tables.aggregate_files`` / ``aggregate_tables``
(Parquet parts on threads or Dask tasks) and ``source_stream`` (a user source): DuckDB projects each row and a
compiled kernel adds it into flat accumulators. This module holds what they share: the row expressions and
their one DuckDB ``GROUP BY`` (:func:`aggregate_sql`, the engine for one group per distinct score and the SQL
reference the tests compare against), the replicate draws (:func:`add_replicates`), the distinct-score
decision, the path expansion and the refusals of invalid rows. The first builder (a fine table per segment
value, by this GROUP BY or a per-row kernel, and its Dask form) is the tests' control,
``tests/helpers/table_reference.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import duckdb
import numpy as np
import pandas as pd

from calibflow.aggregate.grid import DEFAULT_GRID, BucketGrid
from calibflow.aggregate.options import KINDS as _KINDS
from calibflow.metrics import LOG_LOSS_CLIP
from calibflow.sources import files, quote_ident, require_columns

BATCH_ROWS = 1 << 20


def clip_sql(q: str) -> str:
    """SQL for ``metrics.clip_probability`` of the expression ``q`` (the one log-loss clip)."""
    return f"greatest(least({q}, 1 - {LOG_LOSS_CLIP!r}), {LOG_LOSS_CLIP!r})"


def _z_q_ll(kind: str) -> tuple[str, str, str]:
    """SQL for the logit ``z``, the probability ``q`` and the log loss ``ll`` of the double score ``s``
    with label ``y`` (as the calibrators convert and ``calibflow.metrics.log_loss`` clips: 1e-15)."""
    qc = clip_sql("q")
    exact = f"CASE WHEN y = 1 THEN -ln({qc}) ELSE -ln(1 - {qc}) END"
    if kind == "probability":
        # Inside [1e-12, 1 - 1e-12] neither clip acts, so the log loss reuses the logit's two logs.
        inner = "CASE WHEN y = 1 THEN -lp ELSE -l1p END"
        return "(lp - l1p)", "s", f"CASE WHEN s BETWEEN 1e-12 AND 1 - 1e-12 THEN {inner} ELSE {exact} END"
    if kind in ("logit", "score"):
        return "s", "(1 / (1 + exp(-s)))", exact
    raise ValueError(f"score_kind must be one of {_KINDS}, got {kind!r}")


def _bucket_sql(grid: BucketGrid) -> str:
    """The logit cell of ``z`` (rows beyond ``z_max`` go to the end cells)."""
    return (
        f"CAST(least(greatest(floor((least(greatest(z, -{grid.z_max}), {grid.z_max}) + {grid.z_max})"
        f" * {grid.n_buckets / (2 * grid.z_max)!r}), 0), {grid.n_buckets - 1}) AS INTEGER)"
    )


def _row_sql(
    source: str,
    score: str,
    label: str,
    kind: str,
    segments: Sequence[str],
    weight: str | None,
    grid: BucketGrid,
    distinct: bool = False,
) -> str:
    """A CTE ``rows``: per row ``seg_i``, ``w``, the logit ``z``, probability ``q``, exact log loss ``ll``,
    ``bucket`` (the logit cell, or the score itself when ``distinct``), ``label`` and ``bad`` (0: valid,
    1: a label outside {0, 1}, 2: a score that is missing, not finite or, for probabilities, outside
    [0, 1]). The GROUP BY reads it; the kernels' projections (``tables._projection``) compute the same
    expressions split between SQL and ``kernel``, and the tests require both to give one table."""
    z, q, ll = _z_q_ll(kind)
    seg = "".join(f"{quote_ident(c)} AS seg_{i}, " for i, c in enumerate(segments))
    w = f"CAST({quote_ident(weight)} AS DOUBLE)" if weight else "CAST(1 AS DOUBLE)"
    # isfinite() also catches NaN; a NULL makes the test NULL, hence the coalesce
    invalid = "NOT isfinite(s)" + (" OR s < 0 OR s > 1" if kind == "probability" else "")
    pc = "greatest(least(s, 1 - 1e-12), 1e-12)"
    logs = f", ln({pc}) AS lp, ln(1 - {pc}) AS l1p" if kind == "probability" else ""
    bucket = "s" if distinct else _bucket_sql(grid)
    return f"""
WITH r0 AS (
  SELECT {seg}CAST({quote_ident(score)} AS DOUBLE) AS s, CAST({quote_ident(label)} AS DOUBLE) AS y,
    {w} AS w{logs}
  FROM {source}
), r1 AS (
  SELECT *, {z} AS z, {q} AS q,
    CASE WHEN coalesce(y NOT IN (0, 1), true) THEN 1 WHEN coalesce({invalid}, true) THEN 2 ELSE 0 END AS bad
  FROM r0
), rows AS (
  SELECT *, {ll} AS ll,
    CASE WHEN bad = 0 THEN {bucket} ELSE 0 END AS bucket,
    CASE WHEN bad = 0 THEN CAST(y AS INTEGER) ELSE -bad END AS label
  FROM r1
)"""


def aggregate_sql(
    source: str,
    score: str,
    label: str,
    kind: str = "probability",
    segments: Sequence[str] = (),
    weight: str | None = None,
    grid: BucketGrid = DEFAULT_GRID,
    distinct: bool = False,
) -> str:
    """The table as one DuckDB GROUP BY over ``source`` (a FROM item exposing the columns), no replicates.

    Invalid rows form groups of their own (``bad`` > 0, ``rows`` their row count); :func:`_sql_pass`
    refuses them. ``distinct``: one group per distinct score instead of per logit cell (``bucket`` is then
    the score's rank among the distinct scores), so step maps fitted on the table are the row fit's.
    """
    seg_keys = "".join(f"seg_{i}, " for i in range(len(segments)))
    sql = f"""{_row_sql(source, score, label, kind, segments, weight, grid, distinct)}
SELECT {seg_keys}bucket, label, bad, count(*) AS rows, sum(w) AS n, sum(w * z) AS sum_z, sum(w * q) AS sum_q,
  sum(w * ll) AS sum_ll, sum(w * q * q) AS sum_q2
FROM rows GROUP BY ALL ORDER BY ALL"""
    if not distinct:
        return sql
    # The score's rank among the distinct scores (0-based) replaces the score as the integer bucket; the
    # score itself is kept, so fits see the rows' own values (a group mean can differ in the last bit).
    rank = "CAST(dense_rank() OVER (PARTITION BY bad ORDER BY bucket) - 1 AS INTEGER)"
    return f"""
SELECT * REPLACE ({rank} AS bucket), bucket AS {distinct_column(kind)}
FROM ({sql}) ORDER BY ALL"""


#: Groups per slice of :func:`add_replicates`' draws.
REPLICATE_SLICE = 1 << 16


def add_replicates(table: pd.DataFrame, replicates: int, seed: int = 0) -> pd.DataFrame:
    """Poisson-bootstrap replicate counts ``b0..b{R-1}`` of each group (Chamandy et al. 2012).

    The per-row Poisson bootstrap gives every row a weight ``k ~ Poisson(1)`` per replicate; a group's
    replicate count is the sum of its rows' draws, which is exactly ``Poisson(n)`` (a sum of independent
    Poisson variables), independent across groups and replicates. So it is drawn once per group from
    ``n`` instead of once per row: the same distribution, no per-row work, and the same draws for any
    engine or partitioning that yields the same table (the table is sorted by its keys). Metrics use a
    group's per-row quantities at their group means either way. With frequency weights ``n`` is the
    summed weight (a row of weight w stands for w rows).
    """
    if replicates <= 0 or table.empty:
        return table.assign(**{f"b{r}": np.zeros(len(table)) for r in range(max(replicates, 0))})
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5CA1E]))
    n = np.clip(table["n"].to_numpy(np.float64), 0.0, None)
    # Drawn in slices of groups (the generator fills in C order, so the draws are those of one
    # (groups x replicates) call) into one (replicates x groups) block: each replicate's column is
    # contiguous for the metrics' passes, and no int64 matrix and float copy of it exist at once
    # (1e6 groups x 32 replicates: 256 MB, not 512).
    draws = np.empty((replicates, n.size))
    for i in range(0, n.size, REPLICATE_SLICE):
        j = min(n.size, i + REPLICATE_SLICE)
        draws[:, i:j] = rng.poisson(n[i:j, None], size=(j - i, replicates)).T
    block = pd.DataFrame(draws.T, columns=[f"b{r}" for r in range(replicates)], index=table.index, copy=False)
    return pd.concat([table, block], axis=1)


def distinct_column(kind: str) -> str:
    """The column of a distinct-score table holding each group's score itself, in the source's ``kind``."""
    return f"score_{kind}"


def distinct_scores_sql(source: str, score: str) -> str:
    """HyperLogLog estimate of the number of distinct scores (constant memory, a few % error)."""
    return f"SELECT approx_count_distinct(CAST({quote_ident(score)} AS DOUBLE)) FROM {source}"


#: Where the HyperLogLog estimate falls within this factor of ``distinct_max``, the scores are counted
#: exactly (:func:`is_distinct`). DuckDB's estimate is deterministic (the same for any thread count or
#: part order: its sketches merge by register maxima) but a few % off (measured 2-4% at 1e6), so near the
#: limit the estimate alone would put two sources with the same distinct count on different paths.
DISTINCT_MARGIN = 1.25


def is_distinct(
    con: duckdb.DuckDBPyConnection, source: str, params: dict, score: str, distinct_max: int
) -> bool:
    """Whether ``source`` holds at most ``distinct_max`` distinct scores: the distinct-score table's switch.

    Exact: the estimate decides only when it is more than :data:`DISTINCT_MARGIN` away from the limit
    (an HLL error that large is far outside its few %); in between, ``count(DISTINCT ...)`` does (one hash
    table of at most ~1.25 x ``distinct_max`` doubles, ~40 MB at 2^20).
    """
    if distinct_max <= 0:
        return False
    est = con.execute(distinct_scores_sql(source, score), params).fetchall()[0][0]
    if est * DISTINCT_MARGIN < distinct_max or est > distinct_max * DISTINCT_MARGIN:
        return est <= distinct_max
    exact = f"SELECT count(DISTINCT CAST({quote_ident(score)} AS DOUBLE)) FROM {source}"
    return con.execute(exact, params).fetchall()[0][0] <= distinct_max


def expand(paths: str | Sequence[str]) -> list[str]:
    """Parquet files of a path, folder or glob (sorted, so every engine lists them in one order).

    Each path is resolved by :func:`calibflow.sources.files`, the one resolver user sources use; the
    aggregate engines read Parquet only, so a CSV source is refused here with the fix.
    """
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


def _sql_pass(
    con: duckdb.DuckDBPyConnection,
    source: str,
    params: dict,
    score: str,
    label: str,
    kind: str,
    segments: Sequence[str],
    weight: str | None,
    grid: BucketGrid,
    distinct: bool,
) -> pd.DataFrame:
    """The table by DuckDB's GROUP BY (the reference engine); invalid rows refused with their count."""
    sql = aggregate_sql(source, score, label, kind, segments, weight, grid, distinct)
    table = con.execute(sql, params).df()
    bad = table["bad"].to_numpy()
    _check_bad(np.array([table["rows"][bad == k].sum() for k in (1, 2)]), score, label, kind)
    return table[bad == 0].drop(columns=["bad", "rows"]).reset_index(drop=True)


def _check_columns(con: duckdb.DuckDBPyConnection, source: str, params: dict, wanted: list[str]) -> None:
    """A missing column is one line naming it and the closest existing one (not DuckDB's binder error)."""
    have = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}", params).fetchall()]
    require_columns(have, wanted, where=" in the source")


def _check_bad(bad: np.ndarray, score: str, label: str, kind: str) -> None:
    if bad[0]:
        raise ValueError(f"{bad[0]:,} rows have a {label!r} outside {{0, 1}}: labels must be 0 or 1")
    if bad[1]:
        what = "finite" if kind != "probability" else "probabilities in [0, 1]"
        raise ValueError(f"{bad[1]:,} rows have a {score!r} that is not {what}: drop or fix those rows")


