"""The monitor against a real local Prefect server: drift events, the automation reacting, the artifact."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from flow_fixtures import free_port
from monitor_data import make_project

pytestmark = [pytest.mark.server, pytest.mark.xdist_group("prefect")]

SCRIPT = r"""
import asyncio, json, sys, time
import httpx
from calibflow.flows import server
port, root, now = int(sys.argv[1]), sys.argv[2], sys.argv[3]
server.start(port, wait=120)
from calibflow.flows.monitor import drift_automation, monitor
auto = drift_automation(name="drift-test")
out = monitor(root=root, now=now, commit=False, registry_on=False)
alerts = [a for r in out["sources"] for a in r["alerts"]]
api = server.api_url(port)
def events(name):
    body = {"filter": {"event": {"name": [name]}}, "limit": 50}
    r = httpx.post(f"{api}/events/filter", json=body, timeout=10)
    r.raise_for_status()
    return r.json()["events"]
for _ in range(90):
    drift, triggered = events("calibflow.calibration.drift"), events("prefect.automation.triggered")
    if triggered and len(drift) >= min(len(alerts), 50):
        break
    time.sleep(1)
from prefect.client.orchestration import get_client
async def keys():
    async with get_client() as c:
        return sorted({a.key for a in await c.read_artifacts()})
print(json.dumps({
    "alerts": len(alerts),
    "drift": [dict(e["payload"], resource=e["resource"]["prefect.resource.id"]) for e in drift],
    "triggered": [e["resource"]["prefect.resource.id"] for e in triggered],
    "automation_id": str(auto.id),
    "artifacts": asyncio.run(keys()),
}))
"""


CHECK = r"""
import asyncio, json
from prefect.client.orchestration import get_client
from prefect.deployments import run_deployment
async def dep():
    async with get_client() as c:
        for _ in range(240):
            try:
                d = await c.read_deployment_by_name("calibflow-monitor/test"); break
            except Exception:
                await asyncio.sleep(0.5)
        return [s.schedule.cron for s in d.schedules]
crons = asyncio.run(dep())
fr = run_deployment("calibflow-monitor/test", timeout=240, poll_interval=1)
print(json.dumps({"crons": crons, "state": fr.state.type.value}))
"""


def _serve_and_trigger(root, port, env) -> dict:
    """``python -m calibflow.flows.monitor --cron ...`` against the server; trigger the deployment once."""
    params = json.dumps({"root": str(root), "commit": False, "registry_on": False, "now": "2026-01-15"})
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "calibflow.flows.monitor",
            "--cron",
            "0 6 * * *",
            "--name",
            "test",
            "--port",
            str(port),
            "--parameters",
            params,
        ],
        env={**env, "PREFECT_RUNNER_POLL_FREQUENCY": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHECK], env=env, capture_output=True, text=True, timeout=400
        )
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        serve.terminate()
        serve.wait(timeout=30)


def test_drift_event_reaches_the_server_and_the_automation_fires(tmp_path):
    make_project(tmp_path, "base_rate", days=12, shift_day=7, monitor={"methods": ["platt"]})
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "CALIBFLOW_ROOT": str(tmp_path),
        "OPENBLAS_NUM_THREADS": "1",
    }
    try:
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(port), str(tmp_path), "2026-01-15"],
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        sched = _serve_and_trigger(tmp_path, port, env)
    finally:
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=60
        )
    assert res["alerts"] >= 1
    assert len(res["drift"]) == min(res["alerts"], 50)
    ev = res["drift"][0]
    assert ev["resource"] == "calibflow.source.ads" and ev["source"] == "ads"
    assert {"segment", "metric", "value", "band", "window"} <= set(ev)
    assert ev["metric"] in ("calibration_ratio", "ece") and len(ev["band"]) == 2
    assert res["triggered"], "the automation did not fire"
    assert all(res["automation_id"] in r for r in res["triggered"])  # our automation, no other
    assert "monitor-ads" in res["artifacts"]
    # Served on a cron: the deployment carries it and a triggered run completes (nothing new to score).
    assert sched == {"crons": ["0 6 * * *"], "state": "COMPLETED"}
