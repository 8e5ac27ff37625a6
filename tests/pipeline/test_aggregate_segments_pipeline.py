"""Segmented calibrators on the pipeline's aggregate path, against the row path on the same prepared split.

A score source with a ``country`` segment (tests/source_data.py: 6000 generated rows) runs calibrate,
calibrate_segments, validate@calibrated and evaluate twice: the row computation the stages used before issue
35 (helpers/row_reference.py, the row path) and the stages (aggregate path: ``partial_pooling`` fitted from
the pass's tables, ``multicalibration`` on a seeded sample of calib rows). Stated tolerance: the two paths'
test probabilities within 0.01 (one segment column: the table fit differs from the row fit only by the
coarse cells).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import row_reference
from helpers.source_data import scores_frame, write

from calibflow.calibrators import from_json
from calibflow.io import read_json
from calibflow.pipeline import (
    calibrate,
    calibrate_segments,
    evaluate,
    fetch,
    fingerprint,
    train,
    validate,
)

SEG = "data/calibrated_segments"
REPO = Path(__file__).resolve().parents[2]


def _params(path: str) -> dict:
    """The repository's params with one score source segmented by country, small model and bootstrap."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["datasets"]["names"] = []
    params["papers"] = []
    params["calibrate"]["methods"] = ["platt"]
    params["calibrate"]["segmented"] = ["partial_pooling", "multicalibration"]  # both paths, both methods
    params["evaluate"].update(n_bootstrap=40, n_bins=10)
    params["model"].update(n_estimators=10, max_depth=3, n_jobs=1)
    params["sources"] = {"ads": {"path": path, "label": "clicked", "score": "p_model", "weight": "weight",
                                "score_kind": "probability", "time": "date", "segments": ["country"]}}
    return params


def _downstream_rows(params: dict, root: Path) -> None:
    """The row computation the stages used before issue 35 (tests/helpers/row_reference.py)."""
    row_reference.calibrate_rows("platt", params, root)
    row_reference.calibrate_segments_rows(params, root)
    validate.run("calibrated", params, root)
    row_reference.evaluate_rows(params, root)


def _downstream(params: dict, root: Path) -> None:
    calibrate.run("platt", params, root)
    calibrate_segments.run(params, root)
    validate.run("calibrated", params, root)
    evaluate.run(params, root)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    rows = tmp_path_factory.mktemp("rows")
    path = write(scores_frame(n=6000, days=30, seed=5), "parquet", rows / "userdata")
    params = _params(str(path.relative_to(rows)))
    fingerprint.run("ads", params, rows)
    fetch.run(params, rows)
    row_reference.prepare_rows(params, rows)  # a predictions file: the table path reads it by split
    train.run(params, rows)
    agg = tmp_path_factory.mktemp("agg")
    shutil.copytree(rows / "data", agg / "data")
    _downstream_rows(params, rows)
    _downstream({**params, "scale": {"row_threshold": 1000, "replicates": 40}}, agg)
    return rows, agg


def test_aggregate_path_fits_partial_pooling_from_tables(both):
    rows, agg = both
    info = read_json(agg / SEG / "fit.json")["methods"]
    assert info["partial_pooling"]["ads"]["path"] == "aggregate"
    # issue 35: multicalibration needs the rows; the one path fits it on a bounded seeded sample of the
    # calib rows (here all of them: fewer than scale.fit_rows) and says so (before: skipped, said so)
    assert "fitted on every one of the" in info["multicalibration"]["ads"]["fit_note"]
    assert info["multicalibration"]["ads"]["fit_rows"] == info["multicalibration"]["ads"]["calib_rows"]
    ma = pd.read_parquet(agg / SEG / "multicalibration" / "ads.parquet").sort_values("row")
    mr = pd.read_parquet(rows / SEG / "multicalibration" / "ads.parquet").sort_values("row")
    assert np.array_equal(ma["row"].to_numpy(), mr["row"].to_numpy())
    assert np.abs(ma["prob"].to_numpy() - mr["prob"].to_numpy()).max() < 0.01
    cal = from_json((agg / SEG / "partial_pooling" / "ads.json").read_text())
    assert cal.segment_names_ == ["country"] and {"DE", "FR", "US"} <= set(cal.vocab_[0])
    pa = pd.read_parquet(agg / SEG / "partial_pooling" / "ads.parquet").sort_values("row")
    pr = pd.read_parquet(rows / SEG / "partial_pooling" / "ads.parquet").sort_values("row")
    assert np.array_equal(pa["row"].to_numpy(), pr["row"].to_numpy())
    assert np.abs(pa["prob"].to_numpy() - pr["prob"].to_numpy()).max() < 0.01


@pytest.mark.parametrize("which", [0, 1])
def test_evaluate_covers_the_segmented_methods(both, which):
    root = both[which]
    path = "aggregate" if which else "rows"
    rec = read_json(root / "metrics/evaluation/ads/partial_pooling.json")
    assert rec["path"] == path and rec["n_test"] > 0
    assert set(rec["ci"]) >= {"log_loss", "calibration_ratio"}  # intervals, as for the global methods
    assert read_json(root / "plots/reliability/ads/partial_pooling.json")
    if which == 0:  # the row path fits multicalibration too, and evaluates it
        assert read_json(root / "metrics/evaluation/ads/multicalibration.json")["path"] == "rows"


def test_evaluate_agrees_between_paths(both):
    rows, agg = both
    r = read_json(rows / "metrics/evaluation/ads/partial_pooling.json")
    a = read_json(agg / "metrics/evaluation/ads/partial_pooling.json")
    assert a["n_test"] == r["n_test"]
    assert a["log_loss"] == pytest.approx(r["log_loss"], abs=2e-3)
    assert a["calibration_ratio"] == pytest.approx(r["calibration_ratio"], abs=0.01)


@pytest.mark.parametrize("which", [0, 1])
def test_validate_checks_the_segmented_outputs(both, which):
    res = read_json(both[which] / "reports/validation/calibrated.json")
    suites = {s["name"]: s for s in res["suites"]}
    assert suites["calibrated.partial_pooling.ads"]["success"]
    assert res["success"]


def test_validate_catches_an_order_reversal_within_a_segment():
    """The within-segment order check fails on a reversal inside one segment and passes across segments."""
    df = pd.DataFrame({"margin": [0.0, 1.0, 0.0, 1.0], "prob": [0.2, 0.3, 0.6, 0.1], "y": [0, 1, 0, 1],
                       "row": [0, 1, 2, 3], "s:c": ["a", "a", "b", "b"]})
    frame, _ = validate.segmented_suite(df, ["s:c"])
    assert frame["prob_drop"].max() == pytest.approx(0.5)  # b: 0.6 at margin 0, 0.1 at margin 1
    ok = df.assign(prob=[0.2, 0.3, 0.05, 0.1])  # b entirely below a: across segments, allowed
    frame, _ = validate.segmented_suite(ok, ["s:c"])
    assert frame["prob_drop"].max() == 0.0


def test_the_within_segment_order_check_keys_on_every_column_and_null():
    """Segments are combinations of the columns' values, a null a value of its own: a reversal inside the null
    segment, or inside (a, x), is caught; the same values across (a, x) and (a, y) are not a reversal."""
    df = pd.DataFrame({"margin": [0.0, 1.0, 0.0, 1.0, 0.0, 1.0], "prob": [0.5, 0.6, 0.9, 0.1, 0.7, 0.2],
                       "y": [0, 1, 0, 1, 0, 1], "row": range(6),
                       "s:c": ["a", "a", None, None, "a", "a"], "s:d": ["x", "x", "x", "x", "y", "y"]})
    frame, _ = validate.segmented_suite(df, ["s:c", "s:d"])
    assert sorted(frame["prob_drop"].round(12)) == [0.0, 0.0, 0.0, 0.0, 0.5, 0.8]  # (a, y) and (null, x)
    ok = df.assign(prob=[0.5, 0.6, 0.05, 0.1, 0.2, 0.3])
    frame, _ = validate.segmented_suite(ok, ["s:c", "s:d"])
    assert frame["prob_drop"].max() == 0.0 and len(frame) == len(df)


def test_aggregate_stage_adds_a_supported_pair(tmp_path):
    """Two segment columns with a country x device bias in the predictions file: the aggregate path's
    partial_pooling holds the pair (joint table) and predicts every test row from the saved JSON."""
    from scipy.special import expit

    from calibflow.pipeline._common import Layout

    rng = np.random.default_rng(8)
    n = 40_000
    c, d = rng.integers(0, 6, n), rng.integers(0, 2, n)
    z = rng.normal(-1.2, 1.0, n)
    inter = np.array([[0.8, -0.8], [-0.6, 0.6], [0, 0], [0.5, -0.5], [0, 0], [-0.7, 0.7]])
    y = (rng.random(n) < expit(z + inter[c, d])).astype(np.int64)
    preds = pd.DataFrame({"row": np.arange(n), "split": np.where(np.arange(n) % 2, "calib", "test"), "y": y,
                          "margin": z, "prob": expit(z), "s:country": np.char.add("c", c.astype(str)),
                          "s:device": np.char.add("d", d.astype(str))})
    lay = Layout(tmp_path)
    lay.predictions.mkdir(parents=True)
    preds.to_parquet(lay.predictions / "ads.parquet", index=False)
    params = {"scale": {"row_threshold": 1000}}
    text, out, unseen = calibrate_segments.calibrate_aggregate_source(lay, params, "ads", "logit", {})
    cal = from_json(text)
    assert [t["columns"] for t in cal.pair_tests_ if t["included"]] == [["country", "device"]]
    assert len(out) == n // 2 and unseen == {"country": 0, "device": 0}
    test = preds[preds["split"] == "test"]
    want = expit(test["margin"] + inter[c[test.index], d[test.index]])
    assert np.abs(out["prob"].to_numpy() - want.to_numpy()).mean() < 0.02  # the truth, to sampling error


def test_select_scores_the_segmented_fit_in_one_pass_over_the_predictions(both):
    """A predictions file above the threshold (not streamed): select's pass reads its test rows and gives
    the row formula's paired interval for the segmented fit against the chosen global calibrator."""
    from calibflow import selection
    from calibflow.pipeline import select

    _, agg = both
    params = {**_params("userdata/scores.parquet"), "scale": {"row_threshold": 1000, "replicates": 40}}
    card = select.run(params, agg)["ads"]
    seg = card["segmented"]
    assert card["path"] == "aggregate" and seg["segmented_method"] == "partial_pooling"
    preds = pd.read_parquet(agg / "data/predictions/ads.parquet")
    test = preds[preds["split"] == "test"].sort_values("row")
    pp = pd.read_parquet(agg / SEG / "partial_pooling" / "ads.parquet").sort_values("row")
    glob = seg["global_method"]
    p_glob = test["prob"].to_numpy() if glob == "identity" else from_json(
        (agg / f"data/calibrated/{glob}/ads.json").read_text()).predict(test["margin"].to_numpy())
    want = selection.paired_log_loss(test["y"].to_numpy(), p_glob, pp["prob"].to_numpy(),
                                     params["evaluate"]["ci_level"])
    assert seg["delta"] == pytest.approx(want.delta, abs=1e-12)
    assert seg["delta_ci"] == pytest.approx(want.ci(), abs=1e-12)
    assert seg["chosen"] == (want.high < -card["selection"]["margin"])
