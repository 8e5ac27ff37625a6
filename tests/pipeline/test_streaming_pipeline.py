"""Issue 25: a score source above ``scale.row_threshold`` goes through every stage without its rows in
pandas: validate@raw runs GX on DuckDB's one-scan profile, prepare writes the split with DuckDB, train is
skipped, calibrate/evaluate/select read bucket tables, validate@calibrated checks each calibrator on the test
table. Reduced size: 20,000 generated rows (helpers/source_data.py) with ``row_threshold: 1000``; the row
path is the same pipeline with the threshold above the row count.
"""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.source_data import scores_frame, write
from helpers.sources_pipeline import METHODS, run_pipeline, source_params

from calibflow.io import read_json
from calibflow.pipeline import prepare, validate
from calibflow.pipeline._common import StageError

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
    # prepare's file is the predictions layout, written by DuckDB; rows after the test end are dropped
    f = pq.ParquetFile(root / "data/prepared/ads.parquet")
    assert {"row", "split", "y", "margin", "prob", "weight", "time", "s:country"} <= set(f.schema_arrow.names)
    assert f.metadata.num_rows == rec["n_rows"] == sum(rec["counts"].values())
    # train skipped: no model, no predictions copy, a marker naming the rows
    assert not (root / "data/predictions/ads.parquet").exists()
    assert read_json(root / "data/predictions/ads.skipped.json")["rows"] == "prepared/ads.parquet"
    assert "skipped" in read_json(root / "metrics/train.json")["ads"]
    for m in METHODS:
        fit = read_json(root / f"data/calibrated/{m}/fit.json")["datasets"]["ads"]
        assert fit["path"] == "aggregate" and fit["n_test"] == rec["counts"]["test"]
        assert not (root / f"data/calibrated/{m}/ads.parquet").exists()
        assert read_json(root / f"metrics/evaluation/ads/{m}.json")["n_test"] == rec["counts"]["test"]
    assert read_json(root / "models/ads/card.json")["path"] == "aggregate"


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
    """The time windows are the row path's: per split the same rows (counts and positives) land in it."""
    root, params = streamed
    rows_params = {**params, "scale": {"row_threshold": 10**9}}
    (tmp_path / "userdata").symlink_to(root / "userdata")
    prepare.run(rows_params, tmp_path)
    by_rows = read_json(tmp_path / "data/prepared/splits.json")["datasets"]["ads"]
    streamed_rec = read_json(root / "data/prepared/splits.json")["datasets"]["ads"]
    assert by_rows["counts"] == streamed_rec["counts"]
    assert by_rows["positives"] == streamed_rec["positives"]
    a = pd.read_parquet(tmp_path / "data/prepared/ads.parquet", columns=["row", "split"])
    b = pd.read_parquet(root / "data/prepared/ads.parquet", columns=["row", "split", "prob", "margin"])
    assert a.sort_values("row")["split"].tolist() == b.sort_values("row")["split"].tolist()


def test_random_split_is_seeded_and_near_its_fractions(tmp_path):
    path = write(scores_frame(n=N, days=30, seed=6), "parquet", tmp_path / "userdata")
    params = _stream_params(str(path.relative_to(tmp_path)), split={"kind": "random"})
    first = prepare.run(params, tmp_path)["datasets"]["ads"]
    again = prepare.run(params, tmp_path)["datasets"]["ads"]
    assert first["rows_digest"] == again["rows_digest"] and first["counts"] == again["counts"]
    assert abs(first["counts"]["calib"] / N - 0.5) < 4 * (0.25 / N) ** 0.5  # binomial: 4 sd
    other = prepare.run({**params, "seed": params["seed"] + 1}, tmp_path)["datasets"]["ads"]
    assert other["rows_digest"] != first["rows_digest"]


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
