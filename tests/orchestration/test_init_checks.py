"""``calibflow init`` refuses at once what the run would refuse later, in one line naming what it saw.

Each case writes a real file (generated ground-truth scores, helpers.source_data, with one defect) and runs
the real ``calibflow init`` command; a refusal must leave params.yaml byte-identical. The text-date cases
then run the pipeline's own validate and prepare stages on the declared source, so the format init detected
is the one the run reads with (01/09/2026 is the 1st of September in every row, not January 9th).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.source_data import scores_frame
from typer.testing import CliRunner

from calibflow.cli.main import app
from calibflow.pipeline.params_schema import load_and_validate, with_paper_profiles

REPO = Path(__file__).resolve().parents[2]
PARAMS_BEFORE = "seed: 0\n# a comment that must survive\n"


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return scores_frame(n=20_000, days=30, seed=4)


def init(tmp_path: Path, data: Path, *extra: str, score: bool = True) -> tuple[int, str, str]:
    """``calibflow init`` in ``tmp_path``; returns (exit code, output, params.yaml after)."""
    params = tmp_path / "params.yaml"
    if not params.exists():
        params.write_text(PARAMS_BEFORE)
    args = ["init", "--data", str(data), "--label", "clicked", "--params", str(params), *extra]
    if score:
        args += ["--score", "p_model"]
    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output, params.read_text()


def refused(tmp_path: Path, data: Path, *extra: str) -> str:
    code, out, after = init(tmp_path, data, *extra)
    assert code == 1, out
    assert after == PARAMS_BEFORE  # nothing written
    lines = out.strip().splitlines()
    assert len(lines) <= 2 and "Traceback" not in out, out
    return out


def test_a_label_of_2_in_7_rows_is_refused_with_the_values_and_the_fix(tmp_path, frame):
    df = frame.copy()
    df.loc[[5, 100, 2000, 3000, 7000, 15000, 19999], "clicked"] = 2
    df.to_parquet(data := tmp_path / "scores.parquet", index=False)
    out = refused(tmp_path, data)
    assert "label column 'clicked'" in out and "2 (7 rows)" in out
    assert "--positive" in out and "fix those rows" in out


def test_text_labels_without_positive_list_the_values_and_suggest_positive(tmp_path, frame):
    df = frame.copy()
    df["clicked"] = np.where(frame["clicked"] == 1, "Y", "N")
    df.to_csv(data := tmp_path / "yn.csv", index=False)
    out = refused(tmp_path, data)
    assert "'Y' (5,1" in out and "'N' (14,8" in out and "--positive" in out
    # with --positive the same file is accepted and declared with it
    code, out, after = init(tmp_path, data, "--positive", "Y")
    assert code == 0, out
    assert yaml.safe_load(after)["sources"]["yn"]["positive"] == "Y"


def test_three_label_values_with_positive_are_refused(tmp_path, frame):
    df = frame.copy()
    df["clicked"] = np.where(frame["clicked"] == 1, "yes", "no")
    df.loc[[3, 4], "clicked"] = "maybe"
    df.to_parquet(data := tmp_path / "three.parquet", index=False)
    out = refused(tmp_path, data, "--positive", "yes")
    assert "has 3 values, a label has two classes" in out and "'maybe' (2 rows)" in out
    out = refused(tmp_path, data, "--positive", "ja")
    assert "--positive 'ja' is not among the values" in out


def test_one_class_is_refused(tmp_path, frame):
    df = frame.assign(clicked=0)
    df.to_parquet(data := tmp_path / "single.parquet", index=False)
    assert "one class only (20,000 rows of 0)" in refused(tmp_path, data)


def test_empty_files_are_blamed_on_the_file(tmp_path, frame):
    frame.iloc[:0].to_parquet(zero := tmp_path / "zero.parquet", index=False)
    assert "zero.parquet has no rows" in refused(tmp_path, zero)
    (empty := tmp_path / "empty.csv").write_text("")
    out = refused(tmp_path, empty)
    assert "empty.csv is empty (0 bytes)" in out and "not found" not in out
    frame.iloc[:0].to_csv(header := tmp_path / "header.csv", index=False)
    assert "header.csv has no rows" in refused(tmp_path, header)


def test_a_duplicated_column_is_refused(tmp_path):
    data = tmp_path / "dup.csv"
    data.write_text("a,clicked,p_model,p_model\n1,0,0.2,0.3\n2,1,0.5,0.9\n")
    assert "column name(s) 'p_model' more than once" in refused(tmp_path, data)


def test_non_finite_scores_are_counted_and_never_decide_the_kind(tmp_path, frame):
    df = frame.copy()
    df.loc[[1, 2], "p_model"] = np.nan
    df.loc[[3], "p_model"] = np.inf
    df.loc[[4], "p_model"] = -np.inf
    df.to_parquet(data := tmp_path / "nan.parquet", index=False)
    out = refused(tmp_path, data)
    assert "4 value(s) that are not finite (2 null, 0 NaN, 2 inf)" in out  # pandas writes NaN as null
    lo, hi = frame["p_model"].drop(index=[1, 2, 3, 4]).agg(["min", "max"])
    assert f"[{lo:.6g}, {hi:.6g}]" in out  # the finite values: a probability's range, said
    # the same rows without the 4 bad values: guessed a probability (the 4 values did not decide)
    df.drop(index=[1, 2, 3, 4]).to_parquet(data, index=False)
    code, out, after = init(tmp_path, data)
    assert code == 0, out
    assert yaml.safe_load(after)["sources"]["nan"]["score_kind"] == "probability"


def test_null_segments_are_reported(tmp_path, frame):
    df = frame.copy()
    df.loc[[1, 2, 3], "country"] = None
    df.to_parquet(data := tmp_path / "seg.parquet", index=False)
    code, out, _ = init(tmp_path, data, "--segments", "country")
    assert code == 0, out
    assert "segment column 'country': 3 null value(s) of 20,000 rows" in out


def test_names_the_schema_refuses_are_refused_or_normalised_and_said(tmp_path, frame):
    frame.to_parquet(data := tmp_path / "My-Scores.parquet", index=False)
    for bad, fix in (("My_Scores", "my_scores"), ("my-src", "my_src")):
        out = refused(tmp_path, data, "--name", bad)
        assert f"--name {bad!r} is not a source name" in out and f"try --name {fix}" in out
    code, out, after = init(tmp_path, data)
    assert code == 0, out
    assert "source name 'my_scores' (from the file name 'My-Scores'" in out
    assert list(yaml.safe_load(after)["sources"]) == ["my_scores"]


def test_a_written_source_passes_the_params_schema(tmp_path, frame):
    frame.to_parquet(data := tmp_path / "Ads-2026.parquet", index=False)
    params = with_paper_profiles(yaml.safe_load((REPO / "params.yaml").read_text()), REPO / "params.yaml")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    code, out, _ = init(tmp_path, data, "--time", "date", "--segments", "country")
    assert code == 0, out
    load_and_validate(tmp_path / "params.yaml")  # raises ParamsError otherwise


# ---------------------------------------------------------------------------------------- text dates


def _dates(frame: pd.DataFrame, fmt: str) -> pd.DataFrame:
    return frame.assign(date=pd.to_datetime(frame["date"]).dt.strftime(fmt))


def test_ambiguous_day_month_dates_ask_for_a_format(tmp_path, frame):
    early = frame[pd.to_datetime(frame["date"]).dt.day <= 12]
    _dates(early, "%d/%m/%Y").to_csv(data := tmp_path / "ambig.csv", index=False)
    out = refused(tmp_path, data, "--time", "date")
    assert "reads as %d/%m/%Y and as %m/%d/%Y" in out and "--time-format" in out
    out = refused(tmp_path, data, "--time", "date", "--time-format", "%Y/%m/%d")
    assert "do not match --time-format '%Y/%m/%d'" in out and "'01/09/2026'" in out


@pytest.mark.parametrize(
    ("fmt", "given", "kind"),
    [("%d/%m/%Y", None, "csv"), ("%d/%m/%Y", "%d/%m/%Y", "csv"), ("%m/%d/%Y", None, "parquet")],
)
def test_text_dates_are_read_with_one_format_by_init_and_the_run(tmp_path, frame, fmt, given, kind):
    """Detected from all values (or given), written as time_format, used by validate and prepare."""
    from calibflow.pipeline import fetch, fingerprint, prepare, validate

    df = _dates(frame, fmt)
    if given:  # only days <= 12: ambiguous, so the given format decides
        df = df[pd.to_datetime(frame["date"]).dt.day <= 12]
    data = tmp_path / f"dates.{kind}"
    df.to_csv(data, index=False) if kind == "csv" else df.to_parquet(data, index=False)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params.update(datasets={"names": [], "targets": {}, "max_rows": 0}, papers=[], sources={})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    code, out, after = init(tmp_path, data, "--time", "date", *(["--time-format", given] if given else []))
    assert code == 0, out
    decl = yaml.safe_load(after)["sources"]["dates"]
    assert decl["time_format"] == fmt
    last = "2026-09-12" if given else "2026-09-30"
    assert f"2026-09-01 00:00:00 to {last} 00:00:00 (text, read as {fmt})" in out

    params = yaml.safe_load(after)
    params["sources"]["dates"]["path"] = str(data)
    fingerprint.run("dates", params, tmp_path)
    fetch.run(params, tmp_path)
    validate.run("raw", params, tmp_path)
    prepare.run(params, tmp_path)
    split = json.loads((tmp_path / "data/prepared/splits.json").read_text())["datasets"]["dates"]
    assert split["time_range"][0].startswith("2026-09-01") and split["time_range"][1].startswith(last)
