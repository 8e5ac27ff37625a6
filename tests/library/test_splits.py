"""calibflow.splits: determinism, exact sizes, stratification, disjoint cover, CalEM partitions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibflow.splits import split_indices, uplift_partitions

FR = {"train": 0.6, "calibration": 0.2, "test": 0.2}


def _assert_partition(parts, n):
    allidx = np.concatenate(list(parts.values()))
    assert np.array_equal(np.sort(allidx), np.arange(n))  # disjoint and covering


def test_split_is_deterministic_exact_and_recorded():
    a = split_indices(1_001, FR, seed=5)
    b = split_indices(1_001, FR, seed=5)
    c = split_indices(1_001, FR, seed=6)
    assert list(a) == ["train", "calibration", "test"]
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == np.int64 and np.all(np.diff(a[k]) > 0)
    assert not np.array_equal(a["test"], c["test"])
    _assert_partition(a, 1_001)
    assert sorted(a.summary["sizes"].values()) == [200, 200, 601]
    record = json.loads(json.dumps(a.summary))
    assert record["seed"] == 5 and record["sha256"] == b.summary["sha256"] != c.summary["sha256"]


def test_stratified_split_keeps_class_balance():
    rng = np.random.default_rng(1)
    y = (rng.random(5_000) < 0.07).astype(int)
    parts = split_indices(5_000, FR, seed=0, stratify=y)
    _assert_partition(parts, 5_000)
    for name, idx in parts.items():
        assert abs(y[idx].mean() - y.mean()) < 1.5 / len(idx) + 1e-12, name
    assert parts.summary["strata_counts"]["test"]["1"] == int(y[parts["test"]].sum())


@pytest.mark.parametrize(
    ("n", "fractions", "stratify", "match"),
    [
        (10, {"a": 0.5, "b": 0.4}, None, "sum to 1"),
        (10, {"a": 1.2, "b": -0.2}, None, "positive"),
        (10, {}, None, "empty"),
        (0, {"a": 1.0}, None, "positive integer"),
        (10, {"a": 1.0}, np.zeros(9), "length mismatch"),
        (3, {"a": 1.0}, np.array([0.0, np.nan, 1.0]), "NaN"),
    ],
)
def test_bad_split_arguments(n, fractions, stratify, match):
    with pytest.raises(ValueError, match=match):
        split_indices(n, fractions, seed=0, stratify=stratify)


def test_uplift_partitions_follow_the_calem_protocol():
    rng = np.random.default_rng(3)
    arms = np.array(["No E-Mail", "Mens E-Mail", "Womens E-Mail"])[rng.integers(0, 3, 3_000)]
    y = (rng.random(3_000) < 0.15).astype(int)
    parts = uplift_partitions(arms, "No E-Mail", seed=2, stratify=y)
    again = uplift_partitions(arms, "No E-Mail", seed=2, stratify=y)
    _assert_partition(parts, 3_000)
    control = np.flatnonzero(arms == "No E-Mail")
    assert set(parts) == {"train", "calibration", "test", "biased"}
    assert np.array_equal(
        np.sort(np.concatenate([parts["train"], parts["calibration"], parts["test"]])), control
    )
    assert np.array_equal(parts["biased"], np.flatnonzero(arms != "No E-Mail"))
    sizes = parts.summary["sizes"]
    assert abs(sizes["train"] - 0.9 * control.size) <= 2 and abs(sizes["test"] - 0.05 * control.size) <= 2
    for k in parts:
        np.testing.assert_array_equal(parts[k], again[k])
    json.dumps(parts.summary)
    with pytest.raises(ValueError, match="control label"):
        uplift_partitions(arms, "none", seed=0)
    with pytest.raises(ValueError, match="every row is control"):
        uplift_partitions(np.zeros(5), 0, seed=0)
    with pytest.raises(ValueError, match="reserved"):
        uplift_partitions(arms, "No E-Mail", seed=0, fractions={"train": 0.5, "biased": 0.5})
