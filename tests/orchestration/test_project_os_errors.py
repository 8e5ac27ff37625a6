"""Issue 39: an OS error at the project level (read-only folder, full disk, permission denied, missing
.dvc) is one line naming the path and what to do, for every command; a killed ``calibflow monitor run``
leaves no process behind.

Read-only and full are real: as root (who ignores file modes) the project is bind-mounted read-only, or
copied onto a 2 MB tmpfs filled to the brim, in a private mount namespace (``unshare -m``); as another
user the copy is ``chmod -R a-w``.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.procs import children

from calibflow.errors import os_fix
from calibflow.flows import check_writable

PY = sys.executable
CLI = [PY, "-m", "calibflow.cli"]
ROOT = os.geteuid() == 0


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "CALIBFLOW_ROOT"))}
    return {**env, "CALIBFLOW_DEBUG": ""}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("osproj")
    rng = np.random.default_rng(0)
    n = 3000
    s = rng.uniform(0, 1, n)
    frame = pd.DataFrame({"s": s, "y": (rng.uniform(0, 1, n) < s).astype(int),
                          "t": pd.date_range("2026-01-01", periods=n, freq="h")})
    frame.to_parquet(root / "scores.parquet")
    init = ["init", "--data", "scores.parquet", "--label", "y", "--score", "s", "--time", "t", "--monitor"]
    out = subprocess.run([*CLI, *init], cwd=root, env=_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (root / ".dvc").is_dir()
    return root


def _readonly(project: Path, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = " ".join([*CLI, *args])
    if ROOT:
        ro = f"mount --bind {project} {project} && mount -o remount,ro,bind {project}"
        script = f"{ro} && cd {project} && {cmd}"
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script], env=_env(), capture_output=True, text=True, timeout=300
        )
    copy = tmp_path / "ro"
    shutil.copytree(project, copy)
    subprocess.run(["chmod", "-R", "a-w", str(copy)], check=True)
    try:
        return subprocess.run(
            [*CLI, *args], cwd=copy, env=_env(), capture_output=True, text=True, timeout=300
        )
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(copy)], check=True)


COMMANDS = [
    ["run"],
    ["repro"],
    ["validate"],
    ["monitor", "run"],
    ["init", "--data", "scores.parquet", "--label", "y", "--score", "s", "--name", "other"],
    ["fit", "--calib", "scores.parquet", "--score", "s", "--label", "y", "--out", "fitout"],
    ["server", "start", "--port", "4391"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_read_only_project_is_one_line_for_every_command(project, args, tmp_path):
    out = _readonly(project, args, tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0
    assert 1 <= len(lines) <= 3, out.stderr  # calibflow run: at most 3 lines (issue 39)
    assert "Traceback" not in out.stderr
    assert ("Read-only file system" if ROOT else "Permission denied") in lines[0], lines[0]
    assert "writable" in lines[0]


def test_a_full_disk_is_one_line(project):
    if not ROOT:  # a tmpfs needs a mount namespace: the unit test below covers ENOSPC's line
        pytest.fail("this test mounts a tmpfs: run it as root (CI runs as root)")
    fit = ["fit", "--calib", "scores.parquet", "--score", "s", "--label", "y", "--out", "fitout"]
    for args in (["run"], ["monitor", "run"], fit):
        script = (
            "mkdir -p /tmp/cf-full && mount -t tmpfs -o size=2m tmpfs /tmp/cf-full && "
            f"cp -r {project}/. /tmp/cf-full/ && rm -rf /tmp/cf-full/.git; "
            "dd if=/dev/zero of=/tmp/cf-full/fill bs=64k 2>/dev/null; cd /tmp/cf-full && "
            + " ".join([*CLI, *args])
        )
        out = subprocess.run(
            ["unshare", "-m", "sh", "-c", script], env=_env(), capture_output=True, text=True, timeout=300
        )
        lines = out.stderr.strip().splitlines()
        assert out.returncode != 0 and len(lines) == 1, out.stderr
        assert "No space left on device" in lines[0] and "free space" in lines[0], lines[0]


def test_a_missing_dvc_folder_is_one_line(project, tmp_path):
    copy = tmp_path / "nodvc"
    shutil.copytree(project, copy, ignore=shutil.ignore_patterns(".dvc"))
    out = subprocess.run([*CLI, "run"], cwd=copy, env=_env(), capture_output=True, text=True, timeout=300)
    lines = out.stderr.strip().splitlines()
    assert out.returncode != 0 and len(lines) == 1, out.stderr
    assert f"{copy}/.dvc" in lines[0] and "calibflow init" in lines[0]


@pytest.mark.parametrize(
    "code,expect",
    [(errno.EROFS, "writable copy"), (errno.EACCES, "chmod"), (errno.ENOSPC, "free space"),
     (errno.EDQUOT, "quota")],
)
def test_os_fix_names_the_path_and_what_to_do(code, expect):
    line = os_fix(OSError(code, os.strerror(code), "/p/x"))
    assert line.startswith("/p/x: ") and expect in line and "\n" not in line


def test_check_writable_names_the_folder_on_a_failed_write(tmp_path, monkeypatch):
    (tmp_path / ".dvc").mkdir()

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError) as err:
        check_writable(tmp_path)
    assert err.value.filename == str(tmp_path / ".dvc" / "tmp")
    assert not list((tmp_path / ".dvc" / "tmp").iterdir())  # the probe file is removed


# ---- no process outlives a killed command ------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _server_like(pid: int) -> bool:
    """A Prefect server: the temporary one (a fork of the run, known by its name) or any other."""
    from calibflow.flows.temp_server import NAME

    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode("latin-1")
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    return name == NAME or "uvicorn" in cmd or "prefect" in cmd


def test_kill_9_of_monitor_run_leaves_no_server(project):
    proc = subprocess.Popen([*CLI, "monitor", "run"], cwd=project, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline, kids = time.monotonic() + 120, []
        while time.monotonic() < deadline and not kids and proc.poll() is None:
            kids = [k for k in children(proc.pid) if _server_like(k)]
            time.sleep(0.1)
        assert kids, "monitor run started no API server (it must start its own temporary one)"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_alive(k) for k in kids):
            time.sleep(0.2)
        left = [k for k in kids if _alive(k)]
        for k in left:  # never leave one behind, even when the test fails
            os.kill(k, signal.SIGKILL)
        assert not left, f"processes outlived kill -9 of calibflow monitor run: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
