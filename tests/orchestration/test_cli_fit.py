"""``calibflow fit``: calibrators from one streaming pass over Parquet files, via the real CLI.

The refusals of bad arguments run the same command in this process (helpers.cli_here: same argv, stderr
captured at the file descriptor); the fits run the real command in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.cli_here import run_here

from calibflow.calibrators import from_json


def _day(path: Path, n: int, seed: int) -> None:
    """Scores miscalibrated by a known logistic map: y ~ Bernoulli(sigmoid(0.8 logit(s) - 0.3))."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-1, 1.5, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int8)
    country = np.array(["de", "fr", "us"])[rng.integers(0, 3, n)]
    p = (1 / (1 + np.exp(-z))).astype(np.float32)
    pq.write_table(pa.table({"p": p, "y": y, "country": country}), path)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    d = tmp_path_factory.mktemp("logs")
    for day in range(3):
        (d / "calib").mkdir(exist_ok=True)
        _day(d / "calib" / f"day={day}.parquet", 100_000, day)
    _day(d / "test.parquet", 100_000, 99)
    return d


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "calibflow.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_fit_recovers_the_map_and_reports_test_intervals(logs, tmp_path):
    out = tmp_path / "cal"
    r = _cli("fit", "--calib", str(logs / "calib"), "--test", str(logs / "test.parquet"), "--score", "p",
             "--label", "y", "--segment", "country", "--methods", "platt,isotonic", "--out", str(out))
    assert r.returncode == 0, r.stderr
    platt = from_json((out / "platt.json").read_text())
    assert platt.coef_ == pytest.approx(0.8, abs=0.02) and platt.intercept_ == pytest.approx(-0.3, abs=0.02)
    rec = json.loads((out / "fit.json").read_text())
    assert rec["calib"]["rows"] == 300_000 and rec["test"]["rows"] == 100_000
    lo, hi = rec["uncalibrated"]["ci"]["calibration_ratio"]
    assert lo > 1.02  # the raw scores over-predict, and the interval says so
    for m in ("platt", "isotonic"):
        lo, hi = rec["methods"][m]["ci"]["calibration_ratio"]
        assert lo < 1.0 < hi + 0.01, (m, lo, hi)
        assert rec["methods"][m]["log_loss"] < rec["uncalibrated"]["log_loss"]
    assert sorted(s["value"] for s in rec["methods"]["platt"]["segments"]) == ["de", "fr", "us"]
    assert {s["column"] for s in rec["methods"]["platt"]["segments"]} == {"country"}
    assert "platt" in r.stdout and "uncalibrated" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--label", "clicked"], "clicked"),
        (["--label", "y", "--methods", "plat"], "unknown method 'plat'"),
        (["--label", "y", "--score-kind", "odds"], "--score-kind"),
        (["--label", "y", "--segment", "contry"], "contry"),
        (["--label", "y", "--engine", "flink"], "engine must be one of duckdb, dask, spark"),
        (["--label", "y", "--spark-master", "spark://h:1"], "needs engine spark"),
        (["--label", "y", "--dask-address", "tcp://h:1"], "needs engine dask"),
    ],
)
def test_fit_errors_are_one_line_and_write_nothing(logs, tmp_path, args, message, monkeypatch, capfd):
    out = tmp_path / "cal"
    r = run_here(["fit", "--calib", str(logs / "calib"), "--score", "p", "--out", str(out), *args],
                 monkeypatch, capfd)
    assert r.returncode == 1 and message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 2
    assert not out.exists()


def test_apply_streams_in_batches_of_the_chunk_size(logs, tmp_path):
    """Memory of `calibflow apply` is bounded by its chunk: each batch is read, mapped and written on its
    own, so the output's row groups are never larger than ``batch_rows`` (checked structurally, not timed)."""
    from calibflow.apply import apply_file
    from calibflow.calibrators import make

    rows = pq.read_table(logs / "test.parquet")
    s = rows["p"].to_numpy().astype(np.float64)
    cal = make("platt", input="probability").fit(s, rows["y"].to_numpy().astype(np.float64))
    path = tmp_path / "platt.json"
    path.write_text(cal.to_json())
    out = tmp_path / "scored.parquet"
    n = apply_file(path, str(logs / "test.parquet"), "p", out, score_kind="probability", batch_rows=7_000)
    meta = pq.ParquetFile(out).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert n == rows.num_rows == sum(sizes) and max(sizes) <= 7_000 and len(sizes) >= rows.num_rows // 7_000
    np.testing.assert_allclose(pq.read_table(out)["calibrated"].to_numpy(), cal.predict(s), rtol=1e-12)
