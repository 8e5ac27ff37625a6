"""calibflow export: the lookup table, its SQL in DuckDB and its ONNX in onnxruntime, against predict."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest
from scipy.special import expit, logit
from typer.testing import CliRunner

from calibflow import calibrators as C
from calibflow import export as X
from calibflow.cli.main import app

MONOTONE = [m for m in C.available("scores") if C.get_class(m).monotone]


def _fit(method: str, input_kind: str = "logit", n: int = 5000, seed: int = 0) -> C.BaseCalibrator:
    """A calibrator fitted on an overconfident, too-high score (so every map has something to do)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 1.5, n)
    y = (rng.random(n) < expit(z)).astype(np.float64)
    s = 1.6 * z + 0.4
    return C.make(method, input=input_kind).fit(s if input_kind == "logit" else expit(s), y)


def _duckdb(sql: str, scores: np.ndarray) -> np.ndarray:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("scores", pa.table({"score": scores}))
    return con.execute(f"SELECT {sql} AS p FROM scores").fetchnumpy()["p"]


@pytest.fixture(scope="module")
def million() -> np.ndarray:
    """1e6 logit scores, wider than the fits' range (the ends are extrapolated)."""
    return np.random.default_rng(11).normal(-2.5, 3.0, 1_000_000)


@pytest.mark.parametrize("method", MONOTONE)
def test_sql_in_duckdb_reproduces_predict_on_a_million_scores(method, million):
    cal = _fit(method)
    table = X.to_table(cal)
    assert table.max_error <= 1e-6 and table.monotone
    assert np.all(np.diff(table.z) >= 0) and np.all(np.diff(table.x) >= 0)  # a monotone table
    got = _duckdb(X.to_sql(table), million)
    assert np.abs(got - cal.predict(million)).max() <= 1e-6


@pytest.mark.parametrize("method", ["beta", "isotonic", "spline", "venn_abers", "identity"])
def test_probability_input_sql_and_onnx(method):
    """A calibrator fitted on probabilities: the table reads p (clipped, then its logit), in SQL and ONNX."""
    cal = _fit(method, "probability", seed=1)
    table = X.to_table(cal)
    p = expit(np.random.default_rng(2).normal(-2.5, 3.0, 100_000))
    p[:3] = [0.0, 1.0, 1e-14]  # the clip
    want = cal.predict(p)
    assert np.abs(_duckdb(X.to_sql(table), p) - want).max() <= 1e-6
    out = ort.InferenceSession(X.to_onnx(table)).run(None, {"score": p})[0]
    assert out.dtype == np.float64 and np.abs(out - want).max() <= 1e-6


@pytest.mark.parametrize("method", MONOTONE)
def test_onnx_in_onnxruntime_reproduces_predict(method):
    cal = _fit(method, seed=3)
    s = np.random.default_rng(4).normal(-2.5, 3.0, 100_000)
    out = ort.InferenceSession(X.to_onnx(X.to_table(cal))).run(None, {"score": s})[0]
    assert np.abs(out - cal.predict(s)).max() <= 1e-6


def test_user_score_kind_is_the_exported_input():
    """A calibrator file recording the user's score_kind: the SQL takes the user's probability and says so."""
    cal = _fit("platt")  # fitted on logits
    payload = json.loads(cal.to_json())
    payload["score_kind"] = "probability"
    data, table = X.export(json.dumps(payload), "sql")
    assert table.input_kind == "probability" and "user's score" in data
    p = expit(np.random.default_rng(5).normal(-2.0, 2.0, 50_000))
    assert np.abs(_duckdb(data, p) - cal.predict(logit(p))).max() <= 1e-6
    # a NULL score gives NULL, never a number (GREATEST skips NULLs in DuckDB and Spark)
    con = duckdb.connect()
    rows = con.execute(f"SELECT {data} FROM (VALUES (CAST(NULL AS DOUBLE)), (0.5)) AS t(score)").fetchall()
    assert rows[0][0] is None and rows[1][0] == pytest.approx(cal.predict(logit([0.5]))[0], abs=1e-6)


def test_cli_export_writes_each_format_and_refuses_the_card(tmp_path):
    cal = _fit("beta")
    path = tmp_path / "calibrator.json"
    path.write_text(cal.to_json())
    runner = CliRunner()
    res = runner.invoke(app, ["export", "--calibrator", str(path), "--format", "table", "--output",
                              str(tmp_path / "map.json")])
    assert res.exit_code == 0, res.output
    table = json.loads((tmp_path / "map.json").read_text())
    assert table["max_error"] <= 1e-6 and table["input"] == "logit" and len(table["x"]) == table["n_knots"]
    for fmt, name in (("sql", "map.sql"), ("onnx", "map.onnx")):
        res = runner.invoke(app, ["export", "--calibrator", str(path), "--format", fmt, "--output",
                                  str(tmp_path / name), "--column", "p_model"])
        assert res.exit_code == 0 and (tmp_path / name).stat().st_size > 0, res.output
    assert "p_model" in (tmp_path / "map.sql").read_text()
    card = tmp_path / "card.json"
    card.write_text(json.dumps({"name": "ads", "method": "beta", "metrics": {}, "reason": "r"}))
    res = runner.invoke(app, ["export", "--calibrator", str(card), "--format", "sql", "--output",
                              str(tmp_path / "x.sql")])
    assert res.exit_code == 1 and "this is the card; use calibrator.json" in res.output
    assert "Traceback" not in res.output and not (tmp_path / "x.sql").exists()
    res = runner.invoke(app, ["export", "--calibrator", str(path), "--format", "sql", "--output",
                              str(tmp_path / "x.onnx")])
    assert res.exit_code == 1 and "use .sql" in res.output
    assert path.read_text() == cal.to_json()  # the calibrator file is only read


def test_cli_reads_the_users_score_kind_from_the_card_beside_the_calibrator(tmp_path):
    """A pipeline calibrator takes the logit; the card says the user's column is a probability: the SQL
    takes that probability (feeding it a probability as a logit would serve wrong numbers silently)."""
    cal = _fit("beta")
    folder = tmp_path / "models" / "ads"
    folder.mkdir(parents=True)
    (folder / "calibrator.json").write_text(cal.to_json())
    card = {"input": {"score": "p_model", "score_kind": "probability"}}
    (folder / "card.json").write_text(json.dumps(card))
    args = ["export", "--calibrator", str(folder / "calibrator.json"), "--format", "sql"]
    res = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "map.sql"), "--column", "score"])
    assert res.exit_code == 0 and "user's score (probability)" in res.output, res.output
    p = expit(np.random.default_rng(6).normal(-2.0, 2.0, 50_000))
    sql = (tmp_path / "map.sql").read_text()
    assert np.abs(_duckdb(sql, p) - cal.predict(logit(np.clip(p, 1e-15, 1 - 1e-15)))).max() <= 1e-6
