"""The two-weight fit of the likelihood calibrators: one row per sample, weights a and b."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from calibflow import calibrators as C
from calibflow.calibrators.base import LikelihoodCalibrator

METHODS = ["platt", "temperature", "beta", "spline", "gaussian", "gamma"]


pytestmark = pytest.mark.usefixtures("one_blas_thread")


def _data(seed=0, n=4000):
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, 2.0, n)
    q = expit(0.7 * s - 1.0 + 0.8 * np.sin(s))  # not in any family: every fit is a compromise
    a = rng.uniform(0.0, 1.0, n) * q  # soft positive weight, as CalEM's (1 - h) z
    b = 1.0 - a
    return s, a, b


@pytest.mark.parametrize("name", METHODS)
def test_two_weight_fit_equals_the_stacked_rows_fit(name):
    """fit_two_weight(s, a, b) == fit on 2n rows: (s, 1, weight a) and (s, 0, weight b)."""
    s, a, b = _data()
    one = C.make(name).fit_two_weight(s, a, b)
    two = C.make(name).fit(np.r_[s, s], np.r_[np.ones_like(s), np.zeros_like(s)], np.r_[a, b])
    grid = np.linspace(s.min(), s.max(), 301)
    # Same objective up to the factor 1/n vs 1/(2n) in the fitter's mean: same optimum. Newton stops
    # at gradient ~1e-10 (curves agree to ~1e-9); a fit with an active constraint (gamma here) ends in
    # SLSQP, whose ftol = 1e-12 applies to the mean loss that stacking halves: ~2e-7 apart.
    tol = 1e-6 if getattr(one, "solver_", "newton") == "slsqp" else 1e-7
    np.testing.assert_allclose(one.predict(grid), two.predict(grid), atol=tol)
    np.testing.assert_allclose(one.params_, two.params_, atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("name", ["platt", "beta", "spline"])
def test_ordinary_fit_is_the_two_weight_fit(name):
    rng = np.random.default_rng(1)
    s = rng.normal(0.0, 2.0, 3000)
    y = (rng.random(s.size) < expit(s - 1)).astype(float)
    w = rng.uniform(0.2, 2.0, s.size)
    a = C.make(name).fit(s, y, sample_weight=w)
    b = C.make(name).fit_two_weight(s, w * y, w * (1 - y))
    np.testing.assert_array_equal(a.params_, b.params_)


@pytest.mark.parametrize("name", ["platt", "beta", "spline", "gaussian"])
def test_warm_start_reaches_the_same_optimum(name):
    s, a, b = _data(2)
    cold = C.make(name).fit_two_weight(s, a, b)
    start = cold.params_ + 0.05  # a nearby start, as the previous EM iterate is
    warm = C.make(name).fit_two_weight(s, a, b, theta0=start)
    grid = np.linspace(s.min(), s.max(), 301)
    np.testing.assert_allclose(warm.predict(grid), cold.predict(grid), atol=1e-7)


def test_likelihood_methods_declare_two_weight_fit():
    for name in METHODS:
        assert issubclass(C.get_class(name), LikelihoodCalibrator)
    assert not issubclass(C.get_class("isotonic"), LikelihoodCalibrator)
    assert C.get_class("spline").negative_terms is False and C.get_class("platt").negative_terms


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s, a, b: (s, np.r_[a[:-1], -0.1], b, None), "a has 1 negative"),
        (lambda s, a, b: (s, a[:-1], b, None), "length mismatch: a"),
        (lambda s, a, b: (s, a, b[:-1], None), "length mismatch: b"),
        (lambda s, a, b: (s, np.r_[a[:-1], np.nan], b, None), "a has 1 NaN"),
        (lambda s, a, b: (np.r_[s[:-1], np.inf], a, b, None), "scores has 1 infinite"),
        (lambda s, a, b: (s, np.zeros_like(a), b, None), "a sums to 0"),
        (lambda s, a, b: (s, a, -b, None), "b sums to"),
        (lambda s, a, b: (s, a, b, np.zeros(5)), "theta0 must have 2"),
        (lambda s, a, b: (s, a, b, np.array([np.nan, 0.0])), "theta0 has 1 NaN"),
    ],
)
def test_bad_two_weight_input_is_named(change, message):
    s, a, b = _data(n=200)
    with pytest.raises(ValueError, match=message):
        C.make("platt").fit_two_weight(*change(s, a, b))


def test_negative_b_only_where_allowed():
    s, a, b = _data(n=500)
    b = b.copy()
    b[:10] = -0.5
    with pytest.raises(ValueError, match="b has 10 negative.*spline"):
        C.make("spline").fit_two_weight(s, a, b)
    # platt takes them (the UERM loss); the result is a stationary point of the two-weight risk
    C.make("platt").fit_two_weight(s, a, b)


def test_design_cache_is_reused_and_not_kept():
    s, a, b = _data(3)
    cache: dict = {}
    first = C.make("spline").fit_two_weight(s, a, b, design_cache=cache)
    assert len(cache) == 1  # the B-spline basis of these scores
    (key,) = cache
    basis = cache[key]
    again = C.make("spline").fit_two_weight(s, 0.5 * a, b, design_cache=cache)
    assert cache[key] is basis  # built once
    plain = C.make("spline").fit_two_weight(s, 0.5 * a, b)
    np.testing.assert_array_equal(again.params_, plain.params_)
    assert not hasattr(first, "_design_cache") and "_design_cache" not in first.to_json()
