"""CalEM (Sergazinov et al., Algorithm 3 with the App. A.2 weights): method-level tests."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from calibflow import calibrators as C
from calibflow.calibrators.calem import _compact_stack, _q_value, em_weights, treatment_effect
from calibflow.experiments.calem import l2_error, simulate

pytestmark = pytest.mark.usefixtures("one_blas_thread")
#: The spline base (the costliest fit) runs in make test; make test-fast checks each property with the others.
SLOW = pytest.mark.slow


def _data(seed=0, n=6000, share=0.1, g="g2", h="h1", p_y=0.3):
    d = simulate(n, p_y, g, h, share, np.random.default_rng(seed))
    c = d["clean"]
    return d["s"][c], d["y"][c], d["s"][~c], d["z"][~c], d


def _fit(base="platt", seed=0, **kw):
    sc, yc, sb, zb, d = _data(seed)
    return C.make("calem", base=base, input="probability", **kw).fit(sc, yc, sb, zb), d


def test_treatment_effect_formula_and_clip_counts():
    g_eta = np.array([0.5, 0.4, 0.2, 0.1, 0.0])
    g_theta = np.array([0.25, 0.4, 0.3, 0.0, 0.0])
    h, low, high = treatment_effect(g_eta, g_theta)
    np.testing.assert_allclose(h, [0.5, 0.0, 0.0, 1.0, 0.0])  # (0.2-0.3)/0.2 = -0.5 is clipped to 0
    assert (low, high) == (1, 0)


def test_literal_weights_of_algorithm_3():
    h = np.array([0.1, 0.7, 0.0])
    z = np.array([1.0, 0.0, 1.0])
    yc = np.array([0.0, 1.0])
    labels, w = em_weights(h, z, yc)
    np.testing.assert_array_equal(labels, [0, 1, 1, 0, 1, 0, 0, 0])
    np.testing.assert_allclose(w, [1, 1, 0.9, 0.3, 1.0, 0.1, 0.7, 0.0])


def test_compact_stack_has_the_same_weighted_likelihood():
    rng = np.random.default_rng(3)
    sc, yc = rng.random(50), (rng.random(50) < 0.3).astype(float)
    sb, zb = rng.random(400), (rng.random(400) < 0.4).astype(float)
    h = rng.random(400)
    lab, w = em_weights(h, zb, yc)
    s_lit = np.concatenate([sc, sb, sb])
    s_cmp, y_cmp, w_cmp = _compact_stack(sc, yc, sb, zb, h)
    assert s_cmp.size == sc.size + sb.size + int(zb.sum()) < s_lit.size
    q = lambda s: 1 / (1 + np.exp(-(3 * s - 1)))  # noqa: E731 - any fixed calibration map
    ll = lambda s, y, w: np.sum(w * (y * np.log(q(s)) + (1 - y) * np.log(1 - q(s))))  # noqa: E731
    assert ll(s_lit, lab, w) == pytest.approx(ll(s_cmp, y_cmp, w_cmp), rel=1e-12)
    # the trace's Q value is the same weighted log-likelihood per unit weight
    assert _q_value(q(sc), yc, q(sb), zb, h) == pytest.approx(ll(s_lit, lab, w) / w.sum(), rel=1e-12)
    # and so the M-step (a weighted base fit) is the same
    a = C.make("platt", input="probability").fit(s_lit, lab, sample_weight=w)
    b = C.make("platt", input="probability").fit(s_cmp, y_cmp, sample_weight=w_cmp)
    np.testing.assert_allclose(a.predict(sc), b.predict(sc), atol=1e-8)


def test_trace_records_theta_loglik_and_h():
    cal, _ = _fit(tol=1e-5, max_iter=200)
    tr = cal.trace_
    assert cal.converged_ and cal.n_iter_ == len(tr) - 1 >= 2
    assert tr[0]["delta"] is None and all(e["delta"] >= 0 for e in tr[1:])
    assert tr[-1]["delta"] < 1e-5 <= min(e["delta"] for e in tr[1:-1])
    for e in tr[1:]:
        assert np.isfinite(e["weighted_loglik"]) and e["weighted_loglik"] < 0
        assert 0.0 <= e["h"]["mean_pos"] <= 1.0
    # the criterion is the base's parameter vector when it has one, else logits on a fixed grid
    expected = "params_" if getattr(cal.init_, "params_", None) is not None else "grid_logit"
    assert cal.criterion_ == expected
    # theta of the final step is the final calibrator's
    np.testing.assert_allclose(tr[-1]["theta"], cal._theta(cal.base_, _grid(cal)), atol=1e-12)
    # h from the last E-step equals the formula on the final fit
    sc, yc, sb, zb, _ = _data(0)
    h = cal.treatment_effect(sb)
    assert tr[-1]["h"]["mean_pos"] == pytest.approx(h[zb == 1].mean(), rel=1e-10)


def _grid(cal):
    sc, _, sb, _, _ = _data(0)
    return np.quantile(np.concatenate([sc, sb]), np.linspace(0, 1, 101))


def test_not_converged_is_said():
    sc, yc, sb, zb, _ = _data(1)
    cal = C.make("calem", base="platt", input="probability", tol=1e-12, max_iter=2)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        cal.fit(sc, yc, sb, zb)
    assert not cal.converged_ and cal.n_iter_ == 2 and not cal.summary()["converged"]


def test_clipping_is_counted_when_no_treatment_effect():
    # Biased labels with no treatment effect: g_eta and g_theta estimate the same curve, so about
    # half of the raw h values fall below 0 and must be clipped and counted.
    rng = np.random.default_rng(7)
    s = rng.normal(0, 1.5, 22_000)
    lab = (rng.random(s.size) < 1 / (1 + np.exp(-(s - 1)))).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        cal = C.make("calem", base="platt", input="logit", max_iter=25).fit(
            s[:2000], lab[:2000], s[2000:], lab[2000:]
        )
    raw = cal.eta_.predict(s[2000:]) - cal.base_.predict(s[2000:])
    assert cal.h_clip_["clipped_low"] == int((raw < 0).sum()) > 0
    assert cal.trace_[-1]["h"]["clipped_low"] == cal.h_clip_["clipped_low"]
    assert cal.h_clip_["clipped_high"] == 0 and cal.h_clip_["n_biased"] == 20_000
    # with h ~ 0 CalEM is close to fitting the pooled data, and h stays small
    assert cal.trace_[-1]["h"]["mean_pos"] < 0.1


@pytest.mark.parametrize("base", ["platt", pytest.param("spline", marks=SLOW)])
def test_beats_clean_only_fit_on_the_simulation(base):
    """Sec. 5.1 at reduced size: CalEM's L2 error to the oracle is below the clean-only fit's on average."""
    gam, em = [], []
    for seed in range(4):
        sc, yc, sb, zb, d = _data(seed, n=6000, share=0.1, g="g2", h="h1", p_y=0.3)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            cal = C.make("calem", base=base, input="probability").fit(sc, yc, sb, zb)
        gam.append(l2_error(cal.init_.predict(d["s"]), d["oracle"]))
        em.append(l2_error(cal.predict(d["s"]), d["oracle"]))
    # at this size (600 clean rows) spline gains ~11% and platt ~30% over these seeds
    assert np.mean(em) < 0.95 * np.mean(gam), (gam, em)


def test_json_round_trip_keeps_base_and_trace():
    cal, d = _fit()
    text = cal.to_json()
    payload = json.loads(text)
    assert payload["method"] == "calem" and payload["params"]["base"] == "platt"
    again = C.from_json(text)
    np.testing.assert_allclose(again.predict(d["s"]), cal.predict(d["s"]), atol=1e-12)
    np.testing.assert_allclose(again.treatment_effect(d["s"]), cal.treatment_effect(d["s"]), atol=1e-12)
    assert type(again.base_) is type(cal.base_) and again.base_.name == "platt"
    assert again.n_iter_ == cal.n_iter_ and again.converged_ == cal.converged_
    np.testing.assert_allclose(again.trace_[-1]["theta"], cal.trace_[-1]["theta"])
    assert again.summary() == cal.summary()


def test_deterministic():
    a, d = _fit(seed=2)
    b, _ = _fit(seed=2)
    np.testing.assert_array_equal(a.predict(d["s"]), b.predict(d["s"]))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"base": "nope"}, "unknown calibrator"),
        ({"base": "calem"}, "base must name"),
        ({"tol": 0.0}, "tol"),
        ({"tol": float("nan")}, "tol"),
        ({"max_iter": 0}, "max_iter"),
        ({"max_iter": 2.5}, "max_iter"),
        ({"base_params": {"input": "logit"}}, "input"),
        ({"base_params": [1]}, "base_params"),
        ({"input": "odds"}, "input must be"),
        ({"accelerate": "aitken"}, "accelerate"),
        ({"warm_start": 1}, "warm_start"),
    ],
)
def test_bad_params(params, message):
    with pytest.raises(ValueError, match=message):
        C.make("calem", **{"base": "platt", **params})


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda sc, yc, sb, zb: (np.r_[sc[:-1], np.nan], yc, sb, zb), "scores_clean has 1 NaN"),
        (lambda sc, yc, sb, zb: (sc, yc, np.r_[sb[:-1], np.inf], zb), "scores_biased has 1 infinite"),
        (lambda sc, yc, sb, zb: (sc, np.r_[yc[:-1], 2.0], sb, zb), "y_clean must be in"),
        (lambda sc, yc, sb, zb: (sc, yc, sb, np.zeros_like(zb)), "z_biased has a single class"),
        (lambda sc, yc, sb, zb: (sc, np.zeros_like(yc), sb, zb), "y_clean has a single class"),
        (lambda sc, yc, sb, zb: (sc[:-1], yc, sb, zb), "length mismatch: y_clean"),
        (lambda sc, yc, sb, zb: (sc, yc, sb, zb[:-1]), "length mismatch: z_biased"),
        (lambda sc, yc, sb, zb: (sc, yc, sb[:0], zb[:0]), "scores_biased is empty"),
        (lambda sc, yc, sb, zb: (sc + 2.0, yc, sb, zb), "declared as probabilities"),
    ],
)
def test_bad_input_is_named(bad, message):
    sc, yc, sb, zb, _ = _data(0, n=2000)
    with pytest.raises(ValueError, match=message):
        C.make("calem", base="platt", input="probability").fit(*bad(sc, yc, sb, zb))


def test_predict_before_fit_and_plain_fit_signature():
    cal = C.make("calem", base="platt")
    with pytest.raises(ValueError, match="not fitted"):
        cal.predict([0.1, 0.2])
    with pytest.raises(TypeError):
        cal.fit([0.1, 0.2], [0, 1])  # CalEM needs both the clean and the biased set


@pytest.mark.parametrize("base", [pytest.param("spline", marks=SLOW), "beta", "platt"])
def test_warm_started_em_reaches_the_cold_fixed_point(base):
    """Warm starts change only where each M-step's solver starts, not the convex optimum it returns
    (to the solver's tolerance, gradient ~1e-10). EM is a contraction near its fixed point, so these
    tiny perturbations do not grow: the warm run takes the same iterations to the same point."""
    sc, yc, sb, zb, d = _data(4, n=8000)
    runs = {}
    for warm in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            runs[warm] = C.make("calem", base=base, input="probability", warm_start=warm).fit(sc, yc, sb, zb)
    cold, hot = runs[False], runs[True]
    assert hot.n_iter_ == cold.n_iter_ and hot.converged_ == cold.converged_
    np.testing.assert_allclose(hot.predict(d["s"]), cold.predict(d["s"]), atol=1e-6)
    # Relative: the spline's far-tail coefficients (~ -22, p ~ 1e-10) are weakly determined by the
    # likelihood, so the solver's stopping point moves them by ~1e-6 relative (~2e-5 absolute).
    np.testing.assert_allclose(hot.trace_[-1]["theta"], cold.trace_[-1]["theta"], rtol=1e-5, atol=1e-8)


def test_two_weight_m_step_equals_the_stacked_m_step():
    """CalEM's M-step with one two-weight row per sample is the literal D* fit of Algorithm 3."""
    from calibflow.calibrators.calem import em_term_weights

    sc, yc, sb, zb, _ = _data(5)
    h = np.random.default_rng(5).random(sb.size)
    a, b = em_term_weights(yc, zb, h)
    lab, w = em_weights(h, zb, yc)
    grid = np.linspace(0.01, 0.99, 99)
    for base in ("spline", "beta", "platt"):
        one = C.make(base, input="probability").fit_two_weight(np.r_[sc, sb], a, b)
        lit = C.make(base, input="probability").fit(np.r_[sc, sb, sb], lab, sample_weight=w)
        np.testing.assert_allclose(one.predict(grid), lit.predict(grid), atol=1e-7)


@pytest.mark.parametrize("base", [pytest.param("spline", marks=SLOW), "platt"])
def test_squarem_reaches_the_em_fixed_point_in_fewer_m_steps(base):
    """SQUAREM extrapolates h between EM steps; EM's fixed points are its fixed points and the stop rule
    is Algorithm 3's on plain steps. Run both to a tight tol (1e-7): each then stops within about
    tol * rate / (1 - rate) of the same fixed point, so the curves must agree far below the default
    tol's own stopping error (~1e-5..1e-4 in probability at this size; measured here ~2e-7)."""
    sc, yc, sb, zb, d = _data(4, n=8000)
    kw = dict(base=base, input="probability", tol=1e-7, max_iter=500)
    em = C.make("calem", **kw).fit(sc, yc, sb, zb)
    sq = C.make("calem", accelerate="squarem", **kw).fit(sc, yc, sb, zb)
    assert em.converged_ and sq.converged_
    steps = [e["step"] for e in sq.trace_[1:]]
    assert "squarem" in steps and steps[-1] == "em"  # it stopped on a plain EM step
    assert sq.trace_[-1]["delta"] < 1e-7
    assert sq.n_iter_ < 0.5 * em.n_iter_, (sq.n_iter_, em.n_iter_)
    np.testing.assert_allclose(sq.predict(d["s"]), em.predict(d["s"]), atol=2e-6)


# ---- the clip made explicit
def test_unclipped_treatment_effect_is_the_raw_eq_15():
    g_eta = np.array([0.5, 0.2, 0.1])
    g_theta = np.array([0.25, 0.3, 0.0])
    h, low, high = treatment_effect(g_eta, g_theta, clip=False)
    np.testing.assert_allclose(h, [0.5, -0.5, 1.0])
    assert (low, high) == (1, 0)


@pytest.mark.parametrize("base", ["platt", pytest.param("spline", marks=SLOW)])
def test_literal_algorithm_3_runs_without_the_clip_and_differs(base):
    sc, yc, sb, zb, d = _data(3, n=6000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        clipped = C.make("calem", base=base, input="probability", max_iter=40).fit(sc, yc, sb, zb)
        literal = C.make("calem", base=base, input="probability", max_iter=40, clip_h=False).fit(
            sc, yc, sb, zb
        )
    # the literal run keeps negative h (it is counted, not moved) and lands elsewhere
    assert literal.h_clip_["clipped_low"] > 0
    assert literal.treatment_effect(d["s"]).min() < 0 <= clipped.treatment_effect(d["s"]).min()
    assert np.abs(literal.predict(d["s"]) - clipped.predict(d["s"])).max() > 1e-3
    # both start from the same clean-only fit
    np.testing.assert_allclose(literal.init_.predict(d["s"]), clipped.init_.predict(d["s"]))
    again = C.from_json(literal.to_json())
    assert again.clip_h is False
    np.testing.assert_allclose(again.predict(d["s"]), literal.predict(d["s"]), atol=1e-12)


def test_clip_h_params_are_checked():
    with pytest.raises(ValueError, match="clip_h"):
        C.make("calem", clip_h="no")
    with pytest.raises(ValueError, match="accelerate"):
        C.make("calem", clip_h=False, accelerate="squarem")
