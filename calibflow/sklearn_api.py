"""scikit-learn front end: any fitted binary classifier, calibrated by any calibflow method.

``CalibratedModel(model, method="beta")`` is calibflow's ``CalibratedClassifierCV(FrozenEstimator(model))``:
``fit(X, y)`` leaves ``model`` as it is (it must already be fitted) and fits the calibrator on its
scores for ``X`` (use rows the model was not trained on). With ``cv=5`` (an int or a splitter) it
cross-fits instead, as ``CalibratedClassifierCV(model, cv=5)`` does with ``ensemble=True``: per fold a
clone of ``model`` is fitted on the training part and a calibrator on the model's scores for the
held-out part; ``predict_proba`` averages the folds' calibrated probabilities.

The model's scores are ``decision_function`` when it has one (logistic regression, SVMs, most
pipelines ending in them; calibrators get ``input="score"``), else the positive column of
``predict_proba`` (XGBoost, LightGBM, forests; ``input="probability"``); ``response`` picks one.
Methods are those of ``calibflow.calibrators.available("scores")``. A fitted ``CalibratedModel``
is a normal classifier: use it in a ``Pipeline``, tune ``method`` with ``GridSearchCV``. In the
prefit mode ``clone`` keeps the fitted ``model`` (never refits it), as ``FrozenEstimator`` does.
The fitted calibrators are calibflow calibrators (``calibrators_``): ``to_json`` saves each one.
"""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClassifierMixin, MetaEstimatorMixin, clone
from sklearn.model_selection import check_cv
from sklearn.utils import _safe_indexing, indexable
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import _check_sample_weight, _num_features, check_is_fitted

from calibflow import calibrators as C

RESPONSES = ("auto", "decision_function", "predict_proba")


class CalibratedModel(ClassifierMixin, MetaEstimatorMixin, BaseEstimator):
    """A binary classifier whose probabilities are calibrated by a calibflow method.

    Parameters
    ----------
    estimator: a binary classifier with ``predict_proba`` or ``decision_function``; fitted when
        ``cv`` is None, fitted again (clones) per fold otherwise.
    method: a name from ``calibflow.calibrators.available("scores")``.
    method_params: keyword arguments of that method (not ``input``: set from ``response``).
    response: "auto" (``decision_function`` if the model has one, else ``predict_proba``),
        "decision_function" or "predict_proba".
    cv: None (prefit: calibrate the given fitted model) or an int / CV splitter (cross-fitting).
    """

    def __init__(
        self,
        estimator: Any = None,
        method: str = "platt",
        method_params: dict | None = None,
        response: str = "auto",
        cv: Any = None,
    ) -> None:
        self.estimator = estimator
        self.method = method
        self.method_params = method_params
        self.response = response
        self.cv = cv

    # ---- fit ------------------------------------------------------------------------------
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> CalibratedModel:
        self._check_params()
        if y is None:  # scikit-learn's own words for a classifier given no target
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None")
        X, y = indexable(X, y)
        check_classification_targets(y)
        kind = type_of_target(y)
        if kind != "binary":  # scikit-learn's words, so its multiclass check and users read the same line
            raise ValueError(
                f"Only binary classification is supported. The type of the target is {kind}: "
                f"{type(self).__name__} calibrates the positive class of a binary classifier"
            )
        if sample_weight is not None:  # a wrong length is a ValueError naming both lengths
            sample_weight = _check_sample_weight(sample_weight, X)
        if self.cv is None:
            check_is_fitted(self.estimator)
            classes = np.asarray(getattr(self.estimator, "classes_", np.unique(y)))
            pairs = [(self.estimator, self._fit_calibrator(self.estimator, X, y, sample_weight, classes))]
        else:
            classes = np.unique(y)
            pairs = self._cross_fit(X, y, sample_weight, classes)
        self.classes_ = classes
        self.estimators_ = [e for e, _ in pairs]
        self.calibrators_ = [c for _, c in pairs]
        self._set_n_features(X)
        return self

    def _set_n_features(self, X: ArrayLike) -> None:
        """``n_features_in_`` (and ``feature_names_in_``) as the model saw them, else counted from ``X``."""
        first = self.estimators_[0]
        if hasattr(first, "n_features_in_"):
            self.n_features_in_ = first.n_features_in_
        else:
            # text or other inputs a pipeline's first step turns into features have no count
            with contextlib.suppress(TypeError):
                self.n_features_in_ = _num_features(X)
        if hasattr(first, "feature_names_in_"):
            self.feature_names_in_ = first.feature_names_in_

    def _check_params(self) -> None:
        if self.estimator is None:
            raise ValueError("estimator is required: pass a binary classifier")
        if self.response not in RESPONSES:
            raise ValueError(f"response must be one of {RESPONSES}, got {self.response!r}")
        ok = C.available("scores")
        if self.method not in ok:
            raise ValueError(f"method must be one of {ok} (fit(scores, y) methods), got {self.method!r}")
        if self.method_params and "input" in self.method_params:
            raise ValueError("method_params must not set 'input': it follows response")

    def _cross_fit(self, X, y, sample_weight, classes) -> list[tuple[Any, C.BaseCalibrator]]:
        yy = np.asarray(y)
        splitter = check_cv(self.cv, yy, classifier=True)
        pairs = []
        folds = list(splitter.split(X, yy))
        for k, (train, test) in enumerate(folds, 1):
            for part, idx in (("training", train), ("held-out", test)):
                if np.unique(yy[idx]).size < 2:  # scikit-learn names the fold too; no fit on one class
                    raise ValueError(
                        f"fold {k} of {len(folds)}: its {part} part ({idx.size} rows) holds one class "
                        f"({yy[idx][0]!r}); use fewer folds (cv) or more rows of the rarer class"
                    )
            est = clone(self.estimator)
            fit_kw = {} if sample_weight is None else {"sample_weight": _safe_indexing(sample_weight, train)}
            est.fit(_safe_indexing(X, train), yy[train], **fit_kw)
            sw = None if sample_weight is None else _safe_indexing(sample_weight, test)
            pairs.append((est, self._fit_calibrator(est, _safe_indexing(X, test), yy[test], sw, classes)))
        return pairs

    def _fit_calibrator(self, est, X, y, sample_weight, classes) -> C.BaseCalibrator:
        if classes.size != 2:
            raise ValueError(
                f"CalibratedModel is binary: y has {classes.size} classes {classes.tolist()[:5]}"
            )
        yy = np.asarray(y)
        unknown = ~np.isin(yy, classes)
        if unknown.any():
            raise ValueError(f"y has labels {np.unique(yy[unknown]).tolist()[:5]} the model does not know")
        scores, kind = _scores(est, X, self.response)
        cal = C.make(self.method, input=kind, **(self.method_params or {}))
        return cal.fit(scores, (yy == classes[1]).astype(float), sample_weight)

    # ---- predict --------------------------------------------------------------------------
    def predict_proba(self, X: ArrayLike) -> NDArray[np.float64]:
        """``(n, 2)``: columns ``classes_``; the mean of the folds' calibrated probabilities."""
        check_is_fitted(self)
        p = np.mean([c.predict(_scores(e, X, self.response)[0]) for e, c in self._pairs()], axis=0)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: ArrayLike) -> NDArray:
        check_is_fitted(self)
        return self.classes_[(self.predict_proba(X)[:, 1] > 0.5).astype(int)]

    def _pairs(self):
        return zip(self.estimators_, self.calibrators_, strict=True)

    # ---- scikit-learn plumbing --------------------------------------------------------------
    def __sklearn_is_fitted__(self) -> bool:
        """Fitted when ``fit`` ran (the wrapped model's own fitted state is not this estimator's)."""
        return hasattr(self, "calibrators_")

    def __sklearn_clone__(self) -> CalibratedModel:
        """Prefit mode keeps the fitted model (``FrozenEstimator``'s rule); cross-fitting clones it."""
        if self.cv is not None:
            return super().__sklearn_clone__()
        params = self.get_params(deep=False)
        est = params.pop("estimator")
        return type(self)(estimator=est, **{k: clone(v, safe=False) for k, v in params.items()})

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        if self.estimator is not None and hasattr(self.estimator, "__sklearn_tags__"):
            tags.input_tags = self.estimator.__sklearn_tags__().input_tags
        return tags


def _scores(est: Any, X: ArrayLike, response: str) -> tuple[NDArray[np.float64], str]:
    """The model's score for the positive class and its calibflow input kind."""
    if response == "auto":
        response = "decision_function" if hasattr(est, "decision_function") else "predict_proba"
    if not hasattr(est, response):
        raise ValueError(f"{type(est).__name__} has no {response}; pick response='auto' or the other one")
    if response == "decision_function":
        s = np.asarray(est.decision_function(X), dtype=np.float64)
        if s.ndim != 1:
            raise ValueError(f"decision_function gave shape {s.shape}; CalibratedModel is binary")
        return s, "score"
    P = np.asarray(est.predict_proba(X), dtype=np.float64)
    if P.ndim != 2 or P.shape[1] != 2:
        raise ValueError(f"predict_proba gave shape {P.shape}; CalibratedModel needs 2 columns (binary)")
    return np.clip(P[:, 1], 0.0, 1.0), "probability"
