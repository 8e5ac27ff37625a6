"""Partial pooling: a global Platt map on the logit, per-segment offsets and slopes shrunk toward it.

The model, for a row with base logit ``z`` and segment levels ``l_1..l_K`` (one per block: each declared
segment column, plus the column pairs the data supports)::

    logit p = a + sum_k d_k[l_k] + exp(b + sum_k g_k[l_k]) * (z - c)

``a, b`` are the global Platt intercept and log-slope (``c`` centres ``z``), ``d_k`` per-level offsets and
``g_k`` per-level log-slopes. The slope is ``exp(...)``, so within a segment the map is strictly increasing
in ``z``: the ranking inside every segment is kept (across segments the order may change, so ``monotone``
is False, as for ``multicalibration``).

Shrinkage (empirical Bayes, a random-effects logistic model fitted by penalised likelihood): each block's
offsets have a normal prior ``d_k[l] ~ N(0, tau_k^2)`` (slopes ``N(0, sigma_k^2)``) and the fit is the
posterior mode, i.e. the penalised quasi-likelihood fit of a GLMM (Breslow & Clayton, "Approximate
inference in generalized linear mixed models", JASA 88, 1993). The prior variances are estimated from the
data, block by block, with the DerSimonian-Laird method-of-moments estimator (DerSimonian & Laird,
"Meta-analysis in clinical trials", Controlled Clinical Trials 7, 1986) on the per-level estimates and their
Fisher information. A level's offset is its own estimate times ``I / (I + 1/tau^2)`` (``I``: its
information, about its positives times one minus the rate): a segment with 30 positives moves little,
one with 30,000 moves fully, and a column without real heterogeneity gets ``tau^2 = 0`` (no offsets).

Fitting: block coordinate Fisher scoring (the global pair, then each block's levels as independent 2 x 2
systems), re-estimating each ``tau^2`` from the current fit at every sweep, until the largest step is below
``tol``. Cost per sweep: a few passes over the rows per block (``np.bincount``).

Intersections: after the main columns converge, each pair of columns is tested with the score (Cochran Q)
statistic of its cells' residuals; the pair becomes a block (offsets only) when the test rejects at
``alpha`` divided by the number of pairs (Bonferroni) and it has at most ``max_cells`` observed cells. The
main columns' prior variances are then kept fixed (hierarchical: an intersection is a deviation from the
main effects, estimated after them).
The tests are kept in the fitted state (``pair_tests_``), included or not.

Segment values are read by ``calibflow.segments.as_levels`` (a null is its own level). A level never seen in
fitting contributes nothing: with every column unseen a row gets the global map; ``unseen_counts`` says how
many rows that concerns. State is plain arrays and lists (JSON), never pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import chdtrc, expit

from calibflow._validation import check_scores
from calibflow.calibrators.base import BaseCalibrator, Bound, check_finite_output, register
from calibflow.segments import aligned, level_codes, segment_matrix, unseen_counts

_MAX_STEP = 2.0  # a logit step larger than this per sweep is damped (first sweeps on strong biases)


@dataclass
class _Block:
    """One block of levels: a segment column (``columns=[i]``) or a pair of them (``[i, j]``)."""

    columns: list[int]
    codes: NDArray[np.int64]  # level of each fitting row
    n_levels: int
    slopes: bool
    keys: NDArray[np.int64] | None = None  # a pair's cells as code_i * L_j + code_j, sorted
    offset: NDArray[np.float64] = field(default=None)  # type: ignore[assignment]
    log_slope: NDArray[np.float64] = field(default=None)  # type: ignore[assignment]
    tau2: float = 0.0
    sigma2: float = 0.0
    frozen: bool = False  # prior variances kept (the main columns' once intersections join)

    def __post_init__(self) -> None:
        self.offset = np.zeros(self.n_levels)
        self.log_slope = np.zeros(self.n_levels)


def _dl_tau2(est: NDArray[np.float64], info: NDArray[np.float64]) -> float:
    """DerSimonian-Laird between-level variance of estimates ``est`` with inverse variances ``info``."""
    ok = info > 1e-12
    w, d = info[ok], est[ok]
    if w.size < 2:
        return 0.0
    sw = w.sum()
    mean = w @ d / sw
    q = w @ (d - mean) ** 2
    return float(max(0.0, (q - (w.size - 1)) / (sw - (w @ w) / sw)))


@register("partial_pooling")
class PartialPoolingCalibrator(BaseCalibrator):
    """Global Platt map with per-segment offsets/slopes shrunk by their evidence; see the module docstring.

    ``fit(scores, y, sample_weight=None, segments=...)`` and ``predict(scores, segments=...)``, the
    calling convention of ``multicalibration``.
    """
    default_candidate = True
    _bounds = {
        "alpha": Bound("float", gt=0, le=1e6),
        "max_cells": Bound("int", ge=1, le=100_000_000),
        "max_iter": Bound("int", ge=1, le=100_000),
        "tol": Bound("float", gt=0, lt=1),
    }

    expects = "logit"
    monotone = False  # increasing within each segment, not across segments
    needs = ("segments",)
    _state_fields = (
        "global_",
        "segment_names_",
        "vocab_",
        "blocks_",
        "pair_tests_",
        "n_sweeps_",
        "converged_",
    )
    _state_spec = {"global_": ("f", 1), "n_sweeps_": ("i", 0), "converged_": ("b", 0)}

    def __init__(
        self,
        input: str = "score",
        slopes: bool = True,
        intersections: bool = True,
        alpha: float = 0.01,
        max_cells: int = 100_000,
        max_iter: int = 100,
        tol: float = 1e-6,
    ) -> None:
        self.input = input
        self.slopes = slopes
        self.intersections = intersections
        self.alpha = alpha
        self.max_cells = max_cells
        self.max_iter = max_iter
        self.tol = tol

    # ---- public -------------------------------------------------------------------------------------
    def fit(self, scores, y, sample_weight=None, segments=None) -> PartialPoolingCalibrator:
        s, yy, w = self._validate_fit(scores, y, sample_weight)
        names, cols = segment_matrix(segments, s.size)
        z = self._convert(s)
        self.segment_names_ = names
        self.vocab_ = [sorted(set(c.tolist())) for c in cols]
        codes = [level_codes(c, v) for c, v in zip(cols, self.vocab_, strict=True)]
        fit = _Fitter(z, yy, w, float(self.tol), int(self.max_iter))
        for i, c in enumerate(codes):
            fit.blocks.append(_Block([i], c, len(self.vocab_[i]), bool(self.slopes)))
        fit.run()
        self.pair_tests_ = []
        if self.intersections and len(codes) > 1:
            self.pair_tests_ = self._add_pairs(fit, codes)
            if any(t["included"] for t in self.pair_tests_):
                fit.run()
        self.n_sweeps_ = int(fit.sweeps)
        self.converged_ = bool(fit.converged)
        self.global_ = np.array([fit.a, fit.b, fit.c])
        self.blocks_ = [self._block_state(b) for b in fit.blocks]
        self.fitted_ = True
        return self

    def predict(self, scores, segments=None) -> NDArray[np.float64]:
        self._check_fitted()
        self._check_state()
        s = check_scores(scores, self.input)
        z = self._convert(s)
        cols = aligned(segments, self.segment_names_, s.size)
        codes = [level_codes(c, v) for c, v in zip(cols, self.vocab_, strict=True)]
        a, b, c = (float(v) for v in self.global_)
        off, ls = np.zeros(z.size), np.zeros(z.size)
        for blk in self.blocks_:
            idx = self._block_codes(blk, codes)
            seen = idx >= 0
            off[seen] += np.asarray(blk["offset"], dtype=np.float64)[idx[seen]]
            ls[seen] += np.asarray(blk["log_slope"], dtype=np.float64)[idx[seen]]
        p = expit(a + off + np.exp(b + ls) * (z - c))
        return check_finite_output(np.clip(p, 0.0, 1.0), self.name)

    def unseen_counts(self, segments: Any, n: int) -> dict[str, int]:
        """Per segment column, the rows whose value was never seen in fitting (that column adds nothing)."""
        self._check_fitted()
        return unseen_counts(self.segment_names_, self.vocab_, segments, n)

    # ---- helpers ------------------------------------------------------------------------------------
    def _check_state(self) -> None:
        """A state read from JSON must be one this class writes: a ValueError says so otherwise."""
        if not self._state_ok():
            raise ValueError("partial_pooling: the saved state is malformed (global_, vocab_ or blocks_)")

    def _state_ok(self) -> bool:
        k = len(self.segment_names_)
        if (
            np.asarray(self.global_).shape != (3,)
            or not isinstance(self.vocab_, list)
            or len(self.vocab_) != k
        ):
            return False
        if not all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in self.vocab_):
            return False
        for blk in self.blocks_:
            cols = blk.get("columns") if isinstance(blk, dict) else None
            if not (isinstance(cols, list) and len(cols) in (1, 2) and all(c in range(k) for c in cols)):
                return False
            off, ls = np.asarray(blk.get("offset")), np.asarray(blk.get("log_slope"))
            n = len(self.vocab_[cols[0]]) if len(cols) == 1 else np.asarray(blk.get("keys")).size
            if off.dtype != np.float64 or ls.dtype != np.float64 or not off.shape == ls.shape == (n,):
                return False
        return True

    def _add_pairs(self, fit: _Fitter, codes: list[NDArray[np.int64]]) -> list[dict[str, Any]]:
        """Score-test every column pair on the main-effects fit; add the supported ones as blocks."""
        pairs = list(combinations(range(len(codes)), 2))
        r, wt = fit.residuals()
        # The main columns keep the prior variances they converged to: re-estimated beside a pair, a main
        # effect can drain into the pair's cells (each step cheaper there) until its variance reaches 0.
        for blk in fit.blocks:
            blk.frozen = True
        tests = []
        for i, j in pairs:
            keys = codes[i] * len(self.vocab_[j]) + codes[j]
            cells, inv = np.unique(keys, return_inverse=True)
            test: dict[str, Any] = {"columns": [self.segment_names_[i], self.segment_names_[j]]}
            test["cells"] = int(cells.size)
            if cells.size > self.max_cells:
                tests.append({**test, "q": None, "df": None, "p_value": None, "included": False})
                continue
            u, info = np.bincount(inv, r, cells.size), np.bincount(inv, wt, cells.size)
            ok = info > 1e-12
            q = float((u[ok] ** 2 / info[ok]).sum())
            df = max(1, int(ok.sum()) - len(self.vocab_[i]) - len(self.vocab_[j]) + 1)
            pval = float(chdtrc(df, q))  # chi-square survival; scipy.special, not the heavy scipy.stats
            include = pval < self.alpha / len(pairs)
            tests.append({**test, "q": q, "df": df, "p_value": pval, "included": bool(include)})
            if include:
                fit.blocks.append(_Block([i, j], inv.astype(np.int64), int(cells.size), False, cells))
        return tests

    @staticmethod
    def _block_state(b: _Block) -> dict[str, Any]:
        return {
            "columns": list(b.columns),
            "keys": b.keys if b.keys is not None else None,
            "offset": b.offset,
            "log_slope": b.log_slope,
            "tau2": float(b.tau2),
            "sigma2": float(b.sigma2),
        }

    def _block_codes(self, blk: dict[str, Any], codes: list[NDArray[np.int64]]) -> NDArray[np.int64]:
        cols = [int(i) for i in blk["columns"]]
        if len(cols) == 1:
            return codes[cols[0]]
        i, j = cols
        keys = np.asarray(blk["keys"], dtype=np.int64)
        want = codes[i] * len(self.vocab_[j]) + codes[j]
        pos = np.clip(np.searchsorted(keys, want), 0, max(keys.size - 1, 0))
        hit = (codes[i] >= 0) & (codes[j] >= 0) & (keys.size > 0) & (keys[pos] == want)
        return np.where(hit, pos, -1)


class _Fitter:
    """Block coordinate Fisher scoring of the penalised likelihood, tau^2 re-estimated every sweep."""

    def __init__(self, z, y, w, tol: float, max_iter: int, centre: float | None = None) -> None:
        self.y, self.w, self.tol, self.max_iter = y, w, tol, max_iter
        # ``centre``: fits of the same rows from different tables share one (calibflow.aggregate.segment_fit)
        self.c = float(w @ z / w.sum()) if centre is None else float(centre)
        self.x = z - self.c
        self.a, self.b = 0.0, 0.0
        # per row: the summed offsets, and x scaled by the levels' slopes, exp(sum of log-slopes) * x (kept
        # up to date by multiplication, so a sweep computes no exp per row for the slopes)
        self.off, self.xs = np.zeros(z.size), self.x.copy()
        self.blocks: list[_Block] = []
        self.sweeps = 0
        self.converged = False
        self._global_start()

    def _global_start(self) -> None:
        """Plain Platt on the centred logit (slope kept positive: exp of the log-slope)."""
        for _ in range(50):
            if self._global_step() < self.tol:
                return

    def _state(self) -> tuple[NDArray, NDArray, NDArray]:
        u = np.exp(self.b) * self.xs
        p = expit(self.a + self.off + u)
        return u, self.w * (self.y - p), self.w * p * (1.0 - p)

    def residuals(self) -> tuple[NDArray, NDArray]:
        _, r, wt = self._state()
        return r, wt

    def _global_step(self) -> float:
        u, r, wt = self._state()
        g = np.array([r.sum(), r @ u])
        h = np.array([[wt.sum(), wt @ u], [wt @ u, wt @ (u * u)]]) + 1e-9 * np.eye(2)
        step = np.clip(np.linalg.solve(h, g), -_MAX_STEP, _MAX_STEP)
        self.a += float(step[0])
        self.b += float(step[1])
        return float(np.abs(step).max())

    def _block_step(self, blk: _Block) -> float:
        u, r, wt = self._state()
        c, n = blk.codes, blk.n_levels
        u0, i00 = np.bincount(c, r, n), np.bincount(c, wt, n)
        raw_d = blk.offset + np.divide(u0, i00, out=np.zeros(n), where=i00 > 1e-12)
        if not blk.frozen:
            blk.tau2 = _dl_tau2(raw_d, i00)
        p00 = 1.0 / blk.tau2 if blk.tau2 > 1e-12 else np.inf
        if not blk.slopes:
            new_d = np.zeros(n) if np.isinf(p00) else (i00 * blk.offset + u0) / (i00 + p00)
            return self._apply(blk, new_d - blk.offset, np.zeros(n))
        u1, i11, i01 = np.bincount(c, r * u, n), np.bincount(c, wt * u * u, n), np.bincount(c, wt * u, n)
        raw_g = blk.log_slope + np.divide(u1, i11, out=np.zeros(n), where=i11 > 1e-12)
        if not blk.frozen:
            blk.sigma2 = _dl_tau2(raw_g, i11)
        p11 = 1.0 / blk.sigma2 if blk.sigma2 > 1e-12 else np.inf
        d_d, d_g = _penalised_step(blk, u0, u1, i00, i01, i11, p00, p11)
        return self._apply(blk, d_d, d_g)

    def _apply(self, blk: _Block, d_d: NDArray, d_g: NDArray) -> float:
        d_d, d_g = np.clip(d_d, -_MAX_STEP, _MAX_STEP), np.clip(d_g, -_MAX_STEP, _MAX_STEP)
        blk.offset += d_d
        blk.log_slope += d_g
        self.off += d_d[blk.codes]
        if blk.slopes and np.any(d_g):
            self.xs *= np.exp(d_g)[blk.codes]
        self._recentre(blk)
        if len(blk.columns) == 2:
            self._shift_to_mains(blk)
        return float(max(np.abs(d_d).max(initial=0.0), np.abs(d_g).max(initial=0.0)))

    def _recentre(self, blk: _Block) -> None:
        """Move the block's mean level into the global pair: the likelihood is unchanged (every fitting row
        has one level of the block) and the prior's penalty falls, so this is an exact descent step along
        the direction block coordinate descent crawls along otherwise (intercept vs the offsets)."""
        t = float(blk.offset.mean())
        blk.offset -= t
        self.off -= t
        self.a += t
        if blk.slopes:
            g = float(blk.log_slope.mean())
            blk.log_slope -= g
            self.xs *= np.exp(-g)
            self.b += g

    def _shift_to_mains(self, pair: _Block) -> None:
        """Move what a pair's cells share along one column into that column's offsets.

        Rows of a cell all hold one level of each column, so shifting ``t`` from the cells of level ``l``
        to the main offset of ``l`` leaves the likelihood unchanged; ``t`` minimises the two priors'
        penalty along that direction (closed form), the cure for main effects and intersections trading
        their common part slowly under coordinate descent.
        """
        tp = pair.tau2
        if tp <= 1e-12 or pair.keys is None:
            return
        i, j = pair.columns
        main_i, main_j = self.blocks[i], self.blocks[j]
        for main, lvl in ((main_i, pair.keys // main_j.n_levels), (main_j, pair.keys % main_j.n_levels)):
            ti = main.tau2
            if ti <= 1e-12:
                continue
            s = np.bincount(lvl, pair.offset, main.n_levels)
            cnt = np.bincount(lvl, minlength=main.n_levels).astype(np.float64)
            shift = (s * ti - main.offset * tp) / (cnt * ti + tp)
            pair.offset -= shift[lvl]
            main.offset += shift

    def run(self) -> None:
        for _ in range(self.max_iter):
            self.sweeps += 1
            step = self._global_step()
            for blk in self.blocks:
                step = max(step, self._block_step(blk))
            self.converged = step < self.tol
            if self.converged:
                return


def _penalised_step(blk, u0, u1, i00, i01, i11, p00, p11) -> tuple[NDArray, NDArray]:
    """Newton step of each level's (offset, log-slope) under the priors; a zero prior variance pins to 0."""
    if np.isinf(p00) and np.isinf(p11):
        return -blk.offset, -blk.log_slope
    if np.isinf(p11):  # offsets only: the log-slopes go to 0
        return (i00 * blk.offset + u0) / (i00 + p00) - blk.offset, -blk.log_slope
    if np.isinf(p00):  # log-slopes only
        return -blk.offset, (i11 * blk.log_slope + u1) / (i11 + p11) - blk.log_slope
    g0, g1 = u0 - p00 * blk.offset, u1 - p11 * blk.log_slope
    h00, h11, h01 = i00 + p00, i11 + p11, i01
    det = h00 * h11 - h01 * h01
    det = np.where(det > 1e-300, det, 1e-300)
    return (h11 * g0 - h01 * g1) / det, (h00 * g1 - h01 * g0) / det
