"""calibflow export --format sql: apply's numbers in DuckDB, SQLite and a real PostgreSQL server, every input.

Every method of ``available("scores")`` and partial_pooling on a 200-value segment, on 1e5 rows holding
NULL, NaN, +-inf and out-of-range scores (and unseen / NULL segment values): the SQL's answer equals what
``calibflow apply`` computes (``sources.calibrate_scores``, null where apply keeps null or refuses) within
1e-9 in each engine. The PostgreSQL server is started by the fixture (Debian's package; ``.ci/run``
installs it) and stopped at teardown.
"""

from __future__ import annotations

import json
import sqlite3

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from scipy.special import expit, logit

from calibflow import calibrators as C
from calibflow import export as X
from calibflow import export_sql as S
from calibflow.sources import calibrate_scores
from tests.helpers.postgres import PgServer

N = 100_000
METHODS = C.available("scores")


@pytest.fixture(scope="module")
def pg():
    server = PgServer()
    yield server
    server.stop()


def _fit(method: str, cal_input: str, score_kind: str | None, seed: int = 0) -> C.BaseCalibrator:
    """Fitted on an overconfident, too-high score; ``score_kind`` recorded as a deployed file records it."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 1.5, 5000)
    y = (rng.random(5000) < expit(z)).astype(np.float64)
    s = 1.6 * z + 0.4
    cal = C.make(method, input=cal_input).fit(s if cal_input != "probability" else expit(s), y)
    if score_kind is not None:
        cal.score_kind_ = score_kind
    return cal


def _scores(kind: str, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = rng.normal(-2.5, 3.0, N)
    x = expit(t) if kind == "probability" else t
    x[:12] = [np.nan, np.inf, -np.inf, 0.0, 1.0, 1e-300, 1 - 1e-16, 1e308, -1e308, -0.1, 1.5, 5e-13]
    return x


def _want(cal, x: np.ndarray, kind: str, **segments) -> np.ndarray:
    """What apply serves: calibrate_scores on the rows it serves, null elsewhere (NaN here)."""
    ok = np.isfinite(x) & (((x >= 0) & (x <= 1)) if kind == "probability" else True)
    out = np.full(x.size, np.nan)
    extra = {"segments": {k: v[ok] for k, v in segments.items()}} if segments else {}
    out[ok] = calibrate_scores(cal, x[ok], kind, **extra)
    return out


def _close(got: np.ndarray, want: np.ndarray, tol: float = 1e-9) -> None:
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want)), (
        "NULL where apply serves, or a number where it refuses"
    )
    assert np.nanmax(np.abs(got - want)) <= tol


def _duckdb(sql: str, cols: dict) -> np.ndarray:
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.register("scores", pa.table(cols))
    res = con.execute(f"SELECT calibrated FROM ({sql}) AS q ORDER BY id").fetchall()
    return np.array([np.nan if r[0] is None else r[0] for r in res], dtype=np.float64)


def _sqlite(sql: str, cols: dict) -> np.ndarray:
    con = sqlite3.connect(":memory:")
    names = list(cols)
    con.execute(f"CREATE TABLE scores ({', '.join(S.quote(c) for c in names)})")
    rows = zip(
        *[
            [None if (isinstance(v, float) and np.isnan(v)) else v for v in np.asarray(cols[c]).tolist()]
            for c in names
        ],
        strict=True,
    )
    con.executemany(f"INSERT INTO scores VALUES ({', '.join('?' * len(names))})", rows)
    res = con.execute(f"SELECT calibrated FROM ({sql}) AS q ORDER BY id").fetchall()
    return np.array([np.nan if r[0] is None else r[0] for r in res], dtype=np.float64)


def _postgres(pg: PgServer, sql: str, cols: dict, types: dict) -> np.ndarray:
    pg.load("scores", cols, types)
    return pg.query_floats(f"SELECT calibrated FROM ({sql}) AS q ORDER BY id")


def _sql(cal, kind: str | None, dialect: str, **kw) -> str:
    payload = json.loads(cal.to_json())
    text, _ = X.export(json.dumps(payload), "sql", dialect=dialect, table="scores", **kw)
    return text


# (calibrator's input, the user's score kind recorded in the file): the pipeline's deployed case (a logit
# calibrator serving the user's probability column) and a calibrator fitted on probabilities directly
CASES = [("logit", "probability"), ("probability", None)]


@pytest.mark.parametrize("cal_input,score_kind", CASES)
@pytest.mark.slow  # a real engine on 1e5 rows (PostgreSQL, SQLite, Spark): make test, not test-fast
@pytest.mark.parametrize("engine", ["duckdb", "sqlite", "postgres"])
def test_every_method_equals_apply_in_each_engine(engine, cal_input, score_kind, pg):
    """1e5 rows with NULL/NaN/+-inf/out-of-range scores; every score method; within 1e-9 of apply."""
    kind = score_kind or cal_input
    x = _scores(kind)
    cols = {"id": np.arange(N), "score": x}
    if engine == "postgres":
        pg.load("scores", cols, {"id": "bigint", "score": "double precision"})
    lite = None
    for method in METHODS:
        cal = _fit(method, cal_input, score_kind)
        want = _want(cal, x, kind)
        sql = _sql(cal, score_kind, engine)
        if engine == "duckdb":
            got = _duckdb(sql, cols)
        elif engine == "sqlite":
            if lite is None:
                lite = sqlite3.connect(":memory:")
                lite.execute("CREATE TABLE scores (id INTEGER, score REAL)")
                lite.executemany(
                    "INSERT INTO scores VALUES (?, ?)",
                    [(i, None if np.isnan(v) else v) for i, v in enumerate(x.tolist())],
                )
            res = lite.execute(f"SELECT calibrated FROM ({sql}) AS q ORDER BY id").fetchall()
            got = np.array([np.nan if r[0] is None else r[0] for r in res])
        else:
            got = pg.query_floats(f"SELECT calibrated FROM ({sql}) AS q ORDER BY id")
        try:
            _close(got, want)
        except AssertionError as exc:
            raise AssertionError(f"{method} in {engine}: {exc}") from None


def test_flat_platt_is_a_formula_exact_on_a_million_scores():
    """Issue 37's CTR case: Platt slope ~0.2 on the logit, probability input. The export is the formula,
    instant, and within 1e-12 of apply over 1e6 scores from 1e-12 to 1 - 1e-12 in DuckDB."""
    rng = np.random.default_rng(0)
    p = expit(rng.normal(-4.0, 1.0, 20_000))
    y = (rng.random(p.size) < expit(-4.0 + 0.17 * (logit(p) + 4.0))).astype(np.float64)
    cal = C.make("platt").fit(logit(p), y)
    assert 0.1 < cal.coef_ < 0.3
    cal.score_kind_ = "probability"
    sql, plan = X.export(cal.to_json(), "sql")
    assert plan.closed is not None and len(sql) < 20_000  # a formula (the old table: 1.3 MB)
    x = np.exp(np.linspace(np.log(1e-12), np.log(0.5), 500_000))
    x = np.r_[x, 1.0 - x]
    con = duckdb.connect()
    con.register("t", pa.table({"score": x}))
    got = con.execute(f"SELECT {sql} AS p FROM t").fetchnumpy()["p"]
    assert np.abs(np.asarray(got) - calibrate_scores(cal, x, "probability")).max() <= 1e-12


def _segmented(seed: int = 3):
    """partial_pooling on a 200-value string segment (a handful of positives in many) and a second one."""
    rng = np.random.default_rng(seed)
    n = 60_000
    country = rng.choice(
        [f"c{i:03d}" for i in range(200)], n, p=np.r_[np.full(20, 0.03), np.full(180, 0.4 / 180)]
    )
    device = rng.choice(["ios", "android", "web"], n)
    bias = {f"c{i:03d}": rng.normal(0, 0.5) for i in range(200)}
    z = rng.normal(-3.0, 1.2, n)
    shift = np.array([bias[c] for c in country]) + (device == "web") * 0.4
    y = (rng.random(n) < expit(z + shift)).astype(np.float64)
    seg = {"country": country.astype(object), "device": device.astype(object)}
    seg["country"][:50] = None  # a null is its own level
    cal = C.make("partial_pooling").fit(z, y, segments=seg)
    cal.score_kind_ = "logit"
    return cal


def _segment_rows(seed: int = 9):
    rng = np.random.default_rng(seed)
    x = rng.normal(-3.0, 1.5, N)
    x[:6] = [np.nan, np.inf, -np.inf, 1e308, -1e308, 0.0]
    country = rng.choice([f"c{i:03d}" for i in range(230)], N).astype(object)  # c200..c229 never seen
    country[6:300:3] = None
    device = rng.choice(["ios", "android", "web", "tv"], N).astype(object)  # tv never seen
    device[7:200:5] = None
    return x, country, device


@pytest.mark.slow  # a real engine on 1e5 rows (PostgreSQL, SQLite, Spark): make test, not test-fast
@pytest.mark.parametrize("engine", ["duckdb", "sqlite", "postgres"])
def test_partial_pooling_reads_the_segment_columns_like_apply(engine, pg):
    cal = _segmented()
    x, country, device = _segment_rows()
    want = _want(cal, x, "logit", country=country, device=device)
    sql, plan = X.export(cal.to_json(), "sql", dialect=engine, table="scores")
    assert plan.segments is not None and '"country"' in sql.replace("`", '"')
    cols = {"id": np.arange(N), "score": x, "country": country, "device": device}
    if engine == "duckdb":
        got = _duckdb(
            sql,
            {
                **cols,
                "country": pa.array(country.tolist(), pa.string()),
                "device": pa.array(device.tolist(), pa.string()),
            },
        )
    elif engine == "sqlite":
        got = _sqlite(sql, cols)
    else:
        got = _postgres(
            pg, sql, cols, {"id": "bigint", "score": "double precision", "country": "text", "device": "text"}
        )
    _close(got, want)


def test_partial_pooling_parameter_table(tmp_path):
    """--format params: one CSV row per level, the global row first; the SQL formula rebuilt from it."""
    import csv
    import io

    cal = _segmented()
    text, _ = X.export(cal.to_json(), "params")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["block"] == "global"
    a, b, c = (float(rows[0][k]) for k in ("offset", "log_slope", "centre"))
    assert [a, b, c] == [float(v) for v in cal.global_]
    country = {r["level_1"]: r for r in rows if r["column_1"] == "country" and not r["column_2"]}
    assert len(country) == len(cal.vocab_[0]) >= 200
    seen = next(k for k in country if k != "(null)")
    d, g = float(country[seen]["offset"]), float(country[seen]["log_slope"])
    others = [r for r in rows if r["block"] not in ("global",) and r["column_1"] != "country"]
    z = -2.0
    want = cal.predict(np.array([z]), segments={"country": [seen], "device": ["never-seen"]})[0]
    assert others  # the device block is there too
    assert abs(expit(a + d + np.exp(b + g) * (z - c)) - want) <= 1e-12


# ---- names: one quoting function, injection payloads quoted ----------------------------------------------

PROBES = [
    "i IS NULL THEN NULL END) AS x FROM t; DROP TABLE victim; --",
    "(SELECT 0.5)",
    "score with space",
    "score-dash",
    'quote"d',
    "it's",
    "back`tick",
    "back\\slash",
    "x */ SELECT 1; DROP TABLE victim; /* y",  # the header comment holds the name: it must not close it
]


@pytest.mark.parametrize("name", PROBES)
@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_injection_probes_are_quoted_in_duckdb(name, method):
    """The issue's probe names as the score column: the victim table survives and the answer is apply's."""
    cal = _fit(method, "logit", None)
    text, _ = X.export(cal.to_json(), "sql", column=name, table="t")
    con = duckdb.connect()
    con.execute("CREATE TABLE victim AS SELECT 42 AS v")
    x = np.random.default_rng(1).normal(-2, 2, 1000)
    con.register("src", pa.table({"id": np.arange(x.size), name: x}))
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    got = con.execute(f"SELECT calibrated FROM ({text}) AS q ORDER BY id").fetchnumpy()["calibrated"]
    assert con.execute("SELECT v FROM victim").fetchall() == [(42,)]
    _close(np.asarray(got, dtype=np.float64), cal.predict(x))


@pytest.mark.parametrize("dialect", S.DIALECTS)
def test_every_dialect_parses_back_with_only_our_names(dialect):
    """Spark and BigQuery are not run here: their SQL is parsed back by SQLGlot in that dialect; it is one
    statement whose identifiers are the user's (quoted) and the export's own."""
    import sqlglot
    import sqlglot.expressions as exp

    payload = PROBES[0]
    for method in ("platt", "isotonic"):
        cal = _fit(method, "logit", None)
        text, _ = X.export(cal.to_json(), "sql", column=payload, table="t", dialect=dialect)
        tree = sqlglot.parse(text, read=dialect)
        assert len(tree) == 1 and isinstance(tree[0], exp.Select | exp.Query)
        names = {i.name for i in tree[0].find_all(exp.Identifier)}
        assert payload in names and "victim" not in names


@pytest.mark.parametrize("name", ["", "a\nb", "nul\x00", "x" * 64, "__calibflow_s"])
def test_a_name_that_cannot_be_quoted_is_refused_in_one_line(name, tmp_path):
    from typer.testing import CliRunner

    from calibflow.cli.main import app

    path = tmp_path / "calibrator.json"
    path.write_text(_fit("platt", "logit", None).to_json())
    res = CliRunner().invoke(
        app,
        [
            "export",
            "--calibrator",
            str(path),
            "--format",
            "sql",
            "--output",
            str(tmp_path / "m.sql"),
            "--column",
            name,
        ],
    )
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
    assert "--column" in res.output and not (tmp_path / "m.sql").exists()


def test_format_decides_the_content_and_the_extension_must_match(tmp_path):
    from typer.testing import CliRunner

    from calibflow.cli.main import app

    path = tmp_path / "calibrator.json"
    path.write_text(_fit("isotonic", "logit", None).to_json())
    run = CliRunner().invoke
    res = run(
        app, ["export", "--calibrator", str(path), "--format", "table", "--output", str(tmp_path / "map.csv")]
    )
    assert res.exit_code == 1 and "use .json" in res.output and not (tmp_path / "map.csv").exists()
    res = run(
        app,
        [
            "export",
            "--calibrator",
            str(path),
            "--format",
            "sql",
            "--output",
            str(tmp_path / "m.sql"),
            "--dialect",
            "postgres",
            "--table",
            "events",
            "--output-column",
            "p_cal",
        ],
    )
    assert res.exit_code == 0, res.output
    sql = (tmp_path / "m.sql").read_text()
    assert sql.startswith("/* calibflow export: isotonic") and '"events"' in sql and '"p_cal"' in sql
    assert "NULL where apply gives null or refuses" in sql
    res = run(
        app,
        [
            "export",
            "--calibrator",
            str(path),
            "--format",
            "sql",
            "--output",
            str(tmp_path / "m.sql"),
            "--dialect",
            "oracle",
        ],
    )
    assert res.exit_code == 1 and "--dialect" in res.output


def test_partial_pooling_pair_block_joins_both_columns():
    """A column-pair block (an intersection the data supported): its cells join on both segment columns."""
    cal = _segmented()
    n_dev = len(cal.vocab_[1])
    keys = np.array([0 * n_dev + 0, 1 * n_dev + 2, 5 * n_dev + 1], dtype=np.int64)
    cal.blocks_.append(
        {
            "columns": [0, 1],
            "keys": keys,
            "offset": np.array([0.3, -0.2, 0.5]),
            "log_slope": np.zeros(3),
            "tau2": 0.1,
            "sigma2": 0.0,
        }
    )
    x, country, device = _segment_rows()
    country[:3000:2] = cal.vocab_[0][1]  # many rows in a pair cell
    device[:3000:2] = cal.vocab_[1][2]
    want = _want(cal, x, "logit", country=country, device=device)
    sql, plan = X.export(cal.to_json(), "sql", table="scores")
    assert len(plan.segments["blocks"]) == 3
    got = _duckdb(
        sql,
        {
            "id": np.arange(N),
            "score": x,
            "country": pa.array(country.tolist(), pa.string()),
            "device": pa.array(device.tolist(), pa.string()),
        },
    )
    _close(got, want)


@pytest.mark.slow  # a real engine on 1e5 rows (PostgreSQL, SQLite, Spark): make test, not test-fast
def test_the_worked_example_of_docs_serving(tmp_path, pg):
    """docs/serving.md's commands: a postgres query over `events` reading `p_model`, a closed-form
    expression pasted into DuckDB, both equal to `calibflow apply` on the same file."""
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from calibflow.cli.main import app

    rng = np.random.default_rng(4)
    p = expit(rng.normal(-2.0, 1.5, 3000))
    p[:4] = [0.0, 1.0, 1e-14, 0.5]
    pq.write_table(pa.table({"id": np.arange(p.size), "p_model": p}), tmp_path / "scores.parquet")
    run = CliRunner().invoke
    for method in ("isotonic", "platt"):
        cal = _fit(method, "logit", "probability")
        path = tmp_path / f"{method}.json"
        path.write_text(cal.to_json())
        res = run(
            app,
            [
                "apply",
                "--calibrator",
                str(path),
                "--input",
                str(tmp_path / "scores.parquet"),
                "--score",
                "p_model",
                "--output",
                str(tmp_path / "applied.parquet"),
            ],
        )
        assert res.exit_code == 0, res.output
        applied = pq.read_table(tmp_path / "applied.parquet").column("calibrated").to_numpy()
        res = run(
            app,
            [
                "export",
                "--calibrator",
                str(path),
                "--format",
                "sql",
                "--dialect",
                "postgres",
                "--table",
                "events",
                "--column",
                "p_model",
                "--output",
                str(tmp_path / "map.sql"),
            ],
        )
        assert res.exit_code == 0, res.output
        pg.load(
            "events", {"id": np.arange(p.size), "p_model": p}, {"id": "bigint", "p_model": "double precision"}
        )
        sql = (tmp_path / "map.sql").read_text()
        got = pg.query_floats(f"SELECT calibrated FROM ({sql}) AS q ORDER BY id")
        _close(got, applied)
        if method == "platt":  # a closed form: the file is an expression to paste
            res = run(
                app,
                [
                    "export",
                    "--calibrator",
                    str(path),
                    "--format",
                    "sql",
                    "--column",
                    "p_model",
                    "--output",
                    str(tmp_path / "platt_expr.sql"),
                ],
            )
            assert res.exit_code == 0, res.output
            expr = (tmp_path / "platt_expr.sql").read_text()
            q = f"SELECT {expr} AS calibrated FROM '{tmp_path / 'scores.parquet'}' ORDER BY id"
            got = np.asarray(duckdb.connect().execute(q).fetchnumpy()["calibrated"], dtype=np.float64)
            _close(got, applied)


# ``spark``: the one local session of the test process (helpers.spark_session; pyspark is a dev dependency).


@pytest.mark.slow  # a real engine on 1e5 rows (PostgreSQL, SQLite, Spark): make test, not test-fast
@pytest.mark.parametrize("method", ["platt", "beta", "quadratic", "isotonic", "venn_abers", "spline"])
def test_spark_sql_equals_apply(method, spark):
    """Spark SQL (ANSI mode, Spark 4) on 2e4 rows with NULL/NaN/+-inf/out-of-range probabilities."""
    import pandas as pd

    x = _scores("probability")[:20_000]
    cal = _fit(method, "logit", "probability")
    want = _want(cal, x, "probability")
    pdf = pd.DataFrame({"id": np.arange(x.size), "score": x})
    pdf.loc[12, "score"] = None  # a NULL besides the NaN
    want[12] = np.nan
    spark.createDataFrame(pdf).createOrReplaceTempView("scores")
    sql = _sql(cal, "probability", "spark")
    rows = spark.sql(f"SELECT id, calibrated FROM ({sql}) AS q ORDER BY id").collect()
    got = np.array([np.nan if r[1] is None else r[1] for r in rows], dtype=np.float64)
    _close(got, want)


@pytest.mark.slow  # a real engine on 1e5 rows (PostgreSQL, SQLite, Spark): make test, not test-fast
def test_partial_pooling_in_spark(spark):
    import pandas as pd

    cal = _segmented()
    x, country, device = _segment_rows()
    x, country, device = x[:20_000], country[:20_000], device[:20_000]
    want = _want(cal, x, "logit", country=country, device=device)
    pdf = pd.DataFrame({"id": np.arange(x.size), "score": x, "country": country, "device": device})
    spark.createDataFrame(pdf).createOrReplaceTempView("scores")
    sql, _ = X.export(cal.to_json(), "sql", dialect="spark", table="scores")
    rows = spark.sql(f"SELECT id, calibrated FROM ({sql}) AS q ORDER BY id").collect()
    _close(np.array([np.nan if r[1] is None else r[1] for r in rows], dtype=np.float64), want)
