"""Platt scaling and temperature scaling: one- and two-parameter logistic maps of the logit."""

from __future__ import annotations

import warnings

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from calibflow.calibrators._logistic import label_weights
from calibflow.calibrators._warm import fit_logistic_warm
from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, LikelihoodCalibrator, register

#: Temperature scaling: a slope 1/T this many standard errors below 0 is a real anti-correlation (refused);
#: above it the fit takes scikit-learn's bound on 1/T (its minimize_scalar over log 1/T in [-10, 10]).
_ANTI_Z = 2.0
_MIN_INV_T = float(np.exp(-10.0))

#: Fewest positives and negatives (weighted) for ``targets="auto"`` to fit plain maximum likelihood; under
#: it Platt's prior-corrected targets are used. Their pull on the fitted base rate is about ``1 / N+``,
#: under a tenth of the sampling error ``1 / sqrt(N+)`` from 100 on, and what keeps a fit on a handful of
#: labels from 0 and 1 (Platt 1999, Sec. 2.2; Lin, Lin, Weng 2007).
PRIOR_MIN_COUNT = 50


def _separable(s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> bool:
    """The classes do not overlap in score (either way round): maximum likelihood runs off to infinity."""
    pos, neg = s[(y == 1) & (w > 0)], s[(y == 0) & (w > 0)]
    if not pos.size or not neg.size:
        return True
    return bool(neg.max() < pos.min() or pos.max() < neg.min())


def _effective_size(w: NDArray[np.float64]) -> float:
    """Kish's effective sample size of one class's weights (0 for none)."""
    top = float(np.max(w, initial=0.0))
    if top <= 0.0:
        return 0.0
    v = w / top  # scaled first: squares of 1e-300 weights underflow, of 1e300 overflow
    return float(v.sum() ** 2 / (v @ v))


def _no_spread(s: NDArray[np.float64], w: NDArray[np.float64]) -> bool:
    """Every weighted score the same (to rounding: a table's group means can differ by an ulp)."""
    v = s[w > 0]
    return bool(v.size == 0 or np.ptp(v) <= 1e-9 * max(1.0, float(np.abs(v).max())))


@register("platt")
class PlattCalibrator(LikelihoodCalibrator):
    """Platt (1999): ``p = sigma(A s + B)`` on the logit or raw score ``s``.

    Fitted by maximum (weighted) likelihood with the shared fitter. ``targets``: ``"ml"`` fits the 0/1
    labels (what the papers' baselines and an unpenalised ``LogisticRegression`` on the score fit);
    ``"prior"`` fits Platt's prior-corrected targets ``(N+ + 1)/(N+ + 2)`` and ``1/(N- + 2)`` (what
    scikit-learn's ``method="sigmoid"`` fits); ``"auto"`` (default) uses the prior's where the calibration
    set is small (under :data:`PRIOR_MIN_COUNT` positives or negatives) or separable, where plain maximum
    likelihood returns 0 and 1 (issue 36: 1.0, 1.3e-36 and 6.7e-11 on scikit-learn's own three-point case,
    0.589, 0.188, 0.389 with the prior), and the labels elsewhere. ``targets_`` says which were fitted.
    Scores with no spread (all the same) get the constant map at the base rate, never a slope
    fitted to rounding. Monotone: ``fit`` keeps A >= 0 (a negative slope, which scores that do not rank
    give by chance, becomes the constant at the base rate: the likelihood's best with A >= 0); only the
    two-weight fit (UERM, CalEM) leaves A free.
    """
    default_candidate = True
    scale_default = True
    familiarity = 2
    glossary = (
        "p = \u03c3(a s + b): a logistic regression on the logit.",
        "Platt, 1999",
    )

    expects = "logit"
    _state_fields = ("targets_", "coef_", "intercept_")
    _state_spec = {"coef_": ("f", 0), "intercept_": ("f", 0), "targets_": ("s", 0)}
    #: Files written before ``targets_`` was saved fitted the labels.
    _optional_state = {"targets_": "ml"}

    def __init__(self, input: str = DEFAULT_INPUT, targets: str = "auto") -> None:
        self.input = input
        self.targets = targets

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        if self.targets not in ("auto", "prior", "ml"):
            raise ValueError(f"targets must be auto, prior or ml, got {self.targets!r}")
        # Platt's N+, N- are the classes' weight sums, as in scikit-learn's _sigmoid_calibration: a weight
        # of k is k rows (a table's group counts, a sample_weight of 2 equal to a repeated row).
        n_pos, n_neg = float(w @ y), float(w @ (1.0 - y))
        # "Small" is judged on each class's effective size (sum w)^2 / sum w^2: the row count for unit
        # weights, unchanged when every weight is rescaled (1e-300 or 1e300 weights fit as 1s do).
        small = min(_effective_size(w * y), _effective_size(w * (1.0 - y))) < PRIOR_MIN_COUNT
        prior = self.targets == "prior" or (
            self.targets == "auto" and (small or _separable(s, y, w))
        )
        if prior:
            t = np.where(y == 1, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
            a, b = w * t, w * (1.0 - t)
        else:
            a, b = label_weights(y, w)
        if _no_spread(s, w):  # nothing to rank: the calibration base rate, not a slope fitted to rounding
            rate = float(np.clip((w @ y) / w.sum(), 1e-15, 1 - 1e-15))
            self.coef_, self.intercept_ = 0.0, float(np.log(rate) - np.log1p(-rate))
            self.targets_ = "constant"
            return
        self._fit_ab(s, a, b, None)
        self.targets_ = "prior" if prior else "ml"
        if self.coef_ < 0.0:
            # Scores that do not rank (noise, or too few labels) can tip the slope below 0 by chance; the
            # likelihood is concave, so the best map with A >= 0 is then A = 0: the (target) base rate.
            # A decreasing map is never written (it fails the monotone check and reverses the ranking).
            rate = float(a.sum() / (a.sum() + b.sum()))
            self.coef_, self.intercept_ = 0.0, float(np.log(rate) - np.log1p(-rate))

    def _n_params(self) -> int:
        return 2

    def _fit_ab(self, s, a, b, theta0) -> None:
        fit = fit_logistic_warm(np.column_stack([s, np.ones_like(s)]), a, b, theta0=theta0)
        self.coef_, self.intercept_ = float(fit.theta[0]), float(fit.theta[1])
        self.targets_ = "ml"  # a two-weight fit fits the weights it is given

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

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        pass

    def _predict(self, s):
        return s if self.input_kind == "probability" else expit(s)


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

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s, y, w) -> None:
        self.min_, self.max_ = float(s.min()), float(s.max())
        if self.max_ == self.min_:
            raise ValueError("minmax needs at least two distinct scores")

    def _predict(self, s):
        return (s - self.min_) / (self.max_ - self.min_)
