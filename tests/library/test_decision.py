"""Decision boundaries over score x uncertainty (Arora et al.): algorithms, binning, MIST, generator."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st_

from calibflow import calibrators as C
from calibflow import decision as D
from calibflow.experiments import decision as E

PRECISIONS = [0.3, 0.5, 0.6, 0.75, 0.9, 1.0]


def exhaustive(p, n, sigma):
    """Max true positives over all (L+1)^K boundaries with tp >= sigma * pp (empty selection allowed)."""
    k, ell = p.shape
    pi, nu = D._prefix(np.asarray(p, float), np.asarray(n, float))
    best = 0.0
    for t in itertools.product(range(ell + 1), repeat=k):
        tp = sum(pi[i, t[i]] for i in range(k))
        pp = sum(nu[i, t[i]] for i in range(k))
        if tp >= sigma * pp - 1e-9:
            best = max(best, tp)
    return best


@st_.composite
def grids(draw, equal=False):
    k = draw(st_.integers(1, 3))
    ell = draw(st_.integers(1, 5))
    if equal:
        size = draw(st_.integers(1, 6))
        n = np.full((k, ell), size)
    else:
        n = np.array(draw(st_.lists(st_.integers(0, 9), min_size=k * ell, max_size=k * ell))).reshape(k, ell)
    frac = np.array(draw(st_.lists(st_.floats(0, 1), min_size=k * ell, max_size=k * ell))).reshape(k, ell)
    p = np.floor(frac * (n + 1)).clip(0, n)
    return p.astype(float), n.astype(float), draw(st_.sampled_from(PRECISIONS))


def _valid(b: D.Boundary, sigma: float):
    assert b.thresholds.shape == (b.thresholds.size,)
    assert (b.thresholds >= 0).all() and (b.thresholds <= b.n_score_bins).all()
    assert b.predicted_positives == 0 or b.true_positives >= sigma * b.predicted_positives - 1e-9


@settings(max_examples=150, deadline=None)
@given(grids(equal=True))
def test_ew_dpmt_is_optimal_on_equi_weight_grids(g):
    p, n, sigma = g
    b = D.ew_dpmt(p, n, sigma)
    _valid(b, sigma)
    assert b.true_positives == exhaustive(p, n, sigma)


@settings(max_examples=150, deadline=None)
@given(grids())
def test_vw_dpmt_is_optimal_on_any_grid(g):
    p, n, sigma = g
    b = D.vw_dpmt(p, n, sigma)
    _valid(b, sigma)
    assert b.true_positives == exhaustive(p, n, sigma)


@settings(max_examples=100, deadline=None)
@given(grids())
def test_heuristics_are_feasible_and_bounded_by_the_optimum(g):
    p, n, sigma = g
    best = exhaustive(p, n, sigma)
    for f in (D.st, D.hr, D.gmt, D.mist):
        b = f(p, n, sigma)
        _valid(b, sigma)
        assert b.true_positives <= best + 1e-9
        tp, pp = b.evaluate(p, n)
        assert (tp, pp) == (b.true_positives, b.predicted_positives)


def test_uncertainty_helps_when_levels_differ():
    # Level 0: top bins 95% positive; level 1: same score bins only 60% positive. ST must pool them.
    n = np.full((2, 4), 100.0)
    p = np.array([[10, 40, 90, 95], [10, 30, 55, 60]], float)
    st = D.st(p, n, 0.9)
    dp = D.ew_dpmt(p, n, 0.9)
    assert dp.true_positives == 185 and list(dp.thresholds) == [2, 0]
    assert st.true_positives < dp.true_positives
    assert D.vw_dpmt(p, n, 0.9).true_positives == 185
    assert D.gmt(p, n, 0.9).true_positives == 185
    assert D.mist(p, n, 0.9).true_positives == 185


def test_mist_grid_pools_violators_and_uses_a_single_cut():
    n = np.full((1, 3), 10.0)
    p = np.array([[2.0, 9.0, 7.0]])  # not monotone: bins 2 and 3 pool to 0.8
    assert D.mist(p, n, 0.8).thresholds.tolist() == [2]
    assert D.mist(p, n, 0.85).thresholds.tolist() == [0]


def test_ew_dpmt_large_grid_matches_vw_dpmt():
    rng = np.random.default_rng(3)
    n = np.full((4, 30), 20.0)
    p = rng.binomial(20, np.sort(rng.random((4, 30)), axis=1)).astype(float)
    for sigma in (0.6, 0.8, 0.95):
        assert D.ew_dpmt(p, n, sigma).true_positives == D.vw_dpmt(p, n, sigma).true_positives


def test_bad_grid_and_precision_are_named():
    n = np.ones((2, 3))
    with pytest.raises(ValueError, match="shape mismatch"):
        D.gmt(n, np.ones((3, 2)), 0.5)
    with pytest.raises(ValueError, match="positives <= totals"):
        D.vw_dpmt(2 * n, n, 0.5)
    with pytest.raises(ValueError, match="NaN"):
        D.ew_dpmt(np.full((2, 3), np.nan), n, 0.5)
    with pytest.raises(ValueError, match="precision bound"):
        D.st(n, n, 1.5)
    with pytest.raises(ValueError, match="K x L"):
        D.mist(np.ones(3), np.ones(3), 0.5)


# ---- binning and applying a boundary ------------------------------------------------------
def _scored(rng, n):
    u = rng.random(n)
    s = rng.random(n)
    # positivity rises with score, falls with uncertainty (the paper's high-score regime)
    y = (rng.random(n) < s**2 * (1 - 0.6 * u)).astype(float)
    return u, s, y


def test_equi_weight_binning_is_equal_on_holdout_and_frozen(rng):
    u, s, y = _scored(rng, 6000)
    b = D.Binning.fit(u, s, 3, 20, "equi_weight")
    pos, tot = b.grid(u, s, y)
    assert tot.shape == (3, 20) and (tot == 100).all() and pos.sum() == y.sum()
    u2, s2, y2 = _scored(rng, 3000)
    pos2, tot2 = b.grid(u2, s2, y2)
    assert tot2.sum() == 3000 and np.abs(tot2 - 50).max() < 30  # applied unchanged: only roughly equal
    again = D.Binning.from_dict(json.loads(json.dumps(b.to_dict())))
    np.testing.assert_array_equal(again.assign(u2, s2)[1], b.assign(u2, s2)[1])


def test_equi_span_binning_uses_equal_widths(rng):
    u, s, y = _scored(rng, 2000)
    b = D.Binning.fit(u, s, 4, 5, "equi_span")
    np.testing.assert_allclose(np.diff(b.s_edges[0]), (s.max() - s.min()) / 5)
    assert (b.s_edges == b.s_edges[0]).all()


def test_decide_applies_the_boundary_in_one_call(rng):
    u, s, y = _scored(rng, 8000)
    b, bd = D.fit_boundary("ew_dpmt", u, s, y, 0.8, 3, 20)
    pred = D.decide(b, bd, u, s)
    assert pred.sum() == bd.predicted_positives and y[pred].sum() == bd.true_positives
    assert bd.precision >= 0.8
    st = D.fit_boundary("st", u, s, y, 0.8, 1, 60)[1]
    assert bd.recall >= st.recall - 0.02  # the uncertainty-aware optimum is at least as good in-sample
    with pytest.raises(ValueError, match="boundary is for"):
        D.decide(D.Binning.fit(u, s, 2, 20), bd, u, s)
    with pytest.raises(ValueError, match="binning kind"):
        D.Binning.fit(u, s, 2, 2, "equi_depth")
    with pytest.raises(ValueError, match="length mismatch"):
        D.Binning.fit(u[:-1], s, 2, 2)


# ---- MIST calibrator --------------------------------------------------------------------
def test_mist_calibrator_beats_isotonic_when_uncertainty_matters(rng):
    u, s, y = _scored(rng, 20000)
    ut, st, yt = _scored(rng, 20000)
    mist = C.make("mist", n_levels=3).fit(s, y, uncertainty=u)
    ist = C.make("isotonic").fit(s, y)
    b = D.Binning.fit(u, s, 3, 10)
    e_m = D.ece_at_j(b, ut, st, yt, mist.predict(st, uncertainty=ut))
    e_i = D.ece_at_j(b, ut, st, yt, ist.predict(st))
    assert np.mean(e_m) < np.mean(e_i)
    cum = D.cumulative_ece_at_j(e_m)
    assert cum[-1] == pytest.approx(e_m[-1]) and cum[0] == pytest.approx(np.mean(e_m))
    again = C.from_json(mist.to_json())
    np.testing.assert_allclose(again.predict(st, uncertainty=ut), mist.predict(st, uncertainty=ut))


def test_mist_calibrator_validates(rng):
    u, s, y = _scored(rng, 500)
    with pytest.raises(ValueError, match="uncertainty"):
        C.make("mist").fit(s, y)
    with pytest.raises(ValueError, match="length mismatch"):
        C.make("mist").fit(s, y, uncertainty=u[:-1])
    with pytest.raises(ValueError, match="NaN"):
        C.make("mist").fit(np.r_[s[:-1], np.nan], y, uncertainty=u)
    with pytest.raises(ValueError, match="single class"):
        C.make("mist").fit(s, np.zeros_like(y), uncertainty=u)
    with pytest.raises(ValueError, match="n_levels"):
        C.make("mist", n_levels=0).fit(s, y, uncertainty=u)
    with pytest.raises(ValueError, match="not fitted"):
        C.make("mist").predict(s, uncertainty=u)


# ---- Sec. 3 generator ---------------------------------------------------------------------
def test_theorem_31_closed_form_at_tau_1():
    n, b1, b0 = 20, 1.0, 3.0
    sim = E.simulate_regions(200_000, n, 40, b1, b0, tau=1.0, seed=7)
    for k in (1, 4, 8, 12):
        m = sim["n1_train"] == k
        emp = sim["s_test"][m].mean()
        se = sim["s_test"][m].std() / np.sqrt(m.sum())
        assert abs(emp - E.theorem31_tau1(k / n, n, b1, b0)) < 4 * se + 1e-3
    # the closed form is the tau = 1 case of the general Q(r) mean
    assert E.theorem31_mean(0.4, n, b1, b0, 1.0) == pytest.approx(
        float(E.theorem31_tau1(0.4, n, b1, b0)), abs=1e-4
    )


def test_undersampling_makes_train_positivity_overstate_test_positivity():
    n, b1, b0 = 20, 1.0, 3.0
    sim = E.simulate_regions(100_000, n, 40, b1, b0, tau=3.0, seed=8)
    m = sim["n1_train"] == 10
    emp = sim["s_test"][m].mean()
    assert emp < 0.5 - 0.1
    assert abs(emp - E.theorem31_mean(0.5, n, b1, b0, 3.0)) < 0.02
    with pytest.raises(ValueError, match="tau"):
        E.simulate_regions(10, 5, 5, 1.0, 1.0, tau=0.0, seed=0)
