"""CalEM (Sergazinov et al.): calibrate on a small clean set plus a large set with biased labels.

Setting (Sec. 4.1, 4.3). A small clean set D_S = {(s_l, y_l)} carries unbiased labels (the control
group); a large set D_B = {(s_k, z_k)} carries labels inflated by a treatment (the campaign). Under
Assumption 1 (eq. 8), a treated negative would have been negative anyway, and a treated positive was a
counterfactual negative with probability h(x) = P(Y = 0 | Z = 1, x).

Algorithm 3 with the weights of Appendix A.2 (eq. 15-17):

1. g_theta0 <- LogReg(D_S) and g_eta <- LogReg(D_B), both fitted by the chosen base calibrator.
2. h_t = (g_eta(s) - g_theta_t(s)) / g_eta(s) on the biased rows (eq. 15), clipped to [0, 1]; how
   many values the clip moved is counted and reported (eq. 9 says h is in [0, 1] in the population;
   two finite-sample fits need not agree with it). The clip is ours, not Algorithm 3's: h <= 1 holds
   anyway (g_theta >= 0), and h >= 0 acts as the constraint g_theta <= g_eta on the biased positives
   (their label-1 weight 1 - h is then at most 1). ``clip_h=False`` runs Algorithm 3 literally: h < 0
   gives those rows a negative label-0 weight.
3. Refit the base calibrator on D* = D_S u D_B u {(s_k, 0)}_{k in B} with the weights
   w = (1_S, 1 - h_t, h_t) (eq. 17), update h, and stop when ||theta_t+1 - theta_t|| < tol or at
   ``max_iter``.

Implementation notes.

- The base is any registered calibrator whose ``fit`` takes ``sample_weight`` (the paper's
  ``LogReg``): ``spline`` (the paper's GAM), ``beta`` (BC), ``platt``.
- Two-weight M-step. The likelihood calibrators (``LikelihoodCalibrator``: platt, temperature, beta,
  spline, gaussian, gamma) fit ``-sum [a_i log g + b_i log(1 - g)]`` with a weight per term
  (``fit_two_weight``). A biased row's two copies in D* (label z with weight 1 - h, label 0 with
  weight h) are one such row: ``a = z (1 - h)``, ``b = 1 - a``; clean rows have ``a = y, b = 1 - y``
  (``em_term_weights``). The weighted log-likelihood, hence every M-step, is identical to the literal
  D* of Algorithm 3 (``em_weights`` builds the literal one; the tests check both agree), on
  |S| + |B| rows instead of |S| + 2|B|, and the rows' scores do not change across iterations.
  Other bases get the compact stack (``_compact_stack``: z = 0 rows once with weight 1, z = 1 rows
  twice), the same objective through ``fit(s, y, sample_weight)``.
- Warm starts (``warm_start=True``). M-step t + 1 starts its solver from M-step t's parameters, and
  what depends only on the scores (the spline's B-spline design matrix of D_S u D_B) is built once
  and passed back in (``design_cache``). Only the solver's start changes, not the convex optimum it
  returns: iterates and fixed point are those of cold starts to the solver's tolerance (tested). The
  first M-step starts cold (g_theta0 was fitted on the clean scores alone, a spline's coefficients
  depend on the score range).
- Acceleration (``accelerate="squarem"``, off by default so that the default is Algorithm 3 as
  written). SQUAREM (Varadhan & Roland 2008) extrapolates h after every two plain EM steps (see
  ``_Squarem``). The fixed points are EM's and the stopping rule is Algorithm 3's, applied to plain
  EM steps only; the path differs, so the stopping point differs from plain EM's by about the
  stopping error of either (on the 1.1e6-row benchmark, 17 M-steps instead of 57 and curves within
  5e-6 of plain EM's).
- theta. The stopping rule compares the base calibrator's fitted parameter vector ``params_`` when
  it has one (platt, beta, spline expose it). A base without ``params_`` is compared through its
  fitted logits on a fixed grid of 101 score quantiles of D_S u D_B (chosen once, before the
  iterations), divided by sqrt(101) so the norm of a change is its root-mean-square over the grid:
  two maps with the same parameters give the same grid, so this is a faithful stand-in for
  ||theta_t+1 - theta_t|| on the scale of the linear predictor, and ``tol`` keeps its meaning. Which
  one was used is stored in ``criterion_``.
- The trace (``trace_``) has one entry per M-step: its kind (``"em"`` or ``"squarem"``, an
  extrapolated one), the parameter vector, its change, the weighted
  log-likelihood Q(theta_t+1 | theta_t) of eq. 17 per unit weight, and a summary of h (mean on the
  biased positives, quantiles, clip counts). ``converged_`` is False when ``max_iter`` was reached
  first, and ``fit`` then emits a ``RuntimeWarning`` saying so.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logit

from calibflow._validation import INPUT_KINDS, check_labels, check_scores
from calibflow.calibrators.base import BaseCalibrator, Bound, LikelihoodCalibrator, register

_EPS = 1e-12
_GRID_SIZE = 101
# Calibrators whose fit signature is not fit(scores, y, sample_weight): they cannot be the M-step.
_NOT_A_BASE = frozenset({"calem", "vad", "angular", "mist"})


def treatment_effect(
    g_eta: NDArray[np.float64], g_theta: NDArray[np.float64], clip: bool = True
) -> tuple[NDArray[np.float64], int, int]:
    """h = (g_eta - g_theta) / g_eta (eq. 15), clipped to [0, 1] unless ``clip=False`` (the literal
    Algorithm 3); returns (h, n_below_0, n_above_1), the counts of values outside [0, 1] either way."""
    raw = (g_eta - g_theta) / np.maximum(g_eta, _EPS)
    low, high = int((raw < 0.0).sum()), int((raw > 1.0).sum())
    return (np.clip(raw, 0.0, 1.0) if clip else raw), low, high


def em_weights(
    h: NDArray[np.float64], z: NDArray[np.float64], y_clean: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Labels and weights of the literal stacked set D* of Algorithm 3 (App. A.2, eq. 17).

    Rows are ordered D_S, D_B, then D_B relabelled 0: labels ``(y, z, 0)`` and weights
    ``(1_S, 1 - h, h)``. Scores are ``(s_clean, s_biased, s_biased)``.
    """
    n, m = y_clean.size, z.size
    labels = np.concatenate([y_clean, z, np.zeros(m)])
    weights = np.concatenate([np.ones(n), 1.0 - h, h])
    return labels, weights


def _compact_stack(s_c, y_c, s_b, z_b, h):
    """D* with each z = 0 biased row stacked once (weight (1 - h) + h = 1): same objective, fewer rows."""
    pos = z_b == 1.0
    sp = s_b[pos]
    s = np.concatenate([s_c, s_b, sp])
    y = np.concatenate([y_c, z_b, np.zeros(sp.size)])
    w_b = np.where(pos, 1.0 - h, 1.0)
    w = np.concatenate([np.ones(s_c.size), w_b, h[pos]])
    return s, y, w


def em_term_weights(
    y_c: NDArray[np.float64], z_b: NDArray[np.float64], h: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Positive- and negative-term weights of D* with one row per sample: scores ``(s_clean, s_biased)``.

    Clean rows: ``a = y, b = 1 - y``. A biased row's two stacked copies in D* (label z, weight 1 - h;
    label 0, weight h) contribute ``(1 - h) z log g + [(1 - h)(1 - z) + h] log(1 - g)``: so
    ``a = z (1 - h)`` and ``b = 1 - a`` (z = 1: ``a = 1 - h, b = h``; z = 0: ``a = 0, b = 1``). The same
    weighted log-likelihood as D* (eq. 17), with |S| + |B| rows instead of |S| + 2|B|.
    """
    a_b = z_b * (1.0 - h)
    return np.concatenate([y_c, a_b]), np.concatenate([1.0 - y_c, 1.0 - a_b])


def _q_value(p_c, y_c, p_b, z_b, h) -> float:
    """Eq. 17 per unit weight: clean log-lik + (1 - h) biased log-lik + h log(1 - g) on the biased rows.

    Computed from the predictions on D_S and D_B (no pass over the stacked set); the total weight is
    |S| + |B| since the two biased weights sum to 1.
    """
    lc, lb = np.clip(p_c, _EPS, 1.0 - _EPS), np.clip(p_b, _EPS, 1.0 - _EPS)
    clean = y_c @ np.log(lc) + (1.0 - y_c) @ np.log1p(-lc)
    log_neg = np.log1p(-lb)
    biased = (1.0 - h) @ (z_b * np.log(lb) + (1.0 - z_b) * log_neg) + h @ log_neg
    return float((clean + biased) / (p_c.size + p_b.size))


def _h_summary(h, pos, low, high) -> dict[str, float]:
    hp = h[pos]
    q = np.quantile(hp, [0.05, 0.5, 0.95]) if hp.size else np.full(3, np.nan)
    return {
        "mean_pos": float(hp.mean()) if hp.size else float("nan"),
        "q05_pos": float(q[0]),
        "median_pos": float(q[1]),
        "q95_pos": float(q[2]),
        "mean_all": float(h.mean()),
        "clipped_low": low,
        "clipped_high": high,
        "clipped_frac": (low + high) / h.size,
    }


@register("calem")
class CalEMCalibrator(BaseCalibrator):
    """Approximate-EM calibration with a small clean and a large biased set (Algorithm 3).

    Parameters
    ----------
    base: registered name of the likelihood calibrator used for every fit (``spline``, ``beta``,
        ``platt``, ...).
    tol: stop when the parameter change ||theta_t+1 - theta_t||_2 falls below it.
    max_iter: most M-steps; reaching it without meeting ``tol`` leaves ``converged_ = False``.
    base_params: keyword arguments for the base calibrator (not ``input``: that is CalEM's own).
    input: kind of the scores, passed on to the base calibrator.
    warm_start: start each M-step's solver from the previous M-step's parameters (bases with
        ``fit_two_weight``). Only the solver's start changes, not the optimum it returns, so the
        iterates and the fixed point are those of cold starts to the solver's tolerance.
    accelerate: None (Algorithm 3 as written) or ``"squarem"``: SQUAREM extrapolation of h between
        EM steps; same fixed point and stopping rule, about 3x fewer M-steps (module docstring).
    """
    needs_rows = "treated and control sets (aggregate each arm with the treatment as a segment)"
    _bounds = {
        "tol": Bound("float", gt=0, lt=1),
        "max_iter": Bound("int", ge=1, le=100_000),
    }

    expects = "any"
    needs = ("scores_biased", "z_biased")
    _state_fields = ("base_", "init_", "eta_", "trace_", "converged_", "n_iter_", "criterion_", "h_clip_")

    def __init__(
        self,
        base: str = "spline",
        tol: float = 1e-4,
        max_iter: int = 100,
        base_params: dict[str, Any] | None = None,
        input: str = "score",
        warm_start: bool = True,
        accelerate: str | None = None,
        clip_h: bool = True,
    ) -> None:
        self.base = base
        self.tol = tol
        self.max_iter = max_iter
        self.base_params = base_params
        self.input = input
        self.warm_start = warm_start
        self.accelerate = accelerate
        # clip_h=False: the literal Algorithm 3 (h unclipped; h < 0 makes the biased positive's
        # negative-term weight h negative, which needs a likelihood base with negative terms).
        self.clip_h = clip_h
        self._check_params()

    # ---- parameters -----------------------------------------------------------------------
    def _check_params(self) -> None:
        self._check_bounds()
        from calibflow.calibrators import get_class

        if self.input not in INPUT_KINDS:
            raise ValueError(f"input must be one of {INPUT_KINDS}, got {self.input!r}")
        if not isinstance(self.base, str) or self.base in _NOT_A_BASE:
            raise ValueError(
                f"base must name a calibrator fitted by fit(s, y, sample_weight), got {self.base!r}"
            )
        get_class(self.base)  # raises ValueError naming the available methods
        if not (isinstance(self.tol, int | float) and np.isfinite(self.tol) and self.tol > 0):
            raise ValueError(f"tol must be a positive finite number, got {self.tol!r}")
        if (
            isinstance(self.max_iter, bool)
            or not isinstance(self.max_iter, int | np.integer)
            or self.max_iter < 1
        ):
            raise ValueError(f"max_iter must be a positive integer, got {self.max_iter!r}")
        if self.accelerate not in (None, "squarem"):
            raise ValueError(f"accelerate must be None or 'squarem', got {self.accelerate!r}")
        if not isinstance(self.clip_h, bool):
            raise ValueError(f"clip_h must be True or False, got {self.clip_h!r}")
        if not self.clip_h and self.accelerate is not None:
            raise ValueError("clip_h=False (literal Algorithm 3) runs plain EM only; set accelerate=None")
        if not isinstance(self.warm_start, bool):
            raise ValueError(f"warm_start must be True or False, got {self.warm_start!r}")
        if self.base_params is not None and not isinstance(self.base_params, dict):
            raise ValueError(f"base_params must be a dict, got {type(self.base_params).__name__}")
        if self.base_params and "input" in self.base_params:
            raise ValueError("base_params must not set 'input': CalEM passes its own input kind to the base")

    def _make_base(self) -> BaseCalibrator:
        from calibflow.calibrators import make

        return make(self.base, input=self.input, **(self.base_params or {}))

    # ---- fit ------------------------------------------------------------------------------
    def fit(  # type: ignore[override]
        self, scores_clean: ArrayLike, y_clean: ArrayLike, scores_biased: ArrayLike, z_biased: ArrayLike
    ) -> CalEMCalibrator:
        """Algorithm 3 on the clean (scores_clean, y_clean) and the biased (scores_biased, z_biased) sets."""
        self._check_params()
        s_c = check_scores(scores_clean, self.input, name="scores_clean")
        y_c = check_labels(y_clean, n=s_c.size, name="y_clean")
        s_b = check_scores(scores_biased, self.input, name="scores_biased")
        z_b = check_labels(z_biased, n=s_b.size, name="z_biased")

        self.init_ = self._make_base().fit(s_c, y_c)  # g_theta0 <- LogReg(D_S)
        self.eta_ = self._make_base().fit(s_b, z_b)  # g_eta <- LogReg(D_B)
        g_eta = self.eta_.predict(s_b)
        pos = z_b == 1.0
        grid = np.quantile(np.concatenate([s_c, s_b]), np.linspace(0.0, 1.0, _GRID_SIZE))
        self.criterion_ = "params_" if _params(self.init_) is not None else "grid_logit"

        current = self.init_
        theta = self._theta(current, grid)
        h, low, high = treatment_effect(g_eta, current.predict(s_b), self.clip_h)
        self.trace_: list[dict[str, Any]] = [
            {
                "iter": 0,
                "theta": theta,
                "delta": None,
                "weighted_loglik": None,
                "h": _h_summary(h, pos, low, high),
            }
        ]
        self.converged_ = False
        s_all = np.concatenate([s_c, s_b])  # the two-weight M-step's rows: D_S then D_B, fixed
        cache: dict = {}  # what the base builds from s_all alone (spline: its basis), built once
        squarem = _Squarem(h) if self.accelerate == "squarem" else None
        step = "em"
        for t in range(1, self.max_iter + 1):
            # M-step on D* with w^(t), warm-started from the previous M-step (not from g_theta0: it is
            # fitted on the clean scores alone, and a spline's coefficients depend on the score range)
            theta0 = _params(current) if (self.warm_start and t > 1) else None
            nxt = self._m_step(s_all, s_c, y_c, s_b, z_b, h, theta0, cache)
            theta_new = self._theta(nxt, grid)
            delta = float(np.linalg.norm(theta_new - theta)) if theta_new.shape == theta.shape else np.inf
            p_b = nxt.predict(s_b)
            q = _q_value(nxt.predict(s_c), y_c, p_b, z_b, h)  # Q(theta_t+1 | theta_t), eq. 17
            h, low, high = treatment_effect(g_eta, p_b, self.clip_h)  # E-step for the next round
            self.trace_.append(
                {
                    "iter": t,
                    "step": step,
                    "theta": theta_new,
                    "delta": delta,
                    "weighted_loglik": q,
                    "h": _h_summary(h, pos, low, high),
                }
            )
            current, theta = nxt, theta_new
            # Algorithm 3's rule, on plain EM steps only: an extrapolated step's change says nothing
            # about how far theta is from the fixed point.
            if step == "em" and delta < self.tol:
                self.converged_ = True
                break
            if squarem is not None:
                h, step = squarem.next(h, step, delta)
        self.base_ = current
        self.n_iter_ = len(self.trace_) - 1
        self.h_clip_ = {"clipped_low": low, "clipped_high": high, "n_biased": int(s_b.size)}
        self.fitted_ = True
        if not self.converged_:
            warnings.warn(
                f"CalEM did not converge: ||theta_t+1 - theta_t|| = {self.trace_[-1]['delta']:.3g} >= tol "
                f"{self.tol:g} after max_iter={self.max_iter} iterations",
                RuntimeWarning,
                stacklevel=2,
            )
        return self

    def _m_step(self, s_all, s_c, y_c, s_b, z_b, h, theta0, cache) -> BaseCalibrator:
        """One weighted base fit on D*: two-weight rows when the base has them, else compact stacking."""
        base = self._make_base()
        if isinstance(base, LikelihoodCalibrator):
            a, b = em_term_weights(y_c, z_b, h)
            if not self.clip_h and (b < 0).any():
                # Literal Algorithm 3: a biased positive with h < 0 has a = 1 - h > 1, b = h < 0. Every row
                # keeps a + b = 1 >= 0, so its loss -(a log g + b log(1 - g)) has curvature (a + b) g (1 - g)
                # >= 0 in the logit: the objective stays convex and a base that refuses negative terms in
                # general (spline: its Newton loop needs convexity) can take these. Instance-level only.
                base.negative_terms = True
            return base.fit_two_weight(s_all, a, b, theta0=theta0, design_cache=cache)
        if not self.clip_h and (h < 0).any():
            raise ValueError(f"clip_h=False needs a likelihood base (spline, beta, platt), not {self.base!r}")
        s, y, w = _compact_stack(s_c, y_c, s_b, z_b, h)
        return base.fit(s, y, sample_weight=w)

    def _theta(self, cal: BaseCalibrator, grid: NDArray[np.float64]) -> NDArray[np.float64]:
        p = _params(cal)
        if self.criterion_ == "params_" and p is not None:
            return p
        # RMS over the grid (not the plain norm) keeps ``tol`` on the scale of one coefficient.
        return logit(np.clip(cal.predict(grid), 1e-9, 1.0 - 1e-9)) / np.sqrt(grid.size)

    # ---- predict --------------------------------------------------------------------------
    def predict(self, scores: ArrayLike) -> NDArray[np.float64]:
        """Calibrated probabilities g_theta_T(scores) of the last M-step."""
        self._check_fitted()
        return self.base_.predict(scores)

    def treatment_effect(self, scores: ArrayLike) -> NDArray[np.float64]:
        """The fitted h(s) = P(Y = 0 | Z = 1, s) of eq. 15 at ``scores`` (clipped to [0, 1] unless
        ``clip_h=False``)."""
        self._check_fitted()
        clip = getattr(self, "clip_h", True)
        return treatment_effect(self.eta_.predict(scores), self.base_.predict(scores), clip)[0]

    def summary(self) -> dict[str, Any]:
        """Convergence report: iterations, whether ``tol`` was met, last change, h clipping."""
        self._check_fitted()
        last = self.trace_[-1]
        return {
            "base": self.base,
            "converged": bool(self.converged_),
            "n_iter": int(self.n_iter_),
            "criterion": self.criterion_,
            "last_delta": last["delta"],
            "weighted_loglik": last["weighted_loglik"],
            **{f"h_{k}": v for k, v in last["h"].items()},
        }

    def _fit(self, s, y, w) -> None:  # pragma: no cover - fit is overridden
        raise TypeError("CalEM is fitted with fit(scores_clean, y_clean, scores_biased, z_biased)")


class _Squarem:
    """SQUAREM (Varadhan & Roland 2008, scheme SqS3) on the EM map h -> E(M(h)) of the biased rows.

    After two plain EM steps h0 -> h1 -> h2 it jumps to ``h0 - 2 alpha r + alpha^2 v`` (``r = h1 - h0``,
    ``v = h2 - 2 h1 + h0``, ``alpha = -||r|| / ||v||`` kept in ``[-alpha_max, -1]``; ``alpha = -1`` is the
    plain step h2), clipped to [0, 1] like every h, and the next M-step starts from there. Fixed points
    are those of EM (at a fixed point r = v = 0), and the stopping rule is still Algorithm 3's, tested on
    plain steps only. ``alpha_max`` grows 4-fold when the bound binds (SQUAREM's ``mstep``) and falls
    back to 1 when the plain step after a jump moves theta more than the one before it (the jump
    overshot): a residual safeguard in place of SQUAREM's objective check, CalEM's approximate EM
    having no monotone objective.
    """

    def __init__(self, h0: NDArray[np.float64]) -> None:
        self.hist: list[NDArray[np.float64]] = [h0]
        self.alpha_max = 1.0
        self.last_delta = np.inf
        self.after_jump = False

    def next(self, h: NDArray[np.float64], step: str, delta: float) -> tuple[NDArray[np.float64], str]:
        if step == "em":
            if self.after_jump and delta > self.last_delta:
                self.alpha_max = 1.0
            self.after_jump = False
            self.last_delta = delta
        self.hist = [h] if step != "em" or not self.hist else [*self.hist, h]
        if len(self.hist) < 3:
            return h, "em"
        h0, h1, h2 = self.hist
        r, v = h1 - h0, h2 - 2.0 * h1 + h0
        nv = float(np.linalg.norm(v))
        self.hist = [h2]
        if nv == 0.0:
            return h2, "em"
        alpha = max(min(-float(np.linalg.norm(r)) / nv, -1.0), -self.alpha_max)
        if alpha == -self.alpha_max:
            self.alpha_max *= 4.0
        if alpha == -1.0:
            return h2, "em"
        self.hist, self.after_jump = [], True
        return np.clip(h0 - 2.0 * alpha * r + alpha * alpha * v, 0.0, 1.0), "squarem"


def _params(cal: BaseCalibrator) -> NDArray[np.float64] | None:
    p = getattr(cal, "params_", None)
    if p is None:
        return None
    arr = np.atleast_1d(np.asarray(p, dtype=np.float64)).ravel()
    return arr if arr.size else None
