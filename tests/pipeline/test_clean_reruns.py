"""Clean reruns: `--commit` leaves the user's git index as it was despite DVC's autostage, and the
report page (a DVC output) carries no clock time, so a rerun with the same inputs is byte-identical."""

from __future__ import annotations

import subprocess
import sys
import time

from helpers.flow_fixtures import make_toy_repo
from helpers.waiting import wait_until

import calibflow.flows  # noqa: F401  (environment before prefect)
from calibflow.flows import pipeline as pl
from calibflow.flows.dvc_stages import reproduce_stage
from calibflow.flows.gitops import index_kept


def _autostaged_toy(root):
    toy = make_toy_repo(root)
    subprocess.run([sys.executable, "-m", "dvc", "config", "core.autostage", "true"], cwd=toy, check=True)
    subprocess.run(["git", "commit", "-qam", "autostage"], cwd=toy, check=True)
    return toy


def _staged(toy) -> list[str]:
    out = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=toy, capture_output=True, text=True)
    return out.stdout.split()


def test_autostage_stages_dvc_lock_and_index_kept_undoes_it(tmp_path):
    toy = _autostaged_toy(tmp_path / "toy")
    index = (toy / ".git" / "index").read_bytes()
    with index_kept(toy):
        reproduce_stage(toy, "a")
    assert _staged(toy) == [] and (toy / ".git" / "index").read_bytes() == index
    reproduce_stage(toy, "b")  # the control: what DVC does on its own
    assert "dvc.lock" in _staged(toy)


def test_a_commit_run_leaves_the_users_index_as_it_was(harness, tmp_path):
    toy = _autostaged_toy(tmp_path / "toy")
    (toy / "notes.txt").write_text("the user's own staged work\n")
    subprocess.run(["git", "add", "notes.txt"], cwd=toy, check=True)
    index = (toy / ".git" / "index").read_bytes()
    result = pl.pipeline(root=str(toy), commit=True, check_params=False)
    assert result["revision"] and len(result["stages"]) == 4
    assert _staged(toy) == ["notes.txt"]
    assert (toy / ".git" / "index").read_bytes() == index


def test_the_report_page_is_byte_identical_on_rerun(tmp_path):
    from helpers.source_data import scores_frame, write
    from helpers.sources_pipeline import run_pipeline, source_params

    from calibflow.pipeline import report

    frame = scores_frame(n=1500, days=30, seed=2)
    path = write(frame, "parquet", tmp_path / "userdata")
    params = source_params(str(path.relative_to(tmp_path)), with_features=False)
    run_pipeline(params, tmp_path, with_report=True)
    first = (tmp_path / "reports/index.html").read_bytes()
    second = int(time.time())
    wait_until(lambda: int(time.time()) > second, 5, "the next second")  # a clock time would now differ
    report.run(params, tmp_path)
    assert (tmp_path / "reports/index.html").read_bytes() == first
    assert b"generated" not in first
