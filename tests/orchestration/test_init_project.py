"""``calibflow init`` on a team's first day: the split that fits the data, globs DVC can follow, the first
commit, and a project command outside a project that says how to make one.

Each case runs the real command (``CliRunner``) in a fresh folder on a small generated table
(helpers.source_data); a refusal must leave the folder as it was.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.source_data import scores_frame, write
from typer.testing import CliRunner

from calibflow import sources as src
from calibflow import timesplit
from calibflow.cli.main import app


def _init(folder: Path, data: str, *extra: str):
    args = ["init", "--data", data, "--label", "clicked", "--score", "p_model", *extra]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        return CliRunner().invoke(app, args)


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, check=True).stdout


def test_a_seven_day_source_is_refused_with_a_split_that_fits_then_accepted_with_it(tmp_path):
    write(scores_frame(n=800, days=7, seed=1), "parquet", tmp_path)
    res = _init(tmp_path, "scores.parquet", "--time", "date", "--name", "ads")
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in res.output, res.output
    assert "7 day(s)" in lines[0] and "14d" in lines[0] and "7d" in lines[0], lines[0]
    assert lines[1] == "fix: add --test-last 2d --calib-last 5d to this command", lines[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]  # nothing written

    res = _init(tmp_path, "scores.parquet", "--time", "date", "--name", "ads", "--test-last", "2d",
                "--calib-last", "5d")
    assert res.exit_code == 0, res.output
    decl = yaml.safe_load((tmp_path / "params.yaml").read_text())["sources"]["ads"]
    assert decl["split"] == {"test_last": "2d", "calib_last": "5d"}
    assert "calib_last: 5d" in res.output or "'calib_last': '5d'" in res.output


def test_split_options_need_a_time_column_and_a_split_that_fits(tmp_path):
    write(scores_frame(n=800, days=30, seed=2), "parquet", tmp_path)
    res = _init(tmp_path, "scores.parquet", "--test-last", "3d")
    assert res.exit_code == 1 and "--time" in res.output, res.output
    res = _init(tmp_path, "scores.parquet", "--time", "date", "--test-last", "40d")
    assert res.exit_code == 1 and "--test-last" in res.output and "30 day(s)" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]


def test_proposed_splits_fit_and_leave_a_features_source_rows_to_train_on():
    lo = "2026-09-01"
    for days in (2, 3, 7, 10, 21, 90):
        hi = str(pd.Timestamp(lo) + pd.Timedelta(days=days - 1, hours=23))
        for train in (False, True):
            cfg = timesplit.propose_split(lo, hi, needs_train=train)
            if train and days < 3:
                assert cfg is None
                continue
            assert cfg is not None, (days, train)
            assert timesplit.split_problem(lo, hi, cfg, needs_train=train) is None, (days, cfg)
    assert timesplit.propose_split(lo, "2026-09-01 20:00") is None  # one day: no time split
    assert timesplit.split_problem(lo, "2026-09-30", {}) is None  # 30 days hold the default 14d + 7d


def test_a_glob_is_declared_as_its_folder_and_pattern_that_dvc_can_depend_on(tmp_path):
    frame = scores_frame(n=900, days=30, seed=3)
    folder = write(frame, "folder", tmp_path)  # daily/<day>.parquet
    (folder / "notes.txt").write_text("not data")
    res = _init(tmp_path, "daily/*.parquet", "--time", "date", "--name", "g")
    assert res.exit_code == 0, res.output
    decl = yaml.safe_load((tmp_path / "params.yaml").read_text())["sources"]["g"]
    assert decl["path"] == "daily" and decl["glob"] == "*.parquet", decl
    spec = src.parse_source("g", decl).at(tmp_path)
    assert len(src.files(spec.path)) == frame["date"].nunique()
    assert "900 rows" in res.output


def test_glob_key_and_glob_paths_are_checked():
    with pytest.raises(ValueError, match="glob"):
        src.parse_source("g", {"path": "d/*.parquet", "glob": "*.parquet", "label": "y", "score": "s"})
    with pytest.raises(ValueError, match="glob"):
        src.parse_source("g", {"path": "d", "glob": "x.parquet", "label": "y", "score": "s"})
    assert src.split_glob("logs/day=*/x.parquet") == ("logs", "day=*/x.parquet")
    assert src.split_glob("*.csv") == (".", "*.csv")
    assert src.split_glob("a/b.csv") == ("a/b.csv", None)


def test_run_with_a_glob_path_in_params_names_the_fix(tmp_path):
    from calibflow.cli.main import UserError, check_source_paths

    with pytest.raises(UserError, match=r"`path: big` and `glob: '\*.parquet'`"):
        check_source_paths({"sources": {"g": {"path": "big/*.parquet"}}})
    check_source_paths({"sources": {"f": {"path": "big"}, "u": {"path": "s3://b/x/*.parquet"}}})


def test_init_commits_the_project_files_and_never_the_data(tmp_path):
    write(scores_frame(n=600, days=30, seed=5), "parquet", tmp_path)
    res = _init(tmp_path, "scores.parquet", "--time", "date", "--name", "ads")
    assert res.exit_code == 0, res.output
    assert "committed the project files" in res.output, res.output
    tracked = set(_git(tmp_path, "ls-files").split())
    assert {"params.yaml", "dvc.yaml", ".gitignore", ".dvcignore", ".calibflow/code.json"} <= tracked
    assert "scores.parquet" not in tracked
    assert "/scores.parquet" in (tmp_path / ".gitignore").read_text().splitlines()
    _git(tmp_path, "add", "-A")  # what a user does next: the data stays out
    assert "scores.parquet" not in _git(tmp_path, "diff", "--cached", "--name-only")
    assert _git(tmp_path, "status", "--porcelain", "--", "params.yaml", "dvc.yaml") == ""


@pytest.mark.parametrize("argv", [["run"], ["repro"], ["validate"], ["report"], ["monitor", "run"]])
def test_project_commands_outside_a_project_say_how_to_make_one(tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CALIBFLOW_ROOT", raising=False)
    res = CliRunner().invoke(app, argv)
    assert res.exit_code != 0
    assert "no calibflow project" in res.output and "calibflow init --data" in res.output, res.output
    assert "Traceback" not in res.output and len(res.output.strip().splitlines()) <= 2
