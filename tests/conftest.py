"""Shared fixtures: seeded synthetic scores, and the rule that real data must be present in CI."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def miscalibrated(rng):
    """Over-confident logits: true P(y=1|s) = sigmoid(0.5 s - 1), imbalanced (about 30% positives)."""
    n = 20_000
    s = rng.normal(0.0, 2.0, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.5 * s - 1.0)))).astype(float)
    return s, y
