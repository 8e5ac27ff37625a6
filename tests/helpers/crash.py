"""The CLI under signals: a real `calibflow run` of a one-stage project whose stage sleeps."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

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
        [sys.executable, "-m", "calibflow.cli", "run", "--port", "1"],
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
