"""Gaussian and Gamma calibration of ranking scores with unbiased (UERM) fitting.

Kweon, Kang & Yu, "Obtaining Calibrated Probabilities with Personalized Ranking Models" (AAAI 2022).

- ``gaussian``: ``g(s) = sigma(a s^2 + b s + c)`` (eq. 10), the posterior of two Gaussian class-conditional
  score densities with free variances (eq. 8-9); Platt scaling is the special case ``a = 0``.
- ``gamma``: ``g(s) = sigma(a log s + b s + c)`` (eq. 13), the posterior of two Gamma densities (eq. 11-12),
  on scores shifted to be positive.
- Monotonicity (Appendix C): ``g' > 0`` on ``[s_min, s_max]`` iff ``2 a s + b > 0`` (Gaussian) or
  ``a / s + b > 0`` (Gamma) at both ends of the fitting range. Both are linear in ``(a, b, c)``, so they go to
  the shared fitter :func:`calibflow.calibrators._logistic.fit_logistic` as ``C theta >= eps``.
- Losses: ``loss="naive"`` is the log-loss on the observed interaction label ``Y`` (eq. 14); ``loss="uerm"``
  is the inverse-propensity log-loss of eq. 17, positive term weighted ``Y / w`` and negative term
  ``1 - Y / w``. The negative-term weight is negative for every observed pair with ``w < 1``.

Parametrisation actually fitted (same function family, better conditioned for the solver):

- Gaussian: ``u = (s - m) / h`` with ``m, h`` the midpoint and half-width of the fitting range, so
  ``u`` is in ``[-1, 1]``; ``g = sigma(a u^2 + b u + c)``. ``paper_params()`` maps back to raw ``s``.
- Gamma: the paper shifts ``s <- s - s_min`` (eq. 13), which puts ``log 0`` at the smallest score. We use
  ``t = (s - s_min) / (s_max - s_min) + delta`` with ``delta = offset`` (default 0.01), i.e. the paper's
  shift by ``s_min - delta (s_max - s_min)`` followed by a rescaling that only moves ``log`` scale into ``c``.
  ``paper_params()`` gives ``(a, b, c)`` for ``sigma(a log x + b x + c)`` on ``x = s - shift_``.

Outside the fitting range the quadratic / log-linear curve could turn back down, so prediction continues
the logit linearly with its (positive, constrained) slope at the end point: the map is monotone on all of R.

UERM and unboundedness. With a negative weight ``b_i`` the per-pair loss ``-b_i log(1 - g)`` rewards pushing
``g -> 1``; the empirical risk is unbounded below whenever, for some monotone curve, the inverse-propensity
estimate of the preference rate among the top-scored pairs exceeds 1 (e.g. a few positives with tiny
propensities at the top). The paper's remedy is propensity clipping ``w <- max(w, 0.1)`` (Prop. 2 and the
text after it), which bounds ``1 - Y/w >= -9``; we apply it by default (``propensity_floor=0.1``). If the
clipped risk still diverges (the solver fails or the logit saturates, ``|z| > 30`` on the fitting data) we
refit with a ridge penalty ``ridge / 2 ||theta||^2`` (features are scaled to unit range, so one default
fits all score scales), which makes the objective bounded below, and record ``regularised_ = True``. If even
the intercept alone diverges (``sum(1 - Y/w) <= 0``: the estimated overall preference rate is >= 1) the
propensities are wrong for the data and ``fit`` raises ``ValueError``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from calibflow._validation import as_1d_float, check_labels, check_weights
from calibflow.calibrators._logistic import LogisticFit, fit_logistic, label_weights
from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, Bound, LikelihoodCalibrator, register

LOSSES = ("naive", "uerm")
_EPS_SLOPE = 1e-6  # strict monotonicity ("> 0" in App. C) as ">= eps" in the solver's units
_Z_CAP = 30.0  # |logit| beyond this on the fitting data means the fit ran off to a saturated curve


# ---- propensities and UERM weights -----------------------------------------------------------------------
def popularity_propensity(
    interactions: ArrayLike, power: float = 0.5, floor: float = 0.1
) -> NDArray[np.float64]:
    """Item-popularity propensity of the paper (after eq. 17, following Saito 2019), one value per item.

    ``w_i = max((sum_u Y_ui / max_j sum_u Y_uj) ** power, floor)`` for a users x items 0/1 interaction
    matrix ``Y``. ``power=0.5`` and ``floor=0.1`` are the paper's choices. Index the result with the item id
    of each pair to get per-pair propensities.
    """
    Y = np.asarray(interactions, dtype=np.float64)
    if Y.ndim != 2:
        raise ValueError(f"interactions must be a 2-D users x items matrix, got shape {Y.shape}")
    if Y.size == 0:
        raise ValueError("interactions is empty")
    if not np.isfinite(Y).all():
        raise ValueError("interactions has NaN or infinite values")
    if not np.isin(Y, (0.0, 1.0)).all():
        raise ValueError("interactions must be 0/1 (Y_ui = 1 for an observed positive interaction)")
    if not power > 0:
        raise ValueError(f"power must be > 0, got {power}")
    if not 0.0 < floor <= 1.0:
        raise ValueError(f"floor must be in (0, 1], got {floor}")
    counts = Y.sum(axis=0)
    if counts.max() <= 0:
        raise ValueError("interactions has no positive entry; popularity is undefined")
    return np.maximum((counts / counts.max()) ** power, floor)


def check_propensity(propensity: ArrayLike, n: int, floor: float = 0.0) -> NDArray[np.float64]:
    """Validate per-pair observation propensities in (0, 1] and clip them below at ``floor``."""
    w = as_1d_float(propensity, "propensity")
    if w.size != n:
        raise ValueError(f"length mismatch: propensity has {w.size} values, scores have {n}")
    if (w <= 0).any():
        raise ValueError(
            f"propensity has {int((w <= 0).sum())} non-positive value(s); propensities must be in (0, 1]"
        )
    if (w > 1).any():
        raise ValueError(
            f"propensity has {int((w > 1).sum())} value(s) above 1; propensities must be in (0, 1]"
        )
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"propensity_floor must be in [0, 1], got {floor}")
    return np.maximum(w, floor)


UERM_SCHEMES = ("eq17", "released")


def uerm_weights(
    y: ArrayLike,
    propensity: ArrayLike,
    sample_weight: ArrayLike | None = None,
    floor: float = 0.1,
    scheme: str = "eq17",
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Positive- and negative-term weights of the UERM log-loss.

    ``scheme="eq17"`` (default): eq. (17) as printed, ``(v Y/w, v (1 - Y/w))``: every positive also gets a
    ``(1 - 1/w) log(1 - g)`` term. ``scheme="released"``: the authors' released code (Utils/cal_method.py,
    ``Gaussian.fit_params``, lines 55-63 of WonbinKweon/CalibratedRankingModels_AAAI2022), a weighted
    log-loss with weight ``1/w`` on positives and ``1`` on negatives, i.e. ``(v Y/w, v (1 - Y))``.

    ``w`` is the propensity clipped below at ``floor`` (the paper's 0.1), ``v`` an optional non-negative
    sample weight. Uniform propensities (all 1) give the naive loss, eq. (14), under both schemes. Feed the
    result to ``fit_logistic(X, a, b)``; under eq17 the second weight is negative for observed pairs with
    ``w < 1``.
    """
    if scheme not in UERM_SCHEMES:
        raise ValueError(f"UERM scheme must be one of {UERM_SCHEMES}, got {scheme!r}")
    yy = check_labels(y, both_classes=False)
    w = check_propensity(propensity, yy.size, floor)
    v = check_weights(sample_weight, yy.size)
    r = yy / w
    if scheme == "released":
        return v * r, v * (1.0 - yy)
    return v * r, v * (1.0 - r)


# ---- the two calibrators ---------------------------------------------------------------------------------
class _ShapeCalibrator(LikelihoodCalibrator):
    """Shared code of Gaussian and Gamma calibration: ``sigma(theta . phi(s))`` with 3 features."""

    expects = "logit"  # ranking scores are used as they are; probabilities go through logit
    monotone = True
    negative_weights = False  # sample weights are weights; UERM's negative terms come from ``propensity``
    _state_fields = ("theta_", "s_min_", "s_max_", "regularised_", "solver_")
    _state_spec = {"theta_": ("f", 1), "s_min_": ("f", 0), "s_max_": ("f", 0), "regularised_": ("b", 0)}

    def __init__(
        self,
        input: str = DEFAULT_INPUT,
        loss: str = "naive",
        propensity_floor: float = 0.1,
        ridge: float = 1e-2,
        fix_a_zero: bool = False,
    ) -> None:
        self.input = input
        self.loss = loss
        self.propensity_floor = propensity_floor
        self.ridge = ridge
        self.fix_a_zero = fix_a_zero

    # ---- public -------------------------------------------------------------------------------------
    def fit(
        self,
        scores: ArrayLike,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
    ) -> _ShapeCalibrator:
        """Fit on ranking scores and interaction labels; ``propensity`` (per pair) is needed for UERM."""
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        s, yy, v = self._validate_fit(scores, y, sample_weight)
        if self.loss == "uerm":
            if propensity is None:
                raise ValueError("loss='uerm' needs propensity= (pass np.ones(n) for the uniform assumption)")
            a, b = uerm_weights(yy, propensity, v, floor=self.propensity_floor)
        else:
            if propensity is not None:
                raise ValueError("propensity is only used by loss='uerm'; this calibrator has loss='naive'")
            a, b = label_weights(yy, v)
        return self.fit_two_weight(s, a, b)

    @property
    def params_(self) -> NDArray[np.float64]:
        """The fitted ``theta = (a, b, c)`` on the solver's scaled feature (a ``theta0`` for refits)."""
        return self.theta_

    def _n_params(self) -> int:
        return 3

    def paper_params(self) -> dict[str, float]:
        """``(a, b, c)`` in the paper's parametrisation on the raw (Gamma: shifted) score."""
        raise NotImplementedError

    # ---- fitting ------------------------------------------------------------------------------------
    def _check_params(self) -> None:
        if not 0.0 <= self.propensity_floor <= 1.0:
            raise ValueError(f"propensity_floor must be in [0, 1], got {self.propensity_floor}")
        if not self.ridge >= 0:
            raise ValueError(f"ridge must be >= 0, got {self.ridge}")

    def _fit_ab(
        self,
        s: NDArray[np.float64],
        a: NDArray[np.float64],
        b: NDArray[np.float64],
        theta0: NDArray[np.float64] | None = None,
    ) -> None:
        self._check_params()
        self.s_min_, self.s_max_ = float(s.min()), float(s.max())
        if not self.s_max_ > self.s_min_:
            raise ValueError(f"{self.name} calibration needs at least two distinct scores")
        X = self._features(s)
        C, d = self._constraints()
        keep = self._free_columns()
        X, C = X[:, keep], C[:, keep]
        cons = (C, d)
        if theta0 is not None:
            theta0 = theta0[keep]
        elif (b < 0).any():  # warm start from the convex problem with the negative terms dropped
            theta0 = fit_logistic(X, a, np.maximum(b, 0.0), constraints=cons).theta
        fit = fit_logistic(X, a, b, theta0=theta0, constraints=cons)
        self.regularised_ = False
        # Only negative (UERM) weights can make the risk unbounded below; with a, b >= 0 the problem is
        # convex and bounded, and a steep but converged fit (|z| > 30 at an empty tail) is the optimum.
        if (b < 0).any() and self._diverged(fit, X):
            if self.ridge <= 0:
                raise ValueError(
                    "UERM risk is unbounded below on this data (inverse-propensity positive rate > 1 at the "
                    "top); raise propensity_floor or set ridge > 0"
                )
            # All coefficients, intercept included: only then is the penalised risk bounded below.
            fit = fit_logistic(X, a, b, theta0=theta0, constraints=cons, l2=self.ridge)
            self.regularised_ = True
        theta = np.zeros(3)
        theta[keep] = fit.theta
        self.theta_ = theta
        self.solver_ = fit.solver

    def _free_columns(self) -> NDArray[np.intp]:
        return np.array([1, 2]) if self.fix_a_zero else np.array([0, 1, 2])

    @staticmethod
    def _diverged(fit: LogisticFit, X: NDArray[np.float64]) -> bool:
        z = X @ fit.theta
        return (not np.isfinite(z).all()) or (not fit.converged) or float(np.abs(z).max()) > _Z_CAP

    # ---- prediction ---------------------------------------------------------------------------------
    def _logit(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        lo, hi = self.s_min_, self.s_max_
        z = self._features(np.clip(s, lo, hi)) @ self.theta_
        # Linear continuation outside the fitting range keeps the map strictly monotone on R.
        z = z + np.where(s < lo, self._slope(lo) * (s - lo), 0.0)
        return z + np.where(s > hi, self._slope(hi) * (s - hi), 0.0)

    def _predict(self, s):
        return expit(self._logit(s))

    # ---- per-family pieces --------------------------------------------------------------------------
    def _features(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        raise NotImplementedError

    def _constraints(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        raise NotImplementedError

    def _slope(self, s: float) -> float:
        raise NotImplementedError


@register("gaussian")
class GaussianCalibrator(_ShapeCalibrator):
    """Gaussian calibration, eq. (10): ``sigma(a s^2 + b s + c)``, monotone by App. C's constraints.

    Fitted on ``u = (s - m) / h`` in ``[-1, 1]``; the constraints ``2 a u + b >= eps`` at ``u = -1, 1``
    are App. C's ``2 a s + b > 0`` at ``s_min, s_max`` (positive rescaling keeps the sign).
    ``fix_a_zero=True`` fixes ``a = 0``: Platt scaling (eq. 7), the paper's special case.
    """
    default_candidate = True
    familiarity = 12
    glossary = (
        "Posterior of two Gaussian score densities: \u03c3(a s\u00b2 + b s + c), monotone on the data.",
        "Kweon, Kang & Yu, AAAI 2022",
    )
    _bounds = {
        "propensity_floor": Bound("float", ge=0, le=1),
        "ridge": Bound("float", ge=0, le=1e12),
        "loss": Bound("choice", choices=LOSSES),
    }

    def _scale(self) -> tuple[float, float]:
        return 0.5 * (self.s_min_ + self.s_max_), 0.5 * (self.s_max_ - self.s_min_)

    def _features(self, s):
        m, h = self._scale()
        u = (s - m) / h
        return np.column_stack([u * u, u, np.ones_like(u)])

    def _constraints(self):
        return np.array([[-2.0, 1.0, 0.0], [2.0, 1.0, 0.0]]), np.full(2, _EPS_SLOPE)

    def _slope(self, s: float) -> float:
        m, h = self._scale()
        a, b, _ = self.theta_
        return float((2.0 * a * (s - m) / h + b) / h)

    def paper_params(self) -> dict[str, float]:
        self._check_fitted()
        m, h = self._scale()
        a, b, c = self.theta_
        return {"a": a / h**2, "b": b / h - 2 * a * m / h**2, "c": a * m**2 / h**2 - b * m / h + c}


@register("gamma")
class GammaCalibrator(_ShapeCalibrator):
    """Gamma calibration, eq. (13): ``sigma(a log t + b t + c)`` on shifted scores, monotone by App. C.

    ``t = (s - s_min) / (s_max - s_min) + offset`` (``s_min, s_max`` of the fitting data): the paper's shift
    ``s - s_min`` plus a small ``offset`` so that ``log`` is finite at the smallest score, and a rescaling
    whose ``log`` factor is absorbed by ``c``. Constraints ``a / t + b >= eps`` at ``t = offset`` and
    ``t = 1 + offset`` (App. C). ``fix_a_zero=True`` gives Platt scaling.
    """
    default_candidate = True
    familiarity = 13
    glossary = (
        "Posterior of two Gamma score densities: \u03c3(a ln s + b s + c), monotone on the data.",
        "Kweon, Kang & Yu, AAAI 2022",
    )
    _bounds = {
        "propensity_floor": Bound("float", ge=0, le=1),
        "ridge": Bound("float", ge=0, le=1e12),
        "offset": Bound("float", gt=0, le=1e6),
        "loss": Bound("choice", choices=LOSSES),
    }

    def __init__(
        self,
        input: str = DEFAULT_INPUT,
        loss: str = "naive",
        propensity_floor: float = 0.1,
        ridge: float = 1e-2,
        fix_a_zero: bool = False,
        offset: float = 0.01,
    ) -> None:
        super().__init__(input, loss, propensity_floor, ridge, fix_a_zero)
        self.offset = offset

    def _check_params(self) -> None:
        super()._check_params()
        if not self.offset > 0:
            raise ValueError(f"offset must be > 0 so that log is defined at s_min, got {self.offset}")

    def _t(self, s):
        return (s - self.s_min_) / (self.s_max_ - self.s_min_) + self.offset

    def _features(self, s):
        t = self._t(s)
        return np.column_stack([np.log(t), t, np.ones_like(t)])

    def _constraints(self):
        lo, hi = self.offset, 1.0 + self.offset
        return np.array([[1.0 / lo, 1.0, 0.0], [1.0 / hi, 1.0, 0.0]]), np.full(2, _EPS_SLOPE)

    def _slope(self, s: float) -> float:
        a, b, _ = self.theta_
        return float((a / self._t(s) + b) / (self.s_max_ - self.s_min_))

    @property
    def shift_(self) -> float:
        """The score shift: ``x = s - shift_`` is the positive score of eq. (13)."""
        return self.s_min_ - self.offset * (self.s_max_ - self.s_min_)

    def paper_params(self) -> dict[str, float]:
        self._check_fitted()
        r = self.s_max_ - self.s_min_
        a, b, c = self.theta_
        return {"a": a, "b": b / r, "c": c - a * np.log(r), "shift": self.shift_}


# ---- UERM for any likelihood calibrator ------------------------------------------------------------------
def fit_uerm(
    calibrator: BaseCalibrator,
    scores: ArrayLike,
    y: ArrayLike,
    propensity: ArrayLike,
    sample_weight: ArrayLike | None = None,
    floor: float = 0.1,
    scheme: str = "eq17",
) -> BaseCalibrator:
    """Fit a registered likelihood calibrator (platt, temperature, beta, gaussian, gamma) with UERM, eq. (17).

    Each pair enters the calibrator's two-weight fit (``fit_two_weight``) once, with positive-term weight
    ``v Y/w`` and negative-term weight ``v (1 - Y/w)``: exactly eq. (17). The negative-term weights may be
    negative; ``fit_logistic`` handles them. ``scheme="released"`` uses the authors' released weights
    instead (see ``uerm_weights``). Returns the fitted calibrator.
    """
    if not (isinstance(calibrator, LikelihoodCalibrator) and calibrator.negative_terms):
        raise ValueError(
            f"UERM needs a likelihood calibrator whose negative-term weights may be negative "
            f"(platt, temperature, beta, gaussian, gamma); {calibrator.name!r} is not one"
        )
    yy = check_labels(y)
    ab = uerm_weights(yy, propensity, sample_weight, floor=floor, scheme=scheme)
    return calibrator.fit_two_weight(scores, *ab)


__all__ = [
    "GaussianCalibrator",
    "GammaCalibrator",
    "LOSSES",
    "check_propensity",
    "fit_uerm",
    "popularity_propensity",
    "uerm_weights",
    "UERM_SCHEMES",
]
