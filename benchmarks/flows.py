"""Prefect's overhead over a plain ``dvc repro``, and the schedule round-trip time.

Two fresh clones of the current commit (so both start with an empty DVC cache and no outputs):
one runs ``dvc repro``, the other ``calibflow run`` (the Prefect flow, ephemeral API server
included). Then a local server is started, the deployment served, and ``run_deployment`` timed
on an up-to-date clone (a no-op run: the round-trip cost itself).

    python -m benchmarks.flows [--params params.yaml] [--skip-schedule]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _clone(dst: Path, params: Path | None) -> Path:
    subprocess.run(["git", "clone", "-q", str(ROOT), str(dst)], check=True)
    if params:
        shutil.copy(params, dst / "params.yaml")
    for k, v in (("user.email", "bench@calibflow.invalid"), ("user.name", "bench")):
        subprocess.run(["git", "config", k, v], cwd=dst, check=True)
    return dst


def _timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def schedule_round_trip(clone: Path, env: dict[str, str]) -> dict[str, float]:
    port = _free_port()
    env = {
        **env,
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
        "PREFECT_RUNNER_POLL_FREQUENCY": "1",
        "CALIBFLOW_ROOT": str(clone),
        "PREFECT_HOME": str(clone / ".prefect-bench"),
    }
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", f"from calibflow.flows import server; server.start({port}, wait=120)"],
        env=env,
        check=True,
        cwd=clone,
    )
    t_server = time.perf_counter() - t0
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "calibflow.flows.serve",
            "--name",
            "bench",
            "--port",
            str(port),
            "--parameters",
            json.dumps({"root": str(clone)}),
        ],
        env=env,
        cwd=clone,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        code = (
            "import time, asyncio; from prefect.deployments import run_deployment\n"
            "from prefect.client.orchestration import get_client\n"
            "async def wait():\n"
            "    async with get_client() as c:\n"
            "        for _ in range(240):\n"
            "            try: return await c.read_deployment_by_name('calibflow-pipeline/bench')\n"
            "            except Exception: await asyncio.sleep(0.5)\n"
            "asyncio.run(wait()); t0 = time.perf_counter()\n"
            "fr = run_deployment('calibflow-pipeline/bench', timeout=600, poll_interval=1)\n"
            "assert fr.state.is_completed(), fr.state\n"
            "print(time.perf_counter() - t0)\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, cwd=clone, capture_output=True, text=True, check=True
        )
        t_trip = float(out.stdout.strip().splitlines()[-1])
    finally:
        serve.terminate()
        serve.wait(timeout=30)
        subprocess.run([sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True)
    return {"server_start_s": t_server, "round_trip_s": t_trip}


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--params", type=Path, default=None, help="params file for both runs (default: the repo's)"
    )
    ap.add_argument("--skip-schedule", action="store_true")
    a = ap.parse_args(argv)
    from calibflow.flows.dvc_stages import stage_env

    # Both runs see this interpreter first on PATH, as `make repro` and `calibflow run` arrange.
    env = {**stage_env(), "PREFECT_LOGGING_LEVEL": "WARNING"}
    with tempfile.TemporaryDirectory(prefix="calibflow-bench-") as tmp:
        dvc_clone = _clone(Path(tmp) / "dvc", a.params)
        flow_clone = _clone(Path(tmp) / "flow", a.params)
        t_dvc = _timed([sys.executable, "-m", "dvc", "repro"], dvc_clone, env)
        t_flow = _timed(
            [sys.executable, "-m", "calibflow.cli", "run", "--quiet"],
            flow_clone,
            {**env, "CALIBFLOW_ROOT": str(flow_clone), "PREFECT_HOME": str(flow_clone / ".prefect")},
        )
        t_noop = _timed([sys.executable, "-m", "dvc", "repro"], dvc_clone, env)
        res = {
            "dvc_repro_s": t_dvc,
            "calibflow_run_s": t_flow,
            "overhead": t_flow / t_dvc - 1,
            "noop_repro_s": t_noop,
        }
        if not a.skip_schedule:
            res.update(schedule_round_trip(flow_clone, env))
    print("| measure | seconds |\n|---|---|")
    for k, v in res.items():
        print(
            f"| {k} | {v:.3f} |"
            if k != "overhead"
            else f"| Prefect overhead over dvc repro | {100 * v:+.1f}% |"
        )
    return res


if __name__ == "__main__":
    main()
