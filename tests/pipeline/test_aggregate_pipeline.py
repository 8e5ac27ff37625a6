"""Issue 17 wired in: a score source above ``scale.row_threshold`` runs calibrate, evaluate and select on the
aggregate path (DuckDB bucket tables) and agrees with the row path on the same prepared split.

Reduced size: 6000 generated rows (helpers.source_data). Issue 35: every stage takes the table path; the
row path is the row computation the stages used before (helpers/row_reference.py) on the same prepared
split.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import row_reference
from helpers.source_data import scores_frame, write
from helpers.sources_pipeline import source_params

from calibflow.io import read_json
from calibflow.pipeline import calibrate, evaluate, fetch, fingerprint, select, train
from calibflow.report.answers import answer_block

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
    params = source_params(str(path.relative_to(rows)), with_features=False)
    params["calibrate"]["methods"] = METHODS
    params["evaluate"].update(n_bootstrap=40, reliability_bins="quantile")
    fingerprint.run("ads", params, rows)
    fetch.run(params, rows)
    row_reference.prepare_rows(params, rows)  # a predictions file, which the table path reads by split
    train.run(params, rows)
    agg = tmp_path_factory.mktemp("agg")
    shutil.copytree(rows / "data", agg / "data")
    row_params = {**params, "scale": {"row_threshold": 10**9}}
    agg_params = {**params, "scale": {"row_threshold": 1000, "replicates": 40}}
    roots: dict[str, Path] = {}
    grid = tmp_path_factory.mktemp("grid")
    shutil.copytree(rows / "data", grid / "data")
    grid_params = {**params, "scale": {"row_threshold": 1000, "replicates": 40, "distinct_max": 0}}
    row_reference.downstream_rows(row_params, rows)  # the row computation before issue 35
    _downstream(agg_params, agg)
    _downstream(grid_params, grid)
    for label, scale in (("prob_rows", {"row_threshold": 10**9}), ("prob_agg", {"row_threshold": 1000})):
        root = tmp_path_factory.mktemp(label)
        shutil.copytree(rows / "data", root / "data")
        cal = {**params["calibrate"], "input": "probability"}
        run = row_reference.downstream_rows if label == "prob_rows" else _downstream
        run({**params, "scale": scale, "calibrate": cal}, root)
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


def _plot(root: Path, method: str) -> list[dict]:
    return read_json(root / "plots/reliability/ads" / f"{method}.json")


@pytest.mark.parametrize("which", [1, 2])
def test_records_have_the_row_paths_keys(both, which):
    """Every key of a row-path record (and of its ``ci`` and ``selection``) is in the aggregate record;
    reliability records carry the same keys."""
    rows, root = both[0], both[which]
    for m in ("uncalibrated", *METHODS):
        r, a = _rec(rows, m), _rec(root, m)
        assert set(r) <= set(a), (m, set(r) - set(a))
        assert set(r["ci"]) <= set(a["ci"]) and set(r["selection"]) == set(a["selection"]), m
        assert [set(b) for b in _plot(rows, m)] == [set(b) for b in _plot(root, m)], m


@pytest.mark.parametrize(("method", "tol"), [("uncalibrated", 1e-12), ("platt", 1e-6)])
def test_diagnostics_match_rows_distinct(both, method, tol):
    """One group per distinct score, no tied predictions: KS, smooth ECE, Kuiper p, the log-loss
    miscalibration term and the selection-set metrics are the row path's."""
    rows, agg = both[0], both[1]
    r, a = _rec(rows, method), _rec(agg, method)
    for k in ("ks", "smooth_ece", "kuiper_pvalue", "log_loss_miscalibration"):
        assert abs(a[k] - r[k]) < tol, (k, a[k], r[k])
    assert a["ks_bound"] < 2 / a["n_test"]  # one row per group: nothing left unknown but float noise
    for k, v in r["selection"].items():
        assert abs(a["selection"][k] - v) < tol * max(1.0, abs(v)), (k, a["selection"][k], v)
    lo, hi = a["ci"]["ks"]["low"], a["ci"]["ks"]["high"]
    rw = r["ci"]["ks"]["high"] - r["ci"]["ks"]["low"]
    assert lo < hi and 0.3 * rw < hi - lo < 3 * rw


def test_isotonic_ties_within_bounds(both):
    """Isotonic predictions are tied in blocks: the table pools a tie block (as ``cumulative_tests`` and
    CORP's PAV do), the row path's KS takes its max inside the block in row order: within ``ks_bound``."""
    rows, agg = both[0], both[1]
    r, a = _rec(rows, "isotonic"), _rec(agg, "isotonic")
    assert a["ks"] - 1e-9 <= r["ks"] <= a["ks"] + a["ks_bound"] + 1e-9
    for k in ("smooth_ece", "kuiper_pvalue", "log_loss_miscalibration"):
        assert abs(a[k] - r[k]) < 1e-9, (k, a[k], r[k])
    assert a["selection"]["n_selected"] == r["selection"]["n_selected"]
    assert abs(a["selection"]["E"] - r["selection"]["E"]) < 0.05


def test_diagnostics_on_logit_grid(both):
    """``distinct_max: 0``: raw scores on the 65,536-cell grid are within the stated bounds."""
    rows, grid = both[0], both[2]
    r, g = _rec(rows, "uncalibrated"), _rec(grid, "uncalibrated")
    assert g["ks"] - 1e-12 <= r["ks"] <= g["ks"] + g["ks_bound"] + 1e-12
    assert g["kuiper_pvalue_low"] - 1e-12 <= r["kuiper_pvalue"] <= g["kuiper_pvalue"] + 1e-12
    assert abs(g["smooth_ece"] - r["smooth_ece"]) < 1e-4
    # PAV constant inside each bucket: a lower bound of the row path's term
    assert g["log_loss_miscalibration"] <= r["log_loss_miscalibration"] + 1e-12
    assert r["log_loss_miscalibration"] - g["log_loss_miscalibration"] < 1e-3
    assert g["selection"]["n_selected"] == r["selection"]["n_selected"]
    assert abs(g["selection"]["E"] - r["selection"]["E"]) < 1e-3  # only the boundary bucket is split
    for m in METHODS:
        r, g = _rec(rows, m), _rec(grid, m)
        for k in ("ks", "smooth_ece", "log_loss_miscalibration"):
            assert abs(g[k] - r[k]) < 2e-3, (m, k, g[k], r[k])


def test_equal_mass_reliability_matches_rows(both):
    rows, agg = both[0], both[1]
    for m, tol in (("uncalibrated", 1e-12), ("platt", 1e-6)):  # Platt's two fits differ by ~1e-9
        r, a = _plot(rows, m), _plot(agg, m)
        assert [b["count"] for b in a] == [b["count"] for b in r], m
        for ba, br in zip(a, r, strict=True):
            for k in ("mean_pred", "observed", "low", "high"):
                assert ba[k] == pytest.approx(br[k], abs=tol), (m, k)
            for k in ("band_low", "band_high"):  # same law, different draws
                assert ba[k] == pytest.approx(br[k], abs=0.06), (m, k)


def test_card_segment_ratios_match_rows(both):
    rows, agg = both[0], both[1]
    cr, ca = read_json(rows / "models/ads/card.json"), read_json(agg / "models/ads/card.json")
    assert ca["method"] == cr["method"] and cr["segments"]
    assert [(s["column"], s["value"], s["n"], s["positives"]) for s in ca["segments"]] == [
        (s["column"], s["value"], s["n"], s["positives"]) for s in cr["segments"]
    ]
    for sa, sr in zip(ca["segments"], cr["segments"], strict=True):
        assert sa["ratio_uncalibrated"] == pytest.approx(sr["ratio_uncalibrated"], rel=1e-9)
        assert sa["ratio"] == pytest.approx(sr["ratio"], rel=1e-6)
        lo, hi = sa["ratio_ci"]
        assert lo < sa["ratio"] < hi and hi - lo < 3 * (sr["ratio_ci"][1] - sr["ratio_ci"][0])
    assert "Σp / Σy by segment" in answer_block(ca)


def test_report_metric_table_has_no_gaps(both):
    """The report's metric table fills every column on the aggregate path (no "–" for a missing key)."""
    from calibflow.report.data import METRICS
    from calibflow.report.html import _metric_table

    agg = both[1]
    rows = {m: _rec(agg, m) for m in ("uncalibrated", *METHODS)}
    html = _metric_table(rows)
    assert "–" not in html and all(s.key in rows["isotonic"] for s in METRICS)
