"""Hardened library inputs: weights are counts, finite outputs, strings/complex refused."""

from __future__ import annotations

import numpy as np
import pytest

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow.calibrators.bbq import MAX_MODELS, model_grid

# Plain maximum-likelihood (or ratio) estimators: invariant to multiplying every weight by c > 0.
MLE = ["platt", "temperature", "beta", "gaussian", "gamma", "isotonic", "histogram", "scaling_binning"]
N = 2000


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    s = rng.normal(0.0, 2.0, N)
    y = (rng.random(N) < 1.0 / (1.0 + np.exp(-(0.7 * s - 1.0)))).astype(float)
    w = rng.integers(1, 6, N).astype(float)  # counts, as issue-17's aggregated buckets give
    return s, y, w


@pytest.mark.parametrize("name", MLE)
@pytest.mark.parametrize("scale", [1e-300, 1e-10, 1e10, 1e300, "max"])
def test_mle_methods_are_invariant_to_rescaling_weights(name, scale, data):
    s, y, w = data
    c = 1e308 / w.sum() if scale == "max" else scale  # "max": the largest total that is still finite
    base = C.make(name).fit(s, y, sample_weight=w).predict(s)
    scaled = C.make(name).fit(s, y, sample_weight=w * c).predict(s)
    assert np.isfinite(scaled).all()
    np.testing.assert_allclose(scaled, base, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", C.available("scores"))
def test_integer_weights_equal_repeated_rows(name, data):
    """A weight is a frequency: weight k is k copies of the row (the aggregated-bucket fit)."""
    s, y, w = data
    s, y, w = s[:600], y[:600], w[:600]
    k = w.astype(int)
    weighted = C.make(name).fit(s, y, sample_weight=w).predict(s)
    repeated = C.make(name).fit(np.repeat(s, k), np.repeat(y, k)).predict(s)
    np.testing.assert_allclose(weighted, repeated, rtol=0, atol=1e-7)


def test_sample_size_dependent_methods_follow_counts(data):
    """BBQ and spline depend on the total count, as documented: 1/n weights are one observation."""
    s, y, _ = data
    one = C.make("bbq").fit(s, y, sample_weight=np.full(N, 1.0 / N))
    assert one.bins_grid_.tolist() == [1]  # one observation supports one bin
    many = C.make("bbq").fit(s, y)
    assert many.bins_grid_.max() > 100
    a = C.make("spline").fit(s, y).predict(s)
    b = C.make("spline").fit(s, y, sample_weight=np.full(N, 100.0)).predict(s)
    assert np.abs(a - b).max() > 1e-4  # 100x the data: the fixed penalty weighs less


def test_bbq_model_grid_is_bounded():
    rng = np.random.default_rng(1)
    s = rng.random(400)
    y = (rng.random(400) < s).astype(float)
    cal = C.make("bbq", input="probability").fit(s, y, sample_weight=np.full(400, 1e9))
    assert cal.bins_grid_.size <= 400 and cal.bins_grid_.max() <= 400  # not ~70,000 models
    assert np.isfinite(cal.predict(s)).all()
    assert model_grid(1e12, 10**6, 10.0).size <= MAX_MODELS
    np.testing.assert_array_equal(model_grid(1000.0, 1000, 10.0), np.arange(1, 101))  # the paper's grid
    with pytest.raises(ValueError, match="overflows"):
        C.make("bbq", input="probability").fit(s, y, sample_weight=np.full(400, 1e300))


def test_non_finite_weight_sums_are_refused(data):
    s, y, _ = data
    for name in ["platt", "isotonic", "bbq"]:
        with pytest.raises(ValueError, match="sums to infinity"):
            C.make(name).fit(s[:3], [0, 1, 0], sample_weight=[1e308, 1e308, 1.0])
    with pytest.raises(ValueError, match="sums to infinity"):
        M.log_loss([0, 1], [0.2, 0.7], sample_weight=[1e308, 1e308])


def test_metrics_are_invariant_to_rescaling_weights(data):
    s, y, w = data
    p = 1.0 / (1.0 + np.exp(-s))
    base = M.summary(y, p, sample_weight=w)
    for c in (1e-300, 1e-10, 1e300 / w.max()):
        got = M.summary(y, p, sample_weight=w * c)
        for k, v in base.items():
            assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (c, k)
    assert base["ece"] > 0 and base["log_loss"] > 0


def test_auc_rejects_negative_and_all_zero_positive_weights():
    y, s = np.array([0, 1, 0, 1]), np.array([0.1, 0.8, 0.3, 0.6])
    with pytest.raises(ValueError, match="negative"):
        M.auc(y, s, sample_weight=[1, -1, 1, 1])
    with pytest.raises(ValueError, match="every positive row has weight 0"):
        M.auc(y, s, sample_weight=[1, 0, 1, 0])
    assert M.auc(y, s, sample_weight=[1, 2, 1, 2]) == 1.0


def test_predict_refuses_non_finite_output(data):
    s, y, _ = data
    cal = C.make("platt").fit(s, y)
    cal.coef_ = float("nan")
    with pytest.raises(ValueError, match="non-finite prediction"):
        cal.predict(s[:5])


def test_temperature_on_huge_scores_is_not_called_anti_correlated():
    rng = np.random.default_rng(3)
    u = rng.normal(size=500)
    y = (rng.random(500) < 1.0 / (1.0 + np.exp(-2.0 * u))).astype(float)
    big = u * 1e300
    assert np.corrcoef(u, y)[0, 1] > 0.3
    cal = C.make("temperature").fit(big, y)
    ref = C.make("temperature").fit(u, y)
    assert cal.temperature_ == pytest.approx(ref.temperature_ * 1e300, rel=1e-6)
    np.testing.assert_allclose(cal.predict(big), ref.predict(u), atol=1e-7)
    with pytest.raises(ValueError, match="anti-correlated"):
        C.make("temperature").fit(-u, y)


@pytest.mark.parametrize(
    "bad, what",
    [
        (np.array(["0", "1", "1"]), "strings"),
        (["0.2", "0.5", "0.9"], "strings"),
        (np.array([0.2 + 1j, 0.5, 0.9]), "complex"),
        (np.array([0.2, None, 0.9], dtype=object), "non-numeric"),
    ],
)
def test_strings_and_complex_are_refused_as_scores_and_labels(bad, what):
    good_s, good_y = np.array([0.2, 0.5, 0.9]), np.array([0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match=what):
        C.make("platt").fit(bad, good_y)
    with pytest.raises(ValueError, match=what):
        C.make("platt").fit(good_s, bad)
    with pytest.raises(ValueError, match=what):
        M.brier(bad, good_s)
    fitted = C.make("platt").fit(np.r_[good_s, 0.1], np.r_[good_y, 0.0])
    with pytest.raises(ValueError, match=what):
        fitted.predict(bad)


def test_numeric_object_and_bool_inputs_still_work():
    s = np.array([0.2, 0.5, 0.9, 0.1], dtype=object)
    y = np.array([False, True, True, False])
    p = C.make("platt").fit(s, y).predict(s)
    assert p.shape == (4,) and np.isfinite(p).all()
