"""Aggregate path: bucket table vs the exact in-memory path, and DuckDB vs Dask equality."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import Client, LocalCluster
from helpers.table_reference import aggregate_dask, aggregate_duckdb

from calibflow import metrics as M
from calibflow.aggregate import fit_from_table, metrics_from_table
from calibflow.aggregate.options import PassOptions, TableRows
from calibflow.calibrators import make

N = 200_000
SMOOTH = ["platt", "temperature", "beta", "spline", "gaussian", "gamma"]
STEP = ["isotonic", "histogram", "scaling_binning", "bbq"]
SEG_ROWS = TableRows("score", "label", segments=("seg",))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Two Parquet parts: float32 probability score, int8 label, an int segment (known miscalibration)."""
    d = tmp_path_factory.mktemp("agg")
    rng = np.random.default_rng(7)
    paths = []
    for i in range(2):
        z = rng.normal(-1.0, 1.5, N // 2)
        y = (rng.random(N // 2) < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int8)
        t = pa.table({"score": (1 / (1 + np.exp(-z))).astype(np.float32), "label": y,
                      "seg": rng.integers(0, 3, N // 2).astype(np.int32)})
        paths.append(str(d / f"part-{i}.parquet"))
        pq.write_table(t, paths[-1])
    return paths


@pytest.fixture(scope="module")
def rows(files):
    t = pa.concat_tables([pq.read_table(p) for p in files])
    return (t["score"].to_numpy().astype(np.float64), t["label"].to_numpy().astype(np.float64),
            t["seg"].to_numpy())


@pytest.fixture(scope="module")
def table(files):
    return aggregate_duckdb(files, SEG_ROWS, PassOptions(replicates=16, seed=3))


def test_counts_and_exact_metrics(table, rows):
    s, y, seg = rows
    assert table["n"].sum() == N and table.loc[table.label == 1, "n"].sum() == y.sum()
    o = metrics_from_table(table)["overall"]
    assert o["log_loss"] == pytest.approx(M.log_loss(y, s), rel=1e-12)
    assert o["brier"] == pytest.approx(M.brier(y, s), rel=1e-12)
    assert o["calibration_ratio"] == pytest.approx(s.sum() / y.sum(), rel=1e-12)
    assert abs(o["auc"] - M.auc(y, s)) <= o["auc_tie_bound"] + 1e-12
    assert o["ece"] == pytest.approx(M.ece(y, s), abs=2e-4)
    assert o["mce"] == pytest.approx(M.mce(y, s), abs=2e-3)
    for b in (5, 30):  # any number of bins after the pass
        got = metrics_from_table(table, n_bins=b)["overall"]["ece"]
        assert got == pytest.approx(M.ece(y, s, b), abs=2e-4)


def test_segments_and_intervals(table, rows):
    s, y, seg = rows
    res = metrics_from_table(table)
    assert [r["segment"] for r in res["segments"]] == [[0], [1], [2]]
    for r in res["segments"]:
        m = seg == r["segment"][0]
        assert r["calibration_ratio"] == pytest.approx(s[m].sum() / y[m].sum(), rel=1e-12)
        assert r["log_loss"] == pytest.approx(M.log_loss(y[m], s[m]), rel=1e-12)
    ci = res["overall"]["ci"]
    for k in ("log_loss", "calibration_ratio", "ece", "auc"):
        lo, hi = ci[k]
        assert lo < hi and lo <= res["overall"][k] <= hi, k
    # The miscalibration is real (ratio ~1.1): its interval must exclude 1.
    assert ci["calibration_ratio"][0] > 1.0


def test_poisson_weights_have_mean_and_variance_one(table):
    reps = [c for c in table.columns if c.startswith("b") and c[1:].isdigit()]
    tot = table[reps].sum().to_numpy()
    # Each replicate's total is a sum of N Poisson(1) draws: mean N, s.d. sqrt(N) = 447.
    assert np.all(np.abs(tot - N) < 5 * np.sqrt(N))
    assert 0.3 < np.std(tot) / np.sqrt(N) < 2.0
    assert len(set(tot.tolist())) == len(reps)  # replicates are distinct streams


@pytest.mark.parametrize("method", SMOOTH + STEP)
def test_aggregate_fit_matches_exact(method, table, rows):
    s, y, _ = rows
    agg = fit_from_table(table, method)
    exact = make(method, input="probability").fit(s, y)
    grid = np.linspace(s.min(), s.max(), 1001)
    diff = np.abs(agg.predict(grid) - exact.predict(grid)).max()
    # Smooth maps: second-order bucketing error. Step maps move their steps by up to a bucket, so a
    # point near a step can take the neighbouring value (see docs/benchmarks/scale.md for the figures).
    assert diff <= (1e-6 if method in SMOOTH else 0.1), diff


def test_methods_needing_rows_say_so(table):
    for m in ("vad", "calem", "angular", "mist"):
        with pytest.raises(ValueError, match="needs"):
            fit_from_table(table, m)


@pytest.mark.slow  # a Dask cluster: make test, not test-fast
def test_dask_localcluster_equals_duckdb(files, table):
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cl, \
            Client(cl) as client:
        dk = aggregate_dask(files, SEG_ROWS, PassOptions(replicates=16, seed=3), client=client)
    keys = ["seg_0", "bucket", "label"]
    assert list(dk.columns) == list(table.columns)
    assert (dk[keys].to_numpy() == table[keys].to_numpy()).all()
    reps = [c for c in table.columns if c.startswith("b") and c[1:].isdigit()]
    assert (dk[["n", *reps]].to_numpy() == table[["n", *reps]].to_numpy()).all()  # integer-valued: exact
    for c in ("sum_z", "sum_q", "sum_ll", "sum_q2"):
        np.testing.assert_allclose(dk[c], table[c], rtol=1e-9)


def test_seed_changes_draws_not_counts(files, table):
    other = aggregate_duckdb(files, SEG_ROWS, PassOptions(replicates=16, seed=4))
    assert (other["n"] == table["n"]).all() and not (other["b0"] == table["b0"]).all()
    with pytest.raises(ValueError, match="no Parquet files"):
        aggregate_duckdb(str(files[0]) + ".missing*", TableRows("score", "label"))
    assert duckdb.__version__


def test_scale_params_and_switch():
    from calibflow.aggregate import switch
    from calibflow.aggregate.switch import parse_scale

    cfg = parse_scale({"row_threshold": 1000, "buckets": 1024})
    # issue 35: one path; row_threshold still parses (old params files) but chooses nothing any more
    # (this asserted choose_path(1000) == "rows" and choose_path(1001) == "aggregate")
    assert cfg.row_threshold == 1000 and not hasattr(switch, "choose_path")
    assert cfg.grid.width == pytest.approx(32 / 1024)
    for bad, msg in (({"row_treshold": 5}, "unknown key"), ({"buckets": 1}, "buckets"),
                     ({"replicates": -1}, "replicates"), ({"z_max": 0}, "z_max")):
        with pytest.raises(ValueError, match=msg):
            parse_scale(bad)


def test_distinct_scores_make_step_maps_exact(tmp_path):
    """Few distinct scores (float32 rounded to 3 decimals): one group per score, so the step maps fitted on
    the table are the row fits (1e-12), and AUC is exact; with a lower bound the grid is used instead."""
    rng = np.random.default_rng(11)
    z = rng.normal(-1, 1.5, 20_000)
    s = np.round(1 / (1 + np.exp(-z)), 3).astype(np.float32)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int64)
    path = tmp_path / "few.parquet"
    pq.write_table(pa.table({"score": s, "label": y}), path)
    table = aggregate_duckdb(str(path), TableRows("score", "label"), PassOptions(distinct_max=100_000))
    sd = s.astype(np.float64)
    assert "score_probability" in table.columns and table["bucket"].max() + 1 == np.unique(sd).size
    for m in ("isotonic", "histogram", "scaling_binning", "bbq"):
        agg, ex = fit_from_table(table, m), make(m, input="probability").fit(sd, y.astype(float))
        assert np.abs(agg.predict(sd) - ex.predict(sd)).max() < 1e-12, m
    assert metrics_from_table(table)["overall"]["auc"] == pytest.approx(M.auc(y, sd), abs=1e-12)
    coarse = aggregate_duckdb(str(path), TableRows("score", "label"), PassOptions(distinct_max=100))
    assert "score_probability" not in coarse.columns


def _assert_same_table(a, b, keys):
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    assert a[keys].reset_index(drop=True).equals(b[keys].reset_index(drop=True))  # NaN keys compare equal
    assert (a["n"].to_numpy() == b["n"].to_numpy()).all()
    for c in ("sum_z", "sum_q", "sum_ll", "sum_q2"):
        np.testing.assert_allclose(a[c], b[c], rtol=1e-12, atol=1e-300)


def test_kernel_equals_duckdb_group_by(files, monkeypatch):
    """The flat-array pass and DuckDB's GROUP BY (the reference) give one table, segments included; a key
    space over ``KEYS_MAX`` falls back to the GROUP BY by itself."""
    from helpers import table_reference as T

    how = PassOptions(replicates=4, seed=1)
    fast = aggregate_duckdb(files, SEG_ROWS, how, engine="kernel")
    ref = aggregate_duckdb(files, SEG_ROWS, how, engine="sql")
    _assert_same_table(fast, ref, ["seg_0", "bucket", "label"])
    assert (fast[["b0", "b3"]].to_numpy() == ref[["b0", "b3"]].to_numpy()).all()  # draws follow the table
    monkeypatch.setattr(T, "KEYS_MAX", 1000)
    _assert_same_table(aggregate_duckdb(files, SEG_ROWS, how), ref, ["seg_0", "bucket", "label"])


def test_kernel_string_and_null_segments_and_logit_scores(tmp_path):
    rng = np.random.default_rng(5)
    n = 30_000
    z = rng.normal(0, 2, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.int64)
    country = np.array(["de", "fr", None, "us"], dtype=object)[rng.integers(0, 4, n)]
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"margin": z, "y": y, "country": country, "w": rng.integers(1, 4, n)}), path)
    rows = TableRows("margin", "y", "logit", ("country",), "w")
    fast = aggregate_duckdb(str(path), rows, engine="kernel")
    ref = aggregate_duckdb(str(path), rows, engine="sql")
    _assert_same_table(fast, ref, ["seg_0", "bucket", "label"])
    assert fast["seg_0"].isna().any()  # a missing segment value is a segment of its own, as in GROUP BY
    assert fast["n"].sum() == pq.read_table(path)["w"].to_numpy().sum()


@pytest.mark.parametrize("engine", ["kernel", "sql"])
@pytest.mark.parametrize(
    ("column", "value", "message"),
    [("label", 2, "outside"), ("score", np.nan, "not probabilities"), ("score", 1.5, "not probabilities")],
)
def test_invalid_rows_are_refused_with_their_count(tmp_path, engine, column, value, message):
    t = {"score": np.linspace(0.01, 0.99, 100), "label": np.tile([0, 1], 50).astype(np.float64)}
    t[column][[3, 7]] = value
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(t), path)
    with pytest.raises(ValueError, match=f"^2 rows .*{message}"):
        aggregate_duckdb(str(path), TableRows("score", "label"), engine=engine)


def test_group_replicate_counts_are_poisson_of_the_group_size(table):
    """A group's replicate count is the sum of its rows' Poisson(1) draws: Poisson(n), so its variance is
    n (dispersion ~1 across groups and replicates), and the draws depend on the seed only."""
    reps = [c for c in table.columns if c.startswith("b") and c[1:].isdigit()]
    n = table["n"].to_numpy()[:, None]
    b = table[reps].to_numpy()
    dispersion = ((b - n) ** 2).sum() / (n.sum() * len(reps))  # E (b - n)^2 = n for Poisson(n)
    assert 0.9 < dispersion < 1.1, dispersion
    assert (b == np.round(b)).all() and b.min() >= 0
