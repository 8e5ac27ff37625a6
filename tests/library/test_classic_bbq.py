"""BBQ: the BDeu score and the model average checked from the formulas, and probcal's BBQ."""

from __future__ import annotations

import math

import numpy as np
from probcal import BBQCalibrator
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow.binning import equal_mass_edges


def _explicit_model(p, y, n_bins, n_prime=2.0):
    """One equal-frequency model written out bin by bin from Naeini et al. (2015), eq. 2."""
    edges = equal_mass_edges(p, n_bins, np.ones_like(p))
    idx = np.searchsorted(edges, p, side="right")
    bounds = np.r_[0.0, edges, 1.0]
    k = edges.size + 1
    ess = n_prime / k
    log_score, rates = 0.0, []
    for j in range(k):
        nb, mb = float(np.sum(idx == j)), float(np.sum(y[idx == j]))
        prior = (bounds[j] + bounds[j + 1]) / 2
        a, b = ess * prior, ess * (1 - prior)
        log_score += (
            math.lgamma(ess)
            - math.lgamma(nb + ess)
            + math.lgamma(mb + a)
            - math.lgamma(a)
            + math.lgamma(nb - mb + b)
            - math.lgamma(b)
        )
        rates.append((mb + a) / (nb + ess))
    return edges, np.array(rates), log_score


def test_bdeu_average_from_the_formulas(rng):
    """Our folded step function equals the explicit BDeu-weighted average of all models."""
    n = 3000
    p = rng.beta(2, 5, n)
    y = (rng.random(n) < p**1.5).astype(float)
    cal = C.make("bbq", input="probability").fit(p, y)
    root = n ** (1 / 3)
    assert cal.bins_grid_[0] == math.floor(root / 10) and cal.bins_grid_[-1] == math.ceil(10 * root)
    models = [_explicit_model(p, y, int(b)) for b in cal.bins_grid_]
    scores = np.array([m[2] for m in models])
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    # Models with weight < 1e-20 may differ by one edge where q W lands on an integer (rounding).
    np.testing.assert_allclose(cal.model_weights_, weights, rtol=1e-9, atol=1e-20)
    grid = np.r_[np.linspace(0, 1, 2001), p[:500]]
    expected = sum(
        wt * r[np.searchsorted(e, grid, side="right")] for wt, (e, r, _) in zip(weights, models, strict=True)
    )
    np.testing.assert_allclose(cal.predict(grid), expected, atol=1e-12)


def test_close_to_probcal_bbq(miscalibrated):
    """probcal's BBQ averages equal-mass binnings too, but scores them with a per-bin Jeffreys
    Beta(1/2, 1/2) prior (not BDeu with N' = 2) over B in [2, min(50, sqrt n)] (not the paper's
    [N^(1/3)/10, 10 N^(1/3)]). On the same grid the two averages calibrate alike: log loss and
    ECE within 1%/0.005."""
    s, y = miscalibrated
    p = expit(s)
    ours = C.make("bbq", input="probability").fit(p, y)
    ref = BBQCalibrator(min_bins=int(ours.bins_grid_[0]), max_bins=int(ours.bins_grid_[-1])).fit(p, y)
    q_ours, q_ref = ours.predict(p), ref.predict_proba(p)
    assert abs(M.log_loss(y, q_ours) - M.log_loss(y, q_ref)) / M.log_loss(y, q_ref) < 0.01
    assert abs(M.ece(y, q_ours) - M.ece(y, q_ref)) < 0.005
    assert M.ece(y, q_ours) < M.ece(y, p) / 5


def test_weights_equal_repetition(miscalibrated, rng):
    s, y = miscalibrated
    s, y = s[:4000], y[:4000]
    w = rng.integers(1, 4, s.size)
    a = C.make("bbq").fit(s, y, sample_weight=w.astype(float))
    b = C.make("bbq").fit(np.repeat(s, w), np.repeat(y, w))
    np.testing.assert_allclose(a.predict(s), b.predict(s), atol=1e-10)


def test_invalid_params(miscalibrated):
    s, y = miscalibrated
    for kw in ({"C": 0.5}, {"n_prime": 0.0}, {"C": float("nan")}):
        try:
            C.make("bbq", **kw).fit(s, y)
        except ValueError as exc:
            assert next(iter(kw)) in str(exc)
        else:
            raise AssertionError(f"bbq accepted {kw}")
