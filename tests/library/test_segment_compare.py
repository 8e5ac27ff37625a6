"""``calibflow.aggregate.segment_compare``: the pass's sums give the row formulas' numbers.

A 30,000-row Parquet file (small enough to hold) with a per-country effect; a Platt map as the global
calibrator and ``partial_pooling`` fitted on half of it. The pass runs in small batches (many Chan merges)
and its paired interval, log losses, per-value sums and probability table are checked against the same
quantities on the rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit

from calibflow import selection
from calibflow.aggregate import segment_compare as sc
from calibflow.calibrators import make
from calibflow.intervals import normal_mean_interval
from calibflow.metrics import row_log_loss


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = np.random.default_rng(4)
    n = 30_000
    x = rng.normal(size=n)
    country = rng.choice(np.array(["US", "FR", "BR", None], dtype=object), n, p=[0.5, 0.2, 0.25, 0.05])
    base = -1.2 + x
    y = (rng.random(n) < expit(base + np.where(country == "BR", 0.7, 0.0))).astype(np.int64)
    prob = expit(1.3 * base + 0.2)
    frame = pd.DataFrame({"y": y, "margin": logit(prob), "prob": prob, "s:country": country,
                          "split": np.where(np.arange(n) % 2 == 0, "calib", "test")})
    path = tmp_path_factory.mktemp("sc") / "rows.parquet"
    frame.to_parquet(path, index=False)
    cal = frame[frame["split"] == "calib"]
    glob = make("platt", input="logit").fit(cal["margin"].to_numpy(), cal["y"].to_numpy())
    seg = make("partial_pooling", input="logit").fit(
        cal["margin"].to_numpy(), cal["y"].to_numpy(), segments={"country": cal["s:country"].to_numpy()})
    test = frame[frame["split"] == "test"]
    return path, test, glob, seg


def _pass(path, glob, seg, batch_rows=997):
    rows = sc.file_test_rows(str(path), "y", "margin", "prob", {"country": "s:country"}, "split = $split",
                             {"split": "test"})
    return sc.compare(rows, glob, {"partial_pooling": seg}, ["country"], batch_rows=batch_rows)


def test_moments_merge_equals_the_two_pass_formula():
    rng = np.random.default_rng(0)
    d = rng.normal(0.01, 0.3, 10_001)
    m = sc.Moments()
    for chunk in np.array_split(d, 37):
        m.add(chunk)
    mean, lo, hi, se, n = normal_mean_interval(d, 0.95)
    p = selection.paired_from_moments(*m.astuple(), 0.95)
    assert p.n == n == d.size
    assert (p.delta, p.low, p.high, p.se) == pytest.approx((mean, lo, hi, se), abs=1e-15)


def test_pass_gives_the_row_paths_paired_interval_and_sums(data):
    path, test, glob, seg = data
    res = _pass(path, glob, seg)
    y, z = test["y"].to_numpy(np.float64), test["margin"].to_numpy()
    segs = {"country": test["s:country"].to_numpy(dtype=object)}
    p_glob, p_seg, p_unc = glob.predict(z), seg.predict(z, segments=segs), test["prob"].to_numpy()
    assert res.n == y.size
    for got, (ref, new) in ((res.vs_global, (p_glob, p_seg)), (res.vs_uncalibrated, (p_unc, p_seg))):
        want = selection.paired_log_loss(y, ref, new, 0.9)
        p = selection.paired_from_moments(*got["partial_pooling"].astuple(), 0.9)
        assert (p.delta, p.low, p.high) == pytest.approx((want.delta, want.low, want.high), abs=1e-12)
    assert res.log_loss["partial_pooling"] == pytest.approx(row_log_loss(y, p_seg).mean(), abs=1e-12)
    assert res.log_loss_global == pytest.approx(row_log_loss(y, p_glob).mean(), abs=1e-12)
    brier = selection.paired_from_moments(*res.brier_vs_uncalibrated["partial_pooling"].astuple())
    assert brier.delta == pytest.approx(np.mean((p_seg - y) ** 2 - (p_unc - y) ** 2), abs=1e-12)
    # the probability table holds every row once, its sums the rows'
    t = res.tables["partial_pooling"]
    assert t["n"].sum() == y.size and t.loc[t["label"] == 1, "n"].sum() == y.sum()
    assert t["sum_q"].sum() == pytest.approx(p_seg.sum(), rel=1e-12)
    # per value (null its own level): rows, positives, sum p before and after
    v = res.values["country"].set_index("value")
    levels = np.where(pd.isna(segs["country"]), "(null)", segs["country"]).astype(str)
    assert sorted(v.index) == sorted(set(levels))
    for value, row in v.iterrows():
        m = levels == value
        assert (row["n"], row["positives"]) == (m.sum(), y[m].sum())
        assert row["sum_p:partial_pooling"] == pytest.approx(p_seg[m].sum(), rel=1e-12)
        assert row["sum_p_unc"] == pytest.approx(p_unc[m].sum(), rel=1e-12)


def test_pass_is_deterministic_and_batch_free_to_rounding(data):
    path, _, glob, seg = data
    a, b, c = _pass(path, glob, seg), _pass(path, glob, seg), _pass(path, glob, seg, batch_rows=1 << 20)
    assert a.vs_global["partial_pooling"] == b.vs_global["partial_pooling"]
    pd.testing.assert_frame_equal(a.values["country"], b.values["country"])
    assert a.vs_global["partial_pooling"].m2 == pytest.approx(c.vs_global["partial_pooling"].m2, rel=1e-12)


def test_ratio_interval_covers_at_its_level():
    """The stated large-sample interval of sum p / sum y: coverage near 95% on calibrated draws."""
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(400):
        p = rng.uniform(0.05, 0.4, 800)
        y = (rng.random(800) < p).astype(float)
        lo, hi = sc.ratio_interval(np.array([800.0]), np.array([y.sum()]), np.array([p.sum()]),
                                   np.array([p @ p]), np.array([p @ y]), 0.95)
        hits += lo[0] <= 1.0 <= hi[0]
    assert 0.92 <= hits / 400 <= 0.98


def _sampled_positions(n: int, sample: sc.RowSample) -> np.ndarray:
    """The positions the sample keeps, by the documented rule evaluated here in a plain DuckDB query."""
    import duckdb

    key = (sample.seed ^ 0x9E3779B97F4A7C15) & (2**64 - 1)
    q = (f"SELECT i FROM range({n}) t(i) WHERE hash(xor(hash(i), CAST({key} AS UBIGINT))) % 4294967296 "
         f"< {round(sample.fraction * 2**32)} ORDER BY i")
    return duckdb.sql(q).fetchnumpy()["i"].astype(np.int64)


def _sampled_pass(path, glob, seg, sample):
    rows = sc.file_test_rows(str(path), "y", "margin", "prob", {"country": "s:country"}, "split = $split",
                             {"split": "test"}, sample)
    return sc.compare(rows, glob, {"partial_pooling": seg}, ["country"], batch_rows=997)


def test_sampled_pass_is_the_row_formula_on_exactly_the_sampled_rows(data):
    path, test, glob, seg = data
    sample = sc.RowSample(0.3, 7)
    res = _sampled_pass(path, glob, seg, sample)
    kept = test.loc[test.index.isin(_sampled_positions(30_000, sample))]  # the frame's index: file position
    assert 0 < res.n == len(kept) < len(test)
    assert sc.plausible_sample_size(res.n, len(test), sample)
    y, z = kept["y"].to_numpy(np.float64), kept["margin"].to_numpy()
    p_seg = seg.predict(z, segments={"country": kept["s:country"].to_numpy(dtype=object)})
    want = selection.paired_log_loss(y, glob.predict(z), p_seg, 0.9)
    got = selection.paired_from_moments(*res.vs_global["partial_pooling"].astuple(), 0.9)
    assert (got.delta, got.low, got.high) == pytest.approx((want.delta, want.low, want.high), abs=1e-12)
    assert res.values["country"]["n"].sum() == res.n and res.table_uncalibrated is None
    unc = sc.compare(sc.file_test_rows(str(path), "y", "margin", "prob", {"country": "s:country"},
                                       "split = $split", {"split": "test"}, sample),
                     glob, {"partial_pooling": seg}, ["country"], uncalibrated_table=True).table_uncalibrated
    assert unc["n"].sum() == res.n and unc["sum_q"].sum() == pytest.approx(kept["prob"].sum(), rel=1e-12)
    # the same seed gives the same sample; another seed another one
    again = _sampled_pass(path, glob, seg, sample)
    assert again.vs_global["partial_pooling"] == res.vs_global["partial_pooling"]
    other = _sampled_pass(path, glob, seg, sc.RowSample(0.3, 8))
    assert other.vs_global["partial_pooling"] != res.vs_global["partial_pooling"]


def test_no_sample_at_or_below_compare_rows_or_when_off():
    assert sc.row_sample(0, 10**9, 0) is None  # 0: every row
    assert sc.row_sample(5_000_000, 5_000_000, 0) is None
    s = sc.row_sample(5_000_000, 50_000_000, 3)
    assert s == sc.RowSample(0.1, 3) and s.threshold == round(0.1 * 2**32)
    assert not sc.plausible_sample_size(5_200_000, 50_000_000, s)  # 200k rows off: ~94 sd


def test_sample_is_not_the_splits_own_draw():
    """The split keeps a row by hash(hash(row) xor seed); with the same seed (both default 0) the sample
    must still take its fraction of the test split's rows, not a slice of the split's hash range."""
    import duckdb

    u = "hash(xor(hash(i), CAST(0 AS UBIGINT))) / 18446744073709551616.0"
    sample = sc.RowSample(0.25, 0)
    q = (f"SELECT {u} >= 0.7 AS test, avg(CAST({sample.condition('i')} AS DOUBLE)) AS kept "
         "FROM range(400000) t(i) GROUP BY ALL ORDER BY test")
    frac = duckdb.sql(q).fetchnumpy()["kept"]
    assert frac == pytest.approx([0.25, 0.25], abs=0.005)  # sd ~0.0012 for the 120k test rows
