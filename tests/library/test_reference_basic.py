"""Classic methods against scikit-learn on the same data (tolerances stated per method)."""

from __future__ import annotations

import numpy as np
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression

from calibflow import calibrators as C
from calibflow.calibrators._logistic import fit_logistic


def test_isotonic_matches_sklearn(miscalibrated, rng):
    s, y = miscalibrated
    s = np.round(s, 2)  # force ties
    w = rng.uniform(0.1, 2.0, s.size)
    ref = IsotonicRegression(out_of_bounds="clip").fit(s, y, sample_weight=w)
    ours = C.make("isotonic").fit(s, y, sample_weight=w)
    grid = np.linspace(s.min() - 1, s.max() + 1, 5001)
    np.testing.assert_allclose(ours.predict(grid), ref.predict(grid), atol=1e-10)


def test_platt_matches_unpenalised_logistic_regression(miscalibrated):
    s, y = miscalibrated
    ref = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(s[:, None], y)
    ours = C.make("platt").fit(s, y)
    assert abs(ours.coef_ - ref.coef_[0, 0]) < 1e-5
    assert abs(ours.intercept_ - ref.intercept_[0]) < 1e-5


def test_two_weight_fitter_negative_weights_and_constraints(rng):
    """Negative negative-term weights (UERM) and linear constraints both reach a stationary point."""
    n = 5000
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-x))).astype(float)
    X = np.column_stack([x, np.ones(n)])
    a, b = y, (1 - y) - 0.2 * y  # negative mass on positives' negative term, as UERM does
    fit = fit_logistic(X, a, b, l2=1e-3)
    assert np.isfinite(fit.theta).all()
    con = fit_logistic(X, y, 1 - y, constraints=(np.array([[1.0, 0.0]]), np.array([2.0])))
    assert con.theta[0] >= 2.0 - 1e-6


def test_penalty_mask_weights_are_consistent_with_the_gradient(rng):
    """A fractional penalty weight must give a stationary point of the same loss the fitter reports."""
    from scipy.optimize import approx_fprime

    from calibflow.calibrators._logistic import weighted_log_loss

    n = 3000
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(1.5 * x - 0.5)))).astype(float)
    X = np.column_stack([x, np.ones(n)])
    mask = np.array([0.3, 0.0])
    fit = fit_logistic(X, y, 1 - y, l2=0.5, penalty_mask=mask)
    g = approx_fprime(fit.theta, weighted_log_loss, 1e-7, X, y, 1 - y, 0.5, mask)
    assert np.max(np.abs(g)) < 1e-5
