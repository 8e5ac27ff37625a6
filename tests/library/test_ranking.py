"""Gaussian / Gamma calibration and UERM fitting (Kweon et al. 2022)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow.calibrators._logistic import fit_logistic
from calibflow.calibrators.ranking import fit_uerm, popularity_propensity, uerm_weights


def two_gaussians(rng, n, mu0, sd0, mu1, sd1, pi1):
    """Scores from the class-conditional Gaussians of eq. 8 and the exact posterior of eq. 9."""
    y = (rng.random(n) < pi1).astype(float)
    s = np.where(y == 1, rng.normal(mu1, sd1, n), rng.normal(mu0, sd0, n))
    a = 1 / (2 * sd0**2) - 1 / (2 * sd1**2)
    b = mu1 / sd1**2 - mu0 / sd0**2
    c = mu0**2 / (2 * sd0**2) - mu1**2 / (2 * sd1**2) + np.log(pi1 * sd0 / ((1 - pi1) * sd1))
    return s, y, (a, b, c)


def mnar(rng, n=40_000):
    """Preference R ~ sigma(1.2 s - 1.5); exposure O ~ Bernoulli(w) with known w in [0.1, 1]; Y = O R."""
    s = rng.normal(0.0, 1.5, n)
    r = (rng.random(n) < expit(1.2 * s - 1.5)).astype(float)
    w = rng.uniform(0.1, 1.0, n)
    y = r * (rng.random(n) < w)
    return s, y, w, r


# ---- monotonicity (App. C) ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gaussian", "gamma"])
@pytest.mark.parametrize("loss", ["naive", "uerm"])
def test_constraints_hold_where_the_unconstrained_fit_turns_down(name, loss, rng):
    # sd1 < sd0 gives a < 0: the true posterior falls again for s > -b / 2a (about 2.4 here).
    s, y, _ = two_gaussians(rng, 20_000, 0.0, 1.5, 2.0, 0.7, 0.15)
    cal = C.make(name, loss=loss)
    w = np.full(s.size, 0.5) if loss == "uerm" else None
    cal.fit(s, y, propensity=w)
    X = cal._features(s)
    a, b = (y / 0.5, 1 - y / 0.5) if loss == "uerm" else (y, 1 - y)
    free = fit_logistic(X, a, b).theta  # the same family without App. C's constraints
    grid = np.linspace(s.min(), s.max(), 4001)
    assert np.diff(expit(cal._features(grid) @ free)).min() < 0  # ...is not monotone
    p = cal.predict(np.linspace(s.min() - 5, s.max() + 5, 6001))  # the constrained one is, on all of R
    assert np.diff(p).min() >= 0
    ta, tb, _ = cal.theta_
    ends = (ta * np.array([-2.0, 2.0]) + tb) if name == "gaussian" else (ta / np.array([0.01, 1.01]) + tb)
    assert ends.min() >= 1e-6 - 1e-9  # 2as+b (resp. a/s+b) > 0 at s_min and s_max


def test_gaussian_recovers_the_two_gaussian_posterior(rng):
    s, y, (a, b, c) = two_gaussians(rng, 40_000, 0.0, 1.0, 2.0, 1.3, 0.2)  # a > 0, monotone on the bulk
    lo, hi = np.quantile(s, [0.02, 0.98])
    grid = np.linspace(lo, hi, 200)
    truth = expit(a * grid**2 + b * grid + c)
    gauss = C.make("gaussian").fit(s, y)
    platt = C.make("platt").fit(s, y)
    err_g = np.abs(gauss.predict(grid) - truth).max()
    err_p = np.abs(platt.predict(grid) - truth).max()
    assert err_g < 0.03 and err_g < 0.5 * err_p
    assert gauss.paper_params()["a"] == pytest.approx(a, abs=0.05)


def test_gamma_recovers_the_two_gamma_posterior(rng):
    n = 40_000
    y = (rng.random(n) < 0.2).astype(float)
    s = np.where(y == 1, rng.gamma(5.0, 1 / 1.5, n), rng.gamma(2.0, 1 / 2.0, n))
    grid = np.linspace(*np.quantile(s, [0.02, 0.98]), 200)
    a, b = 5.0 - 2.0, 2.0 - 1.5
    from scipy.special import gammaln

    c = np.log(0.2 / 0.8) + 5 * np.log(1.5) - 2 * np.log(2.0) + gammaln(2.0) - gammaln(5.0)
    truth = expit(a * np.log(grid) + b * grid + c)
    gam = C.make("gamma").fit(s, y)
    assert np.abs(gam.predict(grid) - truth).max() < 0.03
    pp = gam.paper_params()
    assert pp["shift"] < s.min()  # x = s - shift > 0 everywhere on the fitting data


# ---- Platt is the a = 0 special case ---------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gaussian", "gamma"])
def test_platt_is_the_a_zero_special_case(name, miscalibrated):
    s, y = miscalibrated
    platt = C.make("platt").fit(s, y)
    special = C.make(name, fix_a_zero=True).fit(s, y)
    grid = np.linspace(s.min(), s.max(), 500)
    np.testing.assert_allclose(special.predict(grid), platt.predict(grid), atol=1e-6)
    assert special.theta_[0] == 0.0


@pytest.mark.parametrize("name", ["gaussian", "gamma"])
def test_platt_special_case_under_uerm(name, rng):
    s, y, w, _ = mnar(rng, 20_000)
    platt = fit_uerm(C.make("platt"), s, y, w)
    special = C.make(name, loss="uerm", fix_a_zero=True).fit(s, y, propensity=w)
    grid = np.linspace(s.min(), s.max(), 500)
    np.testing.assert_allclose(special.predict(grid), platt.predict(grid), atol=1e-5)


def test_gaussian_with_free_a_is_no_worse_than_platt(miscalibrated):
    s, y = miscalibrated
    from calibflow.metrics import log_loss

    g, p = C.make("gaussian").fit(s, y), C.make("platt").fit(s, y)
    assert log_loss(y, g.predict(s)) <= log_loss(y, p.predict(s)) + 1e-9


# ---- UERM weights and propensities ----------------------------------------------------------------------
def test_uerm_weights_formula():
    y = np.array([1.0, 0.0, 1.0, 1.0])
    w = np.array([0.5, 0.2, 0.05, 1.0])
    a, b = uerm_weights(y, w, floor=0.1)
    np.testing.assert_allclose(a, [2.0, 0.0, 10.0, 1.0])
    np.testing.assert_allclose(b, [-1.0, 1.0, -9.0, 0.0])  # 1 - Y/w, negative for observed pairs with w < 1
    a, b = uerm_weights(y, w, sample_weight=[1, 2, 3, 4], floor=0.0)
    np.testing.assert_allclose(a, [2.0, 0.0, 60.0, 4.0])
    np.testing.assert_allclose(b, [-1.0, 2.0, -57.0, 0.0])
    a, b = uerm_weights(y, np.ones(4))  # uniform propensity = naive loss, eq. 14
    np.testing.assert_allclose(a, y)
    np.testing.assert_allclose(b, 1 - y)


def test_popularity_propensity_formula():
    Y = np.zeros((10, 4))
    Y[:4, 0] = 1
    Y[:1, 1] = 1
    Y[:9, 3] = 1  # item counts 4, 1, 0, 9
    w = popularity_propensity(Y)
    np.testing.assert_allclose(w, [np.sqrt(4 / 9), np.sqrt(1 / 9), 0.1, 1.0])
    np.testing.assert_allclose(popularity_propensity(Y, power=1.0, floor=0.2), [4 / 9, 0.2, 0.2, 1.0])


def test_uerm_recovers_preference_probability(rng):
    """Prop. 1: with true propensities the UERM fit targets P(R=1|s); the naive fit targets P(Y=1|s)."""
    s, y, w, _ = mnar(rng)
    grid = np.linspace(-3, 3, 100)
    truth = expit(1.2 * grid - 1.5)
    for name in ("gaussian", "gamma"):
        uerm = C.make(name, loss="uerm", propensity_floor=0.0).fit(s, y, propensity=w)
        naive = C.make(name).fit(s, y)
        assert not uerm.regularised_
        assert np.abs(uerm.predict(grid) - truth).max() < 0.05
        assert np.abs(naive.predict(grid) - truth).max() > 0.15
    platt = fit_uerm(C.make("platt"), s, y, w, floor=0.0)
    assert np.abs(platt.predict(grid) - truth).max() < 0.05
    # Beta on the sigmoid-rescaled score (as the paper does): a = b = 1.2 represents the truth exactly.
    beta = fit_uerm(C.make("beta"), s, y, w, floor=0.0)
    assert np.abs(beta.predict(grid) - truth).max() < 0.05
    assert np.abs(C.make("beta").fit(s, y).predict(grid) - truth).max() > 0.15


def test_negative_weights_go_through_slsqp_and_converge(rng):
    s, y, w, _ = mnar(rng, 10_000)
    a, b = uerm_weights(y, w)
    assert (b < 0).any()
    cal = C.make("gaussian", loss="uerm").fit(s, y, propensity=w)
    assert cal.solver_ == "slsqp" and not cal.regularised_
    # The solution is a stationary point: nudging any coefficient does not lower the UERM risk.
    from calibflow.calibrators._logistic import weighted_log_loss

    X = cal._features(s)
    base = weighted_log_loss(cal.theta_, X, a, b)
    for k in range(3):
        for h in (-1e-3, 1e-3):
            t = cal.theta_.copy()
            t[k] += h
            feasible = (2 * t[0] * np.array([-1, 1]) + t[1] >= 1e-6).all()
            assert not feasible or weighted_log_loss(t, X, a, b) >= base - 1e-9


def test_unbounded_uerm_is_regularised_or_rejected(rng):
    """Positives at the top with tiny propensities: the clipped IPS risk has no minimiser."""
    n = 3_000
    s = rng.normal(0.0, 1.0, n)
    r = (rng.random(n) < expit(3 * s - 1)).astype(float)
    y = r * (rng.random(n) < 0.2)
    w = np.full(n, 0.02)  # far below the true 0.2
    cal = C.make("gaussian", loss="uerm").fit(s, y, propensity=w)  # floor 0.1 -> weights 1 - 10 Y
    assert cal.regularised_ and np.isfinite(cal.theta_).all()
    assert np.diff(cal.predict(np.linspace(-4, 4, 1000))).min() >= 0
    with pytest.raises(ValueError, match="unbounded"):
        C.make("gaussian", loss="uerm", ridge=0.0).fit(s, y, propensity=w)
    with pytest.raises(ValueError, match="sum to <= 0"):  # mean(Y / 0.02) >= 1: not even the intercept exists
        C.make("gamma", loss="uerm", propensity_floor=0.0).fit(s, y, propensity=w)


# ---- JSON and inputs -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gaussian", "gamma"])
@pytest.mark.parametrize("loss", ["naive", "uerm"])
def test_json_round_trip(name, loss, rng):
    s, y, w, _ = mnar(rng, 5_000)
    cal = C.make(name, loss=loss).fit(s, y, propensity=w if loss == "uerm" else None)
    again = C.from_json(cal.to_json())
    probe = np.linspace(s.min() - 3, s.max() + 3, 300)  # outside the fitted range too
    np.testing.assert_allclose(again.predict(probe), cal.predict(probe), atol=1e-12)
    assert again.get_params() == cal.get_params()
    assert json.loads(cal.to_json())["params"]["loss"] == loss


@pytest.mark.parametrize(
    "kwargs, fit_kwargs, message",
    [
        ({"loss": "uerm"}, {"propensity": np.r_[0.0, np.full(99, 0.5)]}, "non-positive"),
        ({"loss": "uerm"}, {"propensity": np.r_[-0.3, np.full(99, 0.5)]}, "non-positive"),
        ({"loss": "uerm"}, {"propensity": np.r_[1.5, np.full(99, 0.5)]}, "above 1"),
        ({"loss": "uerm"}, {"propensity": np.r_[np.nan, np.full(99, 0.5)]}, "NaN"),
        ({"loss": "uerm"}, {"propensity": np.full(50, 0.5)}, "length mismatch"),
        ({"loss": "uerm"}, {}, "needs propensity"),
        ({}, {"propensity": np.full(100, 0.5)}, "only used by loss='uerm'"),
        ({"loss": "ips"}, {}, "loss must be one of"),
        ({"ridge": -1.0}, {}, "ridge"),
        ({"loss": "uerm", "propensity_floor": 2.0}, {"propensity": np.full(100, 0.5)}, "propensity_floor"),
        ({}, {"sample_weight": np.r_[-1.0, np.ones(99)]}, "negative"),
    ],
)
@pytest.mark.parametrize("name", ["gaussian", "gamma"])
def test_bad_inputs_are_named(name, kwargs, fit_kwargs, message, rng):
    s = rng.normal(size=100)
    y = (rng.random(100) < 0.3).astype(float)
    with pytest.raises(ValueError, match=message):
        C.make(name, **kwargs).fit(s, y, **fit_kwargs)


def test_other_bad_inputs(rng):
    with pytest.raises(ValueError, match="offset"):
        C.make("gamma", offset=0.0).fit(rng.normal(size=50), np.r_[np.ones(10), np.zeros(40)])
    with pytest.raises(ValueError, match="two distinct scores"):
        C.make("gaussian").fit(np.ones(20), np.r_[np.ones(5), np.zeros(15)])
    for name in ("isotonic", "histogram", "bbq"):
        with pytest.raises(ValueError, match="not one"):
            fit_uerm(C.make(name), rng.normal(size=20), np.r_[np.ones(5), np.zeros(15)], np.full(20, 0.5))
    with pytest.raises(ValueError, match="0/1"):
        popularity_propensity(np.array([[0, 2], [1, 0]]))
    with pytest.raises(ValueError, match="2-D"):
        popularity_propensity(np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="no positive"):
        popularity_propensity(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="floor"):
        popularity_propensity(np.eye(3), floor=0.0)
    with pytest.raises(ValueError, match="NaN"):
        popularity_propensity(np.array([[np.nan, 1.0]]))


def test_naive_gamma_keeps_a_steep_converged_fit_unregularised():
    """A steep low tail (|logit| > 30 at s_min) is the optimum of the convex naive loss, not divergence.

    The curve is the one bank_marketing's XGBoost margins gave; the ridge fallback used to fire on it and
    bend the fit away (test ECE 0.064 against 0.009 for gaussian).
    """
    rng = np.random.default_rng(7)
    s = rng.uniform(-7.9, 3.0, 20_000)
    t = (s - s.min()) / (s.max() - s.min()) + 0.01
    y = (rng.random(s.size) < expit(7.6 * np.log(t) - 0.86 * t + 3.1)).astype(float)
    cal = C.make("gamma", input="logit").fit(s, y)
    assert not cal.regularised_
    assert M.ece(y, cal.predict(s)) < 0.015
