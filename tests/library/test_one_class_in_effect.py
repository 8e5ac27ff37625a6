"""Weights that leave one class with zero total weight are refused: the fit would see one class."""

from __future__ import annotations

import numpy as np
import pytest

from calibflow import calibrators


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    s = rng.normal(size=2_000)
    y = (rng.random(s.size) < 1.0 / (1.0 + np.exp(-s))).astype(float)
    return s, y


@pytest.mark.parametrize("method", calibrators.available("scores"))
@pytest.mark.parametrize("cls", [1.0, 0.0])
def test_zero_weight_on_every_row_of_a_class_is_refused(method, cls):
    s, y = _data()
    w = np.where(y == cls, 0.0, 1.0)
    word = "positive" if cls == 1.0 else "negative"
    with pytest.raises(ValueError, match=f"0 on every {word}.*one class only"):
        calibrators.make(method).fit(s, y, sample_weight=w)


def test_one_positive_row_with_weight_still_fits():
    s, y = _data()
    w = np.where(y == 1.0, 0.0, 1.0)
    w[np.flatnonzero(y == 1.0)[0]] = 1.0
    p = calibrators.make("platt").fit(s, y, sample_weight=w).predict(s)
    assert np.all(np.isfinite(p)) and p.max() > 1e-6
