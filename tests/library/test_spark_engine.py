"""Issue 41: the pass on Spark and in warehouse SQL equals the DuckDB pass; apply on Spark equals apply.

Data in real logs' shapes: float64 scores (nearly all distinct), a 200-value string segment with NULLs, a
7-value integer segment, ~1% positives in some values. Stated bounds: keys and counts (``n``) equal, every
float sum within 1e-12 relative; calibrated probabilities within 1e-12.

One local Spark session for the module's tests (``helpers.spark_session``, session-scoped).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot
from typer.testing import CliRunner

from calibflow.aggregate import tables as T
from calibflow.aggregate.run import fit_files, tables_for
from calibflow.aggregate.spark_engine import SparkClient, apply_spark
from calibflow.aggregate.sql_pass import DIALECTS, SOURCE, pass_sql, read_result, tables_from_result
from calibflow.aggregate.switch import parse_scale
from calibflow.apply import apply_file
from calibflow.calibrators import from_json
from calibflow.cli.main import app

N = 1_000_000
SUMS = ("sum_z", "sum_q", "sum_ll", "sum_q2")
SEGS = ["country", "seg7"]
ROWS = T.TableRows("score", "label", segments=SEGS)


def _frame(n: int, seed: int, n_values: int = 200) -> pa.Table:
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.5, 1.5, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int8)
    country = np.char.add("c", rng.integers(0, n_values, n).astype(str)).astype(object)
    country[rng.random(n) < 0.01] = None  # NULL segment values: a value of their own
    return pa.table({"id": np.arange(n, dtype=np.int64) + seed * n, "score": 1 / (1 + np.exp(-z)),
                     "label": y, "country": pa.array(country, pa.string()),
                     "seg7": rng.integers(0, 7, n).astype(np.int32)})


def _write(folder, n: int, seed: int) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(2):
        paths.append(str(folder / f"part-{i}.parquet"))
        pq.write_table(_frame(n // 2, seed + i), paths[-1], row_group_size=100_000)
    return paths


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    paths = _write(tmp_path_factory.mktemp("spark_big"), N, 21)
    return paths, T.aggregate_files(paths, ROWS, T.PassOptions(threads=2))


def _keys(col: pd.Series) -> list:
    """A key column as text, a missing value as None (pandas may hold it as None or NaN)."""
    return [None if pd.isna(v) else str(v) for v in col]


def _same(a: pd.DataFrame, b: pd.DataFrame, keys: list[str]) -> None:
    assert len(a) == len(b)
    for k in keys:
        assert _keys(a[k]) == _keys(b[k]), k
    assert (a["n"].to_numpy() == b["n"].to_numpy()).all()
    for c in SUMS:
        np.testing.assert_allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=1e-12, atol=1e-300)


def _same_tables(a: T.Tables, b: T.Tables) -> None:
    _same(a.fine, b.fine, ["bucket", "label"])
    assert a.segments.keys() == b.segments.keys()
    for c in a.segments:
        _same(a.segments[c], b.segments[c], ["seg_0", "code", "bucket", "label"])
        assert (a.starts[c] == b.starts[c]).all()


@pytest.mark.slow
def test_spark_tables_equal_duckdb_at_1e6(big, spark):
    """The pass's parts as Spark tasks (``scale.engine: spark`` on paths): DuckDB's tables."""
    paths, duck = big
    got = T.aggregate_files(paths, ROWS, client=SparkClient(spark))
    _same_tables(got, duck)
    assert got.segments["country"]["seg_0"].isna().any()  # the NULL value kept its own rows
    assert got.segments["country"]["seg_0"].nunique() == 200
    # through the engine switch, with replicates: the same draws as DuckDB's
    a = tables_for(paths, "score", "label", "spark", replicates=4, seed=3)
    b = tables_for(paths, "score", "label", "duckdb", replicates=4, seed=3, threads=2)
    pd.testing.assert_frame_equal(a.fine, b.fine, rtol=1e-12)


def _text_values(t: T.Tables) -> T.Tables:
    """DuckDB's tables with segment values as text, as a SQL result returns them."""
    segs = {c: s.assign(seg_0=[None if pd.isna(v) else str(v) for v in s["seg_0"]])
            for c, s in t.segments.items()}
    return T.Tables(t.fine, segs, t.starts, t.grid)


@pytest.mark.slow
def test_emitted_sql_in_duckdb_and_spark_equals_the_pass(big, spark):
    """The one GROUP BY query, run by DuckDB and by Spark SQL, gives the pass's tables (values as text);
    so does the Spark table route (a DataFrame or a catalog name)."""
    paths, duck = big
    want = _text_values(duck)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW {SOURCE} AS SELECT * FROM read_parquet({paths!r})")
    in_duckdb, spec = tables_from_result(con.sql(pass_sql("score", "label", segments=SEGS)).df())
    _same_tables(in_duckdb, want)
    assert spec["segments"] == SEGS and spec["cells"] == [256, 256]
    spark.read.parquet(*paths).createOrReplaceTempView(SOURCE)
    in_spark, _ = tables_from_result(spark.sql(pass_sql("score", "label", segments=SEGS,
                                                        dialect="spark")).toPandas())
    _same_tables(in_spark, want)
    spark.read.parquet(*paths).createOrReplaceTempView("events")
    named = tables_for("events", "score", "label", "spark", segments=SEGS)
    _same_tables(named, want)


def test_emitted_sql_per_dialect_is_one_definition(tmp_path):
    """Every dialect's query is SQLGlot's writing of the one definition: it parses back in its dialect,
    names the table given, and keeps one GROUP BY per table."""
    queries = {}
    for d in DIALECTS:
        res = CliRunner().invoke(app, ["fit", "--emit-sql", "--dialect", d, "--calib",
                                       "proj.logs.events", "--score", "p", "--label", "y",
                                       "--segment", "country"])
        assert res.exit_code == 0, res.output
        queries[d] = res.output
        tree = sqlglot.parse_one(res.output, read=d)
        assert "events" in {t.name for t in tree.find_all(sqlglot.exp.Table)}
        assert res.output.upper().count("GROUP BY") == 2  # the fine table and the one segment column
    assert "FLOAT64" in queries["bigquery"] and "DOUBLE" in queries["spark"]
    bad = CliRunner().invoke(app, ["fit", "--emit-sql", "--dialect", "oracle", "--score", "p",
                                   "--label", "y"])
    assert bad.exit_code != 0 and "--dialect 'oracle' is not one of" in bad.output


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_documented_sql_is_what_the_command_prints_today(dialect):
    """docs/benchmarks/scale_sql/<dialect>.sql is the worked example of docs/benchmarks/scale.md: the
    command it names must still print it, byte for byte (a change to the pass regenerates the files)."""
    doc = Path(__file__).parents[2] / "docs" / "benchmarks" / "scale_sql" / f"{dialect}.sql"
    res = CliRunner().invoke(app, ["fit", "--emit-sql", "--dialect", dialect, "--calib", "analytics.events",
                                   "--score", "p", "--label", "y", "--segment", "country", "--cells", "4"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == doc.read_text().strip(), (
        f"{doc} is stale: regenerate it with `calibflow fit --emit-sql --dialect {dialect} --calib "
        "analytics.events --score p --label y --segment country --cells 4`")


@pytest.mark.slow  # two fits on 2e5 rows through the command: make test, not test-fast
def test_fit_from_table_equals_fit_on_the_rows(tmp_path):
    """``fit --from-table``: the warehouse's result (here DuckDB's, saved as Parquet) fits the calibrators
    ``calibflow fit`` fits on the rows (the logit grid: ``distinct_max`` 0), and the metrics agree."""
    calib = _write(tmp_path / "calib", 200_000, 31)
    test = _write(tmp_path / "test", 200_000, 41)
    con = duckdb.connect()
    for name, paths in (("calib", calib), ("test", test)):
        con.execute(f"CREATE OR REPLACE VIEW {SOURCE} AS SELECT * FROM read_parquet({paths!r})")
        result = con.sql(pass_sql("score", "label", segments=SEGS)).df()
        result.to_parquet(tmp_path / f"{name}.result.parquet")
    methods = ["platt", "isotonic"]
    rows = fit_files(calib, test, "score", "label", tmp_path / "rows", methods, segments=tuple(SEGS),
                     replicates=8, distinct_max=0)
    res = CliRunner().invoke(app, ["fit", "--from-table", str(tmp_path / "calib.result.parquet"),
                                   "--test-table", str(tmp_path / "test.result.parquet"),
                                   "--out", str(tmp_path / "sql"), "--methods", ",".join(methods),
                                   "--replicates", "8"])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "sql/fit.json").read_text())
    z = np.linspace(1e-4, 1 - 1e-4, 999)
    for m in methods:
        a, b = (from_json((tmp_path / d / f"{m}.json").read_text()) for d in ("rows", "sql"))
        np.testing.assert_allclose(b.predict(z), a.predict(z), rtol=1e-9)
        for k in ("log_loss", "calibration_ratio", "ece"):
            assert got["methods"][m][k] == pytest.approx(rows["methods"][m][k], rel=1e-9)
    assert got["test"]["segment_table_rows"] == rows["test"]["segment_table_rows"]
    # a file that is not a result: one line
    bad = CliRunner().invoke(app, ["fit", "--from-table", calib[0], "--out", str(tmp_path / "x")])
    assert bad.exit_code != 0 and "emit-sql" in bad.output and "Traceback" not in bad.output


def test_invalid_rows_are_refused_from_a_result(tmp_path):
    frame = _frame(1000, 5).to_pandas()
    frame.loc[[3, 9], "score"] = [1.5, np.nan]
    con = duckdb.connect()
    con.register(SOURCE, frame)
    with pytest.raises(ValueError, match="2 rows have a 'score' that is not probabilities"):
        tables_from_result(con.sql(pass_sql("score", "label")).df())
    (tmp_path / "r.parquet").write_bytes(b"PAR1 not parquet")
    with pytest.raises(Exception):  # noqa: B017 - pyarrow's own error on a broken file
        read_result(str(tmp_path / "r.parquet"))


def test_scale_engine_spark_params():
    assert parse_scale({"engine": "spark"}).address is None
    cfg = parse_scale({"engine": "spark", "spark_master": "spark://127.0.0.1:7077"})
    assert cfg.address == "spark://127.0.0.1:7077"
    with pytest.raises(ValueError, match="engine is not spark"):
        parse_scale({"spark_master": "spark://h:7077"})
    with pytest.raises(ValueError, match="scale.engine"):
        parse_scale({"engine": "flink"})


def _segmented_calibrator(tmp_path, paths):
    """A per-segment (partial pooling) calibrator on ``country``, fitted on the rows."""
    from calibflow.calibrators import get_class
    from calibflow.sources import calibrator_input, record_score_kind

    t = pa.concat_tables([pq.read_table(p) for p in paths]).slice(0, 100_000).to_pandas()
    cal = get_class("partial_pooling")()
    x = calibrator_input(t["score"].to_numpy(), "probability", str(getattr(cal, "input", "score")))
    cal.fit(x, t["label"].to_numpy(), segments={"country": t["country"].to_numpy(object)})
    record_score_kind(cal, "probability", "score")
    path = tmp_path / "pp.json"
    path.write_text(cal.to_json())
    return path


@pytest.mark.slow
def test_apply_on_spark_equals_apply(tmp_path, spark):
    """``apply --engine spark`` (calibflow's batch function in mapInPandas) gives ``apply``'s column within
    1e-12, for a global and a per-segment calibrator (NULL segment values included), and NULL scores."""
    _write(tmp_path / "in", 200_000, 51)
    calib = _write(tmp_path / "cal", 100_000, 61)
    fit_files(calib, None, "score", "label", tmp_path / "fit", ["isotonic", "platt"], distinct_max=0)
    cals = [tmp_path / "fit/isotonic.json", tmp_path / "fit/platt.json",
            _segmented_calibrator(tmp_path, calib)]
    for cal in cals:
        want = pd.read_parquet(apply_file(cal, str(tmp_path / "in"), None, tmp_path / "a.parquet") and
                               tmp_path / "a.parquet")
        n = apply_spark(cal, str(tmp_path / "in"), None, tmp_path / "s.parquet")
        got = pd.read_parquet(tmp_path / "s.parquet").sort_values("id").reset_index(drop=True)
        want = want.sort_values("id").reset_index(drop=True)
        assert n == len(want) == 200_000
        pd.testing.assert_frame_equal(got.drop(columns="calibrated"), want.drop(columns="calibrated"))
        np.testing.assert_allclose(got["calibrated"], want["calibrated"], rtol=1e-12, atol=0)
    # NULL scores: refused with their count, or passed through as NULL as apply does
    frame = _frame(2000, 7).to_pandas()
    frame.loc[[5, 50], "score"] = np.nan
    frame.to_parquet(tmp_path / "nulls.parquet")
    with pytest.raises(ValueError, match="2 null or NaN score"):
        apply_spark(cals[1], str(tmp_path / "nulls.parquet"), None, tmp_path / "n.parquet")
    assert not (tmp_path / "n.parquet").exists()
    frame.loc[[7, 70, 700], "score"] = [1.5, -0.1, 2.0]
    frame.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match=r"3 score\(s\) outside \[0, 1\]"):
        apply_spark(cals[1], str(tmp_path / "bad.parquet"), None, tmp_path / "n.parquet", on_null="pass")
    apply_spark(cals[1], str(tmp_path / "nulls.parquet"), None, tmp_path / "n.parquet", on_null="pass")
    apply_file(cals[1], str(tmp_path / "nulls.parquet"), None, tmp_path / "na.parquet", on_null="pass")
    got = pd.read_parquet(tmp_path / "n.parquet").sort_values("id")["calibrated"].to_numpy()
    want = pd.read_parquet(tmp_path / "na.parquet").sort_values("id")["calibrated"].to_numpy()
    assert np.isnan(got).sum() == 2
    np.testing.assert_allclose(got, want, rtol=1e-12)
    shutil.rmtree(tmp_path / "in")


@pytest.mark.slow
def test_fit_and_apply_commands_on_spark(tmp_path, spark):
    """The documented commands: ``calibflow fit --engine spark`` equals the DuckDB pass on the logit grid
    (the fits and the metrics with intervals), and ``calibflow apply --engine spark`` writes apply's
    column."""
    calib = _write(tmp_path / "calib", 100_000, 71)
    test = _write(tmp_path / "test", 100_000, 81)
    want = fit_files(calib, test, "score", "label", tmp_path / "duck", ["platt", "isotonic"],
                     segments=("country",), replicates=8, distinct_max=0)
    res = CliRunner().invoke(app, ["fit", "--engine", "spark", "--calib", str(tmp_path / "calib"), "--test",
                                   str(tmp_path / "test"), "--score", "score", "--label", "label",
                                   "--segment", "country", "--methods", "platt,isotonic", "--replicates", "8",
                                   "--out", str(tmp_path / "spark")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "spark/fit.json").read_text())
    assert got["engine"] == "spark"
    for m in ("platt", "isotonic"):
        for k in ("log_loss", "calibration_ratio", "ece", "auc"):
            assert got["methods"][m][k] == pytest.approx(want["methods"][m][k], rel=1e-9)
        for k, ci in want["methods"][m]["ci"].items():
            assert got["methods"][m]["ci"][k] == pytest.approx(ci, rel=1e-9), (m, k)
    res = CliRunner().invoke(app, ["apply", "--engine", "spark", "--calibrator",
                                   str(tmp_path / "spark/platt.json"), "--input", str(tmp_path / "test"),
                                   "--output", str(tmp_path / "out.parquet")])
    assert res.exit_code == 0, res.output
    apply_file(tmp_path / "spark/platt.json", str(tmp_path / "test"), None, tmp_path / "ref.parquet")
    a = pd.read_parquet(tmp_path / "out.parquet").sort_values("id")["calibrated"].to_numpy()
    b = pd.read_parquet(tmp_path / "ref.parquet").sort_values("id")["calibrated"].to_numpy()
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
