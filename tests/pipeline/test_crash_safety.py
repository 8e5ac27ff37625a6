"""Crash safety with real signals on real subprocesses: SIGKILL leftovers, the temporary server, Ctrl-C."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from calibflow.pipeline._common import atomic_dir, remove_stale_temps

WRITER = textwrap.dedent(
    """
    import sys, time
    from calibflow.pipeline._common import atomic_dir
    with atomic_dir(sys.argv[1]) as tmp:
        for i in range(50):
            (tmp / f"part{i}.json").write_text("{}")
        print("writing", flush=True)
        time.sleep(60)
    """
)


def killed_writer(target: Path) -> int:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return proc.pid


def test_sigkill_leftover_is_removed_at_the_next_stage_start(tmp_path):
    target = tmp_path / "metrics" / "evaluation"
    with atomic_dir(target) as tmp:
        (tmp / "good.json").write_text("1")
    pid = killed_writer(target)
    leftovers = list(target.parent.glob(".evaluation.*.tmp"))
    assert len(leftovers) == 1 and f".evaluation.{pid}." in leftovers[0].name
    assert sorted(p.name for p in target.iterdir()) == ["good.json"], "the last good output is intact"

    with atomic_dir(target) as tmp:  # the next run of the stage
        (tmp / "new.json").write_text("2")
    assert list(target.parent.iterdir()) == [target]
    assert sorted(p.name for p in target.iterdir()) == ["new.json"]


def test_a_live_writers_temp_is_kept(tmp_path):
    target = tmp_path / "plots" / "reliability"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = target.parent / f".reliability.{live.pid}.abc.tmp"
        mine.mkdir(parents=True)
        dead = target.parent / ".reliability.xyz.tmp"  # the old naming (no pid): stale
        dead.write_text("partial")
        assert remove_stale_temps(target) == [dead]
        assert mine.exists()
    finally:
        live.kill()
        live.wait()


# ---- the CLI under signals: a real `calibflow run` of a one-stage project that sleeps ----------

SLEEPER = textwrap.dedent(
    """
    import os, pathlib, time
    pathlib.Path("stage.pid").write_text(str(os.getpid()))
    time.sleep(120)
    pathlib.Path("out.txt").write_text("done")
    """
)
ROOT = Path(__file__).resolve().parents[2]


def sleeper_project(root: Path) -> Path:
    """A git + DVC project with calibflow's own params.yaml and one stage that sleeps."""
    root.mkdir(parents=True)
    for name in ("params.yaml", "params-papers.yaml"):  # the papers listed in one, their blocks in the other
        (root / name).write_text((ROOT / name).read_text())
    (root / "sleep.py").write_text(SLEEPER)
    (root / "dvc.yaml").write_text(
        f"stages:\n  sleep:\n    cmd: {sys.executable} sleep.py\n    deps: [sleep.py]\n    outs: [out.txt]\n"
    )
    for cmd in (
        ["git", "init", "-q"],
        ["git", "config", "user.email", "t@example.invalid"],
        ["git", "config", "user.name", "t"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "sleeper"],
    ):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    return root


def start_run(root: Path, home: Path) -> tuple[subprocess.Popen, int, int]:
    """`calibflow run` in its own session; returns it, its temporary server's pid and the stage's pid."""
    env = {**os.environ, "PREFECT_HOME": str(home), "CALIBFLOW_ROOT": str(root), "PYTHONPATH": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "calibflow.flows.cli", "run", "--port", "1"],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    while not (root / "stage.pid").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the stage never started"
        time.sleep(0.2)
    server_pid = int((home / "calibflow-temp-server.pid").read_text().split()[0])
    stage_pid = int((root / "stage.pid").read_text())
    return proc, server_pid, stage_pid


def gone(pid: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie child of someone else counts as gone
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z":
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One PREFECT_HOME for the three runs: the server's database is created (migrated) once."""
    return tmp_path_factory.mktemp("prefect-home")


def test_ctrl_c_mid_stage_exits_in_seconds_and_stops_stage_and_server(tmp_path, home):
    root = sleeper_project(tmp_path / "p")
    proc, server, stage = start_run(root, home)
    t0 = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 20
    assert gone(stage, 10) and gone(server, 10)
    assert not (root / "out.txt").exists()


def test_sigkill_of_calibflow_takes_its_temporary_server_along(tmp_path, home):
    root = sleeper_project(tmp_path / "p")
    proc, server, stage = start_run(root, home)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    try:
        assert gone(server, 15), "the temporary Prefect server outlived calibflow"
    finally:
        with contextlib.suppress(ProcessLookupError):  # the stage itself is orphaned (not reaped)
            os.kill(stage, signal.SIGKILL)


def test_api_server_death_fails_the_run_fast_in_one_line(tmp_path, home):
    root = sleeper_project(tmp_path / "p")
    proc, server, stage = start_run(root, home)
    t0 = time.monotonic()
    os.kill(server, signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30
    assert proc.returncode == 1
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: the Prefect API at http://127.0.0.1:") and "stopped answering" in last
    assert gone(stage, 10)
