"""Venn-Abers predictors: inductive (IVAP) and cross (CVAP).

Vovk & Petej, "Venn-Abers predictors" (UAI 2014), and Vovk, Petej & Fedorova, "Large-scale probabilistic
predictors with and without guarantees of validity" (NeurIPS 2015). For a test score ``s`` the IVAP fits
isotonic regression twice on the calibration set plus the test object, once labelled 0 and once labelled 1,
and reads the two fitted values at the test object: ``p0(s) <= p1(s)``, a multiprobability prediction that
is valid (one of the two is calibrated) whatever the data. The single probability is their log-loss
minimax merge ``p = p1 / (1 - p0 + p1)`` (NeurIPS 2015, eq. 6); the interval ``[p0, p1]`` says how much
the calibration set pins the answer down.

Computation (NeurIPS 2015, Sec. 2, Algorithms 1-4, rederived here). The isotonic fit is the slope of the
greatest convex minorant (GCM) of the cumulative sum diagram (CSD) ``P_i = (W_i, Y_i)`` of the distinct
calibration scores (cumulative weight and positive weight). Adding the test object with label ``l`` tied
with the ``j``-th distinct score shifts every point from ``j`` on by ``(1, l)``; translating the whole
diagram back, the points before ``j`` move by ``(-1, -l)`` and the rest stay. The fitted value at the test
object is the slope of the GCM across the gap between the two groups, i.e. the slope of the lower *bridge*
between the convex hull of the shifted prefix and that of the unshifted suffix. The prefix hull grows left
to right (a stack), the suffix hull is built right to left once and replayed forwards by undoing its pops,
and each bridge is found by walking from the previous one: O(k) stack work plus short walks, after an
O(n log n) sort. A test score strictly between two calibration scores gets the value of the tie with the
next score up (for ``p1``) or down (for ``p0``), which is the same fit; beyond the ends ``p1 = 1`` above
the largest score and ``p0 = 0`` below the smallest. Prediction is a binary search: O(log k).

Weights are frequency weights; the test object counts as one row. With unit weights the outputs equal the
``venn-abers`` package's ``VennAbers`` exactly (``tests/library/test_venn_abers.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from calibflow._validation import check_labels, check_scores
from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, StateChecks, register
from calibflow.calibrators.isotonic import pool_ties


def _cross(ox: float, oy: float, ax: float, ay: float, bx: float, by: float) -> float:
    return (ax - ox) * (by - oy) - (ay - oy) * (bx - ox)


def _bridge_slopes(xs: NDArray[np.float64], ys: NDArray[np.float64], label: float) -> NDArray[np.float64]:
    k = xs.size - 1
    # Suffix hulls, built right to left (rx/ry[rn - 1] is the leftmost vertex). Each vertex is pushed once
    # and popped at most once, so the pops of all pushes fit in one array: gone[g0[b]:g1[b]] are the
    # vertices that pushing point b removed, top first.
    rx, ry = np.empty(k + 1), np.empty(k + 1)
    gx, gy = np.empty(k + 1), np.empty(k + 1)
    g0, g1 = np.zeros(k + 1, np.int64), np.zeros(k + 1, np.int64)
    rn, gn = 0, 0
    for b in range(k, 0, -1):
        g0[b] = gn
        while rn >= 2 and _cross(xs[b], ys[b], rx[rn - 1], ry[rn - 1], rx[rn - 2], ry[rn - 2]) <= 0:
            rn -= 1
            gx[gn], gy[gn] = rx[rn], ry[rn]
            gn += 1
        g1[b] = gn
        rx[rn], ry[rn] = xs[b], ys[b]
        rn += 1
    lx, ly = np.empty(k + 1), np.empty(k + 1)
    ln = 0
    out = np.empty(k)
    li, ri = 0, rn - 1
    for j in range(1, k + 1):
        # The prefix hull gains the shifted point j - 1 (lx/ly[ln - 1] is its rightmost vertex).
        qx, qy = xs[j - 1] - 1.0, ys[j - 1] - label
        while ln >= 2 and _cross(lx[ln - 2], ly[ln - 2], lx[ln - 1], ly[ln - 1], qx, qy) <= 0:
            ln -= 1
        lx[ln], ly[ln] = qx, qy
        ln += 1
        # Lower bridge, walked from the previous one (any start works on convex chains; the last bridge is
        # usually a step or two away, which keeps the walks short): move a contact point to a neighbour that
        # lies below the current line, outwards on ties, until neither hull has one.
        li, ri = min(li, ln - 1), min(ri, rn - 1)
        moved = True
        while moved:
            moved = False
            while ri > 0 and _cross(lx[li], ly[li], rx[ri], ry[ri], rx[ri - 1], ry[ri - 1]) <= 0:
                ri -= 1
                moved = True
            while ri + 1 < rn and _cross(lx[li], ly[li], rx[ri + 1], ry[ri + 1], rx[ri], ry[ri]) > 0:
                ri += 1
                moved = True
            while li > 0 and _cross(lx[li - 1], ly[li - 1], lx[li], ly[li], rx[ri], ry[ri]) <= 0:
                li -= 1
                moved = True
            while li + 1 < ln and _cross(lx[li], ly[li], lx[li + 1], ly[li + 1], rx[ri], ry[ri]) > 0:
                li += 1
                moved = True
        out[j - 1] = (ry[ri] - ly[li]) / (rx[ri] - lx[li])
        # The suffix hull loses point j: undo its push and restore what it popped (in reverse order).
        rn -= 1
        for g in range(g1[j] - 1, g0[j] - 1, -1):
            rx[rn], ry[rn] = gx[g], gy[g]
            rn += 1
    return out


@cache
def _compiled() -> Callable[..., NDArray[np.float64]]:
    """``_bridge_slopes`` compiled by numba, on first use: importing numba costs a third of a second, and
    the params check imports this module for the class's facts only."""
    import numba

    global _cross
    _cross = numba.njit(cache=True, inline="always")(_cross)  # the name _bridge_slopes's body resolves
    return numba.njit(cache=True)(_bridge_slopes)


def bridge_slopes(cw: NDArray[np.float64], cy: NDArray[np.float64], label: float) -> NDArray[np.float64]:
    """Isotonic value at a test object of weight 1 and label ``label`` tied with each distinct score.

    ``cw``, ``cy``: the CSD, cumulative weights and cumulative positive weights with a leading 0 (length
    ``k + 1``). Returns ``k`` values: entry ``j - 1`` is the fit when the test object joins score ``j``.
    Compiled with numba: the stack walks are sequential by nature.
    """
    return _compiled()(np.ascontiguousarray(cw, np.float64), np.ascontiguousarray(cy, np.float64), label)


@register("venn_abers")
class VennAbersCalibrator(BaseCalibrator):
    """Inductive Venn-Abers predictor (IVAP): probability plus its ``[p0, p1]`` interval.

    ``predict`` returns the merged probability ``p1 / (1 - p0 + p1)``; ``predict_interval`` returns
    ``(p0, p1)``. Monotone: both ``p0`` and ``p1`` are non-decreasing in the score, and so is the merge.
    Only the order of the scores matters (``expects="any"``).
    """
    default_candidate = True
    familiarity = 9
    glossary = (
        "Two isotonic fits give an interval [p0, p1]; the probability is their log-loss merge.",
        "Vovk & Petej, UAI 2014; Vovk, Petej & Fedorova, NeurIPS 2015",
    )

    expects = "any"
    _state_fields = ("scores_", "p0_", "p1_")
    # p0/p1 only bounded, not checked monotone: weighted fits may dip by rounding
    _state_checks = StateChecks(sorted=("scores_",), strict=("scores_",), probabilities=("p0_", "p1_"),
                                lengths=(("p0_", "scores_", 0), ("p1_", "scores_", 0)))
    _state_spec = {"scores_": ("f", 1), "p0_": ("f", 1), "p1_": ("f", 1)}

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        self.scores_, ws, wy = pool_ties(s, y, w)
        cw, cy = np.r_[0.0, np.cumsum(ws)], np.r_[0.0, np.cumsum(wy)]
        self.p0_ = bridge_slopes(cw, cy, 0.0)
        self.p1_ = bridge_slopes(cw, cy, 1.0)

    def _interval(self, s: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        k = self.scores_.size
        # One binary search per score, on sorted queries: sorted keys let searchsorted reuse its last position
        # (random queries over 1e6 calibration scores are cache misses; this is 3-4x faster at 1e6).
        order = np.argsort(s)
        up = np.empty(s.size, dtype=np.intp)
        up[order] = np.searchsorted(self.scores_, s[order], side="left")  # first distinct score >= s
        exact = (up < k) & (self.scores_[np.minimum(up, k - 1)] == s)
        down = np.where(exact, up, up - 1)  # last distinct score <= s
        p1 = np.where(up < k, self.p1_[np.minimum(up, k - 1)], 1.0)
        p0 = np.where(down >= 0, self.p0_[np.maximum(down, 0)], 0.0)
        return p0, p1

    def _predict(self, s):
        p0, p1 = self._interval(s)
        return p1 / (1.0 - p0 + p1)

    def predict_interval(self, scores: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The multiprobability prediction ``(p0, p1)`` for each score."""
        self._check_fitted()
        s = self._convert(check_scores(scores, self.input_kind))
        return self._interval(s)


def cross_venn_abers(
    fit_scorer: Callable[[NDArray[np.intp]], Callable[[ArrayLike], NDArray[np.float64]]],
    y: ArrayLike,
    n_splits: int = 5,
    seed: int = 0,
) -> Callable[[ArrayLike], tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]]:
    """Cross Venn-Abers predictor (CVAP, NeurIPS 2015 Sec. 4): K IVAPs, each calibrated on one fold.

    ``fit_scorer(train_index)`` trains the underlying model on those rows and returns a function that
    scores rows given *by index into the training data* (for the held-out fold) or new data. For each fold
    ``k`` the model is trained on the other folds and an IVAP is fitted on fold ``k``'s scores; a test object
    gets ``K`` pairs ``(p0_k, p1_k)``, merged by the paper's geometric-mean rule
    ``p = GM(p1) / (GM(1 - p0) + GM(p1))``. Returns ``predict(X) -> (p, p0_mean, p1_mean)``.
    """
    from sklearn.model_selection import StratifiedKFold

    yy = check_labels(y)
    folds = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    members = []
    for train, cal in folds.split(np.zeros(yy.size), yy):
        score = fit_scorer(train)
        members.append((score, VennAbersCalibrator(input="score").fit(score(cal), yy[cal])))

    def predict(x_new: ArrayLike):
        pairs = [ivap.predict_interval(score(x_new)) for score, ivap in members]
        p0 = np.stack([p[0] for p in pairs])
        p1 = np.stack([p[1] for p in pairs])
        gm1 = np.exp(np.mean(np.log(np.clip(p1, 1e-300, None)), axis=0))
        gm0 = np.exp(np.mean(np.log(np.clip(1 - p0, 1e-300, None)), axis=0))
        return gm1 / (gm0 + gm1), p0.mean(axis=0), p1.mean(axis=0)

    return predict
