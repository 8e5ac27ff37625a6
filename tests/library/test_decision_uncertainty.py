"""Uncertainty sources (calibflow.uncertainty) and a small real-data run of the decision experiment."""

from __future__ import annotations

import os

import numpy as np
import pytest
import xgboost as xgb
from scipy.stats import beta as beta_dist

from calibflow import uncertainty as U
from calibflow.experiments import decision as E


def test_beta_entropy_matches_scipy():
    a1 = np.array([0.5, 1.0, 2.0, 30.0, 300.0])
    a0 = np.array([0.7, 1.0, 5.0, 3.0, 900.0])
    np.testing.assert_allclose(U.beta_entropy(a1, a0), beta_dist(a1, a0).entropy(), rtol=1e-10)
    with pytest.raises(ValueError, match="> 0"):
        U.beta_entropy([0.0], [1.0])


def test_posterior_beta_is_centred_on_the_score_and_entropy_falls_with_evidence():
    s = np.full(4, 0.3)
    ev = np.array([1.0, 10.0, 100.0, 1000.0])
    a1, a0 = U.posterior_beta(s, ev, prior=2.0)
    np.testing.assert_allclose(a1 / (a1 + a0), s)
    np.testing.assert_allclose(a1 + a0, ev + 2.0)
    assert np.all(np.diff(U.beta_entropy(a1, a0)) < 0)
    with pytest.raises(ValueError, match="length mismatch"):
        U.posterior_beta(s, ev[:-1])


def _model(rng, n=3000):
    X = rng.normal(size=(n, 4))
    y = (rng.random(n) < 1 / (1 + np.exp(-2 * X[:, 0]))).astype(int)
    # few rows with large |x1|: sparse region for the trees
    params = {"objective": "binary:logistic", "max_depth": 3, "eta": 0.3, "nthread": 1, "seed": 0}
    return X, y, xgb.train(params, xgb.DMatrix(X, label=y), 20)


def test_xgb_evidence_is_lower_in_sparse_regions(rng):
    X, y, bst = _model(rng)
    ev = U.xgb_evidence(bst, X, n_train=X.shape[0])
    assert ev.shape == (X.shape[0],) and np.all(ev > 0) and np.all(ev <= X.shape[0])
    centre = np.abs(X[:, 0]) < 0.5
    tails = np.abs(X[:, 0]) > 2.0
    assert np.median(ev[centre]) > np.median(ev[tails])
    s, u = U.xgb_posterior_entropy(bst, X, n_train=X.shape[0])
    np.testing.assert_allclose(s, bst.predict(xgb.DMatrix(X)), rtol=1e-6)
    assert np.isfinite(u).all()
    s2, u2 = U.xgb_posterior_entropy(bst, X, n_train=X.shape[0], covers=U.leaf_covers(bst))
    np.testing.assert_array_equal(s2, s)
    np.testing.assert_array_equal(u2, u)
    with pytest.raises(ValueError, match="n_train"):
        U.xgb_evidence(bst, X, n_train=0)


def test_paired_pvalue_edge_cases():
    from scipy.stats import ttest_rel

    from calibflow.results import paired_pvalue

    a, b = np.array([0.3, 0.5, 0.4, 0.7]), np.array([0.2, 0.5, 0.1, 0.6])
    assert paired_pvalue(a, b) == pytest.approx(ttest_rel(a, b).pvalue)
    assert paired_pvalue(a, b, "greater") == pytest.approx(ttest_rel(a, b, alternative="greater").pvalue)
    assert np.isnan(paired_pvalue(a[:1], b[:1]))  # fewer than 2 pairs
    assert np.isnan(paired_pvalue(a, a + 0.1))  # constant difference: no variance
    with pytest.raises(ValueError, match="shape"):
        paired_pvalue(a, b[:3])


def test_replica_std_and_user_column(rng):
    z = rng.normal(size=(5, 100))
    np.testing.assert_allclose(U.replica_logit_std(z), z.std(axis=0, ddof=1))
    with pytest.raises(ValueError, match="at least 2 replicas"):
        U.replica_logit_std(z[:1])
    with pytest.raises(ValueError, match="NaN"):
        U.replica_logit_std(np.full((2, 3), np.nan))
    assert U.user_uncertainty([0.1, 0.2], n=2).tolist() == [0.1, 0.2]
    with pytest.raises(ValueError, match="length mismatch"):
        U.user_uncertainty([0.1, 0.2], n=3)
    with pytest.raises(ValueError, match="infinite"):
        U.user_uncertainty([0.1, np.inf])


def test_leaf_row_counts_are_unweighted_and_lower_in_sparse_regions(rng):
    X, y, bst = _model(rng)
    counts = U.leaf_row_counts(bst, X)
    np.testing.assert_array_equal(counts.sum(axis=1), X.shape[0])  # every row reaches one leaf per tree
    u = U.leaf_row_uncertainty(bst, X, counts)
    centre, tails = np.abs(X[:, 0]) < 0.5, np.abs(X[:, 0]) > 2.0
    assert np.median(u[tails]) > np.median(u[centre])
    with pytest.raises(ValueError, match="leaf counts"):
        U.leaf_row_uncertainty(bst, X, counts[:3])


@pytest.mark.slow  # the experiment on a real dataset: make test, not test-fast
def test_experiment_runs_on_real_data():
    """Real data must be present (fails loudly, never skips)."""
    os.environ.setdefault("CALIBFLOW_DATA_MIRROR", "/work/shared/datasets")
    cfg = {
        "datasets": ["bank_marketing"],
        "taus": [3],
        "n_seeds": 2,
        "precisions": [0.6],
        "K": 2,
        "L": 20,
        "n_estimators": 20,
        "replicas": 2,
        "methods": ["st", "mist_samples", "ew_dpmt", "vw_dpmt", "hr"],
        "synthetic": {"n_regions": 20000},
        "generative": {"n_seeds": 2, "n_regions": 2000, "n_hold": 10000, "n_test": 10000, "L": 20},
    }
    rep = E.run(cfg, 1)
    titles = [t.title for t in rep.tables]
    assert rep.key == "decision" and len(rep.figures) == 3
    # the correlation check comes before the tables that use the uncertainties
    assert titles.index(next(t for t in titles if t.startswith("Checked before use"))) < titles.index(
        next(t for t in titles if t.startswith("Headline"))
    )
    corr = next(t for t in rep.tables if t.title.startswith("Checked before use"))
    assert {r[2] for r in corr.rows} == {
        "posterior entropy",
        "leaf row count",
        "bagged replica std",
        "random (control)",
    }
    head = next(t for t in rep.tables if t.title.startswith("Headline"))
    assert "test precision (%)" in head.columns and "p (gain > random control)" in head.columns
    assert not any("HR" in r[4] for r in head.rows)  # HR is in the appendix only
    st_row = next(r for r in head.rows if r[4] == "ST")
    assert st_row[7].startswith("0.00")  # ST's selection is the score's top-n
    app = next(t for t in rep.tables if t.title.startswith("Appendix"))
    assert any(r[4] == "HR (our interpretation)" for r in app.rows)
    assert any(t.title.startswith("Generative model") for t in rep.tables)
    assert 0.0 < rep.metrics["bank_marketing_tau3_st_recall"] < 1.0
