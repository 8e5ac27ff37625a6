"""The warm-started fitter reaches the same optimum as the cold one (it is only a speed-up)."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from calibflow.calibrators._logistic import fit_logistic
from calibflow.calibrators._warm import SUBSAMPLE, fit_logistic_warm
from calibflow.calibrators.beta import beta_features


def test_warm_start_same_optimum(rng):
    n = 5 * SUBSAMPLE
    s = rng.normal(0.0, 2.0, n)
    y = (rng.random(n) < expit(0.5 * s - 3.0)).astype(float)
    w = rng.uniform(0.5, 1.5, n)
    X = np.column_stack([s, np.ones(n)])
    cold, warm = fit_logistic(X, w * y, w * (1 - y)), fit_logistic_warm(X, w * y, w * (1 - y))
    assert warm.converged and warm.n_iter < cold.n_iter
    np.testing.assert_allclose(warm.theta, cold.theta, atol=1e-8)
    # constrained (beta's a, b >= 0) with the constraint active
    p = expit(s)
    yb = (rng.random(n) < expit(2.0 * np.log(p) + 1.0 * np.log1p(-p))).astype(float)
    cons = (np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), np.zeros(2))
    F = beta_features(p)
    cold = fit_logistic(F, yb, 1 - yb, constraints=cons)
    warm = fit_logistic_warm(F, yb, 1 - yb, constraints=cons)
    np.testing.assert_allclose(warm.theta, cold.theta, atol=1e-5)
