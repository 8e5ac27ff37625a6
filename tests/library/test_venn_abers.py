"""Venn-Abers (IVAP/CVAP): exact against the venn-abers package, valid, monotone, fast structure."""

from __future__ import annotations

import numpy as np
import pytest
from venn_abers.venn_abers import VennAbers, VennAbersCV

from calibflow import calibrators as C
from calibflow.calibrators.venn_abers import cross_venn_abers


def _data(rng, n, decimals=None):
    s = rng.random(n)
    if decimals is not None:
        s = np.round(s, decimals)  # many ties
    y = (rng.random(n) < s**1.5).astype(float)
    return s, y


@pytest.mark.parametrize(("n", "decimals"), [(50, None), (3000, None), (3000, 2), (500, 1)])
def test_ivap_equals_the_reference_package(rng, n, decimals):
    s, y = _data(rng, n, decimals)
    t = np.r_[rng.random(500), s[:40], 0.0, 1.0, -0.5, 1.5]  # between, tied, at and beyond the ends
    ref = VennAbers()
    ref.fit(np.c_[1 - s, s], y)
    p_ref, p01 = ref.predict_proba(np.c_[1 - t, t])
    # t probes beyond [0, 1], which only a raw score can be: said (the default reads s as probabilities)
    cal = C.make("venn_abers", input="score").fit(s, y)
    p0, p1 = cal.predict_interval(t)
    np.testing.assert_allclose(p0, p01[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(p1, p01[:, 1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(cal.predict(t), p_ref[:, 1], rtol=0, atol=1e-12)


def test_interval_brackets_and_is_monotone(rng):
    s, y = _data(rng, 5000)
    cal = C.make("venn_abers").fit(s, y)
    t = np.sort(rng.random(2000))
    p0, p1 = cal.predict_interval(t)
    p = cal.predict(t)
    assert np.all(p0 <= p1 + 1e-15) and np.all((p0 <= p + 1e-15) & (p <= p1 + 1e-15))
    assert np.all(np.diff(p0) >= 0) and np.all(np.diff(p1) >= 0) and np.all(np.diff(p) >= -1e-15)
    # Validity in the large: the interval narrows as the calibration set grows (about 1/n per score).
    small = C.make("venn_abers").fit(s[:200], y[:200]).predict_interval(t)
    assert np.mean(p1 - p0) < np.mean(small[1] - small[0]) / 5


def test_frequency_weights_equal_repeated_rows(rng):
    s, y = _data(rng, 400, decimals=2)
    w = rng.integers(1, 4, s.size)
    t = rng.random(300)
    weighted = C.make("venn_abers").fit(s, y, sample_weight=w).predict_interval(t)
    repeated = C.make("venn_abers").fit(np.repeat(s, w), np.repeat(y, w)).predict_interval(t)
    np.testing.assert_allclose(weighted, repeated, rtol=0, atol=1e-12)


def test_json_roundtrip(rng):
    s, y = _data(rng, 1000)
    cal = C.make("venn_abers").fit(s, y)
    again = C.from_json(cal.to_json())
    t = rng.random(100)
    np.testing.assert_array_equal(again.predict(t), cal.predict(t))
    np.testing.assert_array_equal(again.predict_interval(t)[1], cal.predict_interval(t)[1])


def test_cvap_matches_the_reference_package_on_the_same_folds(rng):
    from sklearn.linear_model import LogisticRegression

    n = 1200
    X = rng.normal(size=(n, 3))
    y = (rng.random(n) < 1 / (1 + np.exp(-(X @ [1.0, -0.5, 0.3])))).astype(int)
    X_test = rng.normal(size=(200, 3))

    def fit_scorer(train):
        model = LogisticRegression().fit(X[train], y[train])
        return lambda rows: model.predict_proba(X[rows] if np.ndim(rows) == 1 else rows)[:, 1]

    predict = cross_venn_abers(fit_scorer, y, n_splits=4, seed=7)
    p, _, _ = predict(X_test)
    ref = VennAbersCV(LogisticRegression(), inductive=False, n_splits=4, shuffle=True, random_state=7)
    ref.fit(X, y)
    np.testing.assert_allclose(p, ref.predict_proba(X_test)[:, 1], rtol=0, atol=1e-9)
