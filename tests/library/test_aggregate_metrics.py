"""Aggregate path: KS, Kuiper, smooth ECE, the log-loss miscalibration term, equal-mass bins,
selection-set metrics and per-segment ratios from the bucket table, against the row path's functions.

Three tables of the same 20,000 generated rows: one group per distinct score (continuous scores: must
agree to ~1e-12), the scores rounded to 3 decimals (ties: the stated tie bounds), and a coarse logit
grid (2,048 cells, so the bucket-resolution bounds are visibly in use).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.table_reference import aggregate_duckdb

from calibflow import diagnostics as D
from calibflow import metrics as M
from calibflow.aggregate import diagnostics as AD
from calibflow.aggregate.metrics import calibrated_table
from calibflow.aggregate.options import PassOptions, TableRows
from calibflow.aggregate.table import BucketGrid
from calibflow.binning import linear_edges
from calibflow.calibrators import make

N = 20_000


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Miscalibrated probabilities (float64), labels, a 3-value segment; also a copy rounded to 3 decimals."""
    d = tmp_path_factory.mktemp("aggm")
    rng = np.random.default_rng(11)
    z = rng.normal(-1.0, 1.5, N)
    y = (rng.random(N) < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int8)
    s = 1 / (1 + np.exp(-z))
    seg = rng.choice(np.array(["a", "b", "c"]), N, p=[0.5, 0.3, 0.2])
    paths = {}
    for name, score in (("cont", s), ("round", np.round(s, 3))):
        paths[name] = str(d / f"{name}.parquet")
        pq.write_table(pa.table({"score": score, "label": y, "seg": seg}), paths[name])
    return paths, s, np.round(s, 3), y.astype(np.float64), seg


def _table(path: str, grid: BucketGrid | None = None, replicates: int = 0) -> pd.DataFrame:
    draws = {"replicates": replicates, "seed": 1}
    how = PassOptions(grid, distinct_max=0, **draws) if grid else PassOptions(distinct_max=10**7, **draws)
    return aggregate_duckdb(path, TableRows("score", "label", segments=("seg",)), how)


@pytest.fixture(scope="module")
def tables(data):
    paths = data[0]
    return {
        "distinct": _table(paths["cont"], replicates=8),
        "ties": _table(paths["round"]),
        "grid": _table(paths["cont"], BucketGrid(2048, 16.0)),
    }


def test_distinct_table_is_one_group_per_score(tables):
    assert "score_probability" in tables["distinct"].columns
    assert "score_probability" not in tables["grid"].columns and len(tables["grid"]) < N / 2


def test_ks_kuiper_distinct_scores_exact(tables, data):
    _, s, _, y, _ = data
    c = AD.cumulative_from_table(tables["distinct"])
    assert c["ks"] == pytest.approx(M.ks_error(y, s), abs=1e-12)
    t = D.cumulative_tests(y, s)
    assert c["kuiper"] == pytest.approx(t.kuiper, abs=1e-9)
    assert c["kuiper_pvalue"] == pytest.approx(t.kuiper_pvalue, abs=1e-12)
    # one row per group: no unknown order, the bounds are ~0
    assert c["ks_bound"] < 1 / N


@pytest.mark.parametrize("which", ["ties", "grid"])
def test_ks_kuiper_within_bucket_bounds(tables, data, which):
    """Ties (row order inside a tie decides ks_error's max) and the coarse grid: the rows' values lie in the
    stated intervals, and the intervals are not vacuous (at most the heaviest bucket's weight / N)."""
    _, s, sr, y, _ = data
    p = sr if which == "ties" else s
    c = AD.cumulative_from_table(tables[which])
    ks = M.ks_error(y, p)
    assert c["ks"] - 1e-12 <= ks <= c["ks"] + c["ks_bound"] + 1e-12
    g = AD.groups(tables[which])
    heaviest = g.groupby("bucket")["n"].sum().max() / N
    assert 0 <= c["ks_bound"] <= heaviest
    t = D.cumulative_tests(y, p)
    assert c["kuiper_pvalue_low"] - 1e-12 <= t.kuiper_pvalue <= c["kuiper_pvalue"] + 1e-12
    if which == "ties":  # cumulative_tests pools ties, as the table does: the Kuiper statistic is exact
        assert c["kuiper_pvalue"] == pytest.approx(t.kuiper_pvalue, abs=1e-12)


def test_ks_replicates_bracket_the_estimate(tables):
    reps = AD.ks_replicates(tables["distinct"])
    c = AD.cumulative_from_table(tables["distinct"])
    assert reps.size == 8 and np.all(reps > 0) and reps.min() < c["ks"] * 1.5 and reps.std() > 0


def test_smooth_ece(tables, data):
    _, s, sr, y, _ = data
    assert AD.smooth_ece_from_table(tables["distinct"]) == pytest.approx(D.smooth_ece(y, s), abs=1e-12)
    assert AD.smooth_ece_from_table(tables["ties"]) == pytest.approx(D.smooth_ece(y, sr), abs=1e-12)
    # Coarse grid (dz = 0.0156 logit, <= 3.9e-3 in probability): measured 1e-4-scale difference.
    assert abs(AD.smooth_ece_from_table(tables["grid"]) - D.smooth_ece(y, s)) < 2e-3


def test_log_loss_miscalibration(tables, data):
    _, s, sr, y, _ = data
    for which, p in (("distinct", s), ("ties", sr)):
        row = D.decomposition(y, p, "log_loss").miscalibration
        assert AD.log_loss_miscalibration_from_table(tables[which]) == pytest.approx(row, abs=1e-12), which
    row = D.decomposition(y, s, "log_loss").miscalibration
    got = AD.log_loss_miscalibration_from_table(tables["grid"])
    assert 0 < got <= row + 1e-12 and row - got < 0.1 * row  # a lower bound, close at this grid


@pytest.mark.parametrize("n_bins", [10, 15])
def test_quantile_edges_are_numpys(data, n_bins):
    _, _, sr, _, _ = data
    vals, cnt = np.unique(sr, return_counts=True)
    rng = np.random.default_rng(0)
    perm = rng.permutation(vals.size)  # any input order
    want = np.quantile(sr, np.linspace(0, 1, n_bins + 1)[1:-1])
    np.testing.assert_array_equal(linear_edges(vals[perm], n_bins, counts=cnt[perm].astype(float)), want)


@pytest.mark.parametrize(("which", "strategy"), [("distinct", "quantile"), ("ties", "quantile"),
                                                 ("distinct", "uniform")])
def test_reliability_bins_match_rows(tables, data, which, strategy):
    _, s, sr, y, _ = data
    p = s if which == "distinct" else sr
    got = AD.reliability_bins(tables[which], 15, strategy)
    want = M.reliability(y, p, 15, strategy)
    np.testing.assert_array_equal(got["count"], want.count)
    np.testing.assert_allclose(got["observed"], want.observed, atol=1e-12)
    np.testing.assert_allclose(got["mean_pred"], want.mean_pred, atol=1e-12)
    band = D.consistency_bands(y, p, 15, strategy, n_draws=400, seed=0)
    ok = got["count"] > 0
    # same law (Binomial per group vs Bernoulli per row), different draws: Monte Carlo agreement only
    np.testing.assert_allclose(got["band_low"][ok], band.band_low[ok], atol=0.02)
    np.testing.assert_allclose(got["band_high"][ok], band.band_high[ok], atol=0.02)


def test_reliability_bins_grid_and_normal_band(tables, data):
    _, s, _, y, _ = data
    got = AD.reliability_bins(tables["grid"], 15, "quantile", draw_limit=0)  # the normal approximation
    want = M.reliability(y, s, 15, "quantile")
    # only the groups holding an edge can move: at most 14 groups of rows between neighbouring bins
    g = AD.groups(tables["grid"])
    assert np.abs(got["count"] - want.count).sum() <= 2 * 14 * g["n"].max()
    np.testing.assert_allclose(got["observed"], want.observed, atol=0.02)
    band = D.consistency_bands(y, s, 15, "quantile", n_draws=400, seed=0)
    np.testing.assert_allclose(got["band_low"], band.band_low, atol=0.02)
    assert np.all(got["band_low"] < got["mean_pred"]) and np.all(got["mean_pred"] < got["band_high"])


def test_selection_metrics(tables, data):
    _, s, sr, y, _ = data
    for alpha in (0.1, 0.37):
        got = AD.selection_from_table(tables["distinct"], alpha)
        want = M.selection_metrics(y, s, alpha=alpha, n_bins=10)
        assert got.keys() == want.keys()
        for k, v in want.items():
            assert got[k] == pytest.approx(v, abs=1e-12), (alpha, k)
    # ties at the boundary: the last tie block is taken pro rata; the rows take it in row order
    got, want = AD.selection_from_table(tables["ties"], 0.1), M.selection_metrics(y, sr, alpha=0.1)
    assert got["n_selected"] == want["n_selected"]
    block = np.sum(sr == np.sort(sr)[::-1][want["n_selected"] - 1])
    assert abs(got["positives"] - want["positives"]) <= block
    assert abs(got["E"] - want["E"]) < 0.05 and abs(got["log_loss"] - want["log_loss"]) < 0.05


def test_segment_ratios(tables, data):
    _, s, _, y, seg = data
    unc = tables["distinct"]
    cal = calibrated_table(unc, make("platt", input="probability").fit(s, y))
    pc = make("platt", input="probability").fit(s, y).predict(s)
    out = AD.segment_ratios(unc, cal, ["seg"], level=0.95)
    assert [r["value"] for r in out] == ["a", "b", "c"]  # largest first
    for r in out:
        m = seg == r["value"]
        assert r["n"] == m.sum() and r["positives"] == y[m].sum()
        assert r["ratio_uncalibrated"] == pytest.approx(s[m].sum() / y[m].sum(), rel=1e-12)
        assert r["ratio"] == pytest.approx(pc[m].sum() / y[m].sum(), rel=1e-9)
        lo, hi = r["ratio_ci"]
        assert lo < r["ratio"] < hi and hi - lo < 0.2


def test_ece_and_mce_intervals_hold_their_estimate_and_keep_the_replicates_spread():
    """ECE's replicates sit above the estimate (noise adds absolute gaps), so their plain percentile
    interval could exclude the number printed beside it; the card's interval is their spread placed
    around the estimate."""
    from calibflow.aggregate.metrics import _centred_interval

    rng = np.random.default_rng(0)
    draws = 0.03 + 0.005 * rng.standard_normal(32)  # all above the estimate 0.02
    lo, hi = _centred_interval(draws, 0.02, 0.025)
    q_lo, mid, q_hi = np.quantile(draws, [0.025, 0.5, 0.975])
    assert lo <= 0.02 <= hi and q_lo > 0.02  # the plain interval would have excluded it
    assert hi - lo == pytest.approx(q_hi - q_lo)
    assert _centred_interval(draws, 0.001, 0.025)[0] == 0.0  # never below 0
    assert np.isnan(_centred_interval([], 0.02, 0.025)).all()
