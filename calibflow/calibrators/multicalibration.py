"""Segment-aware calibration (multicalibration) by gradient boosting on the base logit.

In the spirit of MCGrad (Tax et al., "MCGrad: Multicalibration at Web Scale", KDD 2025): a multicalibrated
predictor is calibrated not only overall but on every segment a user can name (country, campaign, device)
and on their intersections. MCGrad's observation is that this is a boosting problem: keep the base model's
logit ``z`` as an *offset* (XGBoost's ``base_margin``), and let shallow trees on ``(z, segment columns)``
learn a correction ``f(z, segments)``, so ``p = sigma(z + f)``. Trees that split on segment columns and
their combinations correct each segment and intersection; splits on ``z`` correct the score-dependent
miscalibration within them. Early stopping on a held-out part of the calibration data stops before the
correction fits noise, so a segment without a real bias is left where the global fit puts it.

Choices (all parameters, defaults shown):
- ``max_depth=3`` (intersections of up to three conditions), ``learning_rate=0.05``, up to
  ``n_estimators=300`` rounds, early stopping after ``early_stopping_rounds=20`` without improvement of
  the held-out log loss on a stratified ``validation_fraction=0.2`` of the rows (seeded);
  ``min_child_weight=50`` so a leaf speaks for at least that much (frequency-)weight of data.
- A monotone constraint (+1) on ``z``: within a segment the map is increasing, so the ranking inside each
  segment is kept. Across segments the order may change (that is the point), so ``monotone`` is False.
- Segment values are read by ``calibflow.segments.as_levels`` (a null is its own level), encoded by a
  vocabulary learned at fit time and given to XGBoost as categorical features; a value never seen in
  fitting is treated as missing (XGBoost's default branch), i.e. it gets the correction learned for the
  data at large (``unseen_counts`` says how many rows that concerns).

State is the booster as XGBoost's own JSON model (``save_raw("json")``) and the vocabularies; no pickle.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit

from calibflow._validation import check_scores
from calibflow.calibrators.base import BaseCalibrator, Bound, register
from calibflow.segments import aligned, level_codes, segment_matrix, unseen_counts

if TYPE_CHECKING:
    import xgboost as xgb

_segment_matrix = segment_matrix  # the shared reader (calibflow.segments); old name kept for callers


@register("multicalibration")
class MulticalibrationCalibrator(BaseCalibrator):
    """Gradient-boosted correction of the base logit on ``(logit, segments)``; see the module docstring.

    ``fit(scores, y, sample_weight=None, segments=...)`` and ``predict(scores, segments=...)``.
    """
    out_of_defaults = (
        "higher held-out log loss than MCGrad on 3 of the 4 benchmark tables and a worse worst segment "
        "at 1e5 (issue 36; docs/benchmarks/segments.md)"
    )
    list_order = 1  # after partial_pooling, the cheaper fit
    _bounds = {
        "max_depth": Bound("int", ge=1, le=16),
        "learning_rate": Bound("float", gt=0, le=1),
        "n_estimators": Bound("int", ge=1, le=100_000),
        "early_stopping_rounds": Bound("int", ge=1, le=100_000),
        "validation_fraction": Bound("float", gt=0, lt=1),
        "min_child_weight": Bound("float", ge=0, le=1e12),
        "reg_lambda": Bound("float", ge=0, le=1e12),
        "seed": Bound("int", ge=0, lt=2**32),
        "n_jobs": Bound("int", ge=1, le=1_024),
    }

    expects = "logit"
    monotone = False  # increasing within each segment, not across segments
    _state_fields = ("model_json_", "segment_names_", "vocab_", "n_rounds_")
    _state_spec = {"model_json_": ("s", 0), "n_rounds_": ("i", 0)}
    needs = ("segments",)

    def __init__(
        self,
        input: str = "score",
        max_depth: int = 3,
        learning_rate: float = 0.05,
        n_estimators: int = 300,
        early_stopping_rounds: int = 20,
        validation_fraction: float = 0.2,
        min_child_weight: float = 50.0,
        reg_lambda: float = 1.0,
        seed: int = 0,
        n_jobs: int = 2,
    ) -> None:
        self.input = input
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.n_estimators = n_estimators
        self.early_stopping_rounds = early_stopping_rounds
        self.validation_fraction = validation_fraction
        self.min_child_weight = min_child_weight
        self.reg_lambda = reg_lambda
        self.seed = seed
        self.n_jobs = n_jobs

    # ---- public -------------------------------------------------------------------------------------
    def fit(self, scores, y, sample_weight=None, segments=None) -> MulticalibrationCalibrator:
        s, yy, w = self._validate_fit(scores, y, sample_weight)
        names, cols = segment_matrix(segments, s.size)
        self.segment_names_ = names
        self.vocab_ = [sorted(set(col.tolist())) for col in cols]
        z = self._convert(s)
        X = self._design(z, cols)
        train, valid = self._holdout(yy)
        params = {
            "objective": "binary:logistic",
            "eval_metric": "logloss",
            "tree_method": "hist",
            "max_depth": int(self.max_depth),
            "eta": float(self.learning_rate),
            "min_child_weight": float(self.min_child_weight),
            "lambda": float(self.reg_lambda),
            "monotone_constraints": "(" + ",".join(["1"] + ["0"] * len(cols)) + ")",
            "seed": int(self.seed),
            "nthread": int(self.n_jobs),  # hist trees are deterministic whatever the thread count
        }
        dtrain = self._dmatrix(X[train], z[train], yy[train], w[train])
        dvalid = self._dmatrix(X[valid], z[valid], yy[valid], w[valid])
        import xgboost as xgb  # at fit and predict: importing the class (the params check) stays light

        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=int(self.n_estimators),
            evals=[(dvalid, "valid")],
            early_stopping_rounds=int(self.early_stopping_rounds),
            verbose_eval=False,
        )
        self.n_rounds_ = int(booster.best_iteration) + 1
        booster = booster[: self.n_rounds_]
        self.model_json_ = bytes(booster.save_raw("json")).decode()
        self.fitted_ = True
        return self

    def predict(self, scores, segments=None) -> NDArray[np.float64]:
        self._check_fitted()
        s = check_scores(scores, self.input)
        cols = aligned(segments, self.segment_names_, s.size)
        z = self._convert(s)
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(bytearray(self.model_json_.encode()))
        margin = booster.predict(self._dmatrix(self._design(z, cols), z), output_margin=True)
        return np.clip(expit(np.asarray(margin, dtype=np.float64)), 0.0, 1.0)

    def unseen_counts(self, segments: Any, n: int) -> dict[str, int]:
        """Per segment column, the rows whose value was never seen in fitting (XGBoost's missing branch)."""
        self._check_fitted()
        return unseen_counts(self.segment_names_, self.vocab_, segments, n)

    # ---- helpers ------------------------------------------------------------------------------------
    def _design(self, z: NDArray[np.float64], cols: Sequence[NDArray]) -> NDArray[np.float64]:
        X = np.empty((z.size, 1 + len(cols)))
        X[:, 0] = z
        for i, (col, vocab) in enumerate(zip(cols, self.vocab_, strict=True)):
            codes = level_codes(col, vocab).astype(np.float64)
            X[:, 1 + i] = np.where(codes >= 0, codes, np.nan)
        return X

    def _dmatrix(self, X, z, y=None, w=None) -> xgb.DMatrix:
        import xgboost as xgb

        types = ["q"] + ["c"] * (X.shape[1] - 1)
        return xgb.DMatrix(
            X, label=y, weight=w, base_margin=z, feature_types=types, enable_categorical=True,
            nthread=int(self.n_jobs),
        )

    def _holdout(self, y: NDArray[np.float64]) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
        from sklearn.model_selection import train_test_split

        if not 0 < self.validation_fraction < 1:
            raise ValueError(f"validation_fraction must be in (0, 1), got {self.validation_fraction!r}")
        idx = np.arange(y.size)
        train, valid = train_test_split(
            idx, test_size=self.validation_fraction, random_state=self.seed, stratify=y
        )
        return np.sort(train), np.sort(valid)


def segment_table(
    y: ArrayLike, predictions: dict[str, ArrayLike], segments: Any, sample_weight: ArrayLike | None = None
) -> list[dict[str, Any]]:
    """Per segment value: rows, positives, and each prediction's calibration ratio ``sum p / sum y``.

    ``predictions`` maps a label (e.g. "before", "after") to probabilities. Rows for segment values with no
    positive label carry ``None`` ratios (undefined), never a silent 0 or inf.
    """
    yy = np.asarray(y, dtype=np.float64)
    w = np.ones_like(yy) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    names, cols = _segment_matrix(segments, yy.size)
    rows = []
    for name, col in zip(names, cols, strict=True):
        values = np.asarray([str(v) for v in col])
        for value in sorted(set(values.tolist())):
            m = values == value
            sy = float(w[m] @ yy[m])
            row: dict[str, Any] = {"column": name, "value": value, "n": float(w[m].sum()), "positives": sy}
            for label, p in predictions.items():
                pm = np.asarray(p, dtype=np.float64)[m]
                row[f"ratio_{label}"] = float(w[m] @ pm / sy) if sy > 0 else None
            rows.append(row)
    return rows


def to_summary_json(rows: list[dict[str, Any]]) -> str:
    """The segment table as JSON (for metrics files)."""
    return json.dumps(rows, sort_keys=True)
