"""The Coat reproduction of Kweon et al. (issue 7) at a reduced size, on the real data (fails if it is "
"missing)."""

from __future__ import annotations

import numpy as np
import pytest

from calibflow.experiments import ranking as R
from calibflow.results import Reproduction

SMALL = {
    "n_seeds": 1,
    "xgb": {"n_estimators": 25},
    "bpr": {"epochs": 25},
    "obd": False,
}


@pytest.fixture(scope="module")
def coat():
    return R.load_coat()  # raises FileNotFoundError when the mirror is absent: real-data tests never skip


def test_coat_shapes_and_protocol(coat):
    assert coat.train.shape == coat.test.shape == (290, 300)
    assert coat.user_features.shape == (290, 14) and coat.item_features.shape == (300, 33)
    split = R.make_split(coat, 0.1, seed=3)
    Y = split.Y
    assert Y.sum() == (coat.train >= 4).sum()
    held = Y[split.cal].sum() / Y.sum()
    assert held == pytest.approx(0.1, abs=0.002)  # 10% of the positive interactions held out
    assert split.cal.mean() == pytest.approx(0.1, abs=0.002)
    assert split.test_r.size == (coat.test > 0).sum()


@pytest.fixture(scope="module")
def one_seed(coat):
    cfg = R.DEFAULTS | SMALL
    cfg["xgb"] = R.DEFAULTS["xgb"] | SMALL["xgb"]
    cfg["bpr"] = R.DEFAULTS["bpr"] | SMALL["bpr"]
    return R.run_seed(coat, cfg, 7), R.random_baseline(coat, cfg, 7)


def test_base_models_are_real_rankers(one_seed):
    out, rand = one_seed
    for model in ("xgb_ranker", "bpr_mf"):
        rk = out["models"][model]["ranking"]
        assert rk["ndcg@5"] > rand["ndcg@5"] + 0.08, model
        assert rk["recall@5"] > rand["recall@5"] + 0.08, model


def test_uerm_improves_parametric_fits_on_coat(one_seed):
    out, _ = one_seed
    for model in ("xgb_ranker", "bpr_mf"):
        meth = out["models"][model]["methods"]
        for name in ("platt", "gaussian", "gamma"):
            assert meth[(name, "uerm")]["ece"] < meth[(name, "naive")]["ece"], (model, name)
        prop = out["models"][model]["propensity"]
        # uniform propensities reproduce the naive loss exactly
        assert prop[("gaussian", "uniform")]["ece"] == pytest.approx(
            meth[("gaussian", "naive")]["ece"], abs=1e-6
        )


def test_calibrated_maps_keep_the_ranking(one_seed):
    out, _ = one_seed
    for res in out["models"].values():
        s = np.sort(res["scores"]["test"])
        for (name, _), cal in res["fitted"].items():
            if name in ("gaussian", "gamma", "platt", "isotonic"):
                assert np.diff(cal.predict(s)).min() >= 0


def test_run_returns_a_saveable_reproduction(tmp_path, monkeypatch):
    rep = R.run(SMALL | {"base_models": ["bpr_mf"]}, seed=11)
    assert rep.key == "ranking" and rep.figures and rep.choices
    titles = [t.title for t in rep.tables]
    assert any("Table 1" in t for t in titles) and any("Table 3" in t for t in titles)
    ece = next(t for t in rep.tables if "Table 1" in t.title)
    assert "paper BPR" in ece.columns
    rep.save(tmp_path / "ranking.json")
    again = Reproduction.load(tmp_path / "ranking.json")
    assert again.tables[1].rows == [list(r) for r in ece.rows]
    assert all(f.svg.startswith("<svg") for f in again.figures)


def test_obd_positive_counts():
    table, note = R.obd_check(n_boot=20)
    random_clicks = {row[0]: row[1] for row in table.rows}
    assert random_clicks == {"all": 38, "men": 46, "women": 46}  # the small sample's real click counts
    assert "cannot separate" in note


def test_yahoo_loader_reads_user_files(tmp_path):
    (tmp_path / "train.txt").write_text("1\t1\t5\n1\t3\t2\n2\t2\t4\n")
    (tmp_path / "test.txt").write_text("1 2 1\n2 3 5\n")
    data = R.load_yahoo_r3(tmp_path)
    assert data.train.shape == (2, 3) and data.train[0, 0] == 5 and data.train[1, 1] == 4
    assert data.test[1, 2] == 5 and data.propensities is None
    with pytest.raises(FileNotFoundError, match="Yahoo!R3 files not found"):
        R.load_yahoo_r3(tmp_path / "nowhere")
    (tmp_path / "train.txt").write_text("0 1 5\n")
    with pytest.raises(ValueError, match="ids must be integers from 1"):
        R.load_yahoo_r3(tmp_path)


def test_bad_config():
    with pytest.raises(ValueError, match="yahoo_path"):
        R.run({"dataset": "yahoo_r3"}, seed=0)
    with pytest.raises(ValueError, match="propensity"):
        R.run({"propensity": "oracle"}, seed=0)
    with pytest.raises(ValueError, match="unknown base model"):
        R.run({"base_models": ["ncf"]}, seed=0)
    with pytest.raises(ValueError, match="cal_fraction"):
        R.make_split(R.Ratings("x", np.ones((2, 2)), np.ones((2, 2))), 1.5, 0)
