"""Data of the ranking reproduction: Coat, Yahoo!R3 and Open Bandit loaders, and the calibration splits
(the authors' released protocol and our stratified reading; see ``calibflow.experiments.ranking``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from calibflow import datasets
from calibflow.calibrators.ranking import popularity_propensity


@dataclass
class Ratings:
    """Explicit ratings in two users x items matrices (0 = not rated) plus optional side information."""

    name: str
    train: NDArray[np.float64]  # MNAR (self-selected) ratings
    test: NDArray[np.float64]  # ratings of uniformly random items: the unbiased test set
    propensities: NDArray[np.float64] | None = None
    user_features: NDArray[np.float64] | None = None
    item_features: NDArray[np.float64] | None = None


def load_coat(data_dir: str | os.PathLike | None = None) -> Ratings:
    """Coat (Schnabel et al. 2016) through ``calibflow.datasets.load_coat`` (sha256-verified)."""
    c = datasets.load_coat(data_dir)
    return Ratings(
        "coat",
        np.asarray(c.train, float),
        np.asarray(c.test, float),
        np.asarray(c.propensities, float),
        np.asarray(c.user_features, float),
        np.asarray(c.item_features, float),
    )


YAHOO_FILES = (
    ("ydata-ymusic-rating-study-v1_0-train.txt", "ydata-ymusic-rating-study-v1_0-test.txt"),
    ("train.txt", "test.txt"),
)


def load_yahoo_r3(path: str | os.PathLike) -> Ratings:
    """Yahoo! R3 from files the user obtained from Yahoo Webscope (its licence forbids redistribution).

    ``path`` is a folder holding the Webscope files ``ydata-ymusic-rating-study-v1_0-{train,test}.txt``
    (or ``train.txt``/``test.txt``): whitespace-separated ``user item rating`` lines, ids from 1. The
    train file is the users' self-selected (MNAR) ratings, the test file ratings of 10 random songs per user.
    """
    root = Path(path)
    for tr, te in YAHOO_FILES:
        if (root / tr).is_file() and (root / te).is_file():
            a, b = _read_triples(root / tr), _read_triples(root / te)
            break
    else:
        names = " or ".join(f"{tr} + {te}" for tr, te in YAHOO_FILES)
        raise FileNotFoundError(f"Yahoo!R3 files not found in {root}: expected {names}")
    n_users = int(max(a[:, 0].max(), b[:, 0].max()))
    n_items = int(max(a[:, 1].max(), b[:, 1].max()))
    mats = []
    for t in (a, b):
        m = np.zeros((n_users, n_items), dtype=np.float64)
        m[t[:, 0].astype(int) - 1, t[:, 1].astype(int) - 1] = t[:, 2]
        mats.append(m)
    return Ratings("yahoo_r3", mats[0], mats[1])


def _read_triples(path: Path) -> NDArray[np.float64]:
    t = np.loadtxt(path, ndmin=2)
    if t.shape[1] < 3:
        raise ValueError(f"{path}: expected 'user item rating' columns, got {t.shape[1]} column(s)")
    t = t[:, :3]
    if (t[:, :2] < 1).any() or (t[:, :2] != np.round(t[:, :2])).any():
        raise ValueError(f"{path}: user and item ids must be integers from 1")
    if ((t[:, 2] < 1) | (t[:, 2] > 5)).any():
        raise ValueError(f"{path}: ratings must be in 1..5")
    return t


def load_obd_clicks(
    policy: str, campaign: str
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.intp]]:
    """Clicks, logged propensities and item ids of the Open Bandit small sample (``calibflow.datasets``)."""
    df = datasets.load_obd(policy=policy, campaign=campaign)
    return (
        df["click"].to_numpy(float),
        df["propensity_score"].to_numpy(float),
        df["item_id"].to_numpy(np.intp),
    )


@dataclass
class Split:
    """Implicit-feedback view of a ratings set and its train / calibration split."""

    Y: NDArray[np.float64]  # users x items interactions (rating >= 4)
    cal: NDArray[np.bool_]  # users x items mask of the held-out calibration pairs
    test_u: NDArray[np.intp]
    test_i: NDArray[np.intp]
    test_r: NDArray[np.float64]  # true preference on the random test ratings
    # released protocol only: the calibration pairs (held-out positives + sampled negatives)
    cal_u: NDArray[np.intp] | None = None
    cal_i: NDArray[np.intp] | None = None
    cal_y: NDArray[np.float64] | None = None

    def cal_pairs(self) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]:
        """Calibration users, items and labels under either protocol."""
        if self.cal_u is not None:
            return self.cal_u, self.cal_i, self.cal_y
        u, i = np.nonzero(self.cal)
        return u, i, self.Y[u, i]

    def omega(self) -> NDArray[np.float64]:
        """Popularity propensity per item: from the training part (released protocol; main.py lines 43-44,
        52) or, for the stratified reading, from the full training matrix as before."""
        if self.cal_u is not None:
            return popularity_propensity(self.Y * ~self.cal)
        return popularity_propensity(self.Y)


def make_split(data: Ratings, cal_fraction: float, seed: int) -> Split:
    """Stratified uniform hold-out of ``cal_fraction`` of all training user-item pairs (choice, see the
    doc of ``calibflow.experiments.ranking``)."""
    if not 0.0 < cal_fraction < 1.0:
        raise ValueError(f"cal_fraction must be in (0, 1), got {cal_fraction}")
    Y = (data.train >= 4).astype(np.float64)
    rng = np.random.default_rng(seed)
    flat = Y.ravel()
    cal = np.zeros(flat.size, bool)
    for label in (0.0, 1.0):
        idx = np.flatnonzero(flat == label)
        cal[rng.choice(idx, int(round(cal_fraction * idx.size)), replace=False)] = True
    tu, ti = np.nonzero(data.test > 0)
    return Split(Y, cal.reshape(Y.shape), tu, ti, (data.test[tu, ti] >= 4).astype(np.float64))


def held_out_positives(
    Y: NDArray[np.float64],
    fraction: float = 0.1,
    min_pos: int = 5,
    rng: np.random.Generator | None = None,
) -> NDArray[np.bool_]:
    """Mask of the last ``max(round(fraction n_u), 1)`` positives of every user with ``n_u >= min_pos``
    positives (data/yahooR3.ipynb cell 6: ``len(items) > 4``, ``items[-num_val:]``).

    With ``rng`` the same number of positives is drawn at random per user instead of the last ones, so
    that a change of seed also changes the split (``held_out: random``; the release's order is fixed).
    """
    cal = np.zeros(Y.shape, bool)
    for u in range(Y.shape[0]):
        items = np.flatnonzero(Y[u] == 1)
        if items.size >= min_pos:
            k = max(int(round(items.size * fraction)), 1)  # Python's round, as the release
            cal[u, items[-k:] if rng is None else rng.choice(items, k, replace=False)] = True
    return cal


def sample_negatives(
    Y: NDArray[np.float64], users: NDArray[np.intp], num_neg: int, rng: np.random.Generator
) -> NDArray[np.intp]:
    """``num_neg`` items per entry of ``users``, uniform with replacement over that user's non-positive items
    (Utils/utils.py ``caldset.negative_sampling``, lines 102-120: rejects items in the user's train+val
    positives)."""
    out = np.empty((users.size, num_neg), np.intp)
    for u in np.unique(users):
        rows = np.flatnonzero(users == u)
        pool = np.flatnonzero(Y[u] == 0)
        out[rows] = pool[rng.integers(0, pool.size, (rows.size, num_neg))]
    return out.ravel()


def released_split(data: Ratings, num_neg: int, seed: int, held_out: str = "last") -> Split:
    """The authors' released protocol (doc of ``calibflow.experiments.ranking``, step 2): held-out last 10%
    positives + ``num_neg`` sampled negatives per positive; ``held_out="random"`` draws the held-out
    positives from the seed."""
    if int(num_neg) < 1:
        raise ValueError(f"num_neg must be >= 1, got {num_neg}")
    Y = (data.train >= 4).astype(np.float64)
    cal = held_out_positives(Y, rng=np.random.default_rng([seed, 27]) if held_out == "random" else None)
    pu, pi = np.nonzero(cal)
    if pu.size == 0:
        raise ValueError(f"{data.name}: no user has more than 4 positives (rating >= 4); nothing to hold out")
    nu, ni = calibration_pairs(Y, pu, pi, int(num_neg), np.random.default_rng(seed))
    tu, ti = np.nonzero(data.test > 0)
    return Split(Y, cal, tu, ti, (data.test[tu, ti] >= 4).astype(np.float64), nu, ni, _labels(pu, nu))


def calibration_pairs(Y, pu, pi, num_neg: int, rng) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Held-out positives followed by their ``num_neg`` sampled negatives each."""
    neg_i = sample_negatives(Y, pu, num_neg, rng)
    return np.concatenate([pu, np.repeat(pu, num_neg)]), np.concatenate([pi, neg_i])


def _labels(pu, all_u) -> NDArray[np.float64]:
    y = np.zeros(all_u.size)
    y[: pu.size] = 1.0
    return y


def split_for(data: Ratings, cfg: dict, seed: int) -> Split:
    if cfg["split"] == "released":
        return released_split(data, cfg["num_neg"], seed, cfg["held_out"])
    return make_split(data, cfg["cal_fraction"], seed)
