"""MIST recalibration: one isotonic regression per uncertainty level (Arora et al., Alg. 3, App. C.6).

The paper's MIST fits isotonic regression *on the samples* of each uncertainty level (App. G), then
places one global threshold on the calibrated probabilities. This calibrator is the first half: it
takes the uncertainty as a second input, cuts it into ``n_levels`` quantile levels on the fitting set
(edges kept and reused unchanged), and fits ``IsotonicCalibrator`` within each level. Compared with a
single isotonic map (IST) by ECE@j and cumulative ECE@j in ``calibflow.experiments.decision``; the
second half (one global cut on the calibrated hold-out probabilities, ``calibflow.decision.sample_threshold``)
is "MIST (samples)" in that experiment's decision tables.

The uncertainty must be passed to ``fit`` and ``predict`` (keyword ``uncertainty``); omitting it is a
``ValueError``. Levels with fewer than ``min_level_size`` items or a single class fall back to the
isotonic map fitted on all data.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from calibflow._validation import as_1d_float, check_scores
from calibflow.calibrators.base import BaseCalibrator, Bound, check_finite_output, register
from calibflow.calibrators.isotonic import IsotonicCalibrator


@register("mist")
class MistCalibrator(BaseCalibrator):
    """Isotonic regression per uncertainty level (``n_levels`` quantile levels of the uncertainty)."""
    needs_rows = "per-row features"
    _bounds = {
        "n_levels": Bound("int", ge=1, le=1_000),
        "min_level_size": Bound("int", ge=1, le=10**9),
    }

    expects = "any"
    monotone = False  # monotone in the score within a level, not across levels
    needs = ("uncertainty",)
    _state_fields = ("u_edges_", "xs_", "ys_")

    def __init__(self, input: str = "score", n_levels: int = 3, min_level_size: int = 20) -> None:
        self.input = input
        self.n_levels = n_levels
        self.min_level_size = min_level_size

    def fit(
        self,
        scores: ArrayLike,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        *,
        uncertainty: ArrayLike | None = None,
    ) -> MistCalibrator:
        if not isinstance(self.n_levels, int | np.integer) or self.n_levels < 1:
            raise ValueError(f"n_levels must be a positive integer, got {self.n_levels!r}")
        s, yy, w = self._validate_fit(scores, y, sample_weight)
        u = self._check_u(uncertainty, s.size)
        from calibflow.binning import order_edges

        self.u_edges_ = order_edges(u, int(self.n_levels))
        lv = np.searchsorted(self.u_edges_, u, side="right")
        glob = None  # the all-data isotonic map, fitted only if some level needs the fallback
        self.xs_, self.ys_ = [], []
        for i in range(int(self.n_levels)):
            m = lv == i
            ok = m.sum() >= self.min_level_size and 0 < yy[m].sum() < m.sum()
            if not ok and glob is None:
                glob = IsotonicCalibrator(input="score").fit(s, yy, w)
            cal = IsotonicCalibrator(input="score").fit(s[m], yy[m], w[m]) if ok else glob
            self.xs_.append(cal.x_)
            self.ys_.append(cal.y_)
        self.fitted_ = True
        return self

    def predict(self, scores: ArrayLike, *, uncertainty: ArrayLike | None = None) -> NDArray[np.float64]:
        self._check_fitted()
        s = check_scores(scores, self.input)
        u = self._check_u(uncertainty, s.size)
        lv = np.searchsorted(np.asarray(self.u_edges_, float), u, side="right")
        out = np.empty(s.size)
        for i in range(len(self.xs_)):
            m = lv == i
            out[m] = np.interp(s[m], self.xs_[i], self.ys_[i])
        return check_finite_output(np.clip(out, 0.0, 1.0), self.name)

    @staticmethod
    def _check_u(uncertainty, n: int) -> NDArray[np.float64]:
        if uncertainty is None:
            raise ValueError("mist needs the uncertainty as a second input: pass uncertainty=...")
        u = as_1d_float(uncertainty, "uncertainty")
        if u.size != n:
            raise ValueError(f"length mismatch: uncertainty has {u.size} values, scores have {n}")
        return u
