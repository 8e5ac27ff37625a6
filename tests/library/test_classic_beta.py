"""Beta calibration against betacal (``BetaCalibration(parameters="abm")``) on the same data."""

from __future__ import annotations

import numpy as np
import pytest
from betacal import BetaCalibration
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M


def _probabilities(rng, n, a, b, c):
    """Scores p ~ U(0.001, 0.999) with true map sigma(a ln p - b ln(1-p) + c)."""
    p = rng.uniform(0.001, 0.999, n)
    y = (rng.random(n) < expit(a * np.log(p) - b * np.log1p(-p) + c)).astype(float)
    return p, y


@pytest.mark.parametrize(
    "truth",
    [(0.6, 1.4, -0.5), (2.0, -1.0, 0.3)],  # interior optimum; b < 0 so the constraint b >= 0 binds
    ids=["interior", "b-constrained"],
)
def test_beta_matches_betacal(rng, truth):
    """Same parameters (a, b) within 1e-3 and predictions within 1e-4.

    betacal fits sklearn's lbfgs LogisticRegression (tol 1e-4, C=1e11) and, when a coefficient is
    negative, refits without that feature; we solve the constrained problem in one go. Both reach
    the same optimum, up to lbfgs's stopping tolerance.
    """
    p, y = _probabilities(rng, 20_000, *truth)
    ref = BetaCalibration(parameters="abm").fit(p, y)
    ours = C.make("beta", input="probability").fit(p, y)
    np.testing.assert_allclose(ours.coef_, ref.calibrator_.map_[:2], atol=1e-3)
    grid = np.linspace(0.0, 1.0, 1001)
    np.testing.assert_allclose(ours.predict(grid), ref.predict(grid), atol=1e-4)
    assert abs(ours.m_ - ref.calibrator_.map_[2]) < 1e-3
    if truth[1] < 0:
        assert ours.coef_[1] == 0.0 and ref.calibrator_.map_[1] == 0.0


def test_beta_weighted_matches_betacal_and_repetition(rng):
    """With weights betacal's lbfgs stops earlier (predictions differ by ~2e-4): ours must agree to
    5e-4 and reach a weighted log loss no worse than betacal's."""
    p, y = _probabilities(rng, 5000, 0.8, 1.2, 0.1)
    w = rng.integers(1, 4, p.size).astype(float)
    ours = C.make("beta", input="probability").fit(p, y, sample_weight=w)
    ref = BetaCalibration(parameters="abm").fit(p, y, sample_weight=w)
    np.testing.assert_allclose(ours.predict(p), ref.predict(p), atol=5e-4)
    assert M.log_loss(y, ours.predict(p), w) <= M.log_loss(y, ref.predict(p), w) + 1e-12
    rep = C.make("beta", input="probability").fit(np.repeat(p, w.astype(int)), np.repeat(y, w.astype(int)))
    np.testing.assert_allclose(ours.params_, rep.params_, atol=1e-7)


def test_beta_params_vector_and_constraints(miscalibrated):
    s, y = miscalibrated
    cal = C.make("beta").fit(s, y, sample_weight=np.full(s.size, 0.5))
    assert cal.params_.shape == (3,) and np.all(cal.coef_ >= 0)
    assert isinstance(cal.coef_, np.ndarray)
