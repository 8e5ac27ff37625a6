"""Histogram binning against probcal's ``HistogramBinningCalibrator`` on the same data."""

from __future__ import annotations

import numpy as np
import pytest
from probcal import HistogramBinningCalibrator
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M


@pytest.fixture
def probs(miscalibrated):
    s, y = miscalibrated
    return expit(s), y


def test_equal_width_matches_probcal_exactly(probs):
    """Equal-width bins are defined identically (right-open, empty bins interpolated): same map."""
    p, y = probs
    ref = HistogramBinningCalibrator(n_bins=12, strategy="width", shrinkage=None).fit(p, y)
    ours = C.make("histogram", n_bins=12, strategy="uniform", input="probability").fit(p, y)
    grid = np.linspace(1e-9, 1 - 1e-9, 3001)
    np.testing.assert_allclose(ours.predict(grid), ref.predict_proba(grid), atol=1e-12)


def test_equal_width_empty_bins_follow_neighbours(rng):
    p = np.r_[rng.uniform(0.0, 0.2, 500), rng.uniform(0.8, 1.0, 500)]
    y = (rng.random(p.size) < p).astype(float)
    ours = C.make("histogram", n_bins=10, input="probability").fit(p, y)
    ref = HistogramBinningCalibrator(n_bins=10, strategy="width", shrinkage=None).fit(p, y)
    np.testing.assert_allclose(ours.bin_value_, ref.bin_rate_, atol=1e-12)


def test_equal_mass_close_to_probcal(probs):
    """Equal-mass edges differ in the quantile rule only (ours: inverted CDF, so that weighted fits
    equal repeated rows; probcal: numpy's linear interpolation), which moves each edge by less
    than one data point: bin rates agree to 1e-3 and log loss to 0.1%."""
    p, y = probs
    ref = HistogramBinningCalibrator(n_bins=15, strategy="mass", shrinkage=None).fit(p, y)
    ours = C.make("histogram", n_bins=15, strategy="quantile", input="probability").fit(p, y)
    assert ours.bin_value_.size == ref.bin_rate_.size
    np.testing.assert_allclose(ours.bin_value_, ref.bin_rate_, atol=1e-3)
    ll_ours, ll_ref = M.log_loss(y, ours.predict(p)), M.log_loss(y, ref.predict_proba(p))
    assert abs(ll_ours - ll_ref) / ll_ref < 1e-3
    np.testing.assert_allclose(ours.bin_weight_, np.full(15, p.size / 15), rtol=1e-3)


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_weights_equal_repetition(probs, rng, strategy):
    p, y = probs
    w = rng.integers(1, 4, p.size)
    a = C.make("histogram", strategy=strategy, input="probability").fit(p, y, sample_weight=w.astype(float))
    b = C.make("histogram", strategy=strategy, input="probability").fit(np.repeat(p, w), np.repeat(y, w))
    np.testing.assert_allclose(a.predict(p), b.predict(p), atol=1e-12)


def test_invalid_params(probs):
    p, y = probs
    with pytest.raises(ValueError, match="strategy"):
        C.make("histogram", strategy="bogus").fit(p, y)
    with pytest.raises(ValueError, match="n_bins"):
        C.make("histogram", n_bins=0).fit(p, y)
