"""Uncertainty-aware decision boundaries over a score x uncertainty grid (Arora et al., Sec. 4-5, App. G).

A decision "act if the score is high enough" becomes "act if the score is high enough *for this
uncertainty level*". The score x uncertainty plane is cut into a K x L grid (rows = uncertainty levels
from low to high, columns = score bins from low to high), the hold-out set is summarised by two count
grids ``positives[i, j]`` and ``totals[i, j]``, and an algorithm picks for each level ``i`` how many of
its highest-score bins are labelled positive (``Boundary.thresholds[i]``, between 0 and L), maximising
recall subject to ``precision >= sigma`` (the 2D-BDB problem, Eq. 2).

Algorithms (all ``f(positives, totals, precision) -> Boundary``):

- ``st``: one score threshold shared by every level (the baseline; exact on grids whose score columns
  are shared across levels, i.e. equi-span; on equi-weight grids run it on a K=1 grid instead).
- ``hr``: Heuristic Recalibration after Poceviciute et al. (2022); see its docstring.
- ``gmt``: Greedy Multi-Thresholds (Algorithm 2), an independent best threshold per level.
- ``mist``: Multi-Isotonic Single Threshold (Algorithm 3) on the grid's bins; ``MistCalibrator`` (in
  ``calibflow.calibrators.mist``) is the sample-level version the paper ran.
- ``ew_dpmt``: Equi-Weight DP Multi-Thresholds (Algorithm 1), optimal when all bins hold the same count.
- ``vw_dpmt``: Variable-Weight DP Multi-Thresholds (Algorithm 4) with a sparse set of feasible states
  (a Pareto frontier), optimal on any grid.

Binning (``Binning``): equi-span (K equal-width uncertainty intervals x L equal-width score intervals),
equi-weight (K uncertainty quantiles, then L score quantiles within each level) or shared-score (K
uncertainty quantiles x L *global* score quantiles, the same score edges in every level), fitted on the
hold-out set and applied unchanged to new data. On grids whose score columns are shared (equi-span,
shared-score) ST is a feasible boundary of every 2-D algorithm, so the exact ones (VW-DPMT, and EW-DPMT
with its uniform candidates) can never fall below ST on the grid they are fitted on.
``decide(binning, boundary, u, s)`` labels new data.

Feasibility is tested as ``tp >= precision * pp - 1e-9`` everywhere (one tolerance for every method and
for the exhaustive search in the tests); the empty selection (pp = 0) is always feasible, with recall 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from calibflow._validation import as_1d_float, check_labels
from calibflow.binning import order_edges

_TOL = 1e-9
BINNINGS = ("equi_weight", "equi_span", "shared_score")


# ---------------------------------------------------------------------------------------------
# The result type and the shared helpers
# ---------------------------------------------------------------------------------------------
@dataclass
class Boundary:
    """A per-level decision boundary on a K x L grid and its quality on the grid it was fitted on.

    ``thresholds[i]`` is the number of highest-score bins of uncertainty level ``i`` labelled positive
    (0 = none, L = the whole level). ``true_positives``/``predicted_positives`` are counted on the grid
    passed to the algorithm; ``precision`` is NaN when nothing is selected.
    """

    thresholds: NDArray[np.intp]
    true_positives: float
    predicted_positives: float
    total_positives: float
    n_score_bins: int
    method: str = ""
    info: dict = field(default_factory=dict)

    @property
    def precision(self) -> float:
        return (
            self.true_positives / self.predicted_positives if self.predicted_positives > 0 else float("nan")
        )

    @property
    def recall(self) -> float:
        return self.true_positives / self.total_positives if self.total_positives > 0 else 0.0

    def mask(self) -> NDArray[np.bool_]:
        """K x L boolean grid of the bins labelled positive."""
        cols = np.arange(self.n_score_bins)
        return cols[None, :] >= (self.n_score_bins - self.thresholds)[:, None]

    def predict(self, level: ArrayLike, score_bin: ArrayLike) -> NDArray[np.bool_]:
        """Label items already mapped to (level, score bin) indices."""
        lv = np.asarray(level, dtype=np.intp)
        sb = np.asarray(score_bin, dtype=np.intp)
        return sb >= self.n_score_bins - self.thresholds[lv]

    def evaluate(self, positives: ArrayLike, totals: ArrayLike) -> tuple[float, float]:
        """(true positives, predicted positives) of this boundary on another grid (e.g. the test grid)."""
        p, n = _check_grid(positives, totals)
        m = self.mask()
        return float(p[m].sum()), float(n[m].sum())

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "thresholds": self.thresholds.tolist(),
            "true_positives": self.true_positives,
            "predicted_positives": self.predicted_positives,
            "precision": self.precision,
            "recall": self.recall,
        }


def _check_grid(positives: ArrayLike, totals: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    p = np.asarray(positives, dtype=np.float64)
    n = np.asarray(totals, dtype=np.float64)
    if p.ndim != 2 or n.ndim != 2:
        raise ValueError(f"positives and totals must be K x L grids, got shapes {p.shape} and {n.shape}")
    if p.shape != n.shape:
        raise ValueError(f"shape mismatch: positives {p.shape} vs totals {n.shape}")
    if p.size == 0:
        raise ValueError("empty grid")
    if not (np.isfinite(p).all() and np.isfinite(n).all()):
        raise ValueError("grid counts contain NaN or infinite values")
    if (p < 0).any() or (p > n).any():
        raise ValueError("grid counts must satisfy 0 <= positives <= totals in every bin")
    return p, n


def _check_precision(precision: float) -> float:
    if not (isinstance(precision, int | float | np.floating) and 0.0 < float(precision) <= 1.0):
        raise ValueError(f"precision bound must be in (0, 1], got {precision!r}")
    return float(precision)


def _prefix(
    p: NDArray[np.float64], n: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """pi(i, j), nu(i, j): positives and totals in the j highest-score bins of level i, j = 0..L (App. G)."""
    k = p.shape[0]
    pi = np.concatenate([np.zeros((k, 1)), np.cumsum(p[:, ::-1], axis=1)], axis=1)
    nu = np.concatenate([np.zeros((k, 1)), np.cumsum(n[:, ::-1], axis=1)], axis=1)
    return pi, nu


def _feasible(tp, pp, sigma):
    return tp >= sigma * pp - _TOL


def _make(thresholds, p, n, method, **info) -> Boundary:
    t = np.asarray(thresholds, dtype=np.intp)
    pi, nu = _prefix(p, n)
    rows = np.arange(p.shape[0])
    return Boundary(
        thresholds=t,
        true_positives=float(pi[rows, t].sum()),
        predicted_positives=float(nu[rows, t].sum()),
        total_positives=float(p.sum()),
        n_score_bins=p.shape[1],
        method=method,
        info=info,
    )


# ---------------------------------------------------------------------------------------------
# Score only, heuristic and greedy algorithms
# ---------------------------------------------------------------------------------------------
def st(positives: ArrayLike, totals: ArrayLike, precision: float) -> Boundary:
    """Single Threshold (ST): the same number of top score bins in every level, best feasible recall.

    The uncertainty levels are pooled (column sums), so this is the score-only baseline when the score
    columns mean the same score range in every level (equi-span and shared-score grids, or K = 1). ST is
    GMT with K = 1.
    """
    p, n = _check_grid(positives, totals)
    sigma = _check_precision(precision)
    pi, nu = _prefix(p.sum(0, keepdims=True), n.sum(0, keepdims=True))
    ok = _feasible(pi[0], nu[0], sigma)
    c = int(np.argmax(np.where(ok, pi[0], -1.0)))
    return _make(np.full(p.shape[0], c), p, n, "st")


def gmt(positives: ArrayLike, totals: ArrayLike, precision: float) -> Boundary:
    """Greedy Multi-Thresholds (Algorithm 2): per level, the most top bins whose precision is >= sigma.

    Each level meets the bound on its own, so the union does too; O(KL) and no interaction between
    levels, which is why it can lose to ST (App. G).
    """
    p, n = _check_grid(positives, totals)
    sigma = _check_precision(precision)
    pi, nu = _prefix(p, n)
    score = np.where(_feasible(pi, nu, sigma), pi, -1.0)
    return _make(np.argmax(score, axis=1), p, n, "gmt")


def hr(positives: ArrayLike, totals: ArrayLike, precision: float, max_step: int | None = None) -> Boundary:
    """Heuristic Recalibration (HR) after Poceviciute et al. (2022), as Arora et al. describe it.

    Interpretation (the paper gives no algorithm): Poceviciute et al. treat uncertain predictions as
    likely misses and move them towards the positive class, i.e. they assume that, at a fixed score,
    positivity *increases* with uncertainty (Arora et al., Sec. 6.2). On the grid we encode this as a
    score threshold that is lowered by a fixed step for every level of uncertainty:
    ``thresholds[i] = min(L, c + d * i)`` with ``d >= 1`` bins. The two parameters (c, d) are chosen on
    the grid for the best feasible recall (d from 1 to ``max_step``, default ``max(1, L // K)``). With
    d >= 1 enforced the rule cannot fall back to ST, which is why it loses wherever uncertainty lowers
    positivity - as it does in the paper's Table 1.
    """
    p, n = _check_grid(positives, totals)
    sigma = _check_precision(precision)
    k, ell = p.shape
    d_max = max(1, ell // k) if max_step is None else int(max_step)
    if d_max < 1:
        raise ValueError(f"max_step must be >= 1, got {max_step}")
    pi, nu = _prefix(p, n)
    rows = np.arange(k)
    best = (-1.0, None)
    c = np.arange(ell + 1)
    for d in range(1, d_max + 1):
        t = np.minimum(ell, c[:, None] + d * rows[None, :])  # (L+1) x K
        tp = pi[rows, t].sum(1)
        pp = nu[rows, t].sum(1)
        score = np.where(_feasible(tp, pp, sigma), tp, -1.0)
        a = int(np.argmax(score))
        if score[a] > best[0]:
            best = (score[a], t[a])
    thr = best[1] if best[1] is not None else np.zeros(k, np.intp)
    return _make(thr, p, n, "hr")


def mist(positives: ArrayLike, totals: ArrayLike, precision: float) -> Boundary:
    """Multi-Isotonic Single Threshold on the grid (Algorithm 3).

    Each level's bin positivity is made non-decreasing in the score by weighted isotonic regression
    (weights = bin totals); all bins are then sorted by calibrated positivity and the longest prefix whose
    pooled precision is >= sigma is taken. Ties in calibrated positivity are taken together. Because the
    sorted calibrated values decrease, the pooled precision of a prefix only decreases, so stopping at
    the first violation (as Algorithm 3 does) is the largest feasible prefix. Inside a level a prefix is
    always a set of highest-score bins, hence a threshold per level. Empty bins take the calibrated value
    of the nearest non-empty bin below them (they change no count).
    """
    p, n = _check_grid(positives, totals)
    sigma = _check_precision(precision)
    cal = _iso_rows(p, n)
    flat = cal.ravel()
    order = np.argsort(-flat, kind="mergesort")
    v, pp_, nn_ = flat[order], p.ravel()[order], n.ravel()[order]
    last = np.r_[v[1:] != v[:-1], True]
    ctp, cpp = np.cumsum(pp_)[last], np.cumsum(nn_)[last]
    ok = _feasible(ctp, cpp, sigma) & (cpp > 0)
    # Prefix precision is non-increasing, so the feasible groups are a leading run.
    n_ok = int(np.argmin(ok)) if not ok.all() else ok.size
    cut = v[last][n_ok - 1] if n_ok > 0 else np.inf
    chosen = cal >= cut
    return _make(chosen.sum(1), p, n, "mist", cut=float(cut))


def _iso_rows(p: NDArray[np.float64], n: NDArray[np.float64]) -> NDArray[np.float64]:
    from calibflow.calibrators.isotonic import pav

    out = np.zeros_like(p)
    for i in range(p.shape[0]):
        nz = np.flatnonzero(n[i] > 0)
        if nz.size == 0:
            continue
        means, starts = pav(p[i, nz] / n[i, nz], n[i, nz])
        vals = np.repeat(means, np.diff(np.append(starts, nz.size)))
        # Forward-fill empty bins from the non-empty bin below (the first ones from the first value).
        pos = np.searchsorted(nz, np.arange(p.shape[1]), side="right") - 1
        out[i] = vals[np.maximum(pos, 0)]
    return out


# ---------------------------------------------------------------------------------------------
# Dynamic programmes
# ---------------------------------------------------------------------------------------------
def ew_dpmt(positives: ArrayLike, totals: ArrayLike, precision: float, chunk: int = 2048) -> Boundary:
    """Equi-Weight DP Multi-Thresholds (Algorithm 1), vectorised.

    ``R(i, m) = max_j [pi(i, j) + R(i-1, m-j)]`` is the most positives any boundary over levels 1..i can
    hold with exactly m bins selected: a (max, +) convolution of the previous row with the level's
    prefix sums, computed here as a strided K x (iL+1) x (L+1) reduction in chunks of m (numpy, no
    Python loop over m or j). The argmax j* per (i, m) is kept (int16/int32) and the boundaries for all
    m are recovered at once by a vectorised backtrack. Algorithm 1 picks m* assuming every bin holds
    N/(KL) items; we instead compute each candidate boundary's actual predicted positives from the
    grid and take the best feasible one, which is identical on exactly equi-weight grids and never
    violates the bound on approximately equal ones. The uniform boundaries (ST's candidates) are added
    to the candidate set, so on grids with shared score edges the result is never below ST (on unequal
    bins EW-DPMT is otherwise a heuristic; VW-DPMT is the exact algorithm there).
    O(K^2 L^2) work, O(K^2 L) memory.
    """
    p, n = _check_grid(positives, totals)
    sigma = _check_precision(precision)
    k, ell = p.shape
    pi, nu = _prefix(p, n)
    neg = -np.inf
    r_prev = pi[0].copy()  # R(1, m), m = 0..L
    choice = np.zeros((k, k * ell + 1), dtype=np.int32)
    choice[0, : ell + 1] = np.arange(ell + 1)
    for i in range(1, k):
        m_max = (i + 1) * ell
        padded = np.concatenate([np.full(ell, neg), r_prev, np.full(ell, neg)])
        # window[m, t] = padded[m + t] = R(i-1, m - (L - t)); j = L - t bins from level i.
        win = np.lib.stride_tricks.sliding_window_view(padded, ell + 1)
        gain = pi[i][::-1]  # gain[t] = pi(i, L - t)
        r_new = np.empty(m_max + 1)
        for lo in range(0, m_max + 1, chunk):
            hi = min(m_max + 1, lo + chunk)
            tot = win[lo:hi] + gain
            t_star = np.argmax(tot, axis=1)
            r_new[lo:hi] = tot[np.arange(hi - lo), t_star]
            choice[i, lo:hi] = ell - t_star
        r_prev = r_new
    thr = _backtrack_all(choice, k, ell)  # (KL+1) x K boundaries, one per m
    # The L + 1 uniform boundaries (c, ..., c) are ST's candidates. On exactly equi-weight grids the DP
    # candidates already dominate them; on unequal bins (e.g. shared score edges) they make ST a
    # feasible special case, so EW-DPMT's grid optimum is never below ST's.
    thr = np.concatenate([thr, np.repeat(np.arange(ell + 1)[:, None], k, axis=1)])
    rows = np.arange(k)
    tp = pi[rows, thr].sum(1)
    pp = nu[rows, thr].sum(1)
    valid = np.r_[np.isfinite(r_prev), np.ones(ell + 1, bool)]
    score = np.where(valid & _feasible(tp, pp, sigma), tp, -1.0)
    m_star = int(np.argmax(score))
    return _make(thr[m_star], p, n, "ew_dpmt", m=m_star)


def _backtrack_all(choice: NDArray[np.int32], k: int, ell: int) -> NDArray[np.intp]:
    m = np.arange(k * ell + 1)
    thr = np.zeros((m.size, k), dtype=np.intp)
    for i in range(k - 1, -1, -1):
        j = choice[i, np.clip(m, 0, choice.shape[1] - 1)]
        j = np.clip(j, 0, ell)
        thr[:, i] = j
        m = np.maximum(m - j, 0)
    return thr


def vw_dpmt(positives: ArrayLike, totals: ArrayLike, precision: float) -> Boundary:
    """Variable-Weight DP Multi-Thresholds (Algorithm 4) over a sparse set of feasible states.

    Algorithm 4 fills a dense table R(i, m) over every possible count m of selected *samples*. Most of
    its entries are unreachable or useless, so we keep only the Pareto frontier of reachable states
    (m = selected samples, r = selected positives): a state (m, r) is dropped when another has m' <= m
    and r' >= r. This pruning is exact for max-recall-at-precision: the levels still to come add the
    same (dm, dr) to both states, and r' - sigma m' >= r - sigma m keeps the dominating state feasible
    whenever the dominated one is, with at least its recall. Each level combines the frontier with its
    L+1 choices in one numpy broadcast, then re-prunes (sort by m, keep strictly increasing r). The
    frontier never exceeds (total positives + 1) states, so the work is O(K L P) for P positives instead
    of O(K L N). Integer-valued grids give the exact optimum.
    """
    p, n = _check_grid(positives, totals)
    sigma = _check_precision(precision)
    k, ell = p.shape
    pi, nu = _prefix(p, n)
    fm, fr = _pareto(nu[0], pi[0])
    back = [(np.arange(ell + 1)[_pareto_idx(nu[0], pi[0])], None)]
    for i in range(1, k):
        cm = (fm[:, None] + nu[i][None, :]).ravel()
        cr = (fr[:, None] + pi[i][None, :]).ravel()
        keep = _pareto_idx(cm, cr)
        parent, j = np.divmod(keep, ell + 1)
        fm, fr = cm[keep], cr[keep]
        back.append((j, parent))
    score = np.where(_feasible(fr, fm, sigma), fr, -1.0)
    s = int(np.argmax(score))
    thr = np.zeros(k, dtype=np.intp)
    for i in range(k - 1, -1, -1):
        j, parent = back[i]
        thr[i] = j[s]
        if parent is not None:
            s = int(parent[s])
    return _make(thr, p, n, "vw_dpmt", frontier=int(fm.size))


def _pareto_idx(m: NDArray[np.float64], r: NDArray[np.float64]) -> NDArray[np.intp]:
    """Indices of the Pareto frontier (small m, large r): sort by m then -r; keep strict new maxima of r."""
    order = np.lexsort((-r, m))
    rs = r[order]
    run = np.maximum.accumulate(rs)
    keep = np.r_[True, rs[1:] > run[:-1]]
    return order[keep]


def _pareto(m, r):
    idx = _pareto_idx(m, r)
    return m[idx], r[idx]


def sample_threshold(values: ArrayLike, y: ArrayLike, precision: float) -> float:
    """Best-recall cut on sample values: select ``values >= cut`` with precision >= sigma (ties together).

    Used for MIST on samples (Algorithm 3 as the paper ran it: the cut on per-level isotonic
    probabilities of the hold-out samples) and for ST at a matched precision. ``inf`` when no
    non-empty selection meets the bound.
    """
    v = as_1d_float(values, "values")
    yy = check_labels(y, n=v.size, both_classes=False)
    sigma = _check_precision(precision)
    order = np.argsort(-v, kind="mergesort")
    vs = v[order]
    last = np.r_[vs[1:] != vs[:-1], True]
    ctp = np.cumsum(yy[order])[last]
    cpp = np.arange(1, v.size + 1, dtype=np.float64)[last]
    score = np.where(_feasible(ctp, cpp, sigma), ctp, -1.0)
    a = int(np.argmax(score))
    return float(vs[last][a]) if score[a] > 0 else float("inf")


ALGORITHMS = {"st": st, "hr": hr, "gmt": gmt, "mist": mist, "ew_dpmt": ew_dpmt, "vw_dpmt": vw_dpmt}


# ---------------------------------------------------------------------------------------------
# Binning
# ---------------------------------------------------------------------------------------------
@dataclass
class Binning:
    """A K x L partition of the (uncertainty, score) plane, fitted on the hold-out set.

    ``kind="equi_weight"``: K global uncertainty quantiles, then L score quantiles *within* each level
    (Sec. 5.2), so every hold-out bin holds about N/(KL) items (exactly, when there are no ties).
    ``kind="equi_span"``: K equal-width uncertainty intervals and L equal-width score intervals over
    the hold-out ranges (Sec. 6.1); the score columns are shared by all levels.
    ``kind="shared_score"`` (ours): K uncertainty quantiles x L global score quantiles; the score
    columns are shared by all levels, so a single score threshold (ST) is a boundary on this grid.
    Values outside the fitted range go to the first/last bin; the edges are never refitted.
    """

    kind: str
    u_edges: NDArray[np.float64]  # K - 1 inner edges
    s_edges: NDArray[np.float64]  # K x (L - 1) inner edges (rows equal for equi-span)

    @property
    def shape(self) -> tuple[int, int]:
        return self.u_edges.size + 1, self.s_edges.shape[1] + 1

    @classmethod
    def fit(
        cls,
        uncertainty: ArrayLike,
        scores: ArrayLike,
        n_levels: int,
        n_score_bins: int,
        kind: str = "equi_weight",
    ) -> Binning:
        u, s = _check_us(uncertainty, scores)
        if kind not in BINNINGS:
            raise ValueError(f"binning kind must be one of {BINNINGS}, got {kind!r}")
        for name, v in (("n_levels", n_levels), ("n_score_bins", n_score_bins)):
            if not isinstance(v, int | np.integer) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        k, ell = int(n_levels), int(n_score_bins)
        if kind == "equi_span":
            u_edges = np.linspace(u.min(), u.max(), k + 1)[1:-1]
            s_row = np.linspace(s.min(), s.max(), ell + 1)[1:-1]
            return cls(kind, u_edges, np.tile(s_row, (k, 1)))
        if kind == "shared_score":
            return cls(kind, order_edges(u, k), np.tile(order_edges(s, ell), (k, 1)))
        u_edges = order_edges(u, k)
        lv = np.searchsorted(u_edges, u, side="right")
        s_edges = np.empty((k, ell - 1))
        for i in range(k):
            si = s[lv == i]
            s_edges[i] = order_edges(si, ell) if si.size else np.full(ell - 1, np.inf)
        return cls(kind, u_edges, s_edges)

    def assign(self, uncertainty: ArrayLike, scores: ArrayLike) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
        """(level, score bin) of each item."""
        u, s = _check_us(uncertainty, scores)
        lv = np.searchsorted(self.u_edges, u, side="right").astype(np.intp)
        k, ell = self.shape
        if self.kind in ("equi_span", "shared_score"):
            return lv, np.searchsorted(self.s_edges[0], s, side="right").astype(np.intp)
        sb = np.empty(s.size, dtype=np.intp)
        for i in range(k):
            m = lv == i
            sb[m] = np.searchsorted(self.s_edges[i], s[m], side="right")
        return lv, sb

    def grid(
        self, uncertainty: ArrayLike, scores: ArrayLike, y: ArrayLike
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(positives, totals) K x L count grids of labelled data."""
        lv, sb = self.assign(uncertainty, scores)
        yy = check_labels(y, n=lv.size, both_classes=False)
        k, ell = self.shape
        flat = lv * ell + sb
        tot = np.bincount(flat, minlength=k * ell).reshape(k, ell).astype(np.float64)
        pos = np.bincount(flat, weights=yy, minlength=k * ell).reshape(k, ell)
        return pos, tot

    def to_dict(self) -> dict:
        return {"kind": self.kind, "u_edges": self.u_edges.tolist(), "s_edges": self.s_edges.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> Binning:
        return cls(
            d["kind"],
            np.asarray(d["u_edges"], float),
            np.asarray(d["s_edges"], float).reshape(len(d["u_edges"]) + 1, -1),
        )


def _check_us(uncertainty, scores):
    u = as_1d_float(uncertainty, "uncertainty")
    s = as_1d_float(scores, "scores")
    if u.size != s.size:
        raise ValueError(f"length mismatch: uncertainty has {u.size} values, scores have {s.size}")
    return u, s


def decide(
    binning: Binning, boundary: Boundary, uncertainty: ArrayLike, scores: ArrayLike
) -> NDArray[np.bool_]:
    """Apply a fitted boundary to new data in one call: True where the item is labelled positive."""
    if binning.shape != (boundary.thresholds.size, boundary.n_score_bins):
        raise ValueError(
            f"boundary is for a {boundary.thresholds.size} x {boundary.n_score_bins} grid, binning is "
            f"{binning.shape}"
        )
    return boundary.predict(*binning.assign(uncertainty, scores))


def fit_boundary(
    method: str,
    uncertainty,
    scores,
    y,
    precision: float,
    n_levels: int,
    n_score_bins: int,
    kind: str = "equi_weight",
):
    """Bin the hold-out set and fit ``method`` on its grid; returns ``(binning, boundary)``."""
    if method not in ALGORITHMS:
        raise ValueError(f"unknown decision algorithm {method!r}; available: {', '.join(ALGORITHMS)}")
    b = Binning.fit(uncertainty, scores, n_levels, n_score_bins, kind)
    pos, tot = b.grid(uncertainty, scores, y)
    return b, ALGORITHMS[method](pos, tot, precision)


# ---------------------------------------------------------------------------------------------
# Calibration error per score bin (App. C.6)
# ---------------------------------------------------------------------------------------------
def ece_at_j(binning: Binning, uncertainty, scores, y, p) -> NDArray[np.float64]:
    """ECE@j = (1/K) sum_i |sum_{x in bin(i,j)} (p(x) - y(x))| / n(i, j) (App. C.6), for j = 1..L.

    ``binning`` places items by their *model* score and uncertainty; ``p`` is the calibrated
    probability being judged. Empty bins are left out of the average over levels.
    """
    lv, sb = binning.assign(uncertainty, scores)
    yy = check_labels(y, n=lv.size, both_classes=False)
    pp = as_1d_float(p, "p")
    k, ell = binning.shape
    flat = lv * ell + sb
    cnt = np.bincount(flat, minlength=k * ell).reshape(k, ell)
    gap = np.bincount(flat, weights=pp - yy, minlength=k * ell).reshape(k, ell)
    with np.errstate(invalid="ignore", divide="ignore"):
        ce = np.abs(gap) / cnt
    return np.nanmean(np.where(cnt > 0, ce, np.nan), axis=0)


def cumulative_ece_at_j(ece_j: ArrayLike) -> NDArray[np.float64]:
    """Cumulative ECE@j: mean ECE over all score bins at or above bin j (App. C.6)."""
    e = np.asarray(ece_j, dtype=float)
    ok = np.isfinite(e)
    s = np.cumsum(np.where(ok, e, 0.0)[::-1])[::-1]
    c = np.cumsum(ok[::-1])[::-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return s / c
