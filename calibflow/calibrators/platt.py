"""Platt scaling and temperature scaling: one- and two-parameter logistic maps of the logit."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from calibflow.calibrators._warm import fit_logistic_warm
from calibflow.calibrators.base import BaseCalibrator, LikelihoodCalibrator, register


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
    default_candidate = True
    scale_default = True
    familiarity = 2
    glossary = (
        "p = \u03c3(a s + b): a logistic regression on the logit.",
        "Platt, 1999",
    )

    expects = "logit"
    _state_fields = ("coef_", "intercept_")
    _state_spec = {"coef_": ("f", 0), "intercept_": ("f", 0)}

    def __init__(self, input: str = "score") -> None:
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
    default_candidate = True
    scale_default = True
    familiarity = 1
    glossary = (
        "p = \u03c3(s / T): one number rescales the logit.",
        "Guo et al., ICML 2017",
    )

    expects = "logit"
    _state_fields = ("temperature_",)
    _state_spec = {"temperature_": ("f", 0)}

    def __init__(self, input: str = "score") -> None:
        self.input = input

    def _n_params(self) -> int:
        return 1

    def _fit_ab(self, s, a, b, theta0) -> None:
        fit = fit_logistic_warm(s[:, None], a, b, theta0=theta0)
        inv_t = float(fit.theta[0])
        if inv_t <= 0:
            raise ValueError("temperature scaling found scores anti-correlated with labels (1/T <= 0)")
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
    default_candidate = True
    glossary = (
        "\u03c3(s) of the raw score: a ranking-paper baseline.",
        "Kweon et al. 2022",
    )
    baseline_note = (
        "\u03c3(score) with nothing fitted: with the pipeline's logit input it is the base model's own "
        "probability, so its row repeats the uncalibrated one."
    )

    expects = "any"

    def __init__(self, input: str = "score") -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        pass

    def _predict(self, s):
        return s if self.input == "probability" else expit(s)


@register("minmax")
class MinMaxBaseline(BaseCalibrator):
    """Uncalibrated baseline of Kweon et al.: ``(s - min) / (max - min)`` with the fit set's range."""
    default_candidate = True
    glossary = (
        "(s \u2212 min) / (max \u2212 min): a ranking-paper baseline.",
        "Kweon et al. 2022",
    )
    baseline_note = (
        "(score \u2212 min) / (max \u2212 min) over the calibration split: a rescaling to [0, 1] that keeps "
        "the ranking but has no probability meaning."
    )

    expects = "any"
    _state_fields = ("min_", "max_")
    _state_spec = {"min_": ("f", 0), "max_": ("f", 0)}

    def __init__(self, input: str = "score") -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        self.min_, self.max_ = float(s.min()), float(s.max())
        if self.max_ == self.min_:
            raise ValueError("minmax needs at least two distinct scores")

    def _predict(self, s):
        return (s - self.min_) / (self.max_ - self.min_)
