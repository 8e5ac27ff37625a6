"""The Prefect flow end to end: a harness run, a Dask run, and a real schedule round-trip."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from flow_fixtures import free_port, make_toy_repo

import flows  # noqa: F401  (environment before prefect)
from flows import pipeline as pl

pytestmark = pytest.mark.xdist_group("prefect")


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_validation_rows_reads_the_report_stage_format():
    payload = {
        "success": False,
        "suites": [
            {"name": "raw.adult", "success": False, "evaluated": 4, "failed": 1, "rows": 9, "failures": []}
        ],
    }
    assert pl.validation_rows(payload) == [
        {"name": "raw.adult", "success": False, "evaluated": 4, "failed": 1}
    ]


def test_apply_params_file_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        pl.apply_params_file(tmp_path, "nope.yaml")


def test_flow_runs_stale_stages_publishes_and_commits(harness, tmp_path):
    from prefect.client.orchestration import get_client

    toy = make_toy_repo(tmp_path / "toy")
    result = pl.pipeline(root=str(toy), commit=True)
    assert [r["name"] for r in result["stages"]][0] == "a" and len(result["stages"]) == 4
    assert (toy / "reports/index.html").exists()
    assert result["published"]["validation_suites"] == 1 and result["published"]["validation_failed"] == 0
    assert (
        result["revision"]
        and "dvc.lock"
        in subprocess.run(
            ["git", "show", "--name-only", "HEAD"], cwd=toy, capture_output=True, text=True
        ).stdout
    )

    async def artifact_keys():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    assert {"validation", "report-summary"} <= asyncio.run(artifact_keys())
    again = pl.pipeline(root=str(toy), commit=True)  # nothing stale: no stage task, no commit
    assert again["stages"] == [] and again["revision"] is None


def test_flow_failure_names_stage_and_keeps_report(harness, tmp_path):
    toy = make_toy_repo(tmp_path / "toy")
    pl.pipeline(root=str(toy))
    report = (toy / "reports/index.html").read_text()
    (toy / "params.yaml").write_text("scale: 1\nfail: b\n")
    with pytest.raises(Exception, match="stage 'b' failed"):
        pl.pipeline(root=str(toy))
    assert (toy / "reports/index.html").read_text() == report


def test_dask_task_runner_runs_a_layer_in_parallel(harness, tmp_path):
    from prefect_dask import DaskTaskRunner

    toy = make_toy_repo(tmp_path / "toy")
    runner = DaskTaskRunner(
        cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "dashboard_address": None}
    )
    result = pl.pipeline.with_options(task_runner=runner)(root=str(toy), parallel=True)
    assert sorted(r["name"] for r in result["stages"]) == ["a", "b", "c", "report"]
    from flows import dvc_stages

    assert not any(s.stale for s in dvc_stages.plan(toy)), "dvc commit must record the parallel runs"


@pytest.mark.server
def test_schedule_round_trip(tmp_path):
    """Start a local server, serve the deployment with a cron, trigger it, assert it completed."""
    toy = make_toy_repo(tmp_path / "toy")
    port = free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "CALIBFLOW_ROOT": str(toy),
    }
    code = "import sys; from flows import server; server.start(int(sys.argv[1]), wait=120)"
    subprocess.run([sys.executable, "-c", code, str(port)], env=env, check=True, timeout=180)
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.serve",
            "--cron",
            "0 2 * * *",
            "--name",
            "test",
            "--port",
            str(port),
            "--parameters",
            json.dumps({"root": str(toy), "commit": True}),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        check = (
            "import asyncio, json; from prefect.client.orchestration import get_client\n"
            "from prefect.deployments import run_deployment\n"
            "async def dep():\n"
            "    async with get_client() as c:\n"
            "        for _ in range(120):\n"
            "            try:\n"
            "                d = await c.read_deployment_by_name('calibflow-pipeline/test'); break\n"
            "            except Exception: await asyncio.sleep(0.5)\n"
            "        return [s.schedule.cron for s in d.schedules]\n"
            "crons = asyncio.run(dep())\n"
            "fr = run_deployment('calibflow-pipeline/test', timeout=120, poll_interval=1)\n"
            "print(json.dumps({'crons': crons, 'state': fr.state.type.value}))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["crons"] == ["0 2 * * *"]
        assert res["state"] == "COMPLETED"
        assert (toy / "reports/index.html").exists()
        log = subprocess.run(["git", "log", "--oneline"], cwd=toy, capture_output=True, text=True).stdout
        assert "calibflow run: 4 stage(s)" in log
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=60
        )
