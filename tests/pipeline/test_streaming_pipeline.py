"""Issue 25: a score source above ``scale.row_threshold`` goes through every stage without its rows in
pandas: validate@raw runs GX on DuckDB's one-scan profile, prepare makes one pass over the source (the split
in the key) and stores the calib and test tables, train is skipped, calibrate/evaluate/select read those
tables, validate@calibrated checks each calibrator on the test table. Reduced size: 20,000 generated rows
(helpers/source_data.py) with ``row_threshold: 1000``; the row path is the same pipeline with the threshold
above the row count.
"""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import row_reference
from helpers.source_data import scores_frame, write
from helpers.sources_pipeline import METHODS, run_pipeline, source_params

from calibflow.aggregate import source_stream
from calibflow.aggregate.run import tables_for
from calibflow.aggregate.table import add_replicates
from calibflow.aggregate.tables import load_tables
from calibflow.io import read_json
from calibflow.pipeline import (
    _aggregate,
    _sources,
    calibrate,
    calibrate_segments,
    evaluate,
    prepare,
    train,
    validate,
)
from calibflow.pipeline._common import StageError, as_params

N = 20_000


def _stream_params(path: str, split: dict | None = None) -> dict:
    params = source_params(path, with_features=False)
    params["scale"] = {"row_threshold": 1000, "replicates": 20}
    if split is not None:
        params["sources"]["ads"]["split"] = split
    return params


@pytest.fixture(scope="module")
def streamed(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    path = write(scores_frame(n=N, days=30, seed=5), "folder", root / "userdata")
    params = _stream_params(str(path.relative_to(root)))
    run_pipeline(params, root)
    return root, params


def test_every_stage_took_the_streaming_path(streamed):
    root, _ = streamed
    rec = read_json(root / "data/prepared/splits.json")["datasets"]["ads"]
    assert rec["rows_path"] == "streaming" and rec["n_rows_source"] == N
    # prepare stored the calib and test tables, no copy of the rows
    assert not (root / "data/prepared/ads.parquet").exists()
    tabs = root / "data/prepared/ads.tables"
    assert {p.name for p in tabs.iterdir()} == {"calib", "test"}
    assert rec["n_rows"] == sum(rec["counts"].values()) <= N
    # train skipped: no model, no predictions copy, a marker naming the tables
    assert not (root / "data/predictions/ads.parquet").exists()
    assert read_json(root / "data/predictions/ads.skipped.json")["rows"] == "prepared/ads.tables"
    assert "skipped" in read_json(root / "metrics/train.json")["ads"]
    for m in METHODS:
        fit = read_json(root / f"data/calibrated/{m}/fit.json")["datasets"]["ads"]
        assert fit["path"] == "aggregate" and fit["n_test"] == rec["counts"]["test"]
        assert not (root / f"data/calibrated/{m}/ads.parquet").exists()
        assert read_json(root / f"metrics/evaluation/ads/{m}.json")["n_test"] == rec["counts"]["test"]
    assert read_json(root / "models/ads/card.json")["path"] == "aggregate"


def test_segmented_fit_from_stored_tables_is_saved_without_test_predictions(streamed):
    """prepare kept tables, not rows: partial_pooling is fitted from them and writes no test predictions
    file (select scores it in its own pass, tests/pipeline/test_streaming_segmented.py) and says so;
    evaluate and validate@calibrated run."""
    from calibflow.calibrators import from_json

    root, params = streamed
    info = calibrate_segments.run(params, root)
    rec = info["methods"]["partial_pooling"]["ads"]
    assert rec["path"] == "aggregate" and rec["n_test"] == 0
    assert "select scores the test rows" in rec["not_evaluated"]
    folder = root / "data/calibrated_segments/partial_pooling"
    cal = from_json((folder / "ads.json").read_text())
    assert cal.segment_names_ == ["country"]
    assert not (folder / "ads.parquet").exists()
    assert "partial_pooling" not in {p.stem for p in (root / "metrics/evaluation/ads").glob("*.json")}
    validate.run("calibrated", params, root)
    evaluate.run(params, root)
    assert "partial_pooling" not in {p.stem for p in (root / "metrics/evaluation/ads").glob("*.json")}


def test_stored_tables_add_up_to_the_source_rows(streamed):
    """The test table holds every test row (unweighted), the calib table the calib rows' summed weights,
    each segment table the same rows as its split's fine table; with the rows after the test window the
    splits add up to the source."""
    root, params = streamed
    rec = read_json(root / "data/prepared/splits.json")["datasets"]["ads"]
    frame = scores_frame(n=N, days=30, seed=5)
    after = (pd.to_datetime(frame["date"]) >= pd.Timestamp(rec["split"]["test"][1])).sum()
    assert sum(rec["counts"].values()) + after == N
    test, _ = load_tables(root / "data/prepared/ads.tables/test")
    calib, _ = load_tables(root / "data/prepared/ads.tables/calib")
    assert test.fine["n"].sum() == rec["counts"]["test"]
    assert test.fine.loc[test.fine["label"] == 1, "n"].sum() == rec["positives"]["test"]
    lo, hi = map(pd.Timestamp, rec["split"]["calib"])
    in_calib = pd.to_datetime(frame["date"]).between(lo, hi, inclusive="left")
    assert in_calib.sum() == rec["counts"]["calib"]
    assert calib.fine["n"].sum() == pytest.approx(frame.loc[in_calib, "weight"].sum(), rel=1e-12)
    for t in (test, calib):
        assert t.segments["country"]["n"].sum() == pytest.approx(t.fine["n"].sum(), rel=1e-12)


def test_raw_validation_is_gx_on_duckdb_counts(streamed):
    root, _ = streamed
    res = read_json(root / "reports/validation/raw.json")
    suite = next(s for s in res["suites"] if s["name"] == "raw.ads")
    assert suite["success"] and suite["rows"] == 1  # GX ran on the one-row profile, not on 20,000 rows
    kinds = {(e["expectation"], e["kwargs"]["column"]) for e in suite["expectations"]}
    for col in ("label_binary", "score_finite", "score_in_01", "weight_ok", "time_parses"):
        assert ("expect_column_values_to_be_between", col) in kinds
    cal = read_json(root / "reports/validation/calibrated.json")
    assert all(s["success"] for s in cal["suites"])
    assert {f"calibrated.{m}.ads" for m in METHODS} <= {s["name"] for s in cal["suites"]}


def test_same_split_counts_as_the_row_path_on_a_time_split(streamed, tmp_path):
    """The time windows are the row path's: per split the same rows (counts and positives) land in it, and
    the stored test table holds exactly the row path's test rows per label."""
    root, params = streamed
    (tmp_path / "userdata").symlink_to(root / "userdata")
    row_reference.prepare_rows(params, tmp_path)  # issue 35: the row path's prepare is the tests' control
    by_rows = read_json(tmp_path / "data/prepared/splits.json")["datasets"]["ads"]
    streamed_rec = read_json(root / "data/prepared/splits.json")["datasets"]["ads"]
    assert by_rows["counts"] == streamed_rec["counts"]
    assert by_rows["positives"] == streamed_rec["positives"]
    a = pd.read_parquet(tmp_path / "data/prepared/ads.parquet", columns=["split", "y"])
    test, _ = load_tables(root / "data/prepared/ads.tables/test")
    got = test.fine.groupby("label")["n"].sum().to_dict()
    assert got == a[a["split"] == "test"].groupby("y").size().to_dict()


def _old_path_tables(spec, seed: int, out, split: str, weighted: bool):
    """The tables as the previous streaming path built them: the split copied to Parquet by DuckDB
    (``source_stream.write_split``), then a pass over that file filtered to one split."""
    if not out.exists():
        source_stream.write_split(spec, seed, out)
    return tables_for(str(out), "margin", "y", kind="logit", segments=["s:country"] if not weighted else [],
                      weight="weight" if weighted else None, distinct_max=1 << 20, where="split = $s",
                      where_params={"s": split})


@pytest.mark.parametrize("split", [{"kind": "random"}, None])
def test_one_pass_tables_and_card_equal_the_copy_path(split, tmp_path):
    """The one-pass tables equal those the previous path (a copy of the split, a pass per split) builds,
    so the card's numbers are that path's: counts exactly, sums to rounding; the split counts too."""
    path = write(scores_frame(n=N, days=30, seed=8), "parquet", tmp_path / "userdata")
    params = _stream_params(str(path.relative_to(tmp_path)), split=split)
    rec = prepare.run(params, tmp_path)["datasets"]["ads"]
    spec = _sources.specs(params, tmp_path)["ads"]
    old = tmp_path / "old.parquet"
    old_rec = None
    for name, weighted in (("calib", True), ("test", False)):
        want = _old_path_tables(spec, params["seed"], old, name, weighted)
        old_rec = old_rec or source_stream.split_profile(old)
        got, _ = load_tables(tmp_path / f"data/prepared/ads.tables/{name}")
        cols = ["bucket", "label", "n", "sum_z", "sum_q", "sum_ll", "sum_q2"]
        pd.testing.assert_frame_equal(got.fine[cols], want.fine[cols], rtol=1e-12, check_dtype=False)
        if not weighted:
            a = got.segments["country"].sort_values(["seg_0", "bucket", "label"]).reset_index(drop=True)
            b = want.segments["s:country"].sort_values(["seg_0", "bucket", "label"]).reset_index(drop=True)
            pd.testing.assert_frame_equal(a[cols[1:]], b[cols[1:]], rtol=1e-12, check_dtype=False)
            assert a["seg_0"].tolist() == b["seg_0"].tolist()
    assert rec["counts"] == old_rec["counts"] and rec["positives"] == old_rec["positives"]
    # the card downstream: evaluate's uncalibrated record from the stored tables is the copy path's
    for stage in ("validate@prepared", "train", "calibrate", "evaluate"):
        _run_stage(stage, params, tmp_path)
    got = read_json(tmp_path / "metrics/evaluation/ads/uncalibrated.json")
    want = _old_path_tables(spec, params["seed"], old, "test", False).fine
    want = add_replicates(want, params["scale"]["replicates"], 0)
    ref = _aggregate.evaluate_tables({"u": want}, as_params(params).evaluate)["u"][0]
    for k in ("n_test", "ece", "brier", "log_loss", "calibration_ratio", "auc", "ks"):
        assert got[k] == pytest.approx(ref[k], rel=1e-9, abs=1e-12), k
    assert got["ci"]["ece"]["low"] == pytest.approx(ref["ci"]["ece"]["low"], rel=1e-9)


def _run_stage(stage: str, params: dict, root) -> None:
    if stage == "validate@prepared":
        validate.run("prepared", params, root)
    elif stage == "train":
        train.run(params, root)
    elif stage == "calibrate":
        for m in METHODS:
            calibrate.run(m, params, root)
    else:
        evaluate.run(params, root)


def test_random_split_is_seeded_and_near_its_fractions(tmp_path):
    path = write(scores_frame(n=N, days=30, seed=6), "parquet", tmp_path / "userdata")
    params = _stream_params(str(path.relative_to(tmp_path)), split={"kind": "random"})
    first = prepare.run(params, tmp_path)["datasets"]["ads"]
    again = prepare.run(params, tmp_path)["datasets"]["ads"]
    assert first["tables_sha256"] == again["tables_sha256"] and first["counts"] == again["counts"]
    assert abs(first["counts"]["calib"] / N - 0.5) < 4 * (0.25 / N) ** 0.5  # binomial: 4 sd
    assert sum(first["counts"].values()) == N
    other = prepare.run({**params, "seed": params["seed"] + 1}, tmp_path)["datasets"]["ads"]
    assert other["tables_sha256"] != first["tables_sha256"] and other["counts"] != first["counts"]


def test_bad_scores_name_column_count_and_rows_without_loading(tmp_path):
    frame = scores_frame(n=N, days=30, seed=7)
    frame.loc[[3, 17, 400], "p_model"] = [1.5, -0.2, 2.0]
    path = write(frame, "parquet", tmp_path / "userdata")
    params = _stream_params(str(path.relative_to(tmp_path)))
    with pytest.raises(StageError) as err:
        validate.run("raw", params, tmp_path)
    msg = str(err.value).splitlines()[0]
    assert "column 'p_model'" in msg and "3 probabilit(ies) outside [0, 1]" in msg
    assert "rows 3, 17, 400" in msg
    assert not (tmp_path / "reports/validation/raw.json").exists()
    assert (tmp_path / "reports/validation/raw.failed.json").exists()


def test_dask_engine_prepares_the_same_tables_as_duckdb(tmp_path):
    """``scale.engine: dask`` (a LocalCluster) in prepare's one pass: the same stored tables as DuckDB
    (keys and counts equal, sums to 1e-12) and the same split counts."""
    path = write(scores_frame(n=N, days=30, seed=9), "parquet", tmp_path / "userdata")
    params = _stream_params(str(path.relative_to(tmp_path)))
    got = {}
    for engine in ("duckdb", "dask"):
        root = tmp_path / engine
        (root / "userdata").mkdir(parents=True)
        (root / "userdata" / path.name).symlink_to(path)
        scale = {**params["scale"], "distinct_max": 0, "engine": engine}  # the grid: Dask has no GROUP BY
        rec = prepare.run({**params, "scale": scale}, root)["datasets"]["ads"]
        tabs = root / "data/prepared/ads.tables"
        got[engine] = rec, {s: load_tables(tabs / s)[0] for s in ("calib", "test")}
    (a_rec, a), (b_rec, b) = got["duckdb"], got["dask"]
    assert a_rec["counts"] == b_rec["counts"] and a_rec["positives"] == b_rec["positives"]
    for s in ("calib", "test"):
        pd.testing.assert_frame_equal(a[s].fine, b[s].fine, rtol=1e-12)
        x = a[s].segments["country"].sort_values(["seg_0", "bucket", "label"]).reset_index(drop=True)
        y = b[s].segments["country"].sort_values(["seg_0", "bucket", "label"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(x, y, rtol=1e-12)
