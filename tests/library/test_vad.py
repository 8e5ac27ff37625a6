"""VAD (Fan, Si & Zhang, Algorithm 1): lambda estimation, the calibrator, VAD+, group-wise VAD, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit, logit

from calibflow import calibrators as C
from calibflow.calibrators.vad import VADWarning, estimate_lambda


def _replicas(rng, n, S, signal_sd, noise_sd, scheme):
    """Link-scale replicas with known variance terms: signal s, estimation noise of variance noise_sd^2.

    seeds: every row is s + e_j (exchangeable). bootstrap: row 0 is s + e_0, rows j >= 1 scatter
    around row 0 with the whole sampling variance, row_0 + e_j.
    """
    s = rng.normal(-1.0, signal_sd, n)
    e = rng.normal(0.0, noise_sd, (S, n))
    L = s + e if scheme == "seeds" else np.vstack([s + e[0], s + e[0] + e[1:]])
    return expit(L), s


@pytest.mark.parametrize("scheme", ["seeds", "bootstrap"])
@pytest.mark.parametrize("S", [2, 3])
def test_each_scheme_estimates_the_sampling_variance(scheme, S):
    rng = np.random.default_rng(1)
    n, sig, v = 200_000, 1.0, 0.3**2
    R, _ = _replicas(rng, n, S, sig, np.sqrt(v), scheme)
    est = estimate_lambda(R, scheme=scheme)
    lam, mean = est  # unpacks as (lambda, mean)
    # sigma_f2 is an average of n chi-square terms with S-1 dof: relative s.e. ~ sqrt(2/((S-1) n)) < 0.5%.
    assert est.sigma_f2 == pytest.approx(v, rel=0.02)
    assert est.sigma_y2 == pytest.approx(sig**2 + v, rel=0.02)
    assert lam == pytest.approx(1 - v / (sig**2 + v), abs=0.005)
    assert mean == pytest.approx(logit(R[0]).mean(), abs=1e-9)


@pytest.mark.parametrize("S", [2, 3])
def test_line6_as_printed_underestimates_bootstrap_variance_by_s_minus_1_over_s(S):
    rng = np.random.default_rng(2)
    v = 0.25**2
    R, _ = _replicas(rng, 200_000, S, 1.0, np.sqrt(v), "bootstrap")
    literal = estimate_lambda(R, scheme="seeds").sigma_f2
    assert literal == pytest.approx(v * (S - 1) / S, rel=0.03)
    assert estimate_lambda(R, scheme="bootstrap").sigma_f2 == pytest.approx(v, rel=0.03)


def test_identity_link_uses_probabilities():
    rng = np.random.default_rng(3)
    p = rng.uniform(0.2, 0.8, 50_000)
    R = np.clip(np.stack([p + rng.normal(0, 0.05, p.size) for _ in range(2)]), 0, 1)
    est = estimate_lambda(R, link="identity", scheme="seeds")
    assert est.mean == pytest.approx(R[0].mean())
    assert est.sigma_f2 == pytest.approx(0.05**2, rel=0.05)
    cal = C.make("vad", link="identity", scheme="seeds").fit(R)
    q = cal.predict(R[0])
    np.testing.assert_allclose(q, np.clip(est[0] * R[0] + (1 - est[0]) * est.mean, 0, 1))


def test_predict_is_algorithm1_line8_and_keeps_the_ranking():
    rng = np.random.default_rng(4)
    R, _ = _replicas(rng, 20_000, 2, 1.0, 0.4, "seeds")
    cal = C.make("vad", scheme="seeds").fit(R)
    lam, mean = estimate_lambda(R, scheme="seeds")
    p = np.sort(rng.uniform(0.01, 0.99, 1000))
    q = cal.predict(p)
    np.testing.assert_allclose(q, expit(lam * logit(p) + (1 - lam) * mean), rtol=1e-12)
    assert np.all(np.diff(q) > 0)
    rep = cal.report()
    assert rep["lambda_"] == lam and rep["sigma_f2_"] > 0 and rep["sigma_y2_"] > rep["sigma_f2_"]


def test_logit_input_matches_probability_input():
    rng = np.random.default_rng(5)
    R, _ = _replicas(rng, 5000, 2, 1.0, 0.3, "seeds")
    a = C.make("vad", scheme="seeds").fit(R)
    b = C.make("vad", scheme="seeds", input="logit").fit(logit(R))
    np.testing.assert_allclose(a.predict(R[0]), b.predict(logit(R[0])), rtol=1e-9)


# ---- VAD+ and group-wise ------------------------------------------------------------------------
def test_vad_plus_uses_the_lambda_ratio_on_the_base_output():
    rng = np.random.default_rng(6)
    Rt, _ = _replicas(rng, 20_000, 2, 1.0, 0.5, "seeds")  # val-test: noisier relative to signal
    Rv, _ = _replicas(rng, 20_000, 2, 1.2, 0.3, "seeds")  # val-train
    y = (rng.random(Rv.shape[1]) < Rv[0]).astype(float)
    cal = C.make("vad", base="isotonic", scheme="seeds").fit(Rt, Rv, y)
    lt, lv = estimate_lambda(Rt, scheme="seeds")[0], estimate_lambda(Rv, scheme="seeds")[0]
    assert cal.lambda_test_ == pytest.approx(lt) and cal.lambda_train_ == pytest.approx(lv)
    assert cal.lambda_ == pytest.approx(lt / lv)
    base = C.make("isotonic", input="probability").fit(Rv[0], y)
    z = logit(np.clip(base.predict(Rt[0]), cal.clip, 1 - cal.clip))
    p = Rt[0][:500]
    zp = logit(np.clip(base.predict(p), cal.clip, 1 - cal.clip))
    np.testing.assert_allclose(
        cal.predict(p), expit(cal.lambda_ * zp + (1 - cal.lambda_) * z.mean()), rtol=1e-9
    )


def test_groupwise_lambda_per_segment():
    rng = np.random.default_rng(7)
    Ra, _ = _replicas(rng, 30_000, 2, 1.0, 0.2, "seeds")  # lambda ~ 1 - 0.04/1.04
    Rb, _ = _replicas(rng, 30_000, 2, 1.0, 0.6, "seeds")  # lambda ~ 1 - 0.36/1.36
    R = np.hstack([Ra, Rb])
    g = np.r_[np.full(30_000, "a"), np.full(30_000, "b")]
    cal = C.make("vad", scheme="seeds").fit(R, groups=g)
    lam = dict(zip(cal.group_keys_, cal.group_lambda_, strict=True))
    assert lam["a"] == pytest.approx(1 - 0.04 / 1.04, abs=0.01)
    assert lam["b"] == pytest.approx(1 - 0.36 / 1.36, abs=0.01)
    p = np.array([0.3, 0.3])
    q = cal.predict(p, groups=["a", "b"])
    assert q[0] != q[1]
    with pytest.warns(VADWarning, match="unseen"):
        q2 = cal.predict(p, groups=["a", "zzz"])
    assert q2[0] == q[0] and q2[1] == pytest.approx(C.make("vad", scheme="seeds").fit(R).predict(p)[1])
    with pytest.raises(ValueError, match="length mismatch"):
        cal.predict(p, groups=["a"])


def test_small_groups_fall_back_to_global_with_a_warning():
    rng = np.random.default_rng(8)
    R, _ = _replicas(rng, 5000, 2, 1.0, 0.3, "seeds")
    g = np.r_[np.full(4950, "big"), np.full(50, "tiny")]
    with pytest.warns(VADWarning, match="global lambda"):
        cal = C.make("vad", scheme="seeds", min_group_size=100).fit(R, groups=g)
    assert cal.fallback_groups_ == ["tiny"]
    assert dict(zip(cal.group_keys_, cal.group_lambda_, strict=True))["tiny"] == cal.lambda_


# ---- JSON ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params, kind",
    [
        ({}, "plain"),
        ({"link": "identity"}, "plain"),
        ({}, "groups"),
        ({"base": "isotonic"}, "plus"),
        ({"base": "platt"}, "plus"),
    ],
)
def test_json_round_trip(params, kind):
    rng = np.random.default_rng(9)
    R, _ = _replicas(rng, 6000, 3, 1.0, 0.3, "bootstrap")
    g = np.where(rng.random(R.shape[1]) < 0.5, "x", "y")
    cal = C.make("vad", **params)
    if kind == "plus":
        y = (rng.random(R.shape[1]) < R[0]).astype(float)
        cal.fit(R, R, y)
    else:
        cal.fit(R, groups=g if kind == "groups" else None)
    text = cal.to_json()
    payload = json.loads(text)
    assert payload["method"] == "vad" and payload["schema"] == 1
    again = C.from_json(text)
    kw = {"groups": g} if kind == "groups" else {}
    np.testing.assert_allclose(again.predict(R[0], **kw), cal.predict(R[0], **kw), rtol=0, atol=1e-12)
    assert again.lambda_ == cal.lambda_ and again.get_params() == cal.get_params()


# ---- bad input -----------------------------------------------------------------------------------
def test_bad_inputs_are_named():
    rng = np.random.default_rng(10)
    R, _ = _replicas(rng, 1000, 2, 1.0, 0.3, "seeds")
    with pytest.raises(ValueError, match="at least 2 replicas"):
        estimate_lambda(R[:1])
    with pytest.raises(ValueError, match="different lengths"):
        estimate_lambda([R[0], R[1][:-1]])
    with pytest.raises(ValueError, match="NaN"):
        estimate_lambda(np.where(np.arange(1000) == 3, np.nan, R))
    with pytest.raises(ValueError, match="declared as probabilities"):
        estimate_lambda(R + 1.0)
    with pytest.raises(ValueError, match="zero variance"):
        estimate_lambda(np.full((2, 1000), 0.3))
    with pytest.raises(ValueError, match="identical predictions"):
        estimate_lambda(np.vstack([R[0], R[0]]))
    with pytest.raises(ValueError, match="link"):
        estimate_lambda(R, link="probit")
    with pytest.raises(ValueError, match="scheme"):
        estimate_lambda(R, scheme="jackknife")
    with pytest.raises(ValueError, match="2-D"):
        estimate_lambda(R[0])
    with pytest.raises(ValueError, match="scheme"):
        C.make("vad", scheme="nope").fit(R)
    with pytest.raises(ValueError, match="clip"):
        C.make("vad", clip=0.7).fit(R)
    with pytest.raises(ValueError, match="not fitted"):
        C.make("vad").predict(R[0])
    with pytest.raises(ValueError, match="needs replicas_train and y_train"):
        C.make("vad", base="isotonic").fit(R)
    with pytest.raises(ValueError, match="only used with base"):
        C.make("vad").fit(R, R, np.ones(1000))
    with pytest.raises(ValueError, match="unknown calibrator"):
        C.make("vad", base="no-such").fit(R, R, (R[0] > 0.3).astype(float))
    with pytest.raises(ValueError, match="single class"):
        C.make("vad", base="platt").fit(R, R, np.ones(1000))
    with pytest.raises(ValueError, match="length mismatch"):
        C.make("vad").fit(R, groups=np.zeros(10))
    with pytest.raises(ValueError, match="invalid parameters"):
        C.make("vad", nope=1)


def test_lambda_outside_unit_interval_is_clipped_and_reported():
    rng = np.random.default_rng(11)
    # bootstrap refits scattering more than the served model varies: raw lambda ~ 1 - 4 / 1 < 0
    z = rng.normal(-1.0, 1.0, 20_000)
    R = expit(np.vstack([z, z + rng.normal(0.0, 2.0, z.size)]))
    with pytest.warns(VADWarning, match="outside \\[0, 1\\]"):
        est = estimate_lambda(R, scheme="bootstrap")
    assert est[0] == 0.0 and est.lambda_raw < 0 and est.clipped
    with pytest.warns(VADWarning):
        cal = C.make("vad", scheme="bootstrap").fit(R)
    assert cal.clipped_ and cal.lambda_ == 0.0 and cal.lambda_raw_ < 0
    q = cal.predict(R[0][:10])
    np.testing.assert_allclose(q, expit(cal.anchor_))  # lambda = 0: every prediction is the anchor
