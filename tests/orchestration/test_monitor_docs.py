"""The DVC command docs/monitoring.md gives for comparing runs, run as written on a real repository whose
``calibflow/runs`` branch interleaves commits of two sources (each monitor run commits per source)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
from helpers.monitor_data import make_project

from calibflow.experiments.monitoring import DAY0
from calibflow.flows.gitops import commit_paths
from calibflow.io import write_json
from calibflow.pipeline import monitor as tm

DOC = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def _sh(root: Path, cmd: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DVC_NO_ANALYTICS": "1",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x.invalid", GIT_COMMITTER_NAME="t")
    env.update(GIT_COMMITTER_EMAIL="t@x.invalid")
    return subprocess.run(["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def test_documented_metrics_diff_compares_a_sources_last_two_runs(tmp_path):
    make_project(tmp_path, "base_rate", days=10, shift_day=5)
    (tmp_path / ".gitignore").write_text("data/\nreports/\n")
    for cmd in ("git init -q -b main", "python -m dvc init -q", "git add -A", "git commit -qm project"):
        assert _sh(tmp_path, cmd).returncode == 0, cmd
    params = tm.load_params(tmp_path / "params.yaml")
    for k, now in enumerate((DAY0 + pd.Timedelta(days=8), DAY0 + pd.Timedelta(days=12))):
        res = tm.run(tmp_path, params, "ads", now=now, render=False)
        assert commit_paths(tmp_path, res["files"], f"monitor ads {k}", branch="calibflow/runs")
        other = tmp_path / "metrics/monitoring/other.json"  # another source's run in between
        write_json(other, {"windows": k})
        assert commit_paths(
            tmp_path, [other.relative_to(tmp_path)], f"monitor other {k}", branch="calibflow/runs"
        )
    line = next(ln for ln in DOC.read_text().splitlines() if ln.startswith("dvc metrics diff"))
    line = line.split("  #")[0].replace("dvc ", "python -m dvc ", 1)
    out = _sh(tmp_path, line)
    assert out.returncode == 0, out.stderr
    rows = {r.split()[1]: r.split()[2:4] for r in out.stdout.splitlines() if r.startswith("metrics/")}
    assert rows["windows"] == ["6", "10"]  # ads: 6 windows after the first run, 10 after the second
    assert "calibration_ratio" in rows
    # The naive form compares with the other source's commit: nothing of ads changes there.
    naive = _sh(
        tmp_path,
        "python -m dvc metrics diff calibflow/runs~1 calibflow/runs --targets metrics/monitoring/ads.json",
    )
    assert "windows" not in naive.stdout
