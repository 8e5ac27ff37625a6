"""Deterministic, recorded splits: train / calibration / test, and the CalEM uplift partitions.

``split_indices`` permutes rows with ``numpy.random.default_rng(seed)`` and cuts the permutation by
largest-remainder rounding of ``n * fraction``, within each stratum when ``stratify`` is given (so class
balance is kept to within one row per stratum and split). Same ``n``, fractions, seed and strata: same
indices, on any machine. The result is a dict of sorted index arrays that also carries a JSON-able
``summary`` (sizes, seed, class counts, and a sha256 of each index set) for run records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

CALEM_FRACTIONS = {"train": 0.90, "calibration": 0.05, "test": 0.05}


class Splits(dict[str, NDArray[np.int64]]):
    """``{split name: sorted row indices}`` plus ``summary``: a JSON-able record of how it was made."""

    summary: dict[str, Any]


def _check_fractions(fractions: Mapping[str, float]) -> dict[str, float]:
    if not fractions:
        raise ValueError("fractions is empty")
    fr = {str(k): float(v) for k, v in fractions.items()}
    bad = {k: v for k, v in fr.items() if not np.isfinite(v) or v <= 0}
    if bad:
        raise ValueError(f"fractions must be positive and finite, got {bad}")
    total = sum(fr.values())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"fractions must sum to 1, got {total:.12g}")
    return fr


def _allocate(n: int, fractions: dict[str, float]) -> list[int]:
    """Sizes summing to ``n``: floor of n * f, the leftover rows to the largest remainders (ties: order)."""
    exact = np.array([n * f for f in fractions.values()])
    sizes = np.floor(exact).astype(int)
    order = np.argsort(-(exact - sizes), kind="stable")
    sizes[order[: n - sizes.sum()]] += 1
    return sizes.tolist()


def digest(idx: ArrayLike) -> str:
    """sha256 of row indices as little-endian int64 (the ``summary["sha256"]`` of a split)."""
    return hashlib.sha256(np.ascontiguousarray(idx, dtype="<i8").tobytes()).hexdigest()


def split_indices(
    n: int, fractions: Mapping[str, float], seed: int, stratify: ArrayLike | None = None
) -> Splits:
    """Split ``range(n)`` into named parts of the given fractions (summing to 1), seeded and recorded."""
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    fr = _check_fractions(fractions)
    rng = np.random.default_rng(seed)
    parts: dict[str, list[NDArray[np.int64]]] = {k: [] for k in fr}
    if stratify is None:
        strata = np.zeros(n, dtype=np.int64)
        labels: list[Any] = [None]
    else:
        s = np.asarray(stratify).reshape(-1)
        if s.shape[0] != n:
            raise ValueError(f"length mismatch: stratify has {s.shape[0]} values, n is {n}")
        if s.dtype.kind == "f" and np.isnan(s).any():
            raise ValueError("stratify has NaN values")
        labels_arr, strata = np.unique(s, return_inverse=True)
        labels = labels_arr.tolist()
    for k in range(len(labels)):
        rows = np.flatnonzero(strata == k)
        perm = rows[rng.permutation(rows.size)]
        cuts = np.cumsum([0, *_allocate(rows.size, fr)])
        for j, name in enumerate(fr):
            parts[name].append(perm[cuts[j] : cuts[j + 1]])
    out = Splits({name: np.sort(np.concatenate(p)).astype(np.int64) for name, p in parts.items()})
    out.summary = {
        "n": int(n),
        "seed": int(seed),
        "fractions": fr,
        "stratified": stratify is not None,
        "sizes": {k: int(v.size) for k, v in out.items()},
        "sha256": {k: digest(v) for k, v in out.items()},
    }
    if stratify is not None:
        out.summary["strata_counts"] = {
            name: {str(lab): int((strata[idx] == k).sum()) for k, lab in enumerate(labels)}
            for name, idx in out.items()
        }
    return out


def uplift_partitions(
    treatment: ArrayLike,
    control_label: Any,
    seed: int,
    fractions: Mapping[str, float] | None = None,
    stratify: ArrayLike | None = None,
) -> Splits:
    """Partitions for the CalEM protocol (Sergazinov et al.): control rows split, treated rows biased.

    Control rows (``treatment == control_label``) are split by ``fractions`` (default 90% ``train``
    for the base model, 5% ``calibration``, 5% ``test``); every other row forms ``biased`` (the treated
    set whose outcomes the base model's calibration is shifted by). ``stratify`` (e.g. the outcome)
    stratifies the control split. Indices refer to the full arrays.
    """
    t = np.asarray(treatment).reshape(-1)
    if t.size == 0:
        raise ValueError("treatment is empty")
    is_control = t == control_label
    if not is_control.any():
        raise ValueError(
            f"no row has the control label {control_label!r}; labels: {np.unique(t)[:10].tolist()}"
        )
    if is_control.all():
        raise ValueError("every row is control; the biased (treated) set would be empty")
    fr = dict(CALEM_FRACTIONS if fractions is None else fractions)
    if "biased" in fr:
        raise ValueError("'biased' is reserved for the treated rows; do not name a control split so")
    control = np.flatnonzero(is_control)
    strat = None
    if stratify is not None:
        s = np.asarray(stratify).reshape(-1)
        if s.shape[0] != t.shape[0]:
            raise ValueError(f"length mismatch: stratify has {s.shape[0]} values, treatment {t.shape[0]}")
        strat = s[control]
    inner = split_indices(control.size, fr, seed, stratify=strat)
    out = Splits({name: control[idx] for name, idx in inner.items()})
    out["biased"] = np.flatnonzero(~is_control).astype(np.int64)
    out.summary = {
        **inner.summary,
        "n": int(t.size),
        "control_label": str(control_label),
        "n_control": int(control.size),
        "sizes": {k: int(v.size) for k, v in out.items()},
        "sha256": {k: digest(v) for k, v in out.items()},
    }
    return out
