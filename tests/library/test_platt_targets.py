"""Issue 36: Platt's prior-corrected targets on small or separable calibration sets, and no decreasing map
from a degenerate one (identical scores, one class in effect), on the rows and from a table."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calibflow.aggregate import fit_from_table
from calibflow.aggregate import tables as T
from calibflow.calibrators import from_json, make


def test_small_separable_set_gets_platts_targets():
    # scikit-learn's test_sigmoid_calibration (LibSVM's port): A = -0.2026, B = 0.6524 in its sign
    f, y = np.array([5.0, -4.0, 1.0]), np.array([1.0, 0.0, 0.0])
    cal = make("platt", input="logit").fit(f, y)
    assert cal.targets_ == "prior"
    np.testing.assert_allclose(cal.predict(f), [0.589, 0.188, 0.389], atol=1e-3)
    np.testing.assert_allclose([cal.coef_, cal.intercept_], [0.20261354391187855, -0.65236314980010512],
                               atol=1e-3)
    ml = make("platt", input="logit", targets="ml").fit(f, y).predict(f)
    assert ml[0] > 1 - 1e-9 and ml[1] < 1e-30  # what maximum likelihood does here (issue 36)
    again = from_json(cal.to_json())
    assert again.targets_ == "prior" and np.array_equal(again.predict(f), cal.predict(f))


def test_large_overlapping_set_is_plain_maximum_likelihood():
    rng = np.random.default_rng(0)
    z = rng.normal(size=5000)
    y = (rng.random(5000) < 1 / (1 + np.exp(-(0.7 * z - 1)))).astype(float)
    auto = make("platt", input="logit").fit(z, y)
    ml = make("platt", input="logit", targets="ml").fit(z, y)
    assert auto.targets_ == "ml" and (auto.coef_, auto.intercept_) == (ml.coef_, ml.intercept_)
    prior = make("platt", input="logit", targets="prior").fit(z, y)
    assert prior.targets_ == "prior" and abs(prior.intercept_ - ml.intercept_) < 0.02
    with pytest.raises(ValueError, match="targets must be"):
        make("platt", input="logit", targets="smooth").fit(z, y)


def test_old_files_read_as_maximum_likelihood():
    cal = make("platt", input="logit", targets="ml").fit([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 0.0, 1.0])
    payload = json.loads(cal.to_json())
    del payload["state"]["targets_"], payload["params"]["targets"]  # as written before issue 36
    assert from_json(json.dumps(payload)).targets_ == "ml"


@pytest.mark.parametrize("n", [1_000, 200_000])
def test_identical_scores_give_the_constant_base_rate(n, tmp_path):
    rng = np.random.default_rng(1)
    y = (rng.random(n) < 0.3).astype(float)
    s = np.full(n, 0.42)
    cal = make("platt", input="probability").fit(s, y)
    assert cal.coef_ == 0.0 and cal.targets_ == "constant"
    assert cal.predict([0.1, 0.42, 0.9]) == pytest.approx(np.full(3, y.mean()), rel=1e-12)
    # the table path (`calibflow fit` on a file): the same constant, never a decreasing map
    path = tmp_path / "same.parquet"
    pq.write_table(pa.table({"score": s, "label": y.astype(np.int8)}), path)
    tab = T.aggregate_files([str(path)], T.TableRows("score", "label"), T.PassOptions(threads=1)).fine
    tcal = fit_from_table(tab, "platt", "probability")
    assert tcal.coef_ == 0.0 and tcal.predict([0.42])[0] == pytest.approx(y.mean(), rel=1e-9)


def test_one_class_in_effect_is_refused_or_flat():
    with pytest.raises(ValueError, match="single class"):
        make("platt", input="logit").fit(np.arange(10.0), np.zeros(10))
    # one positive with a negligible weight: Platt's targets keep the map flat and never decreasing
    w = np.r_[np.ones(9), 1e-12]
    cal = make("platt", input="logit").fit(np.arange(10.0), np.r_[np.zeros(9), 1.0], sample_weight=w)
    assert cal.targets_ == "prior" and 0.0 <= cal.coef_ < 1e-6


def test_noise_scores_never_give_a_decreasing_map():
    """Scores that rank nothing tip the free slope below 0 about half the time: the fit keeps A >= 0."""
    slopes = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        s, y = rng.normal(size=3000), (rng.random(3000) < 0.1).astype(float)
        cal = make("platt", input="logit").fit(s, y)
        free = make("platt", input="logit").fit_two_weight(s, y, 1 - y)  # the unconstrained fit
        slopes.append(free.coef_)
        assert cal.coef_ >= 0.0
        if free.coef_ < 0:
            assert cal.coef_ == 0.0 and cal.predict([0.0])[0] == pytest.approx(y.mean(), rel=1e-9)
        else:
            assert cal.coef_ == pytest.approx(free.coef_, rel=1e-9)
    assert min(slopes) < 0 < max(slopes)  # both cases were exercised
