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


@pytest.fixture(scope="session", autouse=True)
def _data_mirror():
    """Point ``CALIBFLOW_DATA_MIRROR`` at ``../shared/datasets`` when it is unset and that folder exists.

    Nothing is skipped when data is missing: tests that need real data then fail with the fetch error,
    which lists every source tried.
    """
    import os
    from pathlib import Path

    shared = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    if "CALIBFLOW_DATA_MIRROR" not in os.environ and shared.is_dir():
        os.environ["CALIBFLOW_DATA_MIRROR"] = str(shared)
    yield


@pytest.fixture
def one_blas_thread():
    """One BLAS thread: small matrix-vector products only gain contention from threads on shared cores."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield
