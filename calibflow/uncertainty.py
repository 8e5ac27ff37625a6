"""Per-item uncertainty for any model: replica spread, a Posterior-Network analogue for XGBoost, or a column.

Arora et al. (Sec. 3.1) take the uncertainty of an item to be the differential entropy of its
Posterior-Network posterior ``q(x) = Beta(alpha1(x), alpha0(x))`` with ``alpha_c = beta_c^P + beta_c(x)``
(model prior plus evidence pseudo-counts) and score ``S = alpha1 / (alpha1 + alpha0)`` (Eq. 1). For a fixed
score, the entropy is higher when the total pseudo-count ``alpha1 + alpha0`` is lower: less evidence, more
uncertainty. This module offers three sources:

1. ``replica_logit_std``: the standard deviation of the logit across S replicas (seeds or bootstraps),
   shared with the VAD work; an epistemic spread, like the paper's MC-Dropout variant (App. C.5).
2. ``xgb_evidence`` + ``beta_entropy``: a Posterior-Network analogue for gradient-boosted trees (below).
   Its Beta is centred on the score, so the entropy is largely a function of the score.
3. ``leaf_row_counts`` + ``leaf_row_uncertainty``: ``-log`` of the (unweighted) number of training rows
   sharing the item's leaves: evidence that is not pinned to the score.
4. ``user_uncertainty``: any column the user already has, validated.

Posterior-Network analogue for XGBoost (derivation)
---------------------------------------------------
PostNet's evidence at x is ``N * P(z(x) | c)``: how much training mass lies "near" x. A tree already
defines a neighbourhood: the leaf x falls into. XGBoost records for every node its *cover*, the sum over
training rows in the node of the loss hessian; for the logistic loss a row's hessian is q(1 - q), q the
prediction at that round. The share of the tree's training mass in x's leaf is
``cover_t(leaf_t(x)) / cover_t(root_t)``, so ``n_t(x) = n_train * cover_t(leaf_t(x)) / cover_t(root_t)``
is the hessian-weighted number of training rows sharing x's leaf in tree t (exactly the row count when
all hessians are equal). The ensemble's neighbourhood of x is roughly the intersection of its leaves
across trees; we summarise the T trees by the geometric mean
``n(x) = exp(mean_t log n_t(x))`` (a product of per-tree shares, the log-density analogue of PostNet's
normalising flow, taken to the power 1/T so it stays on the count scale). The evidence is then split
*around the model score* ``s(x)`` so that the posterior mean is exactly the model's probability:

    alpha1(x) = s(x) * (n(x) + prior),   alpha0(x) = (1 - s(x)) * (n(x) + prior),

i.e. PostNet's Eq. 1 with model prior pseudo-counts ``beta^P_c = prior * s(x)`` and evidence
``beta_c(x) = n(x) * s(x)`` / ``n(x) * (1 - s(x))``. The uncertainty is the differential entropy of that
Beta (the paper's footnote 3):

    H = log B(alpha0, alpha1) - (alpha1 - 1) psi(alpha1) - (alpha0 - 1) psi(alpha0)
        + (alpha0 + alpha1 - 2) psi(alpha0 + alpha1).

(The footnote prints a minus before the ``(alpha0 + alpha1 - 2) psi`` term; the Beta entropy has a plus,
which is what ``scipy.stats.beta.entropy`` computes and what our test checks.) As in PostNet, for a fixed
score H falls as the evidence grows, and for fixed evidence it is largest at s = 1/2.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import betaln, digamma

from calibflow._validation import as_1d_float


def replica_logit_std(logits: ArrayLike) -> NDArray[np.float64]:
    """Standard deviation (ddof=1) across replicas of an ``S x n`` array of logits, S >= 2."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2:
        raise ValueError(f"logits must be an S x n array (replicas x items), got shape {z.shape}")
    if z.shape[0] < 2:
        raise ValueError(f"need at least 2 replicas for a spread, got {z.shape[0]}")
    if z.shape[1] == 0:
        raise ValueError("logits has no items")
    if not np.isfinite(z).all():
        raise ValueError("logits contain NaN or infinite values")
    return z.std(axis=0, ddof=1)


def user_uncertainty(values: ArrayLike, n: int | None = None) -> NDArray[np.float64]:
    """A user-supplied uncertainty column, validated (finite, 1-D, length ``n`` if given)."""
    u = as_1d_float(values, "uncertainty")
    if n is not None and u.size != n:
        raise ValueError(f"length mismatch: uncertainty has {u.size} values, expected {n}")
    return u


def beta_entropy(alpha1: ArrayLike, alpha0: ArrayLike) -> NDArray[np.float64]:
    """Differential entropy of Beta(alpha1, alpha0) (footnote 3 of the paper, sign corrected)."""
    a1 = np.asarray(alpha1, dtype=np.float64)
    a0 = np.asarray(alpha0, dtype=np.float64)
    if np.any(~np.isfinite(a1)) or np.any(~np.isfinite(a0)) or np.any(a1 <= 0) or np.any(a0 <= 0):
        raise ValueError("Beta parameters must be finite and > 0")
    a = a1 + a0
    return betaln(a1, a0) - (a1 - 1) * digamma(a1) - (a0 - 1) * digamma(a0) + (a - 2) * digamma(a)


def leaf_covers(booster) -> NDArray[np.float64]:
    """``T x max_node`` table of node covers (hessian sums) from the model dump; NaN where no node."""
    df = booster.trees_to_dataframe()
    n_trees = int(df["Tree"].max()) + 1
    table = np.full((n_trees, int(df["Node"].max()) + 1), np.nan)
    table[df["Tree"].to_numpy(int), df["Node"].to_numpy(int)] = df["Cover"].to_numpy(float)
    return table


def xgb_evidence(
    booster, X: ArrayLike, n_train: int, covers: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """Evidence n(x): geometric mean over trees of ``n_train * cover(leaf) / cover(root)`` (module doc)."""
    import xgboost as xgb

    if not isinstance(n_train, int | np.integer) or n_train < 1:
        raise ValueError(f"n_train must be a positive integer, got {n_train!r}")
    cov = leaf_covers(booster) if covers is None else covers
    dm = X if isinstance(X, xgb.DMatrix) else xgb.DMatrix(np.asarray(X, dtype=np.float32))
    leaves = np.asarray(booster.predict(dm, pred_leaf=True), dtype=np.intp).reshape(dm.num_row(), -1)
    t = np.arange(leaves.shape[1])
    share = cov[t[None, :], leaves] / cov[t, 0][None, :]
    if not np.isfinite(share).all():
        raise ValueError("leaf index without a cover in the model dump (booster and covers disagree)")
    return n_train * np.exp(np.mean(np.log(np.maximum(share, 1e-300)), axis=1))


def leaf_row_counts(booster, X_train: ArrayLike) -> NDArray[np.float64]:
    """``T x max_node`` table: how many *training rows* (unweighted) reach each leaf of each tree.

    Unlike the hessian cover, a row count does not shrink where the model is confident (q(1 - q) -> 0
    at scores near 0 or 1), so it measures how much data supports a region without restating the score.
    """
    import xgboost as xgb

    dm = X_train if isinstance(X_train, xgb.DMatrix) else xgb.DMatrix(np.asarray(X_train, dtype=np.float32))
    leaves = np.asarray(booster.predict(dm, pred_leaf=True), dtype=np.intp).reshape(dm.num_row(), -1)
    width = int(leaves.max()) + 1
    t = np.arange(leaves.shape[1])
    flat = (t[None, :] * width + leaves).ravel()
    return np.bincount(flat, minlength=t.size * width).reshape(t.size, width).astype(np.float64)


def leaf_row_uncertainty(booster, X: ArrayLike, counts: NDArray[np.float64]) -> NDArray[np.float64]:
    """Uncertainty ``-log n(x)``, n(x) the geometric mean over trees of the training rows in x's leaf.

    ``counts`` is ``leaf_row_counts(booster, X_train)``. A pseudo-count of 1 keeps empty leaves finite.
    Higher = fewer training rows share x's leaves = less evidence.
    """
    import xgboost as xgb

    dm = X if isinstance(X, xgb.DMatrix) else xgb.DMatrix(np.asarray(X, dtype=np.float32))
    leaves = np.asarray(booster.predict(dm, pred_leaf=True), dtype=np.intp).reshape(dm.num_row(), -1)
    if leaves.shape[1] != counts.shape[0] or leaves.max() >= counts.shape[1]:
        raise ValueError("leaf counts do not match the booster (compute them with leaf_row_counts)")
    t = np.arange(leaves.shape[1])
    return -np.mean(np.log(counts[t[None, :], leaves] + 1.0), axis=1)


def posterior_beta(
    score: ArrayLike, evidence: ArrayLike, prior: float = 2.0
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Beta(alpha1, alpha0) pseudo-counts with mean ``score`` and total ``evidence + prior`` (Eq. 1)."""
    s = np.clip(as_1d_float(score, "score"), 1e-9, 1 - 1e-9)
    n = as_1d_float(evidence, "evidence")
    if s.size != n.size:
        raise ValueError(f"length mismatch: score has {s.size} values, evidence has {n.size}")
    if (n < 0).any():
        raise ValueError("evidence must be >= 0")
    if not prior > 0:
        raise ValueError(f"prior must be > 0, got {prior}")
    tot = n + prior
    return s * tot, (1 - s) * tot


def xgb_posterior_entropy(
    booster,
    X: ArrayLike,
    n_train: int,
    prior: float = 2.0,
    covers: NDArray[np.float64] | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(score, uncertainty) for an XGBoost binary model: score = P(y=1), uncertainty = H(Beta).

    ``covers`` is ``leaf_covers(booster)``, passed to ``xgb_evidence``; compute it once when scoring
    several sets with the same booster (it re-reads the model dump otherwise).
    """
    import xgboost as xgb

    dm = X if isinstance(X, xgb.DMatrix) else xgb.DMatrix(np.asarray(X, dtype=np.float32))
    s = np.asarray(booster.predict(dm), dtype=np.float64)
    a1, a0 = posterior_beta(s, xgb_evidence(booster, dm, n_train, covers), prior)
    return s, beta_entropy(a1, a0)
