"""Issue 15: the decision experiment cannot fool itself (ST feasible in 2-D, equal-size gain, controls)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st_

from calibflow import decision as D
from calibflow.experiments import _decision_eval as V
from calibflow.experiments import decision_generative as G


@settings(max_examples=120, deadline=None)
@given(
    st_.integers(0, 10_000),
    st_.integers(1, 4),
    st_.integers(2, 12),
    st_.sampled_from([0.3, 0.5, 0.7, 0.9]),
)
def test_exact_2d_algorithms_are_never_below_st_on_the_shared_score_grid(seed, k, ell, sigma):
    """ST is a feasible boundary of the 2-D grid: VW-DPMT and EW-DPMT hold at least ST's positives."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 400))
    s = np.round(rng.random(n), 2)  # ties in the score
    u = rng.random(n) if seed % 2 else s + 0.3 * rng.random(n)  # independent, or tied to the score
    y = (rng.random(n) < s * (1.2 - u / u.max())).astype(int)
    b = D.Binning.fit(u, s, k, ell, "shared_score")
    assert np.all(b.s_edges == b.s_edges[0])  # one set of score edges shared by every level
    pos, tot = b.grid(u, s, y)
    base = D.st(pos, tot, sigma)
    for algo in (D.vw_dpmt, D.ew_dpmt):
        bd = algo(pos, tot, sigma)
        assert bd.true_positives >= base.true_positives
        assert bd.predicted_positives == 0 or bd.true_positives >= sigma * bd.predicted_positives - 1e-9


def test_st_on_the_shared_grid_is_a_pure_score_threshold(rng):
    s, u = rng.random(2000), rng.random(2000)
    y = (rng.random(2000) < s).astype(int)
    b = D.Binning.fit(u, s, 3, 20, "shared_score")
    bd = D.st(*b.grid(u, s, y), 0.7)
    sel = D.decide(b, bd, u, s)
    assert sel.any() and s[sel].min() > s[~sel].max()  # everything above one cut, whatever u is


def brute_threshold(v, y, sigma):
    best, cut = 0.0, np.inf
    for c in np.unique(v)[::-1]:  # highest cut first: among equal recalls, the smallest selection
        sel = v >= c
        if y[sel].sum() >= sigma * sel.sum() - 1e-9 and y[sel].sum() > best:
            best, cut = y[sel].sum(), c
    return cut


@settings(max_examples=80, deadline=None)
@given(st_.integers(0, 10_000), st_.sampled_from([0.4, 0.6, 0.8, 1.0]))
def test_sample_threshold_matches_brute_force(seed, sigma):
    rng = np.random.default_rng(seed)
    v = np.round(rng.random(60), 1)
    y = (rng.random(60) < v).astype(int)
    assert D.sample_threshold(v, y, sigma) == brute_threshold(v, y, sigma)


def test_equal_size_gain_is_zero_for_the_score_and_negative_for_noise(rng):
    s = rng.random(20_000)
    y = (rng.random(s.size) < s**3).astype(int)
    ts = V.TestSet(s, y)
    top = s >= np.quantile(s, 0.9)
    o = V.outcome(top, ts, 0.7)
    assert o["gain"] == pytest.approx(0.0)
    assert o["precision"] == pytest.approx(y[top].mean())
    noisy = (s + rng.normal(0, 0.3, s.size)) >= np.quantile(s + rng.normal(0, 0.3, s.size), 0.9)
    assert V.outcome(noisy, ts, 0.7)["gain"] < -0.05
    # below the bound: recall kept raw, zeroed in the appendix column
    o2 = V.outcome(top, ts, 0.99)
    assert o2["recall_zeroed"] == 0.0 and o2["recall"] > 0
    # ST tuned on the test set at the method's own precision can match the score top-n
    assert o["st_matched"] >= o["recall"] - 1e-12


def test_mist_on_samples_meets_the_bound_on_the_hold_out(rng):
    n = 5000
    s, u = rng.random(n), rng.random(n)
    y = (rng.random(n) < np.clip(s * (1.5 - u), 0, 1)).astype(int)
    htp, hpp, mask = V.select("mist_samples", (s, u, y), (s, u), 0.8, 3, 50, {})
    assert hpp > 0 and htp >= 0.8 * hpp
    assert mask.sum() == hpp  # same data: the test selection is the hold-out one


def test_generative_model_gain_where_deployment_is_thin_not_where_it_follows_training():
    cfg = {
        "n_regions": 4000,
        "n_hold": 40_000,
        "n_test": 40_000,
        "K": 3,
        "L": 100,
        "methods": ["st", "vw_dpmt"],
    }
    eq = [G.run_cell(cfg, 3.0, "equal", 0.7, sd) for sd in range(3)]
    ev = [G.run_cell(cfg, 3.0, "evidence", 0.7, sd) for sd in range(3)]
    head_eq = np.mean([o["oracle", "st"]["gain"] for o in eq])
    head_ev = np.mean([o["oracle", "st"]["gain"] for o in ev])
    assert head_eq > 3 * head_ev > 0  # the head-room lives in thinly trained regions
    bayes_eq = np.mean([o["bayes", "st"]["gain"] for o in eq])
    bayes_ev = np.mean([o["bayes", "st"]["gain"] for o in ev])
    assert head_eq > bayes_eq > bayes_ev  # knowing (N, N1) is less than knowing S, more than nothing
    for o in eq + ev:
        assert o["*", "st"]["gain"] == pytest.approx(0.0)
        assert o["posterior entropy", "vw_dpmt"]["hold_recall"] >= o["*", "st"]["hold_recall"] - 1e-12


def test_bayes_positivity_matches_theorem_31():
    from calibflow.experiments.decision import theorem31_mean, theorem31_tau1

    n, k = np.array([20, 20, 5]), np.array([5, 15, 5])
    got = G.bayes_positivity(n, k, 1.0, 3.0, 3.0, grid=4001)
    want = [theorem31_mean(kk / nn, nn, 1.0, 3.0, 3.0) for nn, kk in zip(n, k, strict=True)]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(
        G.bayes_positivity(n, k, 1.0, 3.0, 1.0), theorem31_tau1(k / n, n, 1.0, 3.0), rtol=1e-3
    )


def test_generative_population_follows_the_model(rng):
    pop = G.population({"n_regions": 50_000, "evidence_min": 1, "evidence_max": 1000}, 3.0, rng)
    assert 0.2 < pop["s_true"].mean() < 0.3  # Beta(1, 3) prior, xi = 0.25
    assert pop["score"].mean() > pop["s_true"].mean()  # undersampled negatives: over-estimation
    low = pop["evidence"] < 5
    assert pop["uncertainty"][low].mean() > pop["uncertainty"][~low].mean()
    with pytest.raises(ValueError, match="deployment"):
        G.deploy(pop, 10, "uniform", rng)


def test_the_large_profile_is_a_named_profile_of_params():
    """`python -m calibflow.pipeline.reproduce decision --profile large` finds its block; a typo is named."""
    from calibflow.pipeline._common import StageError, load_params
    from calibflow.pipeline.reproduce import experiment_config

    params = load_params(Path(__file__).resolve().parents[2] / "params.yaml")
    name, cfg = experiment_config(params, "decision", "large")
    assert name == "large" and cfg["generative"]["n_hold"] >= 1_000_000
    assert experiment_config(params, "decision", None)[0] == params.reproduce.profile
    with pytest.raises(StageError, match="profile"):
        experiment_config(params, "decision", "lareg")
    with pytest.raises(StageError, match="profile"):
        experiment_config(params, "vad", "large")  # only decision defines it
