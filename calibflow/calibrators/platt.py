"""Platt scaling and temperature scaling: one- and two-parameter logistic maps of the logit."""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from calibflow.calibrators._warm import fit_logistic_warm
from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, LikelihoodCalibrator, register

#: Temperature scaling: a slope 1/T this many standard errors below 0 is a real anti-correlation (refused);
#: above it the fit takes scikit-learn's bound on 1/T (its minimize_scalar over log 1/T in [-10, 10]).
_ANTI_Z = 2.0
_MIN_INV_T = float(np.exp(-10.0))


@register("platt")
class PlattCalibrator(LikelihoodCalibrator):
    """Platt (1999): ``p = sigma(A s + B)`` on the logit or raw score ``s``.

    Fitted by maximum (weighted) likelihood with the shared fitter. Unlike Platt's paper we do not
    smooth the targets to (N+ + 1)/(N+ + 2): plain maximum likelihood is what the papers' baselines
    and an unpenalised ``LogisticRegression`` on the score fit (scikit-learn 1.9.1's
    ``CalibratedClassifierCV(method="sigmoid")`` does smooth them; tests/library/test_sklearn_api.py).
    Monotone when A >= 0; ``monotone`` is declared True because a negative A only arises for
    anti-correlated scores.
    """

    expects = "logit"
    _state_fields = ("coef_", "intercept_")
    _state_spec = {"coef_": ("f", 0), "intercept_": ("f", 0)}

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _n_params(self) -> int:
        return 2

    def _fit_ab(self, s, a, b, theta0) -> None:
        fit = fit_logistic_warm(np.column_stack([s, np.ones_like(s)]), a, b, theta0=theta0)
        self.coef_, self.intercept_ = float(fit.theta[0]), float(fit.theta[1])

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return expit(self.coef_ * s + self.intercept_)

    @property
    def params_(self) -> NDArray[np.float64]:
        """All fitted parameters ``[A, B]`` as one vector (CalEM tests convergence on it)."""
        return np.array([self.coef_, self.intercept_])


@register("temperature")
class TemperatureCalibrator(LikelihoodCalibrator):
    """Temperature scaling (Guo et al. 2017), binary case: ``p = sigma(s / T)``, T > 0, no bias."""

    expects = "logit"
    _state_fields = ("temperature_",)
    _state_spec = {"temperature_": ("f", 0)}

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _n_params(self) -> int:
        return 1

    def _fit_ab(self, s, a, b, theta0) -> None:
        fit = fit_logistic_warm(s[:, None], a, b, theta0=theta0)
        inv_t = float(fit.theta[0])
        if inv_t <= 0:
            # Wald z of the slope 1/T: a clear negative relation is refused; none at all (noise) gets
            # scikit-learn's bound, 1/T = e^-10 (T about 22026: every probability near 0.5), with a warning.
            p = expit(inv_t * s)
            info = float(np.sum((a + b) * p * (1.0 - p) * s * s))
            z = inv_t * np.sqrt(info) if info > 0 else -np.inf
            one_sign = s.min() >= 0.0 or s.max() <= 0.0  # not anti-correlation: a base rate with no intercept
            if z < -_ANTI_Z and not one_sign:
                raise ValueError(
                    f"temperature scaling found scores anti-correlated with labels (1/T <= 0, z = {z:.1f})"
                )
            why = (
                "every score has one sign (probabilities read as scores? pass input='probability')"
                if one_sign
                else f"the scores show no increasing relation with the labels (z = {z:.1f})"
            )
            warnings.warn(
                f"temperature scaling: {why}; T is bounded at e^10, every probability is near 0.5 "
                "(platt has an intercept)",
                RuntimeWarning,
                stacklevel=4,
            )
            inv_t = _MIN_INV_T
        self.temperature_ = 1.0 / inv_t

    def _predict(self, s):
        return expit(s / self.temperature_)

    @property
    def params_(self) -> NDArray[np.float64]:
        """The fitted parameter ``[1 / T]`` (the slope on the logit; a ``theta0`` for ``fit_two_weight``)."""
        return np.array([1.0 / self.temperature_])


@register("sigmoid")
class SigmoidBaseline(BaseCalibrator):
    """Uncalibrated baseline of Kweon et al.: ``sigmoid(s)`` of the raw score, nothing fitted."""

    expects = "any"

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        pass

    def _predict(self, s):
        return s if self.input_kind == "probability" else expit(s)


@register("minmax")
class MinMaxBaseline(BaseCalibrator):
    """Uncalibrated baseline of Kweon et al.: ``(s - min) / (max - min)`` with the fit set's range."""

    expects = "any"
    _state_fields = ("min_", "max_")
    _state_spec = {"min_": ("f", 0), "max_": ("f", 0)}

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        self.min_, self.max_ = float(s.min()), float(s.max())
        if self.max_ == self.min_:
            raise ValueError("minmax needs at least two distinct scores")

    def _predict(self, s):
        return (s - self.min_) / (self.max_ - self.min_)
