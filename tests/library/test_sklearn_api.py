"""CalibratedModel: any fitted classifier + any calibflow method, in Pipeline and GridSearchCV.

Real data: bank_marketing (about 12% positives), 6,000 rows drawn with a fixed seed.
"""

from __future__ import annotations

import numpy as np
import pytest
import xgboost as xgb
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow import models
from calibflow.datasets import binary_task
from calibflow.sklearn_api import CalibratedModel


@pytest.fixture(scope="module")
def bank():
    task = binary_task("bank_marketing")
    idx = np.random.default_rng(0).choice(task.y.size, 6000, replace=False)
    X, y = task.X[idx], task.y[idx]
    Xtr, Xr, ytr, yr = train_test_split(X, y, test_size=0.66, random_state=0, stratify=y)
    Xc, Xte, yc, yte = train_test_split(Xr, yr, test_size=0.5, random_state=0, stratify=yr)
    model = xgb.XGBClassifier(n_estimators=40, max_depth=4, n_jobs=1, random_state=0).fit(Xtr, ytr)
    return Xtr, ytr, Xc, yc, Xte, yte, model


def test_prefit_xgboost_matches_calibrating_its_probabilities(bank):
    Xtr, ytr, Xc, yc, Xte, yte, model = bank
    cm = CalibratedModel(model, method="beta").fit(Xc, yc)
    raw_c, raw_te = model.predict_proba(Xc)[:, 1], model.predict_proba(Xte)[:, 1]
    direct = C.make("beta", input="probability").fit(raw_c, yc).predict(raw_te)
    np.testing.assert_allclose(cm.predict_proba(Xte)[:, 1], direct, atol=1e-12)
    np.testing.assert_allclose(cm.predict_proba(Xte).sum(axis=1), 1.0)
    assert set(np.unique(cm.predict(Xte))) <= {0, 1}
    assert cm.calibrators_[0].input == "probability"  # XGBClassifier has no decision_function
    # the model was not refitted, and clone keeps it (FrozenEstimator's rule)
    np.testing.assert_array_equal(model.predict_proba(Xte)[:, 1], raw_te)
    assert clone(cm).estimator is model


def test_platt_on_decision_function_is_the_logistic_mle_and_close_to_sklearn_sigmoid(bank):
    Xtr, ytr, Xc, yc, Xte, yte, model = bank
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(Xtr, ytr)
    ours = CalibratedModel(pipe, method="platt").fit(Xc, yc).predict_proba(Xte)[:, 1]
    mle = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(pipe.decision_function(Xc)[:, None], yc)
    np.testing.assert_allclose(ours, mle.predict_proba(pipe.decision_function(Xte)[:, None])[:, 1], atol=1e-5)
    # scikit-learn 1.9.1's method="sigmoid" fits Platt's smoothed targets, so it differs slightly
    theirs = CalibratedClassifierCV(FrozenEstimator(pipe), method="sigmoid", ensemble=False).fit(Xc, yc)
    ll_theirs = M.log_loss(yte, theirs.predict_proba(Xte)[:, 1])
    assert abs(M.log_loss(yte, ours) - ll_theirs) < 0.01 * ll_theirs
    # On XGBoost's predict_proba sklearn fits sigmoid(A p + B); we fit on logit(p), which does better here.
    ours_x = CalibratedModel(model, method="platt").fit(Xc, yc).predict_proba(Xte)[:, 1]
    theirs_x = CalibratedClassifierCV(FrozenEstimator(model), method="sigmoid", ensemble=False).fit(Xc, yc)
    assert M.log_loss(yte, ours_x) < M.log_loss(yte, theirs_x.predict_proba(Xte)[:, 1])


def test_gridsearch_picks_a_method_and_beats_a_bad_one(bank):
    Xtr, ytr, Xc, yc, Xte, yte, model = bank
    grid = {"method": ["platt", "isotonic", "beta", "sigmoid"]}
    gs = GridSearchCV(CalibratedModel(model), grid, cv=3, scoring="neg_log_loss").fit(Xc, yc)
    scores = dict(zip(gs.cv_results_["param_method"], gs.cv_results_["mean_test_score"], strict=True))
    # "sigmoid" is the uncalibrated sigmoid(p) baseline: it must lose to a fitted method
    assert gs.best_params_["method"] != "sigmoid" and scores["sigmoid"] < scores["platt"]
    assert gs.best_estimator_.estimator is model


def test_pipeline_as_model_and_inside_pipeline_with_cross_fitting(bank):
    Xtr, ytr, Xc, yc, Xte, yte, model = bank
    inner = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(Xtr, ytr)
    cm = CalibratedModel(inner, method="isotonic").fit(Xc, yc)
    assert cm.calibrators_[0].input == "score"  # the pipeline exposes decision_function
    assert M.log_loss(yte, cm.predict_proba(Xte)[:, 1]) < 0.4
    outer = Pipeline(
        [("scale", StandardScaler()), ("clf", CalibratedModel(LogisticRegression(max_iter=500), cv=3))]
    )
    gs = GridSearchCV(outer, {"clf__method": ["platt", "spline"]}, cv=2, scoring="neg_log_loss").fit(Xtr, ytr)
    best = gs.best_estimator_.named_steps["clf"]
    assert len(best.calibrators_) == 3 and len(best.estimators_) == 3  # one model + calibrator per fold
    p = gs.predict_proba(Xte)[:, 1]
    assert abs(M.calibration_ratio(yte, p) - 1) < 0.25 and M.auc(yte, p) > 0.8


def test_predict_margin_accepts_xgbclassifier(bank):
    Xtr, ytr, Xc, yc, Xte, yte, model = bank
    m = models.predict_margin(model, Xte)
    np.testing.assert_allclose(
        m, model.get_booster().predict(xgb.DMatrix(Xte), output_margin=True), rtol=1e-6
    )
    np.testing.assert_allclose(1 / (1 + np.exp(-m)), model.predict_proba(Xte)[:, 1], rtol=1e-5)
    with pytest.raises(ValueError, match="not fitted"):
        models.predict_margin(xgb.XGBClassifier(), Xte)
    with pytest.raises(ValueError, match="features"):
        models.predict_margin(model, Xte[:, :3])


def test_bad_use_gets_one_line(bank):
    Xtr, ytr, Xc, yc, Xte, yte, model = bank
    with pytest.raises(ValueError, match="fit\\(scores, y\\) methods"):
        CalibratedModel(model, method="vad").fit(Xc, yc)
    with pytest.raises(ValueError, match="not fitted|NotFitted|fitted"):
        CalibratedModel(xgb.XGBClassifier(), method="platt").fit(Xc, yc)
    three = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)).fit(
        Xtr[:300], np.arange(300) % 3
    )
    with pytest.raises(ValueError, match="binary"):
        CalibratedModel(three).fit(Xc[:300], np.arange(300) % 3)
    with pytest.raises(ValueError, match="response"):
        CalibratedModel(model, response="proba").fit(Xc, yc)
