"""The replicate metrics' compiled pass, the sliced replicate draws, the shared replicate columns of a
calibrated table, the column-wise collapse, and the exact distinct-vs-grid switch (a table of ~1e6
distinct scores made evaluate/select slow and 6x hungrier than the grid; issue 25)."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calibflow.aggregate import table as table_mod
from calibflow.aggregate.diagnostics import groups, ks_from_groups, ks_replicates
from calibflow.aggregate.metrics import (
    _collapse,
    _point,
    _replicate_cols,
    calibrated_table,
    collapsed,
    metrics_from_table,
)
from calibflow.aggregate.replicates import REPLICATE_METRICS, replicate_metrics
from calibflow.aggregate.table import add_replicates, is_distinct
from calibflow.calibrators import make


def _table(n_groups: int, seed: int, segments: int = 0) -> pd.DataFrame:
    """A bucket table (optionally with a segment key, so buckets repeat) with small and empty-ish groups."""
    rng = np.random.default_rng(seed)
    b = rng.integers(0, n_groups // 2, n_groups)
    y = rng.integers(0, 2, n_groups)
    keys = {"bucket": b.astype(np.int32), "label": y.astype(np.int32)}
    if segments:
        keys = {"seg_0": rng.integers(0, segments, n_groups), **keys}
    t = pd.DataFrame(keys).drop_duplicates().sort_values(list(keys)).reset_index(drop=True)
    n = rng.integers(1, 4, len(t)).astype(np.float64)
    q = np.clip((t["bucket"].to_numpy() + rng.random(len(t))) / (n_groups // 2), 1e-6, 1 - 1e-6)
    ll = np.where(t["label"] == 1, -np.log(q), -np.log1p(-q))
    return t.assign(n=n, sum_z=n * np.log(q / (1 - q)), sum_q=n * q, sum_ll=n * ll, sum_q2=n * q * q)


@pytest.mark.parametrize("segments", [0, 3])
def test_replicate_pass_equals_point_per_replicate(segments: int) -> None:
    g = _collapse(add_replicates(_table(20_000, 1, segments), 12, seed=4))
    reps = _replicate_cols(g)
    got = replicate_metrics(g, reps, 15)
    ref = [_point(g, g[c].to_numpy(), 15, exact=False) for c in reps]
    for m in REPLICATE_METRICS:
        want = np.array([ks_from_groups(g, g[c].to_numpy()) for c in reps]) if m == "ks" else np.array(
            [r[m] for r in ref])
        np.testing.assert_allclose(got[m], want, rtol=1e-10, atol=1e-15, err_msg=m)
    np.testing.assert_allclose(ks_replicates(g, groups(g)), got["ks"], rtol=0, atol=0)


def test_replicate_pass_nan_where_a_replicate_draws_nothing() -> None:
    """A tiny segment: replicates that draw no row (or no positive) give NaN, as ``_point`` does."""
    g = _collapse(add_replicates(_table(6, 2).assign(n=0.05), 40, seed=1))
    got = replicate_metrics(g, _replicate_cols(g), 10)
    empty = g[_replicate_cols(g)].sum().to_numpy() == 0
    assert empty.any() and (~empty).any()
    assert np.isnan(got["log_loss"][empty]).all() and np.isnan(got["auc"][empty]).all()
    ref = [_point(g, g[c].to_numpy(), 10, exact=False) for c in _replicate_cols(g)]
    for m in ("log_loss", "calibration_ratio", "mce", "auc"):
        np.testing.assert_allclose(got[m], [r[m] for r in ref], rtol=1e-10, equal_nan=True, err_msg=m)


def test_replicate_pass_refuses_unordered_groups() -> None:
    g = _collapse(add_replicates(_table(200, 3), 2))
    with pytest.raises(ValueError, match="order"):
        replicate_metrics(g.iloc[::-1].reset_index(drop=True), ["b0", "b1"], 10)


def test_sliced_replicate_draws_equal_one_draw() -> None:
    """Drawn in slices of groups, the counts are those of one (groups x replicates) Poisson call: the
    same seed gives the same intervals as before the slicing."""
    t = _table(2 * table_mod.REPLICATE_SLICE + 1000, 5)
    assert len(t) > table_mod.REPLICATE_SLICE
    got = add_replicates(t, 7, seed=9)
    rng = np.random.default_rng(np.random.SeedSequence([9, 0x5CA1E]))
    want = rng.poisson(t["n"].to_numpy()[:, None], size=(len(t), 7)).astype(np.float64)
    np.testing.assert_array_equal(got[[f"b{r}" for r in range(7)]].to_numpy(), want)
    assert got[t.columns].equals(t)


def test_calibrated_table_shares_replicate_columns() -> None:
    """A method's table adds its five columns; the replicate counts are the test table's own arrays."""
    t = add_replicates(_table(4000, 6), 8)
    cal = make("platt", input="logit").fit(t["sum_z"].to_numpy() / t["n"].to_numpy(), t["label"].to_numpy())
    c = calibrated_table(t, cal, "logit")
    for r in _replicate_cols(t):
        assert np.shares_memory(c[r].to_numpy(), t[r].to_numpy()), r
    assert not np.shares_memory(c["sum_q"].to_numpy(), t["sum_q"].to_numpy())
    assert not np.allclose(c["sum_q"], t["sum_q"])  # the calibrated sums replaced, the input untouched


def test_columnwise_collapse_equals_groupby() -> None:
    """The collapse of a table with repeated (bucket, label) keys (segments, or a step map's ties) equals
    pandas' groupby sum, and the exact probability is each group's first row's."""
    t = add_replicates(_table(30_000, 7, segments=4), 5).sample(frac=1.0, random_state=0)
    t["prob"] = t["bucket"] / t["bucket"].max()
    got = collapsed(t)
    cols = ["n", "sum_z", "sum_q", "sum_ll", "sum_q2", *_replicate_cols(t)]
    ref = t.groupby(["bucket", "label"], sort=True).agg({**{c: "sum" for c in cols}, "prob": "first"})
    assert len(got) == len(ref) < len(t)
    np.testing.assert_array_equal(got["bucket"], ref.index.get_level_values(0))
    np.testing.assert_array_equal(got["label"], ref.index.get_level_values(1))
    np.testing.assert_allclose(got[cols].to_numpy(), ref[cols].to_numpy(), rtol=1e-12)
    np.testing.assert_array_equal(got["prob"], ref["prob"])
    a = metrics_from_table(t)["overall"]
    b = metrics_from_table(got)["overall"]
    for k in ("log_loss", "ece", "auc", "calibration_ratio"):
        assert a[k] == pytest.approx(b[k], rel=1e-12)
        assert a["ci"][k] == pytest.approx(b["ci"][k], rel=1e-10)


def _scores(folder, n_distinct: int, rows: int, parts: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    vals = rng.random(n_distinct)
    s = np.concatenate([vals, rng.choice(vals, rows - n_distinct)])
    rng.shuffle(s)
    out = []
    for i, chunk in enumerate(np.array_split(s, parts)):
        f = folder / f"p{i}.parquet"
        pq.write_table(pa.table({"score": chunk}), f)
        out.append(str(f))
    return out


def test_distinct_switch_is_exact_and_deterministic(tmp_path) -> None:
    """The switch is ``distinct scores <= distinct_max`` exactly, for any thread count and part order: the
    HyperLogLog estimate (itself deterministic here, but a few % off) decides only far from the limit."""
    k = 30_000
    files = _scores(tmp_path, k, 80_000, 3)
    estimates = set()
    for threads in (1, 2, 4):
        for order in (files, files[::-1], files[1:] + files[:1]):
            con = duckdb.connect(config={"threads": threads})
            src, prm = "read_parquet($f)", {"f": order}
            estimates.add(con.execute(table_mod.distinct_scores_sql(src, "score"), prm).fetchall()[0][0])
            assert is_distinct(con, src, prm, "score", k)
            assert not is_distinct(con, src, prm, "score", k - 1)
            assert is_distinct(con, src, prm, "score", 2 * k)
            assert not is_distinct(con, src, prm, "score", k // 2)
            assert not is_distinct(con, src, prm, "score", 0)
            con.close()
    assert len(estimates) == 1
    # the estimate alone is off: on one side of k or the other, never exactly k here
    assert estimates != {k}


@pytest.mark.parametrize(("scale", "kind"), [("logit", "logit"), ("probability", "probability"),
                                             ("logit", "probability"), ("probability", "logit")])
def test_representatives_of_a_table_in_group_order_equal_the_group_by(scale, kind) -> None:
    """``fit.representatives`` skips the group-by where the table is one row per (bucket, label) in order
    already: the same arrays, bit for bit, as grouping the same rows out of order; a table with segments
    (several rows per group) is still summed."""
    from calibflow.aggregate.fit import representatives
    from calibflow.metrics import expit

    seg = representatives(_table(4_000, 8, 3), scale, kind)
    summed = _table(4_000, 8, 3).groupby(["bucket", "label"])["n"].sum()
    np.testing.assert_array_equal(seg[2], summed[summed > 0].to_numpy())
    t = _table(4_000, 8)
    t.loc[t.index[::7], "n"] = 0.0  # groups without weight are dropped either way
    t = t.assign(score_logit=t["sum_z"] / t["n"].where(t["n"] > 0, 1.0))
    t = t.assign(score_probability=expit(t["score_logit"]))
    for table in (t, t.drop(columns=["score_logit", "score_probability"])):
        got = representatives(table, scale, kind)
        shuffled = table.sample(frac=1.0, random_state=0)  # out of order: the group-by runs
        want = representatives(shuffled, scale, kind)
        assert len(got[0]) == (table["n"] > 0).sum() < len(table)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
