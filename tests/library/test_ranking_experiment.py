"""The Coat reproduction of Kweon et al. at a reduced size, on the real data (fails if it is "
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
            if name in ("gaussian", "gamma", "isotonic"):  # monotone by construction
                assert np.diff(cal.predict(s)).min() >= 0
            elif name == "platt":  # a free slope: monotone, in either direction (small rankers can invert)
                d = np.diff(cal.predict(s))
                assert d.min() >= 0 or d.max() <= 0


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


# ---- the authors' released protocol
def test_held_out_positives_follow_the_release():
    Y = np.zeros((4, 40))
    Y[0, :4] = 1  # 4 positives: not more than 4, nothing held out
    Y[1, :5] = 1  # 5 positives: max(round(0.5), 1) = 1 held out, the last one
    Y[2, ::2] = 1  # 20 positives: round(2.0) = 2, the last two
    Y[3, :35] = 1  # 35 positives: round(3.5) = 4 (Python rounds half to even)
    cal = R.held_out_positives(Y)
    assert cal[0].sum() == 0
    assert np.flatnonzero(cal[1]).tolist() == [4]
    assert np.flatnonzero(cal[2]).tolist() == [36, 38]
    assert np.flatnonzero(cal[3]).tolist() == [31, 32, 33, 34]
    assert not (cal & (Y == 0)).any()


def test_sampled_negatives_are_never_positives():
    rng = np.random.default_rng(0)
    Y = (rng.random((30, 50)) < 0.3).astype(float)
    users = np.repeat(np.arange(30), 3)
    neg = R.sample_negatives(Y, users, 7, rng)
    assert neg.size == users.size * 7
    assert (Y[np.repeat(users, 7), neg] == 0).all()


def test_released_split_on_coat(coat):
    split = R.released_split(coat, num_neg=12, seed=1)
    u, i, y = split.cal_pairs()
    n_pos = int(split.cal.sum())
    assert y.sum() == n_pos and y.size == 13 * n_pos  # positives + 12 negatives each
    assert (split.Y[u[y == 0], i[y == 0]] == 0).all()
    # omega from the training part only: removing the held-out positives changes the counts
    train_counts = (split.Y * ~split.cal).sum(axis=0)
    np.testing.assert_allclose(split.omega(), np.maximum(np.sqrt(train_counts / train_counts.max()), 0.1))
    assert not np.allclose(split.omega(), R.popularity_propensity(split.Y))
    # the split does not depend on the seed, the negatives do
    other = R.released_split(coat, num_neg=12, seed=2)
    assert (other.cal == split.cal).all() and not np.array_equal(other.cal_i, split.cal_i)


def test_uerm_weight_schemes():
    from calibflow.calibrators.ranking import uerm_weights

    y, w = np.array([1.0, 1.0, 0.0]), np.array([0.5, 0.05, 0.2])
    a17, b17 = uerm_weights(y, w, scheme="eq17")
    ar, br = uerm_weights(y, w, scheme="released")
    np.testing.assert_allclose(a17, [2.0, 10.0, 0.0])  # clipped at 0.1
    np.testing.assert_allclose(ar, a17)
    np.testing.assert_allclose(b17, [-1.0, -9.0, 1.0])  # eq. 17's (1 - 1/w) term on positives
    np.testing.assert_allclose(br, [0.0, 0.0, 1.0])  # released: negatives weight 1, positives no 0-term
    with pytest.raises(ValueError, match="scheme"):
        uerm_weights(y, w, scheme="paper")
    with pytest.raises(ValueError, match="split"):
        R.run({"split": "random"}, seed=0)


def test_yahoo_r3_path_runs_the_released_protocol(tmp_path):
    """User-provided Yahoo!R3 files (generated here with a known preference structure) go through the same
    released split, rankers and num_neg sweep."""
    rng = np.random.default_rng(5)
    n_u, n_i = 60, 40
    taste = rng.normal(size=(n_u, 2)) @ rng.normal(size=(2, n_i))
    rating = np.clip(np.round(3 + 1.5 * taste + rng.normal(0, 0.5, taste.shape)), 1, 5)
    lines_tr, lines_te = [], []
    for u in range(n_u):
        seen = rng.choice(n_i, 25, replace=False)
        for i in sorted(seen[:18]):
            lines_tr.append(f"{u + 1}\t{i + 1}\t{int(rating[u, i])}")
        for i in sorted(seen[18:]):
            lines_te.append(f"{u + 1}\t{i + 1}\t{int(rating[u, i])}")
    (tmp_path / "train.txt").write_text("\n".join(lines_tr) + "\n")
    (tmp_path / "test.txt").write_text("\n".join(lines_te) + "\n")
    cfg = {
        "dataset": "yahoo_r3",
        "yahoo_path": str(tmp_path),
        "base_models": ["bpr_mf"],
        "bpr": {"epochs": 5, "dim": 4},
        "num_neg": 4,
        "num_neg_sweep": [2, 4],
        "obd": False,
    }
    rep = R.run(cfg, seed=3)
    sweep = next(t for t in rep.tables if "num_neg sweep" in t.title)
    assert [r[0] for r in sweep.rows] == [2, 4]
    assert "yahoo_r3" in sweep.title
    assert "naive - UERM released (paired p)" in sweep.columns
    ece = next(t for t in rep.tables if "Table 1" in t.title)
    assert ece.rows[-1][-5:] == R.PAPER_YAHOO["ece"][("gamma", "uerm")]


def test_sweep_cells_carry_seed_spread_and_paired_test():
    """Multi-seed sweep rows: mean ± s.e. over the finite seeds, a mark for seeds without a finite eq. 17
    fit, and the naive - UERM gain with its paired t-test p (a gain that flips sign is not significant)."""
    assert R._sweep_cell([0.1, 0.3]) == "0.2000 ± 0.1000"
    assert R._sweep_cell([0.1, float("nan"), 0.3]) == "0.2000 ± 0.1000 [2/3]"
    assert R._sweep_cell([float("nan")] * 2) == "nan"
    assert R._sweep_cell([0.25]) == "0.2500"
    steady = R._paired_gain([0.20, 0.21, 0.22], [0.10, 0.10, 0.12])
    assert steady.startswith("+0.1033 (p = ") and float(steady.split("p = ")[1][:-1]) < 0.01
    noisy = R._paired_gain([0.2, 0.1, 0.3], [0.1, 0.2, 0.1])
    assert float(noisy.split("p = ")[1][:-1]) > 0.3
    assert R._paired_gain([0.2], [0.1]) == "+0.1000"


def test_run_seed_is_a_function_of_params_and_seed(coat):
    cfg = R.DEFAULTS | {"base_models": ["bpr_mf"], "num_neg_sweep": [1, 2], "obd": False}
    cfg["bpr"] = R.DEFAULTS["bpr"] | {"epochs": 3}
    a, b = (R.run_seed(coat, cfg, 5)["models"]["bpr_mf"] for _ in range(2))
    # no clock time in the result (it goes to the log): a stored result must not change between reruns
    assert set(a) == {"ranking", "methods", "fitted", "propensity", "fitted_prop", "scores", "sweep"}
    for key in ("ranking", "methods", "propensity", "sweep"):
        np.testing.assert_equal(a[key], b[key])
    np.testing.assert_array_equal(a["scores"]["test"], b["scores"]["test"])
