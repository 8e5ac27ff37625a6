"""Isotonic regression calibration by weighted pool-adjacent-violators (Zadrozny & Elkan 2002)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from calibflow.calibrators.base import BaseCalibrator, register


def pav(y: NDArray[np.float64], w: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    """Weighted PAV on values already sorted by score; returns block means and block start indices.

    A single linear-time stack pass: each new point is merged backwards while it violates
    monotonicity with the previous block.
    """
    n = y.size
    means = np.empty(n)
    weights = np.empty(n)
    starts = np.empty(n, dtype=np.intp)
    top = -1
    for i in range(n):
        top += 1
        means[top], weights[top], starts[top] = y[i], w[i], i
        while top > 0 and means[top - 1] >= means[top]:
            wt = weights[top - 1] + weights[top]
            means[top - 1] = (means[top - 1] * weights[top - 1] + means[top] * weights[top]) / wt
            weights[top - 1] = wt
            top -= 1
    return means[: top + 1], starts[: top + 1]


@register("isotonic")
class IsotonicCalibrator(BaseCalibrator):
    """Non-decreasing step map from score to probability, fitted by weighted PAV.

    Matches scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``: ties in the score are pooled
    first (weighted mean), and prediction interpolates linearly between the fitted points, clipping
    outside the fitted range.
    """

    expects = "any"
    _state_fields = ("x_", "y_")

    def __init__(self, input: str = "score") -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        keep = w > 0
        s, y, w = s[keep], y[keep], w[keep]
        # Any sort will do (ties are pooled next), and the default one is the vectorised, faster one.
        order = np.argsort(s)
        s, y, w = s[order], y[order], w[order]
        # Pool ties first so equal scores always get one value (as scikit-learn does).
        # s is sorted: the first index of each distinct value is where it changes (no second sort).
        first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
        uniq = s[first]
        ws = np.add.reduceat(w, first)
        ys = np.add.reduceat(w * y, first) / ws
        means, starts = _pav_fast(ys, ws)
        ends = np.append(starts[1:], uniq.size) - 1
        # Keep both ends of each block so interpolation reproduces the step exactly inside blocks.
        xs = np.column_stack([uniq[starts], uniq[ends]]).ravel()
        vs = np.repeat(means, 2)
        keep_pts = np.ones(xs.size, bool)
        keep_pts[1::2] = starts != ends
        self.x_, self.y_ = xs[keep_pts], vs[keep_pts]

    def _predict(self, s):
        return np.interp(s, self.x_, self.y_)


def _pav_fast(y: NDArray[np.float64], w: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    """PAV via scikit-learn's compiled kernel when present (same result as ``pav``, much faster)."""
    try:
        from sklearn._isotonic import _inplace_contiguous_isotonic_regression
    except ImportError:  # pragma: no cover - fallback keeps us correct without the private kernel
        return pav(y, w)
    fitted = y.astype(np.float64).copy()
    _inplace_contiguous_isotonic_regression(fitted, w.astype(np.float64).copy())
    starts = np.flatnonzero(np.r_[True, fitted[1:] != fitted[:-1]])
    return fitted[starts], starts
