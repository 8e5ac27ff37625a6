"""The Prefect flow end to end: a harness run, a Dask run, and a real schedule round-trip."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from helpers.flow_fixtures import free_port, make_toy_repo

import calibflow.flows  # noqa: F401  (environment before prefect)
from calibflow.flows import pipeline as pl

pytestmark = pytest.mark.xdist_group("prefect")


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


def test_flow_runs_stale_stages_publishes_and_commits(harness, tmp_path):
    from prefect.client.orchestration import get_client

    toy = make_toy_repo(tmp_path / "toy")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=toy, capture_output=True, text=True).stdout
    (toy / "reports").mkdir(exist_ok=True)
    (toy / "reports" / ".stale.tmp").write_text("a crashed stage's leftover")  # not declared: never committed
    result = pl.pipeline(root=str(toy), commit=True, check_params=False)
    assert [r["name"] for r in result["stages"]][0] == "a" and len(result["stages"]) == 4
    assert (toy / "reports/index.html").exists()
    assert result["published"]["validation_suites"] == 1 and result["published"]["validation_failed"] == 0
    committed = subprocess.run(
        ["git", "show", "--name-only", "--format=", "calibflow/runs"], cwd=toy, capture_output=True, text=True
    ).stdout.split()
    # Only dvc.lock, params and the declared cache:false outputs; the checkout's HEAD did not move.
    assert result["revision"] and set(committed) == {
        "dvc.lock",
        "reports/summary.md",
        "reports/validation.json",
    }
    assert (
        subprocess.run(["git", "rev-parse", "HEAD"], cwd=toy, capture_output=True, text=True).stdout == head
    )

    async def artifact_keys():
        async with get_client() as client:
            return {a.key for a in await client.read_artifacts()}

    assert {"validation", "report-summary"} <= asyncio.run(artifact_keys())
    again = pl.pipeline(
        root=str(toy), commit=True, check_params=False
    )  # nothing stale: no stage task, no commit
    assert again["stages"] == [] and again["revision"] is None


def test_flow_failure_names_stage_and_keeps_report(harness, tmp_path):
    toy = make_toy_repo(tmp_path / "toy")
    pl.pipeline(root=str(toy), check_params=False)
    report = (toy / "reports/index.html").read_text()
    (toy / "params.yaml").write_text("scale: 1\nfail: b\n")
    with pytest.raises(Exception, match="stage 'b' failed"):
        pl.pipeline(root=str(toy), check_params=False)
    assert (toy / "reports/index.html").read_text() == report


def test_params_file_runs_as_a_dvc_experiment_and_leaves_params_yaml(harness, tmp_path):
    toy = make_toy_repo(tmp_path / "toy")
    params = (toy / "params.yaml").read_bytes()
    (toy / "other.yaml").write_text("scale: 7\nfail: none\n")
    result = pl.pipeline(root=str(toy), params_file="other.yaml", experiment_name="seven", check_params=False)
    assert result["experiment"]["overrides"] == ["scale=7"]
    assert (toy / "params.yaml").read_bytes() == params
    assert not (toy / "out/a.json").exists(), "the experiment ran in a temporary copy, not the workspace"
    shown = subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "show", "--json"], cwd=toy, capture_output=True, text=True
    )
    assert '"seven"' in shown.stdout and '"scale": 7' in shown.stdout.replace("\n", " ").replace("  ", " ")


def test_param_overrides_cover_set_add_remove_and_quoting():
    from calibflow.flows.dvc_stages import param_overrides

    cur = {"a": {"b": 1, "c": [1, 2]}, "gone": {"x": 1}, "s": "x"}
    new = {"a": {"b": 2, "c": [1, 2], "d": "it's; touch X"}, "s": "x", "e": {}}
    assert param_overrides(cur, new) == ["a.b=2", "+a.d='it\\'s; touch X'", "+e={}", "~gone.x"]


def test_dask_task_runner_runs_a_layer_in_parallel(harness, tmp_path):
    from prefect_dask import DaskTaskRunner

    toy = make_toy_repo(tmp_path / "toy")
    runner = DaskTaskRunner(
        cluster_kwargs={"n_workers": 2, "threads_per_worker": 1, "dashboard_address": None}
    )
    result = pl.pipeline.with_options(task_runner=runner)(root=str(toy), parallel=True, check_params=False)
    assert sorted(r["name"] for r in result["stages"]) == ["a", "b", "c", "report"]
    from calibflow.flows import dvc_stages

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
    code = "import sys; from calibflow.flows import server; server.start(int(sys.argv[1]), wait=120)"
    subprocess.run([sys.executable, "-c", code, str(port)], env=env, check=True, timeout=180)
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "calibflow.flows.serve",
            "--cron",
            "0 2 * * *",
            "--name",
            "test",
            "--port",
            str(port),
            "--parameters",
            json.dumps({"root": str(toy), "commit": True, "check_params": False}),
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
            "# Two triggers at once: the second queues on the checkout's concurrency slot (no LockError).\n"
            "runs = [run_deployment('calibflow-pipeline/test', timeout=0) for _ in range(2)]\n"
            "async def final(ids):\n"
            "    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId\n"
            "    async with get_client() as c:\n"
            "        for _ in range(300):\n"
            "            frs = [await c.read_flow_run(i) for i in ids]\n"
            "            if all(f.state and f.state.is_final() for f in frs): break\n"
            "            await asyncio.sleep(1)\n"
            "        by_run = LogFilter(flow_run_id=LogFilterFlowRunId(any_=list(ids)))\n"
            "        for _ in range(240):  # logs are shipped in batches: wait for the stages' lines\n"
            "            logs = await c.read_logs(by_run)\n"
            "            if any(\"Running stage 'a'\" in l.message for l in logs): break\n"
            "            await asyncio.sleep(0.25)\n"
            "        return [f.state.type.value for f in frs], [l.message for l in logs]\n"
            "states, logs = asyncio.run(final([r.id for r in runs]))\n"
            "print(json.dumps({'crons': crons, 'states': states, 'logs': logs}))\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["crons"] == ["0 2 * * *"]
        assert res["states"] == ["COMPLETED", "COMPLETED"]
        # The stages' own output is in the flow run's logs (what the UI shows), not only on a console.
        # The two runs queue on the checkout: whichever got the slot first ran the stages, the other found
        # nothing stale, so the logs of both runs are read.
        assert any("Running stage 'a'" in m for m in res["logs"]), res["logs"][:20]
        assert (toy / "reports/index.html").exists()
        log = subprocess.run(
            ["git", "log", "--oneline", "calibflow/runs"], cwd=toy, capture_output=True, text=True
        ).stdout
        assert "calibflow run: 4 stage(s)" in log
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=60
        )
