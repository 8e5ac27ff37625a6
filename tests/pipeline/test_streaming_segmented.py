"""Issue 25: the per-segment calibrator is a candidate on the streamed path.

A score source above ``scale.row_threshold`` is prepared to tables (no rows kept); ``partial_pooling`` is
fitted from them and select compares it with the chosen global calibrator in one pass over the source's
test rows (``calibflow.aggregate.segment_compare``). Reduced size: 20,000 generated rows with a country
effect the model misses (BR +0.8, IN -0.8 on the logit) and ``row_threshold: 1000``; the control has no
effect. The row path's numbers are recomputed on the same test rows (the split copied by
``source_stream.write_split``, the same split expression) with the same fitted calibrators.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.sources_pipeline import run_pipeline, source_params
from scipy.special import expit

from calibflow import selection
from calibflow.aggregate import source_stream
from calibflow.calibrators import from_json
from calibflow.metrics import row_log_loss
from calibflow.pipeline import (
    _sources,
    report,
    select,
)
from calibflow.pipeline._common import StageError

N = 20_000
METHODS = ["platt", "isotonic"]


def ctr(n: int, seed: int, effect: float) -> pd.DataFrame:
    """Clicks whose model misses a country effect of ``effect`` x (BR +0.8, IN -0.8) on the logit; 5% null
    countries."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    country = rng.choice(np.array(["US", "FR", "DE", "BR", "IN", None], dtype=object), n,
                         p=[0.35, 0.2, 0.15, 0.13, 0.12, 0.05])
    base = -1.6 + 1.1 * x
    shift = effect * np.select([country == "BR", country == "IN"], [0.8, -0.8], 0.0)
    y = (rng.random(n) < expit(base + shift)).astype(int)
    day = pd.Timestamp("2026-09-01") + pd.to_timedelta(np.sort(rng.integers(0, 30, n)), unit="D")
    return pd.DataFrame({"date": day.date, "country": country, "weight": 1.0,
                         "p_model": expit(1.4 * base + 0.3), "clicked": y})


def _run(root: Path, effect: float) -> dict:
    (root / "userdata").mkdir(parents=True)
    ctr(N, 3, effect).to_parquet(root / "userdata/scores.parquet", index=False)
    params = source_params("userdata/scores.parquet", with_features=False)
    params["scale"] = {"row_threshold": 1000, "replicates": 20}
    run_pipeline(params, root, segments=True)
    return params


@pytest.fixture(scope="module")
def effect(tmp_path_factory):
    root = tmp_path_factory.mktemp("segeffect")
    return root, _run(root, 1.0)


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    root = tmp_path_factory.mktemp("segcontrol")
    return root, _run(root, 0.0)


def _card(root: Path) -> dict:
    return json.loads((root / "models/ads/card.json").read_text())


def _rows(root: Path, params: dict) -> dict[str, np.ndarray]:
    """The row path on the same test rows: the split written out, each fitted calibrator applied."""
    spec = _sources.specs(params, root)["ads"]
    out = root / "rows.parquet"
    if not out.exists():
        source_stream.write_split(spec, params["seed"], out)
    t = pd.read_parquet(out)
    t = t[t["split"] == "test"].sort_values("row")
    card = _card(root)
    glob = from_json((root / f"data/calibrated/{card['segmented']['global_method']}/ads.json").read_text())
    seg = from_json((root / "data/calibrated_segments/partial_pooling/ads.json").read_text())
    z = t["margin"].to_numpy(np.float64)
    country = t["s:country"].to_numpy(dtype=object)
    return {"y": t["y"].to_numpy(np.float64), "unc": t["prob"].to_numpy(np.float64), "glob": glob.predict(z),
            "seg": seg.predict(z, segments={"country": country}), "country": country}


def test_streamed_segmented_is_deployed_with_the_row_paths_interval(effect):
    root, params = effect
    rec = json.loads((root / "data/prepared/splits.json").read_text())["datasets"]["ads"]
    assert rec["rows_path"] == "streaming"  # no rows kept: the pass read the source itself
    card = _card(root)
    assert card["path"] == "aggregate" and card["method"] == "partial_pooling"
    assert card["verdict"] == "calibrate"
    assert card["reason"].startswith("Use partial_pooling: per-segment calibrator, better than the global")
    assert card["segmented"]["chosen"] and "partial_pooling is deployed" in card["segment_reason"]
    assert card["input"]["segments"] == ["country"]
    assert from_json((root / "models/ads/calibrator.json").read_text()).segment_names_ == ["country"]
    r = _rows(root, params)
    assert r["y"].size == rec["counts"]["test"]
    # the verdict's interval is the row path's paired CLT interval on the same rows, to 1e-12
    want = selection.paired_log_loss(r["y"], r["glob"], r["seg"], params["evaluate"]["ci_level"])
    got = card["segmented"]
    assert got["delta"] == pytest.approx(want.delta, abs=1e-12)
    assert got["delta_ci"] == pytest.approx(want.ci(), abs=1e-12)
    assert want.high < -card["selection"]["margin"]
    # the card's log-loss change is the deployed calibrator's against the scores, same formula
    unc = selection.paired_log_loss(r["y"], r["unc"], r["seg"], params["evaluate"]["ci_level"])
    assert card["metrics"]["log_loss"]["delta_ci"] == pytest.approx(unc.ci(), abs=1e-12)


def test_per_segment_ratios_are_the_deployed_calibrators(effect):
    """Flags and ratios on the card come from the deployed calibrator's probabilities on the test rows:
    counts and ratios equal the rows' (nulls their own level), every row counted once."""
    root, params = effect
    card = _card(root)
    r = _rows(root, params)
    country = np.where(pd.isna(r["country"]), "(null)", r["country"]).astype(str)
    segs = {s["value"]: s for s in card["segments"]}
    assert sum(s["n"] for s in card["segments"]) == card["segment_test_rows"] == r["y"].size
    for value, s in segs.items():
        m = country == value
        assert s["n"] == m.sum() and s["positives"] == r["y"][m].sum()
        assert s["ratio"] == pytest.approx(r["seg"][m].sum() / r["y"][m].sum(), rel=1e-12)
        assert s["ratio_uncalibrated"] == pytest.approx(r["unc"][m].sum() / r["y"][m].sum(), rel=1e-12)
        lo, hi = s["ratio_ci"]
        assert lo < s["ratio"] < hi
        assert s["flagged"] == (lo > 1 or hi < 1)
    # the control: the model misses BR and IN before calibration; the deployed calibrator moves both
    for value in ("BR", "IN"):
        assert abs(segs[value]["ratio_uncalibrated"] - 1) > 0.3
        assert abs(segs[value]["ratio"] - 1) < abs(segs[value]["ratio_uncalibrated"] - 1) / 2
    # issue 36: the rows' own interval (exact Poisson on the positives), no longer the delta method's
    assert "exact Poisson" in card["segment_interval"]


def test_report_shows_the_deployed_segmented_calibrator(effect):
    root, _ = effect
    html = (root / "reports/index.html").read_text()
    assert "green: partial_pooling" in html  # its reliability bins, from the card (evaluate has none)
    assert "Intervals after calibration: exact Poisson" in html
    assert "each adds up to the" in html


def test_no_segment_effect_keeps_the_global_calibrator(control):
    root, params = control
    card = _card(root)
    assert card["path"] == "aggregate" and card["method"] in METHODS
    assert not card["segmented"]["chosen"] and "is kept" in card["segment_reason"]
    r = _rows(root, params)
    want = selection.paired_log_loss(r["y"], r["glob"], r["seg"], params["evaluate"]["ci_level"])
    assert card["segmented"]["delta_ci"] == pytest.approx(want.ci(), abs=1e-12)
    assert want.high >= -card["selection"]["margin"]


def test_select_is_deterministic_and_refuses_a_changed_source(effect, tmp_path):
    root, params = effect
    before = (root / "models/ads/card.json").read_bytes()
    copy = tmp_path / "p"
    shutil.copytree(root, copy, symlinks=True)
    select.run(params, copy)
    assert (copy / "models/ads/card.json").read_bytes() == before
    frame = pd.read_parquet(copy / "userdata/scores.parquet")
    pd.concat([frame, frame.tail(50)]).to_parquet(copy / "userdata/scores.parquet", index=False)
    with pytest.raises(StageError, match="changed since prepare"):
        select.run(params, copy)
    assert (copy / "models/ads/card.json").read_bytes() == before  # the last good card is kept


def _select_with_scale(root: Path, params: dict, tmp: Path, **scale) -> tuple[Path, dict]:
    """A copy of a run, select (and report) again with ``scale`` changed (nothing before select reads
    compare_rows, so the stored tables stay valid)."""
    copy = tmp / "_".join(f"{k}{v}" for k, v in scale.items())
    shutil.copytree(root, copy, symlinks=True)
    p = json.loads(json.dumps(params))
    p["scale"] = {**p["scale"], **scale}
    select.run(p, copy)
    report.run(p, copy)
    return copy, p


def _sample_positions(rows: np.ndarray, seed: int, fraction: float) -> np.ndarray:
    """Which of ``rows`` (positions in the source) the documented hash rule keeps, in a plain query."""
    import duckdb

    key = (seed ^ 0x9E3779B97F4A7C15) & (2**64 - 1)
    frame = pd.DataFrame({"r": rows.astype(np.int64)})  # noqa: F841 - read by the query
    q = (f"SELECT hash(xor(hash(r), CAST({key} AS UBIGINT))) % 4294967296 < {round(fraction * 2**32)} AS k "
         "FROM frame")
    return duckdb.sql(q).fetchnumpy()["k"].astype(bool)


def test_sampled_challenge_states_its_sample_and_is_the_row_formula_on_it(effect, tmp_path):
    root, params = effect
    n_test = _card(root)["segmented"]["test_rows"]
    copy, p = _select_with_scale(root, params, tmp_path, compare_rows=2500, seed=11)
    card = _card(copy)
    got = card["segmented"]
    assert got["test_rows"] == n_test and got["test_rows_sample"].startswith("rows kept when hash(")
    # the sampled rows, recomputed here from the row positions of the split and the hash rule
    spec = _sources.specs(p, copy)["ads"]
    source_stream.write_split(spec, p["seed"], copy / "rows.parquet")
    t = pd.read_parquet(copy / "rows.parquet")
    t = t[t["split"] == "test"].sort_values("row")
    t = t[_sample_positions(t["row"].to_numpy(), 11, 2500 / n_test)]
    assert got["test_rows_compared"] == len(t) == got["n_test"] and abs(len(t) - 2500) < 200
    assert f"on a seeded sample of {len(t):,} of {n_test:,} test rows" in card["segment_reason"]
    glob = from_json((copy / f"data/calibrated/{got['global_method']}/ads.json").read_text())
    seg = from_json((copy / "data/calibrated_segments/partial_pooling/ads.json").read_text())
    z = t["margin"].to_numpy(np.float64)
    p_seg = seg.predict(z, segments={"country": t["s:country"].to_numpy(dtype=object)})
    want = selection.paired_log_loss(t["y"].to_numpy(np.float64), glob.predict(z), p_seg,
                                     p["evaluate"]["ci_level"])
    assert got["delta_ci"] == pytest.approx(want.ci(), abs=1e-12)
    assert got["chosen"] and card["method"] == "partial_pooling"
    # the card's before/after metrics are both on the sampled rows (not the stored table's all rows)
    y, unc = t["y"].to_numpy(np.float64), t["prob"].to_numpy(np.float64)
    met = card["metrics"]
    assert met["calibration_ratio"]["uncalibrated"] == pytest.approx(unc.sum() / y.sum(), rel=1e-9)
    assert met["calibration_ratio"]["calibrated"] == pytest.approx(p_seg.sum() / y.sum(), rel=1e-9)
    assert met["log_loss"]["uncalibrated"] == pytest.approx(row_log_loss(y, unc).mean(), abs=1e-12)
    assert "on a seeded sample" in card["reason"]
    # the report's per-column add-up check uses the compared rows
    assert card["segment_test_rows"] == len(t) == sum(s["n"] for s in card["segments"])
    html = (copy / "reports/index.html").read_text()
    assert f"each adds up to the {len(t)} test rows compared (a seeded sample of the" in html
    # same params: the same card; another seed: another sample
    again, _ = _select_with_scale(root, params, tmp_path / "again", compare_rows=2500, seed=11)
    assert (again / "models/ads/card.json").read_bytes() == (copy / "models/ads/card.json").read_bytes()
    other, _ = _select_with_scale(root, params, tmp_path, compare_rows=2500, seed=12)
    assert _card(other)["segmented"]["delta_ci"] != got["delta_ci"]


def test_compare_rows_off_or_above_the_test_rows_gives_the_full_pass(effect, tmp_path):
    root, params = effect
    before = (root / "models/ads/card.json").read_bytes()  # default compare_rows (5e6) > the test rows
    assert json.loads(before)["segmented"]["test_rows_sample"] is None
    for rows in (0, 10**9):
        copy, _ = _select_with_scale(root, params, tmp_path, compare_rows=rows)
        assert (copy / "models/ads/card.json").read_bytes() == before
