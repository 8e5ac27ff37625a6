"""Smooth ECE against relplot, binning-free tests with honest p-values, bands, CORP decompositions."""

from __future__ import annotations

import numpy as np
import pytest
import relplot
from scipy import stats

from calibflow import diagnostics as D
from calibflow import metrics as M


def _calibrated(rng, n, shift=0.0):
    p = rng.beta(2, 5, n)
    truth = 1 / (1 + np.exp(-(np.log(p / (1 - p)) + shift)))
    return (rng.random(n) < truth).astype(float), p


@pytest.mark.parametrize(("n", "shift"), [(500, 0.0), (5000, 0.7), (50_000, -0.3)])
def test_smooth_ece_equals_relplot(rng, n, shift):
    y, p = _calibrated(rng, n, shift)
    ours, sigma = D.smooth_ece(y, p, return_bandwidth=True)
    theirs, sigma_ref = relplot.smECE(p, y, return_width=True)
    assert sigma == sigma_ref
    assert abs(ours - theirs) <= 1e-6
    assert abs(D.smooth_ece_at(y, p, 0.05) - relplot.smECE_sigma(p, y, 0.05)) <= 1e-6


def test_smooth_ece_frequency_weights_equal_repeated_rows(rng):
    y, p = _calibrated(rng, 800, 0.5)
    w = rng.integers(1, 4, y.size)
    assert D.smooth_ece(y, p, w) == pytest.approx(D.smooth_ece(np.repeat(y, w), np.repeat(p, w)), abs=1e-12)


def test_brownian_cdfs_are_monotone_and_reach_one_for_large_statistics():
    """The theta series need more terms as x grows: with a fixed 60 they stopped short of 1 at x ~ 90."""
    xs = np.array([0.5, 1, 2, 5, 10, 30, 60, 90.9, 200, 1000])
    for cdf in (D.brownian_max_abs_cdf, D.brownian_range_cdf):
        v = np.array([cdf(x) for x in xs])
        assert np.all(np.diff(v) >= -1e-15), v
        assert v[-3:] == pytest.approx(1.0, abs=1e-12)


def test_brownian_distributions_match_published_values():
    # MAPIE's documented values (Tygert 2022): P(sup|B| <= 1) and P(range <= 1).
    assert D.brownian_max_abs_cdf(1.0) == pytest.approx(0.3708, abs=5e-5)
    assert D.brownian_range_cdf(1.0) == pytest.approx(0.0634, abs=5e-5)
    # Monte Carlo check of both laws on a fine random walk.
    rng = np.random.default_rng(0)
    steps = rng.normal(size=(4000, 2000)).cumsum(axis=1) / np.sqrt(2000)
    path = np.c_[np.zeros(4000), steps]
    sup, rng_ = np.abs(path).max(axis=1), path.max(axis=1) - path.min(axis=1)
    for x in (0.8, 1.5, 2.2):
        assert D.brownian_max_abs_cdf(x) == pytest.approx(np.mean(sup <= x), abs=0.03)
        assert D.brownian_range_cdf(x + 0.5) == pytest.approx(np.mean(rng_ <= x + 0.5), abs=0.03)


def test_pvalues_are_uniform_when_calibrated_and_small_when_not():
    rng = np.random.default_rng(3)
    ks, ku, sp = [], [], []
    for _ in range(300):
        y, p = _calibrated(rng, 2000)
        t = D.cumulative_tests(y, p)
        ks.append(t.ks_pvalue)
        ku.append(t.kuiper_pvalue)
        sp.append(t.spiegelhalter_pvalue)
    for pv in (ks, ku, sp):
        assert stats.kstest(pv, "uniform").pvalue > 0.01  # calibrated: p-values uniform
    y, p = _calibrated(rng, 5000, shift=0.4)  # miscalibrated
    t = D.cumulative_tests(y, p)
    assert t.ks_pvalue < 1e-3 and t.kuiper_pvalue < 1e-3


def test_tests_do_not_depend_on_tie_order(rng):
    y, p = _calibrated(rng, 3000, 0.2)
    p = np.round(p, 2)
    order = rng.permutation(p.size)
    a, b = D.cumulative_tests(y, p).to_dict(), D.cumulative_tests(y[order], p[order]).to_dict()
    assert a == pytest.approx(b, rel=1e-9, abs=1e-12)


def test_consistency_bands_cover_a_calibrated_model_and_flag_a_shifted_one(rng):
    y, p = _calibrated(rng, 40_000)
    b = D.consistency_bands(y, p, n_bins=10, n_draws=400, seed=1)
    inside = (b.observed >= b.band_low) & (b.observed <= b.band_high)
    assert inside.sum() >= 8  # 95% bands: at most a couple of bins out by chance
    y2, p2 = _calibrated(rng, 40_000, shift=0.5)
    b2 = D.consistency_bands(y2, p2, n_bins=10, n_draws=400, seed=1)
    assert ((b2.observed < b2.band_low) | (b2.observed > b2.band_high)).sum() >= 8


@pytest.mark.parametrize("score", ["brier", "log_loss"])
def test_corp_decomposition_identity_and_meaning(rng, score):
    y, p = _calibrated(rng, 20_000, shift=0.6)
    d = D.decomposition(y, p, score)
    assert d.score == pytest.approx(d.miscalibration - d.discrimination + d.uncertainty, abs=1e-12)
    assert d.miscalibration > 0 and d.discrimination > 0
    ref = M.brier(y, p) if score == "brier" else M.log_loss(y, p)
    assert d.score == pytest.approx(ref, rel=1e-9)
    # After recalibration by the PAV fit itself, nothing is left to remove.
    again = D.decomposition(y, D.recalibrated(y, p), score)
    assert again.miscalibration == pytest.approx(0.0, abs=1e-12)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="p"):
        D.smooth_ece([0, 1], [0.2, 1.3])
    with pytest.raises(ValueError, match="length mismatch"):
        D.cumulative_tests([0, 1, 1], [0.2, 0.3])
    with pytest.raises(ValueError, match="score must be"):
        D.decomposition([0, 1], [0.2, 0.3], "auc")


def test_consistency_bands_leave_empty_bins_without_a_band_and_without_warnings():
    """Uniform bins over predictions that never reach the top bins: those bins get NaN, silently."""
    import warnings

    rng = np.random.default_rng(3)
    p = rng.uniform(0.0, 0.5, 2_000)
    y = (rng.random(p.size) < p).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        band = D.consistency_bands(y, p, 10, "uniform", n_draws=200, seed=0)
    empty = band.count == 0
    assert empty[5:].all() and np.isnan(band.band_low[empty]).all() and np.isnan(band.band_high[empty]).all()
    lo, hi = band.band_low[~empty], band.band_high[~empty]
    assert np.isfinite(lo).all() and (lo <= hi).all()
