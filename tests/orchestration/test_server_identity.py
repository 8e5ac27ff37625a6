"""Only this project's Prefect server is used as ours: identified by the PREFECT_HOME it answers with.

A foreign HTTP server (a plain ``python -m http.server`` on 127.0.0.1 that even answers ``/api/health``
with 200, as a careless health check wants) and a real Prefect server of another PREFECT_HOME (another
checkout's) hold the port; the real CLI must never report to them, never call them its own, and say in one
line who holds the port.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.flow_fixtures import free_port

REPO = Path(__file__).resolve().parents[2]
CALIBFLOW = [sys.executable, "-m", "calibflow.cli"]


def _env(home: Path, root: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "PREFECT_HOME": str(home), "PYTHONPATH": str(REPO)}
    for key in ("PREFECT_API_URL", "CALIBFLOW_DEBUG", "CALIBFLOW_RUN_LOG"):
        env.pop(key, None)
    if root is not None:
        env["CALIBFLOW_ROOT"] = str(root)
    return env


def _cli(env: dict[str, str], *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([*CALIBFLOW, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def foreign(tmp_path):
    """``python -m http.server`` on a free port, serving a folder where /api/health exists (200)."""
    site = tmp_path / "site"
    (site / "api").mkdir(parents=True)
    (site / "api/health").write_text("true")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/api/health"
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                assert resp.status == 200
                break
        except OSError:
            time.sleep(0.1)
    yield port, proc
    proc.kill()
    proc.wait()


def test_a_foreign_http_server_is_never_ours(tmp_path, foreign):
    port, proc = foreign
    home = tmp_path / "prefect-home"
    env = _env(home)

    st = _cli(env, "server", "status", "--port", str(port))
    assert st.returncode == 1
    info = json.loads(st.stdout)
    assert (
        info["healthy"] is False and f"pid {proc.pid}" in info["held_by"] and "http.server" in info["held_by"]
    )

    for args in (["server", "start", "--no-ui"], ["trigger"]):
        res = _cli(env, *args, "--port", str(port))
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 2 and len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
        assert f"port {port} is held by pid {proc.pid}" in lines[0] and "http.server" in lines[0]
        assert "not this project's Prefect server" in lines[0] and "--port " in lines[0]
    assert not (home / "server.pid").exists()  # no server was started beside it


def test_run_reports_to_its_own_server_not_the_foreign_one(tmp_path, foreign):
    """Before: /api/health answered 200, so `calibflow run` sent its flow run to the http.server."""
    from helpers.toy_run import toy_project

    port, _ = foreign
    toy = toy_project(tmp_path / "toy", {})
    res = _cli(_env(tmp_path / "prefect-home", toy), "run", "--port", str(port), "-q", cwd=toy)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("calibflow run: 3 stage(s) ran") and "Traceback" not in res.stderr


def test_another_checkouts_prefect_server_is_not_ours(tmp_path):
    port = free_port()
    other, mine = tmp_path / "other-home", tmp_path / "my-home"
    start = _cli(_env(other), "server", "start", "--no-ui", "--port", str(port))
    assert start.returncode == 0, start.stderr
    try:
        st = json.loads(_cli(_env(other), "server", "status", "--port", str(port)).stdout)
        assert st["healthy"] is True  # its own checkout sees it as its server
        res = _cli(_env(mine), "server", "status", "--port", str(port))
        st = json.loads(res.stdout)
        assert res.returncode == 1 and st["healthy"] is False
        assert f"another Prefect server, PREFECT_HOME={other}" in st["held_by"]
        res = _cli(_env(mine), "trigger", "--port", str(port))
        assert res.returncode == 2 and f"PREFECT_HOME={other}" in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    finally:
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"],
            env=_env(other),
            capture_output=True,
            timeout=60,
        )
