"""Isotonic regression calibration by weighted pool-adjacent-violators (Zadrozny & Elkan 2002)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, StateChecks, register


def pav(y: NDArray[np.float64], w: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    """Weighted pool-adjacent-violators on values already sorted by score.

    Returns the block means and the index where each block starts. The pooling itself is
    scikit-learn's compiled PAV (``sklearn.isotonic.isotonic_regression``); blocks are read off its
    piecewise-constant output.
    """
    from sklearn.isotonic import isotonic_regression  # at fit: importing the class stays light

    fitted = isotonic_regression(y, sample_weight=w)
    starts = np.flatnonzero(np.r_[True, fitted[1:] != fitted[:-1]])
    return fitted[starts], starts


def pool_ties(s, y, w) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Distinct scores (sorted) with their summed weight and summed positive weight; zero weights dropped.

    The step every order-based method (isotonic, centered isotonic, Venn-Abers) starts from: equal scores
    must get one value, so they are pooled before any fitting.
    """
    keep = w > 0
    s, y, w = s[keep], y[keep], w[keep]
    # Any sort will do (ties are pooled next), and the default one is the vectorised, faster one.
    order = np.argsort(s)
    s, y, w = s[order], y[order], w[order]
    # s is sorted: the first index of each distinct value is where it changes (no second sort).
    first = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    return s[first], np.add.reduceat(w, first), np.add.reduceat(w * y, first)


@register("isotonic")
class IsotonicCalibrator(BaseCalibrator):
    """Non-decreasing step map from score to probability, fitted by weighted PAV.

    Matches scikit-learn's ``IsotonicRegression(out_of_bounds="clip")``: ties in the score are pooled
    first (weighted mean), and prediction interpolates linearly between the fitted points, clipping
    outside the fitted range.
    """
    default_candidate = True
    scale_default = True
    familiarity = 3
    glossary = (
        "The best non-decreasing step map (pool adjacent violators); ties scores within a step.",
        "Zadrozny & Elkan, KDD 2002",
    )

    expects = "any"
    _state_fields = ("x_", "y_")
    _state_checks = StateChecks(sorted=("x_",), strict=("x_",), probabilities=("y_",), monotone=("y_",),
                                lengths=(("y_", "x_", 0),))
    _state_spec = {"x_": ("f", 1), "y_": ("f", 1)}

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        # Pool ties first so equal scores always get one value (as scikit-learn does).
        uniq, ws, wy = pool_ties(s, y, w)
        means, starts = pav(wy / ws, ws)
        ends = np.append(starts[1:], uniq.size) - 1
        # Keep both ends of each block so interpolation reproduces the step exactly inside blocks.
        xs = np.column_stack([uniq[starts], uniq[ends]]).ravel()
        vs = np.repeat(means, 2)
        keep_pts = np.ones(xs.size, bool)
        keep_pts[1::2] = starts != ends
        self.x_, self.y_ = xs[keep_pts], vs[keep_pts]

    def _predict(self, s):
        return np.interp(s, self.x_, self.y_)
