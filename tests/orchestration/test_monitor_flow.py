"""The monitor flow: queues behind a run holding the checkout, commits to the runs branch, registers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from helpers.monitor_data import make_project
from helpers.waiting import Output, has_open, wait_until

from calibflow.flows import registry
from calibflow.flows.checkout_lock import checkout_lock, lock_path

# Two triggers in one process (one ephemeral server): the second finds nothing new.
FLOW = (
    "import json, sys; from calibflow.flows.monitor import monitor\n"
    "for _ in range(2):\n"
    "    out = monitor(root=sys.argv[1], now=sys.argv[2], commit=True)\n"
    "    print(json.dumps([[len(r['windows']), r['champion'], r.get('revision')] for r in out['sources']]))"
)


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def test_overlapping_run_queues_then_commits_to_the_runs_branch(tmp_path):
    make_project(tmp_path, "base_rate", days=10, shift_day=5, monitor={"methods": ["platt"]})
    (tmp_path / ".gitignore").write_text("data/\nreports/\n.prefect/\n.dvc/tmp/\n")
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "project")
    head = _git(tmp_path, "rev-parse", "HEAD")
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / ".prefect"), CALIBFLOW_ROOT=str(tmp_path), OPENBLAS_NUM_THREADS="1"
    )
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"  # a loaded shared 2-core machine
    cmd = [sys.executable, "-c", FLOW, str(tmp_path), "2026-01-13"]
    state = tmp_path / "monitoring/ads/state.json"
    with checkout_lock(tmp_path):  # another run holds the checkout
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        output = Output(proc)
        # queued: it has opened the lock file we hold (inside the flow its "waiting" line is not on stderr)
        lock = lock_path(tmp_path)
        wait_until(lambda: has_open(proc.pid, lock) or proc.poll() is not None, 300, "the run at the lock")
        assert proc.poll() is None, output.stderr[-2000:]  # still waiting: queued, not failed
        assert not state.exists()
    out, err = output.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    first, second = (json.loads(line) for line in out.strip().splitlines()[-2:])
    [[windows, champion, rev]] = first
    assert windows == 10 and rev
    # The checked-out branch, its index and work tree are untouched; the run is on calibflow/runs.
    assert (
        _git(tmp_path, "rev-parse", "HEAD") == head and _git(tmp_path, "branch", "--show-current") == "main"
    )
    assert _git(tmp_path, "rev-parse", "calibflow/runs") == rev
    files = _git(tmp_path, "show", "--name-only", "--format=", rev).splitlines()
    assert {"monitoring/ads/state.json", "plots/monitoring/ads.csv", "metrics/monitoring/ads.json"} <= set(
        files
    )
    assert registry.prod_version(tmp_path, "ads") == champion
    assert 1 in registry.registered(tmp_path, "ads")
    # The second trigger finds nothing new: no window counted twice, no new commit.
    assert second[0][0] == 0 and second[0][2] is None
    assert _git(tmp_path, "rev-parse", "calibflow/runs") == rev


def test_cli_run_reports_a_broken_source_and_a_broken_day_in_one_line_each(tmp_path):
    import pandas as pd
    import yaml

    df = make_project(tmp_path, "stable", days=8)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["sources"]["gone"] = {**params["sources"]["ads"], "path": "data/nowhere"}
    params["monitor"]["sources"] = ["gone", "ads"]  # the broken one first: ads must still be scored
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "models/gone").mkdir()
    (tmp_path / "models/gone/calibrator.json").write_text(
        (tmp_path / "models/ads/calibrator.json").read_text()
    )
    day3 = df[df["day"] == 3].drop(columns=["segment"])[["time", "score", "label"]]
    day3.to_parquet(tmp_path / "data/stream/day=003.parquet", index=False)  # a day without its segment
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(
        PREFECT_HOME=str(tmp_path / ".prefect"), CALIBFLOW_ROOT=str(tmp_path), OPENBLAS_NUM_THREADS="1"
    )
    env["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"
    cmd = [
        sys.executable,
        "-m",
        "calibflow.cli",
        "monitor",
        "run",
        "--now",
        "2026-01-10",
        "--no-commit",
    ]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert out.returncode == 1, out.stderr[-3000:]
    assert "Traceback" not in out.stdout + out.stderr
    err = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 2, out.stderr[-3000:]
    assert err[0].startswith("error: monitor gone: failed:") and "data/nowhere" in err[0]
    assert "file day=003.parquet: column 'segment' is missing (800 rows" in err[1]
    assert "monitor ads: 6 window(s)" in out.stdout  # days 0-6 matured, day 3 pending
    state = json.loads((tmp_path / "monitoring/ads/state.json").read_text())
    assert pd.Timestamp("2026-01-04").isoformat() not in state["processed"] and len(state["processed"]) == 6
