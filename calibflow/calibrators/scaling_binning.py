"""Scaling-binning calibrator (Kumar, Liang & Ma, NeurIPS 2019, "Verified Uncertainty Calibration")."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from calibflow._validation import check_n_bins
from calibflow.binning import equal_mass_edges
from calibflow.calibrators._binning import bin_stats
from calibflow.calibrators._logistic import label_weights
from calibflow.calibrators._warm import fit_logistic_warm
from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, Bound, StateChecks, register


@register("scaling_binning")
class ScalingBinningCalibrator(BaseCalibrator):
    """Scaling-binning of Kumar et al. (2019), Sec. 4 / Algorithm 1, binary case.

    1. Function fitting: Platt scaling ``g(s) = sigma(A s + B)`` on the logit, by weighted maximum
       likelihood with the shared fitter.
    2. Binning scheme: ``n_bins`` equal-mass bins of the fitted values ``g(s_i)`` (weighted).
    3. Discretisation: each bin outputs the weighted mean of ``g`` over its members (not the label
       rate: that is what makes the calibration error measurable with few samples).

    Choice: the paper fits the three steps on three disjoint splits of the calibration set (its
    guarantees need it); like probcal's ``ScalingBinningCalibrator`` we use all rows for all three
    steps, which is the common practice and keeps weighted fits equal to repeated rows. The map is
    non-decreasing when ``A >= 0`` (bin means of an increasing ``g`` over ordered bins), so
    ``monotone = True`` with the same caveat as Platt.
    """
    default_candidate = True
    familiarity = 7
    glossary = (
        "Platt, then binned to a few values (its calibration error can be measured).",
        "Kumar, Liang & Ma, NeurIPS 2019",
    )
    _bounds = {
        "n_bins": Bound("int", ge=1, le=1_000_000, bytes_each=96),
    }

    expects = "logit"
    _state_fields = ("coef_", "intercept_", "edges_", "bin_value_")
    _state_checks = StateChecks(sorted=("edges_",), probabilities=("bin_value_",), monotone=("bin_value_",),
                                lengths=(("bin_value_", "edges_", 1),))
    _state_spec = {"coef_": ("f", 0), "intercept_": ("f", 0), "edges_": ("f", 1), "bin_value_": ("f", 1)}

    def __init__(self, n_bins: int = 10, input: str = DEFAULT_INPUT) -> None:
        self.n_bins = n_bins
        self.input = input

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        n_bins = check_n_bins(self.n_bins)
        a, b = label_weights(y, w)
        fit = fit_logistic_warm(np.column_stack([s, np.ones_like(s)]), a, b)
        self.coef_, self.intercept_ = float(fit.theta[0]), float(fit.theta[1])
        g = expit(self.coef_ * s + self.intercept_)
        edges = equal_mass_edges(g, n_bins, w)
        sums, tot = bin_stats(np.searchsorted(edges, g, side="right"), g, w, edges.size + 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            value = sums / tot
        # A bin holding only zero-weight rows has no mean: give it its g at the lower edge.
        empty = ~(tot > 0)
        value[empty] = np.r_[g.min(), edges][empty]
        self.edges_, self.bin_value_ = edges, value

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        g = expit(self.coef_ * s + self.intercept_)
        return self.bin_value_[np.searchsorted(self.edges_, g, side="right")]

    @property
    def params_(self) -> NDArray[np.float64]:
        """All fitted parameters of the scaling stage, ``[A, B]``."""
        return np.array([self.coef_, self.intercept_])
