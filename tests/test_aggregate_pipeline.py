"""Issue 17 wired in: a score source above ``scale.row_threshold`` runs calibrate, evaluate and select on the
aggregate path (DuckDB bucket tables) and agrees with the row path on the same prepared split.

Reduced size: 6000 generated rows (tests/source_data.py) and ``row_threshold: 1000``; the row path is the
same pipeline with the threshold above the row count.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from source_data import scores_frame, write
from test_sources_pipeline import _params

from calibflow.io import read_json
from calibflow.report.answers import answer_block
from tasks import calibrate, evaluate, fetch, fingerprint, prepare, select, train

METHODS = ["platt", "isotonic"]


def _downstream(params: dict, root: Path) -> None:
    for m in METHODS:
        calibrate.run(m, params, root)
    evaluate.run(params, root)
    select.run(params, root)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    rows = tmp_path_factory.mktemp("rows")
    path = write(scores_frame(n=6000, days=30, seed=5), "parquet", rows / "userdata")
    params = _params(str(path.relative_to(rows)), with_features=False)
    params["calibrate"]["methods"] = METHODS
    params["evaluate"].update(n_bootstrap=40, reliability_bins="uniform")
    fingerprint.run("ads", params, rows)
    fetch.run(params, rows)
    prepare.run(params, rows)
    train.run(params, rows)
    agg = tmp_path_factory.mktemp("agg")
    shutil.copytree(rows / "data", agg / "data")
    row_params = {**params, "scale": {"row_threshold": 10**9}}
    agg_params = {**params, "scale": {"row_threshold": 1000, "replicates": 40}}
    roots: dict[str, Path] = {}
    grid = tmp_path_factory.mktemp("grid")
    shutil.copytree(rows / "data", grid / "data")
    grid_params = {**params, "scale": {"row_threshold": 1000, "replicates": 40, "distinct_max": 0}}
    _downstream(row_params, rows)
    _downstream(agg_params, agg)
    _downstream(grid_params, grid)
    for label, scale in (("prob_rows", {"row_threshold": 10**9}), ("prob_agg", {"row_threshold": 1000})):
        root = tmp_path_factory.mktemp(label)
        shutil.copytree(rows / "data", root / "data")
        cal = {**params["calibrate"], "input": "probability"}
        _downstream({**params, "scale": scale, "calibrate": cal}, root)
        roots[label] = root
    return rows, agg, grid, roots


def _rec(root: Path, method: str) -> dict:
    return read_json(root / "metrics/evaluation/ads" / f"{method}.json")


def test_path_is_recorded(both):
    rows, agg, _, _ = both
    assert _rec(rows, "platt")["path"] == "rows" and _rec(agg, "platt")["path"] == "aggregate"
    assert read_json(agg / "data/calibrated/platt/fit.json")["datasets"]["ads"]["path"] == "aggregate"
    card = read_json(agg / "models/ads/card.json")
    assert card["path"] == "aggregate" and read_json(rows / "models/ads/card.json")["path"] == "rows"
    assert "computed from: aggregate" in answer_block(card)


def test_uncalibrated_metrics_match_rows(both):
    rows, agg, _, _ = both
    r, a = _rec(rows, "uncalibrated"), _rec(agg, "uncalibrated")
    assert a["n_test"] == r["n_test"]
    for k in ("log_loss", "brier", "calibration_ratio"):  # summed per row in the pass: exact
        assert a[k] == pytest.approx(r[k], rel=1e-9), k
    assert abs(a["ece"] - r["ece"]) < 1e-3  # only rows of buckets straddling a bin edge can move
    assert abs(a["auc"] - r["auc"]) <= a["auc_tie_bound"] + 1e-12


@pytest.mark.parametrize(("method", "tol"), [("platt", 1e-6), ("isotonic", 1e-9)])
def test_calibrated_metrics_match_rows(both, method, tol):
    """6000 continuous scores are below ``scale.distinct_max``: one group per distinct score, so isotonic
    (a step map) matches the row fit to 1e-9 and Platt (fitted by iterations) to 1e-6."""
    rows, agg, _, _ = both
    r, a = _rec(rows, method), _rec(agg, method)
    for k in ("log_loss", "brier", "ece"):
        assert abs(a[k] - r[k]) < tol, (k, a[k], r[k])
    assert abs(a["calibration_ratio"] - r["calibration_ratio"]) < 10 * tol
    assert abs(a["auc"] - r["auc"]) <= a["auc_tie_bound"] + 1e-12
    # Poisson intervals hold the point estimate and have the rows' bootstrap width within a factor 2
    for k in ("log_loss", "ece"):
        lo, hi = a["ci"][k]["low"], a["ci"][k]["high"]
        rw = r["ci"][k]["high"] - r["ci"][k]["low"]
        assert lo <= a[k] <= hi and 0.5 * rw < hi - lo < 2 * rw, (k, lo, hi, rw)


def test_selection_agrees(both):
    rows, agg, _, _ = both
    cr, ca = read_json(rows / "models/ads/card.json"), read_json(agg / "models/ads/card.json")
    assert ca["method"] == cr["method"]
    ll = ca["metrics"]["log_loss"]
    assert ll["delta_ci"][0] <= ll["delta"] <= ll["delta_ci"][1]
    assert ll["calibrated"] == pytest.approx(cr["metrics"]["log_loss"]["calibrated"], abs=5e-3)


def test_logit_grid_close_to_rows(both):
    """``distinct_max: 0``: the 65,536-cell logit grid. Raw-score metrics exact, Platt within 1e-4, and
    isotonic (its steps move to bucket boundaries) within 2e-3 of the rows."""
    rows, _, grid, _ = both
    assert _rec(grid, "uncalibrated")["log_loss"] == pytest.approx(
        _rec(rows, "uncalibrated")["log_loss"], rel=1e-9
    )
    for method, tol in (("platt", 1e-4), ("isotonic", 2e-3)):
        r, g = _rec(rows, method), _rec(grid, method)
        for k in ("log_loss", "brier", "ece", "calibration_ratio"):
            assert abs(g[k] - r[k]) < tol, (method, k, g[k], r[k])


def test_probability_input_matches_rows(both):
    """``calibrate.input: probability``: tables built on ``prob``, so the fits see the rows' own values."""
    roots = both[3]
    rows, agg = roots["prob_rows"], roots["prob_agg"]
    for method, tol in (("uncalibrated", 1e-12), ("platt", 1e-6), ("isotonic", 1e-9)):
        r, a = _rec(rows, method), _rec(agg, method)
        assert a["path"] == "aggregate" and r["path"] == "rows"
        for k in ("log_loss", "brier", "ece", "calibration_ratio", "auc"):
            assert abs(a[k] - r[k]) < tol, (method, k, a[k], r[k])
