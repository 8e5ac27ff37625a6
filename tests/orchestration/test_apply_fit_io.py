"""`calibflow apply` and `calibflow fit` under bad input and I/O faults: one line each, no traceback, the last
good output kept.

The tests in ``REAL`` run the real CLI in a subprocess: each command at least once, and where the process is
the point (a crash-sized input, a killed run's temporary file). The others run the same command in this
process (helpers.cli_here: the same argv, stderr captured at the file descriptor): one import of the command
instead of one per case."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.cli_here import run_here

from calibflow import calibrators, sources

#: Tests that run the real command in a subprocess (see the module's docstring).
REAL = {
    "test_apply_unwritable_folder_is_one_line",
    "test_a_killed_applys_temp_file_is_removed_by_the_next_run",
    "test_fit_text_labels_are_one_line_before_any_cast",
    "test_fit_segment_with_millions_of_values_is_one_line_not_a_crash",
}
_HERE: list = []  # the running test's (monkeypatch, capfd) when it runs the command in this process


@pytest.fixture(autouse=True)
def _where(request, monkeypatch, capfd):
    _HERE[:] = [] if request.node.originalname in REAL else [(monkeypatch, capfd)]
    yield
    _HERE.clear()


def _cli(*args: str) -> subprocess.CompletedProcess:
    if _HERE:
        return run_here(list(args), *_HERE[0])
    cmd = [sys.executable, "-m", "calibflow.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _one_line(r: subprocess.CompletedProcess, text: str) -> None:
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert text in r.stderr, r.stderr


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("io")
    rng = np.random.default_rng(0)
    z = rng.normal(-1, 1.5, 5_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-(0.6 * z - 0.5)))).astype(np.int8)
    p = 1 / (1 + np.exp(-z))
    w = rng.uniform(0.5, 2, z.size)
    ylab = np.where(y == 1, "yes", "no")
    pq.write_table(pa.table({"p": p, "y": y, "w": w, "ylab": ylab}), d / "in.parquet")
    cal = calibrators.make("platt", input="probability").fit(p, y.astype(float))
    (d / "models").mkdir()
    (d / "models" / "calibrator.json").write_text(sources.record_score_kind(cal, "probability").to_json())
    (d / "models" / "card.json").write_text(json.dumps({"method": "platt", "reason": "x", "metrics": {}}))
    return d


def _apply(work: Path, output: str | Path, *extra: str, calibrator: Path | None = None):
    cal = calibrator or work / "models" / "calibrator.json"
    return _cli("apply", "--calibrator", str(cal), "--input", str(work / "in.parquet"), "--score", "p",
                "--output", str(output), *extra)


def test_apply_unwritable_folder_is_one_line(work):
    _one_line(_apply(work, "/sys/calibflow-probe/scored.parquet"), "/sys/calibflow-probe")


def test_apply_output_that_is_a_folder_is_one_line(work, tmp_path):
    _one_line(_apply(work, tmp_path), "is a folder; give a file name")


def test_apply_output_under_a_file_is_one_line(work, tmp_path):
    (tmp_path / "f").write_text("x")
    _one_line(_apply(work, tmp_path / "f" / "scored.parquet"), "is a file, not a folder")


@pytest.mark.parametrize("name", ["scored.xlsx", "scored", "scored.json"])
def test_apply_unknown_output_format_is_refused_not_written_as_parquet(work, tmp_path, name):
    _one_line(_apply(work, tmp_path / name), "unknown format")
    assert not (tmp_path / name).exists()


def test_apply_csv_gz_is_really_gzip(work, tmp_path):
    r = _apply(work, tmp_path / "scored.csv.gz")
    assert r.returncode == 0, r.stderr
    with gzip.open(tmp_path / "scored.csv.gz", "rt") as fh:
        assert len(pd.read_csv(fh)) == 5_000


def test_apply_refuses_the_card(work, tmp_path):
    r = _apply(work, tmp_path / "o.parquet", calibrator=work / "models" / "card.json")
    _one_line(r, "this is the card; use calibrator.json")


def test_a_killed_applys_temp_file_is_removed_by_the_next_run(work, tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    leftover = tmp_path / f".scored.parquet.{dead}.tmp"
    leftover.write_bytes(b"x" * 1000)  # what SIGKILL mid-write leaves
    r = _apply(work, tmp_path / "scored.parquet")
    assert r.returncode == 0, r.stderr
    assert not leftover.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["scored.parquet"]


def test_on_null_fail_counts_all_and_pass_leaves_them_empty(work, tmp_path):
    t = pq.read_table(work / "in.parquet").to_pandas()
    t.loc[[3, 4000], "p"] = np.nan
    t.loc[[17], "p"] = None
    inp = tmp_path / "nulls.parquet"
    t.to_parquet(inp)
    out = tmp_path / "o.parquet"
    base = ["apply", "--calibrator", str(work / "models" / "calibrator.json"), "--input", str(inp),
            "--score", "p", "--output", str(out), "--batch-rows", "1000"]
    _one_line(_cli(*base), "3 null or NaN score(s), the first at row 3")
    assert not out.exists()
    r = _cli(*base, "--on-null", "pass")
    assert r.returncode == 0, r.stderr
    got = pq.read_table(out).to_pandas()
    assert got["calibrated"].isna().to_numpy().nonzero()[0].tolist() == [3, 17, 4000]
    ok = got["p"].notna()
    cal = calibrators.from_json((work / "models" / "calibrator.json").read_text())
    want = cal.predict(got.loc[ok, "p"].to_numpy())
    np.testing.assert_allclose(got.loc[ok, "calibrated"], want, rtol=1e-12)
    _one_line(_cli(*base, "--on-null", "skip"), "--on-null 'skip' is not one of fail|pass")


def _fit(work: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _cli("fit", "--calib", str(work / "in.parquet"), "--score", "p", "--methods", "platt",
                "--out", str(out), *extra)


def test_fit_text_labels_are_one_line_before_any_cast(work, tmp_path):
    _one_line(_fit(work, tmp_path / "o", "--label", "ylab"), "label column 'ylab' is VARCHAR")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda w: np.where(np.arange(w.size) == 5, -1.0, w), "1 negative value(s)"),
        (lambda w: np.where(np.arange(w.size) < 2, np.nan, w), "2 missing or non-finite value(s)"),
        (lambda w: np.zeros_like(w), "sums to 0 (all weights zero)"),
    ],
)
def test_fit_weights_are_checked_as_the_library_checks_them(work, tmp_path, edit, message):
    t = pq.read_table(work / "in.parquet").to_pandas()
    t["w"] = edit(t["w"].to_numpy())
    t.to_parquet(tmp_path / "in.parquet")
    _one_line(_fit(tmp_path, tmp_path / "o", "--label", "y", "--weight", "w"), message)
    assert not (tmp_path / "o").exists()


def test_fit_zero_weight_on_every_positive_is_refused(work, tmp_path):
    t = pq.read_table(work / "in.parquet").to_pandas()
    t["w"] = np.where(t["y"] == 1, 0.0, 1.0)
    t.to_parquet(tmp_path / "in.parquet")
    r = _fit(tmp_path, tmp_path / "o", "--label", "y", "--weight", "w")
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "one class" in r.stderr or "single class" in r.stderr, r.stderr


def test_fit_out_that_is_a_file_is_one_line(work, tmp_path):
    (tmp_path / "o").write_text("x")
    _one_line(_fit(work, tmp_path / "o", "--label", "y"), "is a file; give a folder")


def test_fit_segment_with_millions_of_values_is_one_line_not_a_crash(tmp_path):
    from calibflow.aggregate.tables import SEG_VALUES_MAX

    n = 1_200_000
    rng = np.random.default_rng(1)
    z = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.int8)
    pq.write_table(pa.table({"p": 1 / (1 + np.exp(-z)), "y": y, "id": np.arange(n)}), tmp_path / "in.parquet")
    r = _cli("fit", "--calib", str(tmp_path / "in.parquet"), "--test", str(tmp_path / "in.parquet"),
             "--score", "p", "--label", "y", "--segment", "id", "--methods", "platt",
             "--out", str(tmp_path / "o"))
    _one_line(r, f"values (at most {SEG_VALUES_MAX:,})")


def test_hostile_column_names_are_quoted_not_parsed(work, tmp_path):
    """A score column named with quotes and SQL goes through ``sources.quote_ident`` everywhere."""
    col = 'my"p"; DROP TABLE x; --'
    t = pq.read_table(work / "in.parquet").rename_columns([col, "y", "w", "ylab"])
    pq.write_table(t, tmp_path / "in.parquet")
    out = tmp_path / "o.parquet"
    r = _cli("apply", "--calibrator", str(work / "models" / "calibrator.json"), "--input",
             str(tmp_path / "in.parquet"), "--score", col, "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert pq.read_table(out).column_names == [col, "y", "w", "ylab", "calibrated"]
    r = _cli("fit", "--calib", str(tmp_path / "in.parquet"), "--score", col, "--label", "y", "--weight", "w",
             "--methods", "platt", "--out", str(tmp_path / "fit"))
    assert r.returncode == 0, r.stderr
