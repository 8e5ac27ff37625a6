"""Centered isotonic, quadratic scaling and segment-aware calibration."""

from __future__ import annotations

import numpy as np
import pytest

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow.calibrators.multicalibration import segment_table


def test_centered_isotonic_keeps_every_rank(miscalibrated):
    s, y = miscalibrated
    cal, test = slice(0, 10_000), slice(10_000, None)
    cir = C.make("centered_isotonic").fit(s[cal], y[cal])
    p = cir.predict(s[test])
    inside = (s[test] > s[cal].min()) & (s[test] < s[cal].max())
    order = np.argsort(s[test][inside])
    assert np.all(np.diff(p[inside][order]) > 0)  # strictly increasing: no ties inside the data range
    assert M.auc(y[test], p) == pytest.approx(M.auc(y[test], s[test]), abs=1e-12)
    iso = C.make("isotonic").fit(s[cal], y[cal]).predict(s[test])
    assert np.unique(iso).size < np.unique(p).size / 20  # isotonic ties, CIR does not
    assert M.log_loss(y[test], p) < M.log_loss(y[test], 1 / (1 + np.exp(-s[test])))


def test_centered_isotonic_frequency_weights(rng):
    s = np.round(rng.normal(size=500), 1)
    y = (rng.random(500) < 1 / (1 + np.exp(-s))).astype(float)
    w = rng.integers(1, 4, 500)
    t = np.linspace(-3, 3, 200)
    a = C.make("centered_isotonic").fit(s, y, sample_weight=w).predict(t)
    b = C.make("centered_isotonic").fit(np.repeat(s, w), np.repeat(y, w)).predict(t)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_quadratic_fits_a_quadratic_logit_and_stays_monotone(rng):
    z = rng.normal(0, 2, 40_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-(0.6 * z - 1 + 0.1 * z**2)))).astype(float)
    q = C.make("quadratic").fit(z[:20_000], y[:20_000])
    platt = C.make("platt", input="logit").fit(z[:20_000], y[:20_000])
    t = z[20_000:]
    assert M.log_loss(y[20_000:], q.predict(t)) < M.log_loss(y[20_000:], platt.predict(t)) - 0.002
    grid = np.linspace(-15, 15, 3001)
    assert np.all(np.diff(q.predict(grid)) >= 0)
    assert C.from_json(q.to_json()).predict(t) == pytest.approx(q.predict(t), abs=1e-12)


def _segmented(rng, n):
    country = rng.choice(["FR", "DE", "US", "XX"], n)
    device = rng.choice(["ios", "web"], n)
    z = rng.normal(-2, 1.5, n)
    bias = np.select([country == "FR", country == "DE"], [0.8, -0.8], 0.0)
    bias = bias + np.where((country == "US") & (device == "ios"), 0.6, 0.0)  # an intersection only
    y = (rng.random(n) < 1 / (1 + np.exp(-(z + bias)))).astype(float)
    return z, y, {"country": country, "device": device}


def test_multicalibration_fixes_segments_and_intersections(rng):
    z, y, seg = _segmented(rng, 60_000)
    fit, test = slice(0, 30_000), slice(30_000, None)
    seg_fit = {k: v[fit] for k, v in seg.items()}
    seg_test = {k: v[test] for k, v in seg.items()}
    mc = C.make("multicalibration").fit(z[fit], y[fit], segments=seg_fit)
    p = mc.predict(z[test], segments=seg_test)
    platt = C.make("platt", input="logit").fit(z[fit], y[fit]).predict(z[test])
    assert M.log_loss(y[test], p) < M.log_loss(y[test], platt) - 0.01
    rows = segment_table(y[test], {"platt": platt, "mc": p}, {"country": seg_test["country"]})
    for r in rows:
        assert abs(r["ratio_mc"] - 1) < max(0.1, abs(r["ratio_platt"] - 1) / 3)
    us_ios = (seg_test["country"] == "US") & (seg_test["device"] == "ios")
    ratio = p[us_ios].sum() / y[test][us_ios].sum()
    assert abs(ratio - 1) < 0.08 and abs(platt[us_ios].sum() / y[test][us_ios].sum() - 1) > 0.15
    # Within a segment the ranking of the base score is kept (monotone constraint on the logit).
    fr = seg_test["country"] == "FR"
    for dev in ("ios", "web"):
        m = fr & (seg_test["device"] == dev)
        order = np.argsort(z[test][m])
        assert np.all(np.diff(p[m][order]) >= -1e-12)
    again = C.from_json(mc.to_json())
    np.testing.assert_array_equal(again.predict(z[test], segments=seg_test), p)


def test_multicalibration_leaves_unbiased_segments_alone(rng):
    z = rng.normal(-1, 1.5, 40_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-z))).astype(float)  # calibrated everywhere
    seg = {"country": rng.choice(["A", "B", "C"], z.size)}
    mc = C.make("multicalibration").fit(z[:20_000], y[:20_000], segments={"country": seg["country"][:20_000]})
    p = mc.predict(z[20_000:], segments={"country": seg["country"][20_000:]})
    base = 1 / (1 + np.exp(-z[20_000:]))
    assert M.log_loss(y[20_000:], p) <= M.log_loss(y[20_000:], base) + 0.002  # early stopping: no harm


def test_multicalibration_needs_segments(miscalibrated):
    s, y = miscalibrated
    with pytest.raises(ValueError, match="segments"):
        C.make("multicalibration").fit(s, y)
