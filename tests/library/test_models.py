"""calibflow.models: determinism, JSON round trips, replicas, ranker, ridge logistic, bad input."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from scipy.special import expit

from calibflow import models

PARAMS = {"n_estimators": 30, "max_depth": 3, "learning_rate": 0.2}


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    n, d = 2_000, 6
    X = rng.normal(size=(n, d))
    logit = 1.5 * X[:, 0] - X[:, 1] + 0.5 * X[:, 2] * X[:, 3] - 0.5
    y = (rng.random(n) < expit(logit)).astype(int)
    return X, y


def test_classifier_is_deterministic_and_learns(data):
    X, y = data
    params = {**PARAMS, "subsample": 0.7, "colsample_bytree": 0.7}
    a = models.train_classifier(X, y, params, seed=3)
    b = models.train_classifier(X, y, params, seed=3)
    c = models.train_classifier(X, y, params, seed=4)
    assert isinstance(a, xgb.Booster)
    pa, pb, pc = (models.predict_proba(m, X) for m in (a, b, c))
    np.testing.assert_array_equal(pa, pb)
    assert not np.array_equal(pa, pc)  # the seed drives the subsampling
    np.testing.assert_allclose(expit(models.predict_margin(a, X)), pa, rtol=1e-12)
    assert ((pa > 0.5) == y).mean() > 0.75
    two = models.train_classifier(X, y, {**params, "n_jobs": 2}, seed=3)
    np.testing.assert_array_equal(models.predict_proba(two, X), pa)  # thread count does not matter


def test_sample_weight_changes_the_fit(data):
    X, y = data
    w = np.where(y == 1, 5.0, 1.0)
    plain = models.predict_proba(models.train_classifier(X, y, PARAMS, 0), X)
    heavy = models.predict_proba(models.train_classifier(X, y, PARAMS, 0, sample_weight=w), X)
    assert heavy.mean() > plain.mean() + 0.1


def test_booster_json_round_trip_is_exact(tmp_path, data):
    X, y = data
    model = models.train_classifier(X, y, PARAMS, seed=1)
    path = models.save_model(model, tmp_path / "m" / "model.json")
    assert json.loads(path.read_text())["learner"]["objective"]["name"] == "binary:logistic"
    assert [p.name for p in path.parent.iterdir()] == ["model.json"]  # no temporary file left behind
    loaded = models.load_model(path)
    np.testing.assert_array_equal(models.predict_margin(loaded, X), models.predict_margin(model, X))


def test_replicas_differ_and_are_reproducible(data):
    X, y = data
    for scheme in ("seeds", "bootstrap"):
        reps = models.train_replicas(X, y, PARAMS, n_replicas=3, scheme=scheme, seed=11)
        again = models.train_replicas(X, y, PARAMS, n_replicas=3, scheme=scheme, seed=11)
        preds = [models.predict_proba(m, X) for m in reps]
        assert len(reps) == 3
        assert not np.array_equal(preds[0], preds[1]) and not np.array_equal(preds[1], preds[2])
        for m, p in zip(again, preds, strict=True):
            np.testing.assert_array_equal(models.predict_proba(m, X), p)
        spread = np.std(preds, axis=0).mean()
        assert 1e-4 < spread < 0.1, (scheme, spread)
    with pytest.raises(ValueError, match="scheme"):
        models.train_replicas(X, y, PARAMS, 2, scheme="jackknife")
    with pytest.raises(ValueError, match="n_replicas"):
        models.train_replicas(X, y, PARAMS, 0)


def _ndcg_at(y_true, scores, qid, k=5):
    """Mean NDCG@k over queries (gain 2^rel - 1, log2 discount); queries with no relevant item skipped."""
    vals = []
    for q in np.unique(qid):
        rel, s = y_true[qid == q], scores[qid == q]
        disc = 1.0 / np.log2(np.arange(2, k + 2))[: len(rel)]
        dcg = ((2.0 ** rel[np.argsort(-s, kind="stable")][:k] - 1) * disc).sum()
        idcg = ((2.0 ** np.sort(rel)[::-1][:k] - 1) * disc).sum()
        if idcg > 0:
            vals.append(dcg / idcg)
    return float(np.mean(vals))


def test_ranker_beats_random_ndcg():
    rng = np.random.default_rng(0)
    n_q, per_q, d = 60, 20, 5
    qid = np.repeat(np.arange(n_q), per_q)
    X = rng.normal(size=(n_q * per_q, d))
    util = X[:, 0] + 0.5 * X[:, 1] + rng.normal(scale=0.5, size=len(qid))
    rel = np.clip(np.round(util + 2), 0, 4)
    perm = rng.permutation(len(qid))  # unsorted groups: the ranker must sort them itself
    train = perm[: len(perm) // 2]
    test = np.isin(qid, np.unique(qid[perm[len(perm) // 2 :]]))
    model = models.train_ranker(
        X[train], rel[train], qid[train], {"n_estimators": 40, "max_depth": 3}, seed=0
    )
    again = models.train_ranker(
        X[train], rel[train], qid[train], {"n_estimators": 40, "max_depth": 3}, seed=0
    )
    s = models.predict_margin(model, X)
    np.testing.assert_array_equal(s, models.predict_margin(again, X))
    assert json.loads(model.save_raw(raw_format="json"))["learner"]["objective"]["name"] == "rank:pairwise"
    ours = _ndcg_at(rel[test], s[test], qid[test])
    rand = np.mean([_ndcg_at(rel[test], rng.random(test.sum()), qid[test]) for _ in range(20)])
    assert ours > rand + 0.15, (ours, rand)
    with pytest.raises(ValueError, match="length mismatch"):
        models.train_ranker(X, rel[:-1], qid, {}, 0)
    with pytest.raises(ValueError, match=">= 0"):
        models.train_ranker(X, -rel, qid, {}, 0)


def test_ridge_logistic_fits_round_trips_and_shrinks(tmp_path, data):
    X, y = data
    lin = models.RidgeLogistic(l2=1e-4).fit(X, y)
    from sklearn.linear_model import LogisticRegression

    # Same objective as scikit-learn's with C = 1 / (n * l2) on standardized features.
    Z = (X - X.mean(0)) / X.std(0)
    ref = LogisticRegression(C=1.0 / (len(y) * 1e-4), tol=1e-10, max_iter=1000).fit(Z, y)
    np.testing.assert_allclose(lin.coef_, ref.coef_[0], atol=1e-5)
    np.testing.assert_allclose(lin.intercept_, ref.intercept_[0], atol=1e-5)
    strong = models.RidgeLogistic(l2=10.0).fit(X, y)
    assert np.abs(strong.coef_).sum() < 0.2 * np.abs(lin.coef_).sum()
    path = models.save_model(lin, tmp_path / "lin.json")
    back = models.load_model(path)
    assert isinstance(back, models.RidgeLogistic)
    np.testing.assert_array_equal(models.predict_proba(back, X), models.predict_proba(lin, X))
    np.testing.assert_array_equal(
        models.RidgeLogistic.from_json(lin.to_json()).predict_margin(X), lin.predict_margin(X)
    )


def test_save_predictions_parquet(tmp_path, data):
    X, y = data
    model = models.train_classifier(X, y, PARAMS, seed=0)
    frame = models.prediction_frame(model, X, y=y)
    path = models.save_predictions(tmp_path / "pred.parquet", frame)
    back = pd.read_parquet(path)
    assert list(back.columns) == ["margin", "prob", "y"]
    np.testing.assert_array_equal(back["prob"].to_numpy(), models.predict_proba(model, X))
    with pytest.raises(ValueError, match="missing \\['margin'\\]"):
        models.save_predictions(tmp_path / "bad.parquet", {"prob": [0.5]})
    with pytest.raises(ValueError, match="sigmoid"):
        models.save_predictions(tmp_path / "bad.parquet", {"prob": [0.5], "margin": [2.0]})
    assert not (tmp_path / "bad.parquet").exists()


@pytest.mark.parametrize(
    ("X", "y", "params", "match"),
    [
        (np.array([[0.0], [np.nan]]), [0, 1], {}, "NaN"),
        (np.array([[0.0], [np.inf]]), [0, 1], {}, "infinite"),
        (np.zeros((2, 1)), [0, 2], {}, "must be in"),
        (np.zeros((2, 1)), [1, 1], {}, "single class"),
        (np.zeros((3, 1)), [0, 1], {}, "length mismatch"),
        (np.zeros(3), [0, 1, 0], {}, "2-D"),
        (np.zeros((2, 1)), [0, 1], {"n_estimators": 0}, "n_estimators"),
        (np.zeros((2, 1)), [0, 1], {"subsample": 1.5}, "subsample"),
        (np.zeros((2, 1)), [0, 1], {"num_leaves": 8}, "unknown model param"),
    ],
)
def test_bad_input_is_a_value_error(X, y, params, match):
    with pytest.raises(ValueError, match=match):
        models.train_classifier(X, y, params, seed=0)


def test_prediction_checks_feature_count(data):
    X, y = data
    model = models.train_classifier(X, y, PARAMS, seed=0)
    with pytest.raises(ValueError, match="trained on 6"):
        models.predict_proba(model, X[:, :3])
    with pytest.raises(ValueError, match="not fitted"):
        models.RidgeLogistic().predict_proba(X)
    with pytest.raises(ValueError, match="l2"):
        models.RidgeLogistic(l2=-1.0)
