"""The calibrator contract every registered method must honour."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibflow import calibrators as C
from calibflow import metrics as M

# Methods with a fit signature other than fit(scores, y, sample_weight) are exercised in their own tests.
SPECIAL = {"vad", "calem", "angular", "mist", "multicalibration", "partial_pooling"}
STANDARD = [m for m in C.available() if m not in SPECIAL]


@pytest.mark.parametrize("name", STANDARD)
def test_fit_predict_roundtrip(name, miscalibrated):
    s, y = miscalibrated
    cal = C.make(name).fit(s, y)
    p = cal.predict(s)
    assert p.shape == s.shape and np.all((p >= 0) & (p <= 1))
    payload = json.loads(cal.to_json())
    assert payload["schema"] == 1 and payload["method"] == name
    again = C.from_json(cal.to_json())
    np.testing.assert_allclose(again.predict(s), p, rtol=0, atol=1e-12)


MONOTONE = [m for m in STANDARD if C.get_class(m).monotone]


def test_ranking_claims_are_declared():
    """Binning methods (step maps that can dip) say so; the smooth and isotonic maps claim monotonicity."""
    assert {"histogram", "bbq"}.isdisjoint(MONOTONE)
    assert {"platt", "temperature", "isotonic", "beta", "spline", "gaussian", "gamma"} <= set(MONOTONE)


@pytest.mark.parametrize("name", MONOTONE)
def test_monotone_methods_preserve_order(name, miscalibrated):
    s, y = miscalibrated
    cal = C.make(name).fit(s, y)
    grid = np.linspace(s.min(), s.max(), 2001)
    assert np.all(np.diff(cal.predict(grid)) >= -1e-12)


@pytest.mark.parametrize("name", STANDARD)
@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda s, y: (np.r_[s[:-1], np.nan], y), "NaN"),
        (lambda s, y: (np.r_[s[:-1], np.inf], y), "infinite"),
        (lambda s, y: (s, np.r_[y[:-1], 2.0]), "must be in"),
        (lambda s, y: (s, np.zeros_like(y)), "single class"),
        (lambda s, y: (s[:-1], y), "length mismatch"),
        (lambda s, y: (s[:0], y[:0]), "empty"),
    ],
)
def test_bad_input_is_named(name, bad, message, miscalibrated):
    s, y = miscalibrated
    bs, by = bad(s, y)
    with pytest.raises(ValueError, match=message):
        C.make(name).fit(bs, by)


@pytest.mark.parametrize("name", STANDARD)
def test_predict_before_fit(name):
    with pytest.raises(ValueError, match="not fitted"):
        C.make(name).predict(np.array([0.1, 0.2]))


def test_registry_errors():
    with pytest.raises(ValueError, match="unknown calibrator"):
        C.make("no-such-method")
    with pytest.raises(ValueError, match="invalid parameters"):
        C.make("platt", not_a_param=1)
    with pytest.raises(ValueError, match="schema"):
        C.from_json(json.dumps({"schema": 99, "method": "platt"}))
    with pytest.raises(ValueError, match="not valid JSON"):
        C.from_json("{")


def test_probability_input_out_of_range():
    with pytest.raises(ValueError, match="declared as probabilities"):
        C.make("platt", input="probability").fit(np.array([0.2, 1.3]), np.array([0, 1]))


def test_platt_and_isotonic_improve_calibration(miscalibrated):
    s, y = miscalibrated
    raw = M.ece(y, 1 / (1 + np.exp(-s)))
    for name in ("platt", "isotonic"):
        assert M.ece(y, C.make(name).fit(s, y).predict(s)) < raw / 5


def test_sample_weight_equals_repetition(miscalibrated):
    """Integer weights must give the same fit as repeating rows."""
    s, y = miscalibrated
    s, y = s[:2000], y[:2000]
    w = np.random.default_rng(1).integers(1, 4, s.size).astype(float)
    rep_s, rep_y = np.repeat(s, w.astype(int)), np.repeat(y, w.astype(int))
    for name in ("platt", "temperature", "isotonic"):
        a = C.make(name).fit(s, y, sample_weight=w).predict(s)
        b = C.make(name).fit(rep_s, rep_y).predict(s)
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_atomic_writes_respect_umask(tmp_path):
    import os
    import stat

    from calibflow.io import write_text

    old = os.umask(0o022)
    try:
        path = write_text(tmp_path / "out.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
