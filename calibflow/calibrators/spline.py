"""Monotone penalised-spline logistic calibration: the "GAM" baseline of the CalEM paper."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

from calibflow.calibrators._logistic import fit_logistic
from calibflow.calibrators._warm import fit_logistic_warm
from calibflow.calibrators.base import DEFAULT_INPUT, Bound, LikelihoodCalibrator, StateChecks, register

DEGREE = 3


def cubic_bspline_parts(
    x: NDArray[np.float64], lo: float, hi: float, n_splines: int
) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """First active basis index and the 4 non-zero values of a uniform cubic B-spline basis.

    ``n_splines`` basis functions on ``n_splines - 3`` equal segments of ``[lo, hi]`` (knots
    extended by 3 segments on each side, as pygam and de Boor's uniform construction do).
    ``x`` must already lie in ``[lo, hi]``. Row ``i`` of the dense basis is ``vals[i]`` at
    columns ``first[i] .. first[i] + 3``.
    """
    n_seg = n_splines - DEGREE
    u = (x - lo) * (n_seg / (hi - lo))
    first = np.minimum(u.astype(np.intp), n_seg - 1)
    f = u - first
    f2, f3 = f * f, f * f * f
    vals = (
        np.column_stack([(1.0 - f) ** 3, 3.0 * f3 - 6.0 * f2 + 4.0, -3.0 * f3 + 3.0 * f2 + 3.0 * f + 1.0, f3])
        / 6.0
    )
    return first, vals


def bspline_design(x: NDArray[np.float64], lo: float, hi: float, n_splines: int) -> NDArray[np.float64]:
    """Dense ``(n, n_splines)`` uniform cubic B-spline design matrix of ``x`` in ``[lo, hi]``."""
    first, vals = cubic_bspline_parts(x, lo, hi, n_splines)
    out = np.zeros((x.size, n_splines))
    rows = np.arange(x.size)[:, None]
    out[rows, first[:, None] + np.arange(DEGREE + 1)] = vals
    return out


def _difference(k: int, order: int) -> NDArray[np.float64]:
    return np.diff(np.eye(k), n=order, axis=0)


def penalised_basis(
    merge: NDArray[np.float64], penalty: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``T`` and a 0/1 mask with ``theta = T beta`` and ``theta' P theta = ||mask * beta||^2``.

    ``theta = merge @ gamma`` ties coefficients together (the active monotonicity constraints);
    the shared fitter only penalises a masked ridge, so the full quadratic penalty
    ``Q = merge' P merge`` is diagonalised, ``Q = V diag(e) V'``, and each penalised direction
    rescaled by ``1 / sqrt(e)``: ``beta`` is then ridge-penalised on the range of ``Q`` and free on
    its null space (constant and linear coefficient sequences for the second-difference ``P``).
    """
    e, v = np.linalg.eigh(merge.T @ penalty @ merge)
    pen = e > 1e-10 * max(float(e.max()), 1e-300)
    scale = np.where(pen, 1.0 / np.sqrt(np.where(pen, e, 1.0)), 1.0)
    return merge @ (v * scale), pen.astype(float)


def _merge_matrix(active: NDArray[np.bool_]) -> NDArray[np.float64]:
    """``(k, g)`` 0/1 matrix setting ``theta_j = theta_{j+1}`` for every active constraint ``j``."""
    group = np.r_[0, np.cumsum(~active)]
    out = np.zeros((group.size, group[-1] + 1))
    out[np.arange(group.size), group] = 1.0
    return out


def fit_monotone_pspline(
    basis: NDArray[np.float64],
    a: NDArray[np.float64],
    b: NDArray[np.float64],
    lam: float,
    theta0: NDArray[np.float64] | None = None,
    active0: NDArray[np.bool_] | None = None,
) -> tuple[NDArray[np.float64], bool]:
    """Minimise ``-sum [a log p + b log(1-p)] + lam/2 ||D2 theta||^2`` s.t. ``D1 theta >= 0``.

    A primal-dual active-set loop around the shared fitter (Nocedal & Wright, Sec. 16.5): solve
    the equality-constrained problem (active constraints tie neighbouring coefficients) with
    ``fit_logistic``'s Newton solver; add the constraints it violates; drop the active one with
    the most negative Lagrange multiplier; stop at a KKT point. The multipliers have a closed
    form because ``D1' lambda = grad`` is a telescoping sum: ``lambda_j = -sum_{i<=j} grad_i``.
    K is ~20, so this takes a few Newton solves, where SLSQP over the same n rows takes tens of
    passes. Falls back to ``fit_logistic``'s constrained (SLSQP) solver if it cycles.

    ``active0`` starts the loop from a guess of the active set (a warm start: the constraints tight
    at a previous solution); the KKT check at the end makes the answer independent of the guess.
    """
    n, k = basis.shape
    d1, d2 = _difference(k, 1), _difference(k, 2)
    penalty = d2.T @ d2
    active = np.zeros(k - 1, bool) if active0 is None else active0.copy()
    theta = np.zeros(k) if theta0 is None else theta0
    tol_lam = 1e-7 * float(np.sum(np.abs(a) + np.abs(b)))
    for _ in range(3 * k):
        t, mask = penalised_basis(_merge_matrix(active), penalty)
        beta0 = np.linalg.lstsq(t, theta, rcond=None)[0]
        fit = fit_logistic(basis @ t, a, b, theta0=beta0, l2=lam / n, penalty_mask=mask)
        theta = t @ fit.theta
        slack = d1 @ theta
        viol = ~active & (slack < -1e-9 * (1.0 + np.abs(theta).max()))
        if viol.any():
            active |= viol
            continue
        grad = basis.T @ ((a + b) * expit(basis @ theta) - a) + lam * penalty @ theta
        mult = -np.cumsum(grad)[:-1]
        worst = int(np.argmin(np.where(active, mult, np.inf))) if active.any() else -1
        if worst < 0 or mult[worst] >= -tol_lam:
            return theta, bool(fit.converged)
        active[worst] = False
    t, mask = penalised_basis(np.eye(k), penalty)
    fit = fit_logistic(basis @ t, a, b, constraints=(d1 @ t, np.zeros(k - 1)), l2=lam / n, penalty_mask=mask)
    return t @ fit.theta, bool(fit.converged)


def _linear_start(s, a, b, lo: float, hi: float, k: int) -> NDArray[np.float64]:
    """Spline coefficients of the Platt fit ``A s + B``: a warm start that saves Newton passes.

    B-splines reproduce straight lines exactly with coefficients ``A c_j + B`` at the Greville
    abscissae ``c_j = lo + (j - 1) h`` of the uniform cubic basis. The 2-column Platt fit costs a
    tenth of one pass over the ``n x K`` design.
    """
    fit = fit_logistic_warm(np.column_stack([s, np.ones_like(s)]), a, b)
    slope = max(float(fit.theta[0]), 0.0)  # the monotone fit cannot start on a decreasing line
    grev = lo + (np.arange(k) - 1.0) * (hi - lo) / (k - DEGREE)
    return slope * grev + float(fit.theta[1])


@register("spline")
class SplineCalibrator(LikelihoodCalibrator):
    """Monotone penalised B-spline logistic calibration on the logit: the CalEM paper's "GAM".

    ``p = sigma(sum_j theta_j B_j(s))`` with ``B_j`` a uniform cubic B-spline basis on the logit
    ``s`` (Eilers & Marx 1996 P-splines), fitted by maximising the weighted penalised likelihood

        sum_i w_i [y_i log p_i + (1 - y_i) log(1 - p_i)] - (lam / 2) ||D2 theta||^2

    subject to ``theta_1 <= theta_2 <= ... <= theta_K`` (linear constraints ``D1 theta >= 0``),
    which makes the map non-decreasing (a B-spline with non-decreasing coefficients is
    non-decreasing). The shared fitter ``fit_logistic`` solves it, the full second-difference
    penalty being turned into its masked ridge by ``penalised_basis``, inside the active-set
    loop ``fit_monotone_pspline``.

    Knots and penalty. Sergazinov et al. (CalEM) call this baseline "GAM" and cite Gupta et al.
    (2021) for a monotonic spline fitted by the logistic objective, but give no knots or penalty.
    A logistic GAM with a monotone constraint is what pygam's ``LogisticGAM`` fits, so we take
    its defaults: ``n_splines=20`` cubic B-splines with knots equally spaced over the observed
    logit range, a second-difference penalty with ``lam=0.6`` on the likelihood *sum* scale
    (pygam minimises deviance + lam ||D2 theta||^2, i.e. the objective above). Being on the sum
    scale, the fit of integer weights equals the fit of repeated rows, and the penalty's relative
    strength falls as data grow (the usual GAM convention). Unlike pygam the monotonicity is a
    hard constraint (pygam adds a large penalty on violations) and scores outside the fitted
    range are clamped to it (constant tails) instead of extrapolated linearly.
    """
    default_candidate = True
    scale_default = True
    familiarity = 6
    glossary = (
        "A monotone penalised spline of the logit (a GAM).",
        "as in Sergazinov et al. (CalEM)",
    )
    _bounds = {
        "n_splines": Bound("int", ge=4, le=10_000),
        "lam": Bound("float", ge=0, le=1e12),
    }

    expects = "logit"
    negative_terms = False  # the active-set Newton loop needs a convex objective
    _state_fields = ("coef_", "lo_", "hi_")
    _state_checks = StateChecks(monotone=("coef_",))
    _state_spec = {"coef_": ("f", 1), "lo_": ("f", 0), "hi_": ("f", 0)}

    def __init__(self, n_splines: int = 20, lam: float = 0.6, input: str = DEFAULT_INPUT) -> None:
        self.n_splines = n_splines
        self.lam = lam
        self.input = input

    def _check_params(self) -> int:
        k = self.n_splines
        if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < DEGREE + 1:
            raise ValueError(f"n_splines must be an integer >= {DEGREE + 1}, got {k!r}")
        if not (isinstance(self.lam, int | float | np.floating) and np.isfinite(self.lam) and self.lam >= 0):
            raise ValueError(f"lam must be a finite number >= 0, got {self.lam!r}")
        return int(k)

    def _n_params(self) -> int:
        return self._check_params()

    def _fit_ab(self, s, a, b, theta0) -> None:
        k = self._check_params()
        live = s[(a + b) > 0]
        lo, hi = float(live.min()), float(live.max())
        if hi <= lo:
            raise ValueError("spline needs at least two distinct scores (with positive weight)")
        active0 = None
        if theta0 is None:
            theta0 = _linear_start(s, a, b, lo, hi, k)
        else:  # a caller's start (a previous solution): start from the constraints tight there
            active0 = np.diff(theta0) <= 1e-9 * (1.0 + np.abs(theta0).max())
        # zero-weight rows may lie outside [lo, hi]; the basis depends on the scores only
        basis = self._cached((lo, hi, k), lambda: bspline_design(np.clip(s, lo, hi), lo, hi, k))
        theta, converged = fit_monotone_pspline(basis, a, b, float(self.lam), theta0, active0)
        # Solvers stop ~1e-10 outside the cone: close it exactly so predictions never decrease.
        self.coef_ = np.maximum.accumulate(theta)
        self.lo_, self.hi_ = lo, hi
        self.converged_ = converged

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return expit(self.decision_function(s))

    def decision_function(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        """The fitted logit ``sum_j theta_j B_j(s)`` of already converted scores ``s``."""
        self._check_fitted()
        x = np.clip(s, self.lo_, self.hi_)
        first, vals = cubic_bspline_parts(x, self.lo_, self.hi_, self.coef_.size)
        cols = first[:, None] + np.arange(DEGREE + 1)
        return np.einsum("ij,ij->i", vals, self.coef_[cols])

    @property
    def params_(self) -> NDArray[np.float64]:
        """All fitted parameters: the B-spline coefficients ``theta``."""
        return self.coef_
