"""The base rankers (XGBoost ``rank:pairwise`` and BPR-MF) and their ranking metrics (Table 3)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from calibflow.experiments._ranking.data import Ratings, Split


def pair_features(
    data: Ratings, users: NDArray[np.intp], items: NDArray[np.intp], counts: tuple[NDArray, NDArray]
) -> NDArray[np.float64]:
    """User features, item features, user and item id, user activity and item popularity.

    ``counts`` are the per-user and per-item numbers of training-part interactions (implicit feedback the
    ranker is allowed to see); the ids enter as plain numbers, which the trees can still isolate.
    """
    parts = []
    if data.user_features is not None:
        parts.append(data.user_features[users])
    if data.item_features is not None:
        parts.append(data.item_features[items])
    parts.append(np.column_stack([users, items, counts[0][users], counts[1][items]]).astype(np.float64))
    return np.hstack(parts)


def train_xgb_ranker(data: Ratings, split: Split, params: dict, seed: int):
    """XGBoost ``rank:pairwise`` via ``calibflow.models.train_ranker``: one query per user, fitted on the
    non-held-out pairs with label Y; returns a scorer ``(users, items) -> margin``."""
    from calibflow import models

    train_mask = ~split.cal
    y_train = split.Y * train_mask
    counts = (y_train.sum(axis=1), y_train.sum(axis=0))
    users, items = np.nonzero(train_mask)
    booster = models.train_ranker(
        pair_features(data, users, items, counts), split.Y[users, items], users, dict(params), seed
    )

    def score(u: NDArray[np.intp], i: NDArray[np.intp]) -> NDArray[np.float64]:
        return models.predict_margin(booster, pair_features(data, u, i, counts))

    return score


def train_bpr(split: Split, params: dict, seed: int):
    """BPR matrix factorisation (Rendle et al. 2009; the paper's eq. 24) by minibatch SGD in numpy.

    Positives are the training part's ``Y = 1`` pairs; each is paired with a negative item drawn uniformly
    from the user's training-part ``Y = 0`` items (held-out calibration pairs are never sampled).
    Score ``f(u, i) = e_u . e_i``.
    """
    rng = np.random.default_rng(seed)
    n_u, n_i = split.Y.shape
    d, lr, reg, batch = int(params["dim"]), float(params["lr"]), float(params["reg"]), int(params["batch"])
    P = rng.normal(0.0, 0.1, (n_u, d))
    Q = rng.normal(0.0, 0.1, (n_i, d))
    pos_u, pos_i = np.nonzero((split.Y == 1) & ~split.cal)
    neg_ok = (split.Y == 0) & ~split.cal
    for _ in range(int(params["epochs"])):
        order = rng.permutation(pos_u.size)
        for start in range(0, order.size, batch):
            b = order[start : start + batch]
            u, i = pos_u[b], pos_i[b]
            j = rng.integers(0, n_i, b.size)
            bad = ~neg_ok[u, j]
            while bad.any():  # rejection-sample negatives
                j[bad] = rng.integers(0, n_i, int(bad.sum()))
                bad = ~neg_ok[u, j]
            pu, qi, qj = P[u], Q[i], Q[j]
            g = 1.0 / (1.0 + np.exp(np.sum(pu * (qi - qj), axis=1)))  # sigma(-x_uij): d(-log sigma(x))/dx
            np.add.at(P, u, lr * (g[:, None] * (qi - qj) - reg * pu))
            np.add.at(Q, i, lr * (g[:, None] * pu - reg * qi))
            np.add.at(Q, j, lr * (-g[:, None] * pu - reg * qj))

    def score(u: NDArray[np.intp], i: NDArray[np.intp]) -> NDArray[np.float64]:
        return np.sum(P[u] * Q[i], axis=1)

    return score


def ranking_metrics(users, scores, rel, ks=(1, 3, 5)) -> dict[str, float]:
    """NDCG@k and Recall@k (binary relevance) per user over that user's test items, averaged over users
    with at least one relevant item (Table 3)."""
    out = {f"ndcg@{k}": [] for k in ks} | {f"recall@{k}": [] for k in ks}
    for u in np.unique(users):
        m = users == u
        r = rel[m]
        if r.sum() == 0:
            continue
        ranked = r[np.argsort(-scores[m], kind="mergesort")]
        ideal = np.sort(r)[::-1]
        for k in ks:
            disc = 1.0 / np.log2(np.arange(2, k + 2))
            out[f"ndcg@{k}"].append(
                float(ranked[:k] @ disc[: ranked[:k].size] / (ideal[:k] @ disc[: ideal[:k].size]))
            )
            out[f"recall@{k}"].append(float(ranked[:k].sum() / r.sum()))
    return {k: float(np.mean(v)) for k, v in out.items()}
