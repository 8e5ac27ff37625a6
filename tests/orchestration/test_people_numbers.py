"""Issue 39: numbers printed for people are formatted for people: a weighted row count is a weight sum with
its unit (weights of 1e-300 printed "on 0 rows", 1e300 a 300-digit count); a ratio with no denominator is
``n/a`` and why (a test split with no positives printed ``nan``)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from calibflow.cli.scale import _summary
from calibflow.report._format import fmt_ratio, fmt_rows


@pytest.mark.parametrize(
    "total,weight,expect",
    [
        (5000.0, None, "5,000 rows"),
        (5e-297, "w", "weight sum 5.00e-297 (column 'w')"),
        (5e303, "w", "weight sum 5.00e+303 (column 'w')"),
        (2.5, None, "weight sum 2.50 (sum of the row weights)"),
        (1e300, None, "weight sum 1.00e+300 (sum of the row weights)"),
    ],
)
def test_rows_for_people(total, weight, expect):
    assert fmt_rows(total, weight) == expect


def test_a_ratio_without_a_denominator_says_why():
    assert fmt_ratio(float("nan"), 0.0, "no positives") == "n/a (no positives)"
    assert fmt_ratio(float("inf"), 1.0, "no positives") == "n/a (no positives)"
    assert fmt_ratio(1.02, 10.0, "no positives") == "1.0200"


def test_the_fit_summary_never_prints_nan_or_a_huge_count():
    row = {"log_loss": 0.5, "ci": {"log_loss": [0.4, 0.6]}, "calibration_ratio": float("nan"), "ece": 0.1,
           "positives": 0.0}
    rec = {"calib": {"rows": 1e300}, "test": {"rows": 1e-300}, "uncalibrated": row, "methods": {"platt": row}}
    text = _summary(rec, "w")
    assert "nan" not in text and "n/a (no positives in the test rows)" in text
    assert "weight sum 1.00e-300 (column 'w')" in text
    assert "0 rows" not in text


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("people")
    rng = np.random.default_rng(1)
    n = 4000
    s = rng.uniform(0.01, 0.99, n)
    f = pd.DataFrame({"s": s, "y": (rng.uniform(0, 1, n) < s).astype(int)})
    for name, w in (("small", 1e-300), ("big", 1e300)):
        f.assign(w=w).to_parquet(d / f"{name}.parquet")
    f.assign(y=0).to_parquet(d / "nopos.parquet")
    f.to_parquet(d / "calib.parquet")
    return d


def _fit(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "calibflow.cli", "fit", "--score", "s", "--label", "y", "--methods",
           "platt,isotonic", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name,expect", [("small", "weight sum 4.00e-297"), ("big", "weight sum 4.00e+303")])
def test_calibflow_fit_prints_a_weight_sum_with_its_unit(files, name, expect):
    out = _fit("--calib", str(files / f"{name}.parquet"), "--weight", "w", "--out", str(files / f"o_{name}"))
    assert out.returncode == 0, out.stderr
    assert f"{expect} (column 'w')" in out.stdout, out.stdout
    assert "on 0 rows" not in out.stdout


def test_calibflow_fit_on_a_test_split_with_no_positives_says_na(files):
    out = _fit("--calib", str(files / "calib.parquet"), "--test", str(files / "nopos.parquet"), "--out",
               str(files / "o_nopos"))
    assert out.returncode == 0, out.stderr
    assert "nan" not in out.stdout
    assert out.stdout.count("n/a (no positives in the test rows)") == 3, out.stdout
