"""Base models: XGBoost binary classifier and ranker, replicas, and a ridge-logistic linear model.

Everything is deterministic for fixed params and seed (XGBoost ``hist`` with a fixed ``seed``; replica
seeds from ``numpy.random.SeedSequence(seed).spawn``), and saved as JSON, never pickle:
XGBoost boosters through ``Booster.save_raw("json")`` (the format of ``Booster.save_model("*.json")``),
``RidgeLogistic`` through its own ``to_json``. All writes go to a temporary file that is renamed over
the target, so a crash never leaves half a model.

Params use the scikit-learn-style names found in ``params.yaml`` (``n_estimators``, ``max_depth``,
``learning_rate``, ``subsample``, ``colsample_bytree``, ``min_child_weight``, ``reg_lambda``,
``reg_alpha``, ``gamma``, ``max_bin``, ``tree_method``, ``n_jobs``); anything else is a ``ValueError``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from calibflow._validation import check_labels, check_weights
from calibflow.calibrators._logistic import fit_logistic, label_weights
from calibflow.io import atomic_path, write_bytes, write_text

# scikit-learn-style name -> XGBoost native name (None: handled separately)
_PARAM_MAP: dict[str, str | None] = {
    "n_estimators": None,
    "max_depth": "max_depth",
    "learning_rate": "eta",
    "subsample": "subsample",
    "colsample_bytree": "colsample_bytree",
    "min_child_weight": "min_child_weight",
    "reg_lambda": "lambda",
    "reg_alpha": "alpha",
    "gamma": "gamma",
    "max_bin": "max_bin",
    "tree_method": "tree_method",
    "n_jobs": "nthread",
}
DEFAULT_PARAMS: dict[str, Any] = {
    "n_estimators": 200,
    "max_depth": 4,
    "learning_rate": 0.1,
    "subsample": 1.0,
    "colsample_bytree": 1.0,
    "tree_method": "hist",
    "n_jobs": 1,  # the machines here have 2 shared cores; callers raise it explicitly
}
REPLICA_SUBSAMPLE = 0.8  # "seeds" replicas need randomness: used when params ask for no subsampling


def as_features(X: ArrayLike, name: str = "X") -> NDArray[np.float64]:
    """``X`` as a 2-D float64 array with finite values (impute before training; NaN is not 'missing' here)."""
    arr = np.asarray(X.to_numpy() if isinstance(X, pd.DataFrame) else X, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows x features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape})")
    bad = ~np.isfinite(arr)
    if bad.any():
        kind = "NaN" if np.isnan(arr[bad]).any() else "infinite"
        row = int(np.flatnonzero(bad.any(axis=1))[0])
        raise ValueError(f"{name} has {int(bad.sum())} {kind} value(s) (first in row {row}); impute first")
    return arr


def xgb_params(params: Mapping[str, Any] | None, seed: int, objective: str) -> tuple[dict[str, Any], int]:
    """Native XGBoost params and the number of boosting rounds from scikit-learn-style ``params``."""
    merged = {**DEFAULT_PARAMS, **dict(params or {})}
    unknown = sorted(set(merged) - set(_PARAM_MAP))
    if unknown:
        raise ValueError(f"unknown model param(s) {unknown}; allowed: {sorted(_PARAM_MAP)}")
    rounds = merged.pop("n_estimators")
    if not isinstance(rounds, int | np.integer) or rounds < 1:
        raise ValueError(f"n_estimators must be a positive integer, got {rounds!r}")
    for key in ("subsample", "colsample_bytree"):
        if not 0.0 < float(merged[key]) <= 1.0:
            raise ValueError(f"{key} must be in (0, 1], got {merged[key]!r}")
    if float(merged["learning_rate"]) <= 0:
        raise ValueError(f"learning_rate must be > 0, got {merged['learning_rate']!r}")
    native = {_PARAM_MAP[k]: v for k, v in merged.items()}
    native.update(objective=objective, seed=int(seed), verbosity=0)
    return native, int(rounds)


def train_classifier(
    X: ArrayLike,
    y: ArrayLike,
    params: Mapping[str, Any] | None,
    seed: int,
    sample_weight: ArrayLike | None = None,
) -> xgb.Booster:
    """Fit an XGBoost binary classifier (``binary:logistic``); returns the ``xgboost.Booster``."""
    Xa = as_features(X)
    ya = check_labels(y, n=Xa.shape[0])
    w = None if sample_weight is None else check_weights(sample_weight, Xa.shape[0])
    native, rounds = xgb_params(params, seed, "binary:logistic")
    dtrain = xgb.DMatrix(Xa, label=ya, weight=w)
    return xgb.train(native, dtrain, num_boost_round=rounds)


def train_replicas(
    X: ArrayLike,
    y: ArrayLike,
    params: Mapping[str, Any] | None,
    n_replicas: int,
    scheme: str = "seeds",
    seed: int = 0,
    sample_weight: ArrayLike | None = None,
) -> list[xgb.Booster]:
    """S replicas of the classifier, for ensembles and uncertainty (VAD, uncertainty-aware calibration).

    ``scheme="seeds"``: replica r gets its own seed with row and column subsampling (``subsample`` and
    ``colsample_bytree`` as given, or 0.8 each where params leave them at 1, since otherwise the seed
    changes nothing). ``scheme="bootstrap"``: replica r is trained on a bootstrap resample of the rows,
    given as multinomial in-bag counts used as weights (the same fit as duplicating rows), with the
    params unchanged. Seeds: ``SeedSequence(seed).spawn(n_replicas)``.
    """
    if not isinstance(n_replicas, int | np.integer) or n_replicas < 1:
        raise ValueError(f"n_replicas must be a positive integer, got {n_replicas!r}")
    if scheme not in ("seeds", "bootstrap"):
        raise ValueError(f"scheme must be 'seeds' or 'bootstrap', got {scheme!r}")
    Xa = as_features(X)
    ya = check_labels(y, n=Xa.shape[0])
    n = Xa.shape[0]
    base_w = check_weights(sample_weight, n)
    params = {**DEFAULT_PARAMS, **dict(params or {})}
    if scheme == "seeds":
        for key in ("subsample", "colsample_bytree"):
            if float(params[key]) >= 1.0:
                params[key] = REPLICA_SUBSAMPLE
    models = []
    for child in np.random.SeedSequence(seed).spawn(n_replicas):
        rng = np.random.default_rng(child)
        r_seed = int(rng.integers(0, 2**31 - 1))
        w = base_w
        if scheme == "bootstrap":
            counts = rng.multinomial(n, np.full(n, 1.0 / n)).astype(np.float64)
            w = base_w * counts
            if ya[w > 0].min() == ya[w > 0].max():
                raise ValueError("a bootstrap resample has a single class; use more rows or scheme='seeds'")
        models.append(train_classifier(Xa, ya, params, r_seed, sample_weight=w))
    return models


def train_ranker(
    X: ArrayLike, y: ArrayLike, qid: ArrayLike, params: Mapping[str, Any] | None, seed: int
) -> xgb.Booster:
    """Fit an XGBoost ``rank:pairwise`` ranker; rows are grouped by ``qid`` (e.g. the Coat user).

    ``y`` are relevance grades (non-negative, e.g. ratings); rows need not be sorted: they are stably
    sorted by ``qid`` internally, as XGBoost requires contiguous groups.
    """
    Xa = as_features(X)
    ya = np.asarray(y, dtype=np.float64).reshape(-1)
    q = np.asarray(qid).reshape(-1)
    if ya.shape[0] != Xa.shape[0] or q.shape[0] != Xa.shape[0]:
        raise ValueError(f"length mismatch: X has {Xa.shape[0]} rows, y {ya.shape[0]}, qid {q.shape[0]}")
    if not np.isfinite(ya).all() or (ya < 0).any():
        raise ValueError("ranking labels y must be finite and >= 0")
    order = np.argsort(q, kind="stable")
    _, q_int = np.unique(q[order], return_inverse=True)
    native, rounds = xgb_params(params, seed, "rank:pairwise")
    dtrain = xgb.DMatrix(Xa[order], label=ya[order], qid=q_int)
    return xgb.train(native, dtrain, num_boost_round=rounds)


# ------------------------------------------------------------------------------------------- prediction


def predict_margin(model: xgb.Booster | xgb.XGBModel | RidgeLogistic, X: ArrayLike) -> NDArray[np.float64]:
    """Raw margin: the logit for classifiers, the ranking score for rankers.

    ``model`` may also be a fitted scikit-learn-API ``xgboost.XGBClassifier`` (binary) or
    ``XGBRanker``: its margin is ``model.predict(X, output_margin=True)`` (a DataFrame keeps its
    column names, which XGBoost checks against the training columns).
    """
    if isinstance(model, xgb.XGBModel):
        return _sklearn_xgb_margin(model, X)
    Xa = as_features(X)
    if isinstance(model, RidgeLogistic):
        return model.predict_margin(Xa)
    if isinstance(model, xgb.Booster):
        n_feat = model.num_features()
        if Xa.shape[1] != n_feat:
            raise ValueError(f"X has {Xa.shape[1]} features, the model was trained on {n_feat}")
        return model.predict(xgb.DMatrix(Xa), output_margin=True).astype(np.float64)
    raise ValueError(f"unsupported model type {type(model).__name__}")


def _sklearn_xgb_margin(model: xgb.XGBModel, X: ArrayLike) -> NDArray[np.float64]:
    if not model.__sklearn_is_fitted__():
        raise ValueError(f"{type(model).__name__} is not fitted: call fit before predict_margin")
    if isinstance(model, xgb.XGBClassifier) and getattr(model, "n_classes_", 2) != 2:
        raise ValueError(f"predict_margin needs a binary XGBClassifier, got {model.n_classes_} classes")
    if not isinstance(X, pd.DataFrame):
        X = as_features(X)
        if X.shape[1] != model.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, the model was trained on {model.n_features_in_}")
    margin = np.asarray(model.predict(X, output_margin=True), dtype=np.float64)
    if margin.ndim != 1:
        raise ValueError(f"predict_margin expects one margin per row, got shape {margin.shape}")
    return margin


def predict_proba(model: xgb.Booster | xgb.XGBModel | RidgeLogistic, X: ArrayLike) -> NDArray[np.float64]:
    """P(y = 1 | x) = sigmoid(margin)."""
    return expit(predict_margin(model, X))


# ---------------------------------------------------------------------------------------- ridge logistic


@dataclass
class RidgeLogistic:
    """Logistic regression with an L2 (ridge) penalty on the coefficients, not the intercept.

    Minimises ``-(1/n) sum_i w_i [y_i log p_i + (1-y_i) log(1-p_i)] + (l2/2) ||beta||^2`` with weights
    normalised to mean 1, by Newton's method (the shared ``fit_logistic``). With ``standardize`` the
    features are centred and scaled by training mean/std first, so the penalty treats them alike.
    """

    l2: float = 1e-2
    standardize: bool = True
    coef_: NDArray[np.float64] | None = field(default=None, repr=False)
    intercept_: float = 0.0
    mean_: NDArray[np.float64] | None = field(default=None, repr=False)
    scale_: NDArray[np.float64] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not np.isfinite(self.l2) or self.l2 < 0:
            raise ValueError(f"l2 must be finite and >= 0, got {self.l2!r}")

    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> RidgeLogistic:
        Xa = as_features(X)
        ya = check_labels(y, n=Xa.shape[0])
        w = check_weights(sample_weight, Xa.shape[0])
        w = w / w.mean()
        d = Xa.shape[1]
        if self.standardize:
            self.mean_ = Xa.mean(axis=0)
            sd = Xa.std(axis=0)
            self.scale_ = np.where(sd > 0, sd, 1.0)
        else:
            self.mean_, self.scale_ = np.zeros(d), np.ones(d)
        Z = np.hstack([(Xa - self.mean_) / self.scale_, np.ones((Xa.shape[0], 1))])
        a, b = label_weights(ya, w)
        mask = np.r_[np.ones(d), 0.0]
        fit = fit_logistic(Z, a, b, l2=self.l2, penalty_mask=mask)
        self.coef_, self.intercept_ = fit.theta[:d], float(fit.theta[d])
        return self

    def _check_fitted(self) -> None:
        if self.coef_ is None:
            raise ValueError("RidgeLogistic is not fitted; call fit first")

    def predict_margin(self, X: ArrayLike) -> NDArray[np.float64]:
        self._check_fitted()
        Xa = as_features(X)
        if Xa.shape[1] != self.coef_.shape[0]:  # type: ignore[union-attr]
            raise ValueError(f"X has {Xa.shape[1]} features, the model was trained on {self.coef_.shape[0]}")  # type: ignore[union-attr]
        return ((Xa - self.mean_) / self.scale_) @ self.coef_ + self.intercept_

    def predict_proba(self, X: ArrayLike) -> NDArray[np.float64]:
        return expit(self.predict_margin(X))

    def to_json(self) -> str:
        self._check_fitted()
        state = {
            "kind": "ridge_logistic",
            "l2": self.l2,
            "standardize": self.standardize,
            "coef": self.coef_.tolist(),  # type: ignore[union-attr]
            "intercept": self.intercept_,
            "mean": self.mean_.tolist(),  # type: ignore[union-attr]
            "scale": self.scale_.tolist(),  # type: ignore[union-attr]
        }
        # repr-precision floats: json round-trips float64 exactly
        return json.dumps(state)

    @classmethod
    def from_json(cls, text: str) -> RidgeLogistic:
        state = json.loads(text)
        if state.get("kind") != "ridge_logistic":
            raise ValueError(f"not a RidgeLogistic JSON (kind={state.get('kind')!r})")
        return cls(
            l2=float(state["l2"]),
            standardize=bool(state["standardize"]),
            coef_=np.asarray(state["coef"], dtype=np.float64),
            intercept_=float(state["intercept"]),
            mean_=np.asarray(state["mean"], dtype=np.float64),
            scale_=np.asarray(state["scale"], dtype=np.float64),
        )


# -------------------------------------------------------------------------------------------- persistence


def save_model(model: xgb.Booster | RidgeLogistic, path: str | os.PathLike[str]) -> Path:
    """Save as JSON, atomically (XGBoost's JSON model format, or RidgeLogistic's own JSON)."""
    if isinstance(model, RidgeLogistic):
        return write_text(path, model.to_json())
    if isinstance(model, xgb.Booster):
        return write_bytes(path, bytes(model.save_raw(raw_format="json")))
    raise ValueError(f"unsupported model type {type(model).__name__}")


def load_model(path: str | os.PathLike[str]) -> xgb.Booster | RidgeLogistic:
    """Load a model written by ``save_model`` (the kind is read from the JSON)."""
    raw = Path(path).read_bytes()
    try:
        head = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not a JSON model: {exc}") from None
    if isinstance(head, dict) and head.get("kind") == "ridge_logistic":
        return RidgeLogistic.from_json(raw.decode("utf-8"))
    booster = xgb.Booster()
    booster.load_model(bytearray(raw))
    return booster


def save_predictions(path: str | os.PathLike[str], frame: pd.DataFrame | Mapping[str, Sequence[Any]]) -> Path:
    """Write predictions as Parquet, atomically; the frame must hold ``prob`` and ``margin`` columns.

    ``prob`` must lie in [0, 1] and match ``sigmoid(margin)`` (to 1e-6), so the two never disagree.
    """
    df = pd.DataFrame(frame)
    missing = {"prob", "margin"} - set(df.columns)
    if missing:
        raise ValueError(f"predictions need columns 'prob' and 'margin'; missing {sorted(missing)}")
    prob = df["prob"].to_numpy(dtype=np.float64)
    margin = df["margin"].to_numpy(dtype=np.float64)
    if not (np.isfinite(prob).all() and np.isfinite(margin).all()):
        raise ValueError("prob and margin must be finite")
    if prob.min(initial=0.0) < 0.0 or prob.max(initial=1.0) > 1.0:
        raise ValueError(f"prob must lie in [0, 1], range is [{prob.min():.4g}, {prob.max():.4g}]")
    if np.abs(expit(margin) - prob).max(initial=0.0) > 1e-6:
        raise ValueError("prob does not equal sigmoid(margin)")
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return Path(path)


def prediction_frame(model: xgb.Booster | RidgeLogistic, X: ArrayLike, **extra: ArrayLike) -> pd.DataFrame:
    """``margin`` and ``prob`` of ``model`` on ``X``, plus any extra columns (``y=...``, ``row=...``)."""
    margin = predict_margin(model, X)
    return pd.DataFrame(
        {"margin": margin, "prob": expit(margin), **{k: np.asarray(v) for k, v in extra.items()}}
    )
