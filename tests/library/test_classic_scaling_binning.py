"""Scaling-binning against probcal's ``ScalingBinningCalibrator`` on the same data."""

from __future__ import annotations

import numpy as np
from probcal import ScalingBinningCalibrator
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M


def test_matches_probcal(miscalibrated):
    """Comparable, not identical: probcal's Platt stage fits Platt's smoothed targets
    ((N+ + 1)/(N+ + 2)), ours plain maximum likelihood, and its equal-mass edges use numpy's
    linear quantiles, ours the inverted CDF. Both shifts are O(1/n): the Platt slopes agree to
    1e-3, the outputs to 2e-3 except for the few rows an edge moved across (< 0.1% of rows), and
    the log loss to 0.1%."""
    s, y = miscalibrated
    p = expit(s)
    ref = ScalingBinningCalibrator(n_bins=10).fit(p, y)
    ours = C.make("scaling_binning", n_bins=10, input="probability").fit(p, y)
    assert abs(ours.coef_ - ref.platt_.a_) < 1e-3
    assert np.mean(np.abs(ours.predict(p) - ref.predict_proba(p)) > 2e-3) < 1e-3
    ll_ours, ll_ref = M.log_loss(y, ours.predict(p)), M.log_loss(y, ref.predict_proba(p))
    assert abs(ll_ours - ll_ref) / ll_ref < 1e-3


def test_outputs_are_bin_means_of_the_scaled_values(miscalibrated):
    """Kumar et al. step 3: each bin outputs the mean of g over its members, not the label rate."""
    s, y = miscalibrated
    cal = C.make("scaling_binning", n_bins=8).fit(s, y)
    g = expit(cal.coef_ * s + cal.intercept_)
    idx = np.searchsorted(cal.edges_, g, side="right")
    means = np.bincount(idx, weights=g) / np.bincount(idx)
    np.testing.assert_allclose(cal.bin_value_, means, rtol=1e-12)
    np.testing.assert_allclose(np.bincount(idx), s.size / 8, rtol=1e-3)
    assert np.all(np.diff(cal.bin_value_) > 0)


def test_weights_equal_repetition(miscalibrated, rng):
    s, y = miscalibrated
    s, y = s[:5000], y[:5000]
    w = rng.integers(1, 4, s.size)
    a = C.make("scaling_binning").fit(s, y, sample_weight=w.astype(float))
    b = C.make("scaling_binning").fit(np.repeat(s, w), np.repeat(y, w))
    np.testing.assert_allclose(a.predict(s), b.predict(s), atol=1e-8)
    assert a.params_.shape == (2,)
