"""The monitor against a real local Prefect server: incident events (not one per window), promotion and
failure events, the automation reacting, the artifact, a broken source isolated in its own subflow, and
the flow served on a cron against that server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.flow_fixtures import free_port
from helpers.monitor_data import make_project

pytestmark = [pytest.mark.server, pytest.mark.xdist_group("prefect")]

SCRIPT = r"""
import asyncio, json, sys, time
import httpx
from prefect.client.orchestration import get_client
from calibflow.flows import server
port, root, now = int(sys.argv[1]), sys.argv[2], sys.argv[3]
server.start(port, wait=120)
from calibflow.flows.monitor import drift_automation, monitor
auto = drift_automation(name="drift-test")
out = monitor(root=root, now=now, commit=False, registry_on=False)
alerts = [a for r in out["sources"] for a in r["alerts"]]
opened = [i for r in out["sources"] for i in r["opened"]]
promotions = [v for r in out["sources"] for v in r["promotions"]]
api = server.api_url(port)
def events(name):
    body = {"filter": {"event": {"name": [name]}}, "limit": 50}
    r = httpx.post(f"{api}/events/filter", json=body, timeout=10)
    r.raise_for_status()
    return r.json()["events"]
for _ in range(90):
    drift, triggered = events("calibflow.calibration.drift"), events("prefect.automation.triggered")
    promoted, failed = events("calibflow.calibrator.promoted"), events("calibflow.monitor.failed")
    if triggered and len(drift) >= len(opened) and len(promoted) >= len(promotions) and failed:
        break
    time.sleep(1)
async def runs():
    async with get_client() as c:
        return sorted((r.name, r.state.type.value) for r in await c.read_flow_runs())
async def keys():
    async with get_client() as c:
        return sorted({a.key for a in await c.read_artifacts()})
print(json.dumps({
    "alerts": len(alerts),
    "opened": len(opened),
    "promotions": len(promotions),
    "promoted": [e["payload"]["version"] for e in promoted],
    "failed_events": [e["payload"]["error"] for e in failed],
    "failed": out["failed"],
    "scored": [r["source"] for r in out["sources"]],
    "runs": asyncio.run(runs()),
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
    """``calibflow monitor serve --cron ...`` with no PREFECT_API_URL set (the CLI must still serve against
    the project's server, not an ephemeral one); trigger the deployment once."""
    params = json.dumps({"root": str(root), "commit": False, "registry_on": False, "now": "2026-01-15"})
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "calibflow.cli",
            "monitor",
            "serve",
            "--cron",
            "0 6 * * *",
            "--name",
            "test",
            "--port",
            str(port),
            "--parameters",
            params,
        ],
        env={
            **{k: v for k, v in env.items() if k != "PREFECT_API_URL"},
            "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        },
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
    import yaml

    params = yaml.safe_load((tmp_path / "params.yaml").read_text())  # a broken source listed first
    params["sources"]["broken"] = {**params["sources"]["ads"], "path": "data/nowhere"}
    params["monitor"]["sources"] = ["broken", "ads"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / "models/broken").mkdir()
    (tmp_path / "models/broken/calibrator.json").write_text(
        (tmp_path / "models/ads/calibrator.json").read_text()
    )
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
    # One event per incident opened, not one per out-of-band window.
    assert res["alerts"] > res["opened"] >= 1
    assert len(res["drift"]) == res["opened"]
    ev = res["drift"][0]
    assert ev["resource"] == "calibflow.source.ads" and ev["source"] == "ads"
    assert {"segment", "metric", "worst", "band", "window", "incident", "opened"} <= set(ev)
    assert ev["metric"] in ("calibration_ratio", "ece") and len(ev["band"]) == 2
    assert res["promotions"] >= 1 and len(res["promoted"]) == res["promotions"]
    # The broken source failed alone, in one line, as its own failed subflow; `ads` was still scored.
    assert res["scored"] == ["ads"] and len(res["failed"]) == 1
    assert res["failed"][0].startswith("monitor broken: failed:") and "data/nowhere" in res["failed"][0]
    assert res["failed_events"] == res["failed"]
    assert ("monitor-broken", "FAILED") in [tuple(r) for r in res["runs"]]
    assert ("monitor-ads", "COMPLETED") in [tuple(r) for r in res["runs"]]
    assert res["triggered"], "the automation did not fire"
    assert all(res["automation_id"] in r for r in res["triggered"])  # our automation, no other
    assert "monitor-ads" in res["artifacts"]
    # Served on a cron: the deployment carries it and a triggered run completes (nothing new to score).
    assert sched == {"crons": ["0 6 * * *"], "state": "COMPLETED"}
