"""``calibflow trigger --wait`` follows the served run: its states and progress lines, then its final state.

A real local Prefect server (own PREFECT_HOME, a free port), the pipeline served on the toy DVC repository
(helpers.flow_fixtures) in a subprocess, and the real CLI triggering it: once to completion, once with a
stage told to fail (exit 1, the stage's own line shown).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.flow_fixtures import free_port, make_toy_repo

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_trigger_wait_follows_states_and_progress(tmp_path):
    toy = make_toy_repo(tmp_path / "toy")
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "CALIBFLOW_ROOT": str(toy),
        "PYTHONPATH": str(REPO),
    }
    env.pop("CALIBFLOW_RUN_LOG", None)
    code = "import sys; from calibflow.flows import server; server.start(int(sys.argv[1]), wait=120)"
    subprocess.run([sys.executable, "-c", code, str(port)], env=env, check=True, timeout=180)
    params = json.dumps({"root": str(toy), "check_params": False})
    serve = subprocess.Popen(
        [sys.executable, "-m", "calibflow.flows.serve", "--name", "test", "--port", str(port)]
        + ["--parameters", params],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    trigger = [sys.executable, "-m", "calibflow.cli", "trigger", "--wait", "--name", "test"]
    trigger += ["--port", str(port)]
    try:
        deadline = time.monotonic() + 120
        while True:  # the deployment appears once serve has registered it
            proc = subprocess.run(trigger, env=env, capture_output=True, text=True, timeout=300)
            if "no deployment" not in proc.stderr or time.monotonic() > deadline:
                break
            time.sleep(1)
        out = proc.stdout.splitlines()
        assert proc.returncode == 0, proc.stdout + proc.stderr
        states = [ln.split(": ", 1)[1] for ln in out if ln.startswith("flow run ") and ": " in ln]
        assert "Running" in states and "Completed" in states, out
        assert "4 of 4 stages to run: a, b, c, report" in out, out
        for k, name in enumerate(["a", "b", "c", "report"], 1):
            assert any(ln.startswith(f"[{k}/4] {name} ... done in ") for ln in out), out
        running = next(k for k, ln in enumerate(out) if ln.startswith("flow run ") and ln.endswith("Running"))
        assert out.index("4 of 4 stages to run: a, b, c, report") > running, out

        (toy / "params.yaml").write_text("scale: 2\nfail: b\n")
        proc = subprocess.run(trigger, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert any(ln.startswith("flow run ") and ln.endswith(": Failed") for ln in proc.stdout.splitlines())
        assert "[1/4] a ... done in " in proc.stdout and "stage b told to fail" in proc.stdout + proc.stderr
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=60
        )
