"""Monotone P-spline logistic calibration against pygam and against the constrained SLSQP fit."""

from __future__ import annotations

import numpy as np
import pytest
from pygam import LogisticGAM
from pygam import s as term
from scipy.interpolate import BSpline
from scipy.special import expit, log_expit

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow.calibrators._logistic import fit_logistic
from calibflow.calibrators.spline import _difference, bspline_design, penalised_basis


def _objective(basis, y, w, theta, lam):
    """-sum w [y log p + (1-y) log(1-p)] + lam/2 ||D2 theta||^2, the GAM objective on the sum scale."""
    z = basis @ theta
    d2 = np.diff(theta, 2)
    return float(-(w * y) @ log_expit(z) - (w * (1 - y)) @ log_expit(-z) + 0.5 * lam * d2 @ d2)


def _u_shaped(rng, n):
    """A calibration curve that dips: the monotone constraint must bind."""
    s = rng.normal(0.0, 2.0, n)
    y = (rng.random(n) < expit(0.8 * s - 1.0 + 4.0 * np.exp(-((s + 2.5) ** 2)))).astype(float)
    return s, y


def test_basis_is_the_uniform_cubic_bspline(rng):
    x = np.sort(rng.uniform(-3.0, 5.0, 500))
    k, h = 12, 8.0 / 9
    knots = np.linspace(-3 - 3 * h, 5 + 3 * h, k + 4)
    ref = BSpline.design_matrix(np.clip(x, -3, 5), knots, 3).toarray()
    np.testing.assert_allclose(bspline_design(x, -3.0, 5.0, k), ref, atol=1e-13)


@pytest.mark.parametrize("shape", ["smooth", "u-shaped"])
def test_matches_pygam_monotone_gam(miscalibrated, rng, shape):
    """pygam's LogisticGAM(s(0, monotonic_inc)) with the same basis (20 cubic B-splines, knots
    equal-spaced over the data range) and the same penalty (lam = 0.6 on the second differences)
    enforces monotonicity by a large penalty, we by hard constraints: our penalised objective must
    be no worse than pygam's coefficients score on it, and the curves must agree to 0.01."""
    s, y = miscalibrated if shape == "smooth" else _u_shaped(rng, 20_000)
    s, y = s[:8000], y[:8000]
    ours = C.make("spline").fit(s, y)
    gam = LogisticGAM(term(0, n_splines=20, lam=0.6, constraints="monotonic_inc")).fit(s[:, None], y)
    theta_gam = gam.coef_[:20] + gam.coef_[20]  # the basis sums to one: fold pygam's intercept in
    basis = bspline_design(s, s.min(), s.max(), 20)
    w = np.ones_like(s)
    assert _objective(basis, y, w, ours.coef_, 0.6) <= _objective(basis, y, w, theta_gam, 0.6) + 1e-6
    grid = np.linspace(s.min(), s.max(), 1001)
    np.testing.assert_allclose(ours.predict(grid), gam.predict_proba(grid[:, None]), atol=0.01)
    ll_ours, ll_gam = M.log_loss(y, ours.predict(s)), M.log_loss(y, gam.predict_proba(s[:, None]))
    assert abs(ll_ours - ll_gam) / ll_gam < 1e-3


def test_active_set_reaches_the_constrained_optimum(rng):
    """The active-set loop ends where fit_logistic's own constrained (SLSQP) solver ends."""
    s, y = _u_shaped(rng, 4000)
    w = rng.uniform(0.2, 2.0, s.size)
    ours = C.make("spline", n_splines=12, lam=2.0).fit(s, y, sample_weight=w)
    basis = bspline_design(s, s.min(), s.max(), 12)
    t, mask = penalised_basis(np.eye(12), _difference(12, 2).T @ _difference(12, 2))
    ref = fit_logistic(
        basis @ t,
        w * y,
        w * (1 - y),
        constraints=(_difference(12, 1) @ t, np.zeros(11)),
        l2=2.0 / s.size,
        penalty_mask=mask,
        max_iter=1000,
    )
    theta_ref = t @ ref.theta
    assert np.any(np.diff(ours.coef_) == 0.0)  # some constraints are active
    assert _objective(basis, y, w, ours.coef_, 2.0) <= _objective(basis, y, w, theta_ref, 2.0) + 1e-6
    np.testing.assert_allclose(ours.coef_, theta_ref, atol=1e-3)


def test_weights_equal_repetition(rng):
    s, y = _u_shaped(rng, 3000)
    w = rng.integers(1, 4, s.size)
    a = C.make("spline").fit(s, y, sample_weight=w.astype(float))
    b = C.make("spline").fit(np.repeat(s, w), np.repeat(y, w))
    np.testing.assert_allclose(a.params_, b.params_, atol=1e-5)
    np.testing.assert_allclose(a.predict(s), b.predict(s), atol=1e-6)


def test_zero_weight_rows_are_ignored(rng):
    """CalEM hands rows whose weight fell to zero: they must not move the fit (nor the knots)."""
    s, y = _u_shaped(rng, 3000)
    w = np.r_[np.ones(2900), np.zeros(100)]
    s[2900:] += 50.0  # far outside the live range
    a = C.make("spline").fit(s, y, sample_weight=w)
    b = C.make("spline").fit(s[:2900], y[:2900])
    np.testing.assert_allclose(a.params_, b.params_, atol=1e-8)


def test_large_penalty_tends_to_platt(miscalibrated):
    """lam -> infinity leaves only the penalty's null space, lines in the logit: Platt scaling."""
    s, y = miscalibrated
    big = C.make("spline", lam=1e9).fit(s, y)
    platt = C.make("platt").fit(s, y)
    grid = np.linspace(s.min(), s.max(), 101)
    np.testing.assert_allclose(big.predict(grid), platt.predict(grid), atol=1e-4)


def test_invalid_params(miscalibrated):
    s, y = miscalibrated
    with pytest.raises(ValueError, match="n_splines"):
        C.make("spline", n_splines=3).fit(s, y)
    with pytest.raises(ValueError, match="lam"):
        C.make("spline", lam=-1.0).fit(s, y)
    with pytest.raises(ValueError, match="distinct"):
        C.make("spline").fit(
            np.r_[np.zeros(9), 1.0], np.tile([0.0, 1.0], 5), sample_weight=np.r_[np.ones(9), 0.0]
        )
