"""Angular calibration of a high-dimensional linear classifier (Li & Sur, seed 003).

Pipeline (the paper's Algorithm 1, App. G):

(A) fit ``w_hat = argmin (1/n) sum_i l_{y_i}(x_i'w) + g(w)`` (Sec. 7.1: log-loss, ``g = lam/(2d)||w||^2``)
    by Newton's method with Cholesky solves (``fit_glm``);
(B) estimate ``<w*, w_hat>_Sigma^2`` from the training data alone with Bellec's observable estimator,
    eq. (11) (``inner_product_sq``). The seed prints ``gamma_hat = Tr(X H X'D)``; that is a misprint:
    the scale-free, verified form is ``gamma_hat = Tr(X H X'D) / Tr(D - D X H X'D)`` (order one,
    asymptotically ``Tr(Sigma H)``); see ``shared/notes/angle-estimator.md``. Everything else is as
    printed: ``psi_i = -l'``, ``D = diag(l'')``, ``H = (X'DX + n grad^2 g)^-1``,
    ``v_hat = Tr(D - DXHX'D)/n``, ``r_hat^2 = ||psi||^2/n`` and ``Sigma = Cov(x)``;
(C) its sign from a labelled holdout, eq. (12);
(D) ``theta_hat = arccos(clip(sgn sqrt(max(a2, 0)) / ||w_hat||_Sigma, -1, 1))``, eq. (13) with the clip
    of App. G. A negative ``a2`` or a ratio outside [-1, 1] is clipped AND recorded in ``flags_``
    (and warned about), never silently;
(E) the angular predictor, Def. 3.1, ``E_Z sigma(cos(theta) s + sin(theta) Z)`` with
    ``s = w_hat'x / ||w_hat||_Sigma``, by Gauss-Hermite quadrature (closed forms for the probit and the
    clipped-linear links), with the node count doubled until two rules agree to 1e-12.

``sigma`` is the link of the single-index model ``P(y=1|x) = sigma(w*'x)`` with ``||w*||_Sigma = 1``,
not the fitted model's sigmoid: the angular predictor is ``E[y | w_hat'x]`` only for the true link
(note, Sec. 7). Links are ``F(link_scale * t + link_shift)`` with ``F`` one of ``LINKS`` (the paper's
simulation: ``link="logistic", link_scale=3, link_shift=1``) or any callable (not JSON-serialisable).
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.linalg import LinAlgError, cho_factor, cho_solve, cholesky, solve_triangular
from scipy.special import expit, ndtr, roots_hermitenorm

from calibflow._validation import check_labels
from calibflow.calibrators.base import BaseCalibrator, Bound, register

Array = NDArray[np.float64]
MIN_N = 20  # below this the proportional-asymptotics estimator (11) is meaningless
MIN_D = 10
MAX_NODES = 4096
QUAD_TOL = 1e-12
_SQRT_PI_8 = math.sqrt(math.pi / 8.0)


# ---------------------------------------------------------------------------------------------
# links


def clipped_linear(t: ArrayLike) -> Array:
    """The clipped ReLU of App. H.1: ``clip(t, 0, 1)``."""
    return np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)


LINKS: dict[str, Callable[[ArrayLike], Array]] = {
    "logistic": expit,
    "probit": ndtr,
    "clipped_relu": clipped_linear,
}


def resolve_link(
    link: str | Callable, scale: float = 1.0, shift: float = 0.0
) -> Callable[[ArrayLike], Array]:
    """``t -> F(scale t + shift)`` for a named base link ``F``, or the callable itself."""
    if callable(link):
        if scale != 1.0 or shift != 0.0:
            raise ValueError("link_scale/link_shift apply to named links only; fold them into the callable")
        return link
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}; use one of {sorted(LINKS)} or a callable")
    if not (np.isfinite(scale) and np.isfinite(shift)) or scale == 0.0:
        raise ValueError(
            f"link_scale must be finite and non-zero and link_shift finite, got {scale}, {shift}"
        )
    base = LINKS[link]
    return lambda t: base(scale * np.asarray(t, dtype=np.float64) + shift)


# ---------------------------------------------------------------------------------------------
# (E) the angular predictor: E_Z link(m + tau Z) by quadrature


def gaussian_expectation(
    link: str | Callable, mean: ArrayLike, sd: float, scale: float = 1.0, shift: float = 0.0, n_nodes: int = 0
) -> tuple[Array, int]:
    """``E_Z F(scale (mean + sd Z) + shift)``, Z ~ N(0, 1), and the node count used (0 = closed form).

    Probit: ``Phi(m / sqrt(1 + tau^2))`` exactly. Clipped linear: ``tau [G(m/tau) - G((m-1)/tau)]`` with
    ``G(x) = x Phi(x) + phi(x)`` (integral of the Gaussian survival function over [0, 1]). Otherwise
    probabilists' Gauss-Hermite with ``n_nodes`` nodes, or, when ``n_nodes == 0``, doubled from 64 until
    two rules agree to ``QUAD_TOL`` at every requested point (the logistic integrand is analytic in a
    strip of half-width pi/tau, so the rule converges geometrically in sqrt(nodes)).
    """
    m = np.asarray(mean, dtype=np.float64)
    sd = float(sd)
    if isinstance(link, str) and link in ("probit", "clipped_relu"):
        mm, tau = scale * m + shift, abs(scale) * sd
        if link == "probit":
            return ndtr(mm / math.sqrt(1.0 + tau * tau)), 0
        if tau < 1e-300:
            return clipped_linear(mm), 0
        return tau * (_g(mm / tau) - _g((mm - 1.0) / tau)), 0
    f = resolve_link(link, scale, shift)
    if sd == 0.0:
        return np.asarray(f(m), dtype=np.float64), 0
    if n_nodes:
        return _gauss_hermite(f, m, sd, n_nodes), n_nodes
    probe = m if m.size <= 512 else np.quantile(m, np.linspace(0, 1, 257))
    k, prev = 64, _gauss_hermite(f, probe, sd, 64)
    while k < MAX_NODES:
        cur = _gauss_hermite(f, probe, sd, 2 * k)
        k *= 2
        if np.max(np.abs(cur - prev)) < QUAD_TOL:
            break
        prev = cur
    else:
        warnings.warn(f"Gauss-Hermite did not settle to {QUAD_TOL:g} with {MAX_NODES} nodes", stacklevel=2)
    return _gauss_hermite(f, m, sd, k), k


def _g(x: Array) -> Array:
    return x * ndtr(x) + np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gauss_hermite(f: Callable, m: Array, sd: float, n_nodes: int) -> Array:
    t, wt = roots_hermitenorm(n_nodes)  # weight exp(-t^2/2); weights sum to sqrt(2 pi)
    wt = wt / math.sqrt(2.0 * math.pi)
    flat = m.reshape(-1)
    out = np.empty(flat.size)
    step = max(1, 2_000_000 // n_nodes)  # bound the (points x nodes) temporary
    for i in range(0, flat.size, step):
        out[i : i + step] = f(flat[i : i + step, None] + sd * t[None, :]) @ wt
    return out.reshape(m.shape)


def angular_probability(
    s: ArrayLike,
    cos_theta: float,
    link: str | Callable,
    scale: float = 1.0,
    shift: float = 0.0,
    n_nodes: int = 0,
) -> tuple[Array, int]:
    """Def. 3.1: ``E_Z sigma(cos(theta) s + sin(theta) Z)`` for normalised logits ``s = w'x/||w||_Sigma``."""
    c = float(np.clip(cos_theta, -1.0, 1.0))
    return gaussian_expectation(
        link, c * np.asarray(s, dtype=np.float64), math.sqrt(max(0.0, 1 - c * c)), scale, shift, n_nodes
    )


def probit_coefficients(link: str, scale: float = 1.0, shift: float = 0.0) -> tuple[float, float]:
    """``(a, b)`` with ``sigma(t) ~= Phi(a t + b)``: exact for probit, ``sigmoid(u) ~= Phi(sqrt(pi/8) u)``."""
    if link == "probit":
        return float(scale), float(shift)
    if link == "logistic":
        return _SQRT_PI_8 * scale, _SQRT_PI_8 * shift
    raise ValueError(f"the Platt limit (Thm 5.1) needs a probit or logistic link, got {link!r}")


def platt_limit(theta: float, w_norm: float, a: float, b: float) -> tuple[float, float]:
    """Thm 5.1 eq. (9): Platt map ``sigma(A* u + B*)`` on raw logits ``u`` when ``sigma = Phi(a . + b)``."""
    k = math.sqrt(1.0 + a * a * math.sin(theta) ** 2)
    return math.cos(theta) / (w_norm * k), (b / a) * (1.0 / k - 1.0)


# ---------------------------------------------------------------------------------------------
# (A) the base fit: any convex loss l_y(t) and penalty g(w), given derivatives


@dataclass(frozen=True)
class Loss:
    """A per-sample loss ``l_y(t)`` and its first two derivatives in ``t`` (vectorised)."""

    value: Callable[[Array, Array], Array]
    d1: Callable[[Array, Array], Array]
    d2: Callable[[Array, Array], Array]


LOGISTIC_LOSS = Loss(
    value=lambda y, t: np.logaddexp(0.0, t) - y * t,
    d1=lambda y, t: expit(t) - y,
    d2=lambda y, t: expit(t) * expit(-t),
)


@dataclass(frozen=True)
class Penalty:
    """A convex penalty ``g``: value, gradient, Hessian (d x d, or a length-d diagonal).

    ``ridge`` set to ``c`` declares ``g = c/2 ||w||^2`` exactly, which unlocks the n x n kernel path.
    """

    value: Callable[[Array], float]
    grad: Callable[[Array], Array]
    hess: Callable[[Array], Array]
    ridge: float | None = None


def ridge_penalty(lam: float, d: int) -> Penalty:
    """Sec. 7.1's ``g(w) = lam/(2d) ||w||^2``."""
    if not (np.isfinite(lam) and lam > 0):
        raise ValueError(f"lam must be a finite positive number, got {lam!r}")
    c = lam / d
    return Penalty(lambda w: 0.5 * c * float(w @ w), lambda w: c * w, lambda w: np.full(w.size, c), ridge=c)


@dataclass
class GLMFit:
    w: Array
    n_iter: int
    grad_norm: float
    converged: bool
    gram: Array | None = None  # X X' when the kernel path was used (reused by eq. 11)


def fit_glm(
    X: Array,
    y: Array,
    loss: Loss = LOGISTIC_LOSS,
    penalty: Penalty | None = None,
    lam: float = 1.0,
    tol: float = 1e-11,
    max_iter: int = 100,
) -> GLMFit:
    """Newton's method with backtracking for ``(1/n) sum l_{y_i}(x_i'w) + g(w)`` (App. G step A).

    Steps solve ``(X'DX/n + grad^2 g) delta = grad`` by Cholesky. For a ridge penalty with ``d > n`` the
    solve goes through the n x n matrix ``cI + D^1/2 X X' D^1/2`` (Woodbury), so each step costs
    O(n^2 d) once for ``K = XX'`` and O(n^3) afterwards. Stops at ``max|grad| < tol``.
    """
    n, d = X.shape
    pen = penalty if penalty is not None else ridge_penalty(lam, d)
    kernel = pen.ridge is not None and d > n
    K = X @ X.T if kernel else None
    w = np.zeros(d)

    def objective(v: Array) -> float:
        return float(np.mean(loss.value(y, X @ v))) + pen.value(v)

    f = objective(w)
    gnorm = np.inf
    for it in range(1, max_iter + 1):
        t = X @ w
        grad = X.T @ loss.d1(y, t) / n + pen.grad(w)
        gnorm = float(np.max(np.abs(grad)))
        if gnorm < tol:
            return GLMFit(w, it - 1, gnorm, True, K)
        dd = loss.d2(y, t)
        step = (
            _ridge_solve(X, K, dd, n * pen.ridge, n * grad)
            if kernel
            else _primal_solve(X, dd, pen.hess(w), grad)
        )
        lr, slope = 1.0, float(grad @ step)
        while True:
            cand = w - lr * step
            fc = objective(cand)
            if fc <= f - 1e-4 * lr * slope or lr < 1e-12:
                break
            lr *= 0.5
        if lr < 1e-12:  # no descent possible at this precision: accept if the gradient is tiny
            return GLMFit(w, it, gnorm, gnorm < 1e-7, K)
        w, f = cand, fc
    return GLMFit(w, max_iter, gnorm, gnorm < 1e-7, K)


def _primal_solve(X: Array, dd: Array, hess_g: Array, rhs: Array) -> Array:
    n = X.shape[0]
    A = (X.T * dd) @ X / n
    A += np.diag(hess_g) if hess_g.ndim == 1 else hess_g
    return cho_solve(cho_factor(A, lower=True, check_finite=False), rhs, check_finite=False)


def _ridge_solve(X: Array, K: Array, dd: Array, c: float, rhs: Array) -> Array:
    """``(X'DX + cI)^-1 rhs`` via ``(1/c)(I - X'S M^-1 S X)``, ``S = D^1/2``, ``M = cI + SKS``."""
    s = np.sqrt(np.maximum(dd, 0.0))
    M = s[:, None] * K * s[None, :]
    M[np.diag_indices_from(M)] += c
    u = s * (X @ rhs)
    u = cho_solve(cho_factor(M, lower=True, check_finite=False), u, check_finite=False)
    return (rhs - X.T @ (s * u)) / c


# ---------------------------------------------------------------------------------------------
# (B) eq. (11): the observable estimate of <w*, w_hat>_Sigma^2


@dataclass
class InnerProductEstimate:
    """Eq. (11) and its pieces. ``a2`` is the raw (possibly negative) estimate of ``<w*, w_hat>^2_Sigma``."""

    a2: float
    numerator: float
    denominator: float
    v_hat: float
    gamma_hat: float
    df_hat: float
    r2_hat: float
    w_norm_sigma: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def leverages(X: Array, dd: Array, penalty: Penalty, w: Array, gram: Array | None = None) -> Array:
    """``diag(X H X')`` with ``H = (X'DX + n grad^2 g(w))^-1`` (kernel form for ridge when d > n)."""
    n, d = X.shape
    if penalty.ridge is not None and d > n:
        c = n * penalty.ridge
        s = np.sqrt(np.maximum(dd, 0.0))
        K = X @ X.T if gram is None else gram
        M = s[:, None] * K * s[None, :]
        M[np.diag_indices_from(M)] += c
        L = cholesky(M, lower=True, check_finite=False)
        G = solve_triangular(L, s[:, None] * K, lower=True, check_finite=False)
        return (np.diag(K) - (G * G).sum(0)) / c
    hg = penalty.hess(w)
    A = (X.T * dd) @ X + n * (np.diag(hg) if hg.ndim == 1 else hg)
    L = cholesky(A, lower=True, check_finite=False)
    return (solve_triangular(L, X.T, lower=True, check_finite=False) ** 2).sum(0)


def sigma_factor(sigma: ArrayLike, d: int) -> Array:
    """Lower Cholesky factor of ``Sigma``; a ValueError naming the problem if it is unusable."""
    S = np.asarray(sigma, dtype=np.float64)
    if S.shape != (d, d):
        raise ValueError(f"Sigma must be {d} x {d} to match X, got shape {S.shape}")
    if not np.isfinite(S).all():
        raise ValueError("Sigma has NaN or infinite entries")
    if not np.allclose(S, S.T, rtol=1e-10, atol=1e-14 * np.abs(S).max()):
        raise ValueError("Sigma is not symmetric")
    try:
        L = cholesky(S, lower=True, check_finite=False)
    except LinAlgError as exc:
        raise ValueError(
            "Sigma is singular or not positive definite (Cholesky failed); "
            "estimate it with estimate_covariance (Ledoit-Wolf) or regularise it"
        ) from exc
    diag = np.diag(L)
    if diag.min() <= 1e-7 * diag.max():  # condition number above ~1e14: numerically singular
        raise ValueError(
            f"Sigma is numerically singular (Cholesky diagonal ratio {diag.min() / diag.max():.2e})"
        )
    return L


def observable_inner_product(
    X: Array,
    y: Array,
    w_hat: Array,
    sigma: ArrayLike | None = None,
    *,
    loss: Loss = LOGISTIC_LOSS,
    penalty: Penalty,
    sigma_chol: Array | None = None,
    gram: Array | None = None,
) -> InnerProductEstimate:
    """Eq. (11) with the corrected ``gamma_hat = df/(n v_hat)``, for any loss and penalty.

    ``X`` (n x d) is the training design, ``w_hat`` the minimiser of ``(1/n) sum l + g``, ``Sigma``
    the covariance of a row of X (including any 1/d scaling), or its Cholesky factor ``sigma_chol``.
    """
    n, d = X.shape
    L_s = sigma_chol if sigma_chol is not None else sigma_factor(sigma, d)
    u = X @ w_hat
    psi = -loss.d1(y, u)  # psi_i = -l'_{y_i}(x_i'w), not divided by n
    dd = loss.d2(y, u)  # D = diag(l'')
    lev = leverages(X, dd, penalty, w_hat, gram)
    big_v = float(dd.sum() - (dd * dd * lev).sum())  # Tr(D - D X H X' D) = n v_hat
    df = float((dd * lev).sum())  # Tr(X H X' D)
    if big_v <= 0:
        raise ValueError("Tr(D - DXHX'D) <= 0: the loss curvature vanishes on the training set")
    v, gam, r2 = big_v / n, df / big_v, float(psi @ psi) / n
    res = u - gam * psi
    z = solve_triangular(L_s, X.T @ psi, lower=True, check_finite=False)  # Sigma^{-1/2} X' psi
    rr, pu = float(res @ res) / n, float(psi @ u) / n
    num = (v * rr + pu - gam * r2) ** 2
    den = float(z @ z) / n**2 + 2 * v * pu + v * v * rr - d / n * r2
    w_norm = float(np.linalg.norm(L_s.T @ w_hat))
    a2 = num / den if den != 0 else -np.inf
    return InnerProductEstimate(float(a2), float(num), float(den), v, gam, df, r2, w_norm)


def inner_product_sq(
    X: ArrayLike,
    y: ArrayLike,
    w_hat: ArrayLike,
    sigma: ArrayLike,
    lam: float,
    *,
    loss: Loss = LOGISTIC_LOSS,
    penalty: Penalty | None = None,
) -> float:
    """Eq. (11): the observable estimate of ``<w*, w_hat>_Sigma^2`` (``||w*||_Sigma = 1``), unclipped.

    Defaults to the paper's ridge logistic fit, ``g = lam/(2d)||w||^2``; pass ``loss``/``penalty``
    for any other convex pair. May be negative in small samples: callers clip (``AngularCalibrator``
    clips and flags).
    """
    Xa, ya = _check_design(X, y, "X", "y")
    w = np.asarray(w_hat, dtype=np.float64).reshape(-1)
    if w.size != Xa.shape[1]:
        raise ValueError(f"w_hat has {w.size} entries, X has {Xa.shape[1]} columns")
    pen = penalty if penalty is not None else ridge_penalty(lam, Xa.shape[1])
    return observable_inner_product(Xa, ya, w, sigma, loss=loss, penalty=pen).a2


# ---------------------------------------------------------------------------------------------
# (C) eq. (12), the sign, and Sigma from an unlabeled pool


def sign_estimate(w_hat: Array, X_holdout: Array, y_holdout: Array) -> float:
    """Eq. (12): ``sign(sum_i (w_hat'x_i) y_i)`` on a labelled holdout with y in {0, 1}."""
    t = float((X_holdout @ w_hat) @ y_holdout)
    if t == 0.0:
        raise ValueError("sign estimate (12) is undefined: the holdout has no positives or sum w'x y = 0")
    return 1.0 if t > 0 else -1.0


def estimate_covariance(X_pool: ArrayLike, method: str = "auto") -> tuple[Array, dict[str, Any]]:
    """Covariance of x from an unlabeled pool (App. G allows Sigma "estimated from unlabeled data").

    ``method="auto"``: the sample covariance when the pool has at least ``10 d`` rows and that estimate
    is well conditioned (Ledoit-Wolf's shrinkage would then be negligible), otherwise
    Ledoit-Wolf shrinkage towards ``mu I`` (scikit-learn's ``ledoit_wolf``), which keeps the estimate
    positive definite even for a pool smaller than d. ``"sample"`` or ``"ledoit_wolf"`` force one.
    """
    from sklearn.covariance import ledoit_wolf

    P = np.asarray(X_pool, dtype=np.float64)
    if P.ndim != 2 or P.shape[0] < 2:
        raise ValueError(f"X_pool must be a 2-D array with at least 2 rows, got shape {P.shape}")
    if not np.isfinite(P).all():
        raise ValueError("X_pool has NaN or infinite entries")
    m, d = P.shape
    if method in ("auto", "sample") and (m >= 10 * d or method == "sample"):
        S = np.cov(P, rowvar=False).reshape(d, d)
        if method == "sample" or _well_conditioned(S):
            return S, {"method": "sample", "n_pool": m, "shrinkage": 0.0}
        method = "ledoit_wolf"  # e.g. collinear one-hot columns: the sample covariance is singular
    if method == "auto":
        method = "ledoit_wolf"
    if method == "ledoit_wolf":
        S, shrink = ledoit_wolf(P, assume_centered=False)
        return S, {"method": "ledoit_wolf", "n_pool": m, "shrinkage": float(shrink)}
    raise ValueError(f"method must be 'auto', 'sample' or 'ledoit_wolf', got {method!r}")


def _well_conditioned(S: Array) -> bool:
    try:
        diag = np.diag(cholesky(S, lower=True, check_finite=False))
    except LinAlgError:
        return False
    return bool(diag.min() > 1e-6 * diag.max())


def _check_design(X, y, xname: str, yname: str, both_classes: bool = True):
    Xa = np.asarray(X, dtype=np.float64)
    if Xa.ndim != 2:
        raise ValueError(f"{xname} must be 2-D (n x d), got shape {Xa.shape}")
    if not np.isfinite(Xa).all():
        raise ValueError(f"{xname} has NaN or infinite entries")
    n, d = Xa.shape
    if n < MIN_N or d < MIN_D:
        raise ValueError(
            f"{xname} is {n} x {d}: the angle estimator (11) needs n >= {MIN_N} and d >= {MIN_D}"
        )
    return Xa, check_labels(y, n=n, name=yname, both_classes=both_classes)


# ---------------------------------------------------------------------------------------------
# the registered calibrator


@register("angular")
class AngularCalibrator(BaseCalibrator):
    """Angular calibration (Def. 3.1) of a ridge-logistic linear classifier, angle from eqs. (11)-(13).

    ``make("angular", lam=0.5, link="logistic", link_scale=3, link_shift=1)`` is the paper's Sec. 7.1
    set-up (``sigma(u) = sigmoid(3u + 1)``). Fit with ``fit_linear(X, y, X_holdout, y_holdout, sigma)``;
    then ``predict(logits)`` maps raw logits ``w_'x`` to probabilities. Fitted attributes: ``w_``,
    ``w_norm_`` (``||w_||_Sigma``), ``inner_product_sq_`` (raw eq. 11), ``inner_product_`` (signed,
    clipped), ``sign_``, ``cos_theta_``, ``theta_`` (radians), ``flags_`` (every clip applied),
    ``diagnostics_`` (the pieces of eq. 11), ``n_nodes_`` (quadrature nodes, 0 = closed form).
    """
    needs_rows = "the feature vectors of each row"
    _bounds = {
        "lam": Bound("float", gt=0, le=1e12),
        "link_scale": Bound("float", gt=0, le=1e6),
        "link_shift": Bound("float", ge=-1e6, le=1e6),
        "n_nodes": Bound("int", ge=0, le=10_000),
    }

    expects = "logit"
    monotone = True  # for a non-decreasing link and cos(theta) >= 0
    needs = ("X", "X_holdout", "sigma")  # fit_linear: the design matrix, not scores
    _state_fields = (
        "w_",
        "w_norm_",
        "inner_product_sq_",
        "inner_product_",
        "sign_",
        "cos_theta_",
        "theta_",
        "flags_",
        "diagnostics_",
        "n_nodes_",
        "sigma_info_",
    )

    def __init__(
        self,
        lam: float = 1.0,
        link: str | Callable = "logistic",
        link_scale: float = 1.0,
        link_shift: float = 0.0,
        n_nodes: int = 0,
        input: str = "score",
    ) -> None:
        self.lam = lam
        self.link = link
        self.link_scale = link_scale
        self.link_shift = link_shift
        self.n_nodes = n_nodes
        self.input = input

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, scores, y, sample_weight=None):
        raise ValueError(
            "angular calibration needs the design matrix: use fit_linear(X, y, X_holdout, "
            "y_holdout, sigma) (fit(scores, y) cannot estimate the angle)"
        )

    def fit_linear(
        self,
        X: ArrayLike,
        y: ArrayLike,
        X_holdout: ArrayLike,
        y_holdout: ArrayLike,
        sigma: ArrayLike | None = None,
        *,
        X_pool: ArrayLike | None = None,
        loss: Loss = LOGISTIC_LOSS,
        penalty: Penalty | None = None,
    ) -> AngularCalibrator:
        """Fit ``w_`` (App. G step A), eq. (11) on the training data, eq. (12) on the holdout, eq. (13).

        ``sigma`` is Cov(x) (d x d); pass ``X_pool`` (unlabeled rows) instead to estimate it with
        ``estimate_covariance``. ``loss``/``penalty`` replace the ridge-logistic pair (then
        ``lam`` is unused).
        """
        self._check_params()
        Xa, ya = _check_design(X, y, "X", "y")
        n, d = Xa.shape
        Xh = np.asarray(X_holdout, dtype=np.float64)
        if Xh.ndim != 2 or Xh.shape[1] != d or Xh.shape[0] < 1 or not np.isfinite(Xh).all():
            raise ValueError(f"X_holdout must be a finite (n_ho x {d}) array, got shape {Xh.shape}")
        yh = check_labels(y_holdout, n=Xh.shape[0], name="y_holdout", both_classes=False)
        if sigma is None:
            if X_pool is None:
                raise ValueError("pass sigma (Cov(x)) or X_pool (unlabeled rows to estimate it)")
            sigma, self.sigma_info_ = estimate_covariance(X_pool)
        else:
            self.sigma_info_ = {"method": "given"}
        L_s = sigma_factor(sigma, d)
        pen = penalty if penalty is not None else ridge_penalty(self.lam, d)
        glm = fit_glm(Xa, ya, loss, pen)
        if not glm.converged:
            raise ValueError(f"the base fit did not converge (max |grad| = {glm.grad_norm:.3g})")
        est = observable_inner_product(Xa, ya, glm.w, loss=loss, penalty=pen, sigma_chol=L_s, gram=glm.gram)
        self.w_, self.w_norm_ = glm.w, est.w_norm_sigma
        self.diagnostics_ = est.to_dict() | {"newton_iter": glm.n_iter, "grad_norm": glm.grad_norm}
        self.inner_product_sq_ = est.a2
        self.sign_ = sign_estimate(glm.w, Xh, yh)
        self._set_angle(est.a2)
        self.fitted_ = True
        self._choose_nodes(Xa @ glm.w)
        return self

    def _set_angle(self, a2: float) -> None:
        """Eq. (13) with App. G's clip; every clip is recorded in ``flags_`` and warned about."""
        flags = []
        if not np.isfinite(a2) or a2 < 0:
            flags.append(
                f"negative_inner_product_sq: eq. (11) gave {a2:.4g} < 0, clipped to 0 (theta = 90 deg)"
            )
            a2 = 0.0
        c = self.sign_ * math.sqrt(a2) / self.w_norm_
        if abs(c) > 1:
            flags.append(f"cos_theta_clipped: |sgn sqrt(a2)/||w||_Sigma| = {abs(c):.4g} > 1, clipped to 1")
            c = float(np.clip(c, -1.0, 1.0))
        for f in flags:
            warnings.warn(f"angular calibration: {f}", stacklevel=3)
        self.flags_ = flags
        self.cos_theta_ = c
        self.theta_ = math.acos(c)
        self.inner_product_ = c * self.w_norm_

    def _choose_nodes(self, logits: Array) -> None:
        s = logits / self.w_norm_
        _, self.n_nodes_ = angular_probability(
            s, self.cos_theta_, self.link, self.link_scale, self.link_shift, self.n_nodes
        )

    @property
    def clipped_(self) -> bool:
        return bool(self.flags_)

    # -- prediction -------------------------------------------------------------------------
    def _predict(self, s: Array) -> Array:
        p, _ = angular_probability(
            s / self.w_norm_,
            self.cos_theta_,
            self.link,
            self.link_scale,
            self.link_shift,
            self.n_nodes_ if self.n_nodes_ else self.n_nodes,
        )
        return p

    def platt_limit(self) -> tuple[float, float]:
        """Thm 5.1 eq. (9) at the estimated angle, with the probit approximation of the link."""
        self._check_fitted()
        if callable(self.link):
            raise ValueError("the Platt limit needs a named probit or logistic link, not a callable")
        a, b = probit_coefficients(self.link, self.link_scale, self.link_shift)
        return platt_limit(self.theta_, self.w_norm_, a, b)

    def to_json(self) -> str:
        self._check_fitted()
        if callable(self.link):
            raise ValueError(
                "cannot serialise an angular calibrator with a custom callable link; use a "
                f"named link ({', '.join(sorted(LINKS))}) with link_scale/link_shift"
            )
        return super().to_json()

    def _check_params(self) -> None:
        self._check_bounds()
        if not (isinstance(self.lam, numbers.Real) and np.isfinite(self.lam) and self.lam > 0):
            raise ValueError(f"lam must be a finite positive number, got {self.lam!r}")
        resolve_link(self.link, self.link_scale, self.link_shift)
        if not (isinstance(self.n_nodes, int | np.integer) and 0 <= self.n_nodes <= MAX_NODES):
            raise ValueError(
                f"n_nodes must be an integer in [0, {MAX_NODES}] (0 = automatic), got {self.n_nodes!r}"
            )
