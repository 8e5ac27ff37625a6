"""Validation at the boundary: every public ``fit``/``predict``/metric goes through these.

Errors are ``ValueError`` with a message that names the problem and, where useful, the count and
position of the offending values, so a pipeline log says what to fix.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

INPUT_KINDS = ("probability", "logit", "score")


def as_1d_float(x: ArrayLike, name: str) -> NDArray[np.float64]:
    """Return ``x`` as a 1-D float64 array; raise if it is empty, not 1-D, NaN or infinite."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 1:
        arr = arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        kind = "NaN" if np.isnan(arr[bad]).any() else "infinite"
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} has {int(bad.sum())} {kind} value(s) (first at index {first})")
    return arr


def check_scores(scores: ArrayLike, input: str = "score", name: str = "scores") -> NDArray[np.float64]:
    """Validate scores of the declared kind: probabilities must lie in [0, 1]."""
    if input not in INPUT_KINDS:
        raise ValueError(f"input must be one of {INPUT_KINDS}, got {input!r}")
    arr = as_1d_float(scores, name)
    if input == "probability" and (arr.min() < 0.0 or arr.max() > 1.0):
        raise ValueError(
            f"{name} declared as probabilities but range is [{arr.min():.4g}, {arr.max():.4g}]; "
            "pass input='logit' or input='score' for unbounded scores"
        )
    return arr


def check_labels(
    y: ArrayLike, n: int | None = None, name: str = "y", both_classes: bool = True
) -> NDArray[np.float64]:
    """Validate binary labels in {0, 1} (booleans accepted) and, optionally, that both classes occur."""
    arr = as_1d_float(y, name)
    if n is not None and arr.size != n:
        raise ValueError(f"length mismatch: {name} has {arr.size} values, scores have {n}")
    bad = (arr != 0.0) & (arr != 1.0)
    if bad.any():
        vals = np.unique(arr[bad])[:5]
        raise ValueError(
            f"{name} must be in {{0, 1}}; found {int(bad.sum())} other value(s), e.g. {vals.tolist()}"
        )
    if both_classes and (arr.min() == arr.max()):
        raise ValueError(f"{name} has a single class ({int(arr[0])}); calibration needs both 0 and 1")
    return arr


def check_weights(
    sample_weight: ArrayLike | None, n: int, name: str = "sample_weight", allow_negative: bool = False
) -> NDArray[np.float64]:
    """Return weights of length ``n`` (ones when None); reject negative ones unless allowed."""
    if sample_weight is None:
        return np.ones(n)
    w = as_1d_float(sample_weight, name)
    if w.size != n:
        raise ValueError(f"length mismatch: {name} has {w.size} values, scores have {n}")
    if not allow_negative and (w < 0).any():
        raise ValueError(f"{name} has {int((w < 0).sum())} negative value(s); this method needs weights >= 0")
    if w.sum() <= 0 and not allow_negative:
        raise ValueError(f"{name} sums to {w.sum():g}; at least one positive weight is needed")
    return w


def check_probabilities(p: ArrayLike, n: int | None = None, name: str = "p") -> NDArray[np.float64]:
    """Validate predicted probabilities in [0, 1]."""
    arr = check_scores(p, input="probability", name=name)
    if n is not None and arr.size != n:
        raise ValueError(f"length mismatch: {name} has {arr.size} values, labels have {n}")
    return arr


def check_n_bins(n_bins: object, name: str = "n_bins") -> int:
    """A positive integer number of bins (booleans refused)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"{name} must be a positive integer, got {n_bins!r}")
    return int(n_bins)
