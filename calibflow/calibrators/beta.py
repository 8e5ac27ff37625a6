"""Beta calibration (Kull, Silva Filho & Flach, AISTATS 2017), the three-parameter "abm" family."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from calibflow.calibrators._warm import fit_logistic_warm
from calibflow.calibrators.base import DEFAULT_INPUT, LikelihoodCalibrator, register

# betacal clips with the float64 machine epsilon; we do the same so the fits agree.
_EPS = float(np.finfo(np.float64).eps)


def beta_features(p: NDArray[np.float64]) -> NDArray[np.float64]:
    """Design ``[ln p, -ln(1 - p), 1]`` of the logistic form of beta calibration (Kull et al., eq. 5)."""
    p = np.clip(p, _EPS, 1.0 - _EPS)
    return np.column_stack([np.log(p), -np.log1p(-p), np.ones_like(p)])


@register("beta")
class BetaCalibrator(LikelihoodCalibrator):
    """Beta calibration: ``p' = sigma(a ln p - b ln(1 - p) + c)`` with ``a, b >= 0`` (Kull et al. 2017).

    The map is the ratio of two beta densities (Sec. 3, eq. 3-5); ``a, b >= 0`` makes it monotone
    non-decreasing in ``p``. Fitted by weighted maximum likelihood with the shared fitter under the
    linear constraints ``a >= 0``, ``b >= 0``. betacal (``parameters="abm"``) instead refits
    without the offending feature when one coefficient comes out negative; the constrained optimum
    is the same point whenever only one constraint is active (the KKT conditions of the restricted
    problem), which is the case betacal handles. ``m_`` is the midpoint ``p`` with ``p' = 1/2``.
    """
    default_candidate = True
    scale_default = True
    familiarity = 4
    glossary = (
        "p = \u03c3(a ln q \u2212 b ln(1 \u2212 q) + c) of the probability q: bends each end apart.",
        "Kull, Silva Filho & Flach, AISTATS 2017",
    )

    expects = "probability"
    _state_fields = ("coef_", "intercept_")
    _state_spec = {"coef_": ("f", 1), "intercept_": ("f", 0)}

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _n_params(self) -> int:
        return 3

    def _fit_ab(self, s, a, b, theta0) -> None:
        cons = (np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), np.zeros(2))
        fit = fit_logistic_warm(beta_features(s), a, b, theta0=theta0, constraints=cons)
        theta = fit.theta.copy()
        # SLSQP stops a hair either side of an active bound (|x| ~ 1e-20): report an active
        # constraint as exactly 0, i.e. the feature dropped, as betacal does.
        theta[:2] = np.where(theta[:2] < 1e-12, 0.0, theta[:2])
        self.coef_, self.intercept_ = theta[:2], float(theta[2])

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return expit(beta_features(s) @ self.params_)

    @property
    def params_(self) -> NDArray[np.float64]:
        """All fitted parameters ``[a, b, c]``."""
        return np.r_[self.coef_, self.intercept_]

    @property
    def m_(self) -> float:
        """Midpoint: the input probability mapped to 1/2 (betacal's ``map_[2]``), in [0, 1]."""
        from scipy.optimize import brentq

        def f(p: float) -> float:  # the logit of the output: non-decreasing in p since a, b >= 0
            return float(beta_features(np.array([p]))[0] @ self.params_)

        lo, hi = _EPS, 1.0 - _EPS
        if f(lo) >= 0:
            return 0.0
        return 1.0 if f(hi) <= 0 else float(brentq(f, lo, hi, xtol=1e-14))
