"""Serve the pipeline flow as a scheduled deployment against the local Prefect server.

    calibflow server start
    calibflow serve --cron "0 2 * * *"          # blocks, running each scheduled flow run

``python -m calibflow.flows.serve --cron ... --name ...`` is the same, for process managers. Each scheduled
run
commits its ``dvc.lock``, metrics and summary (``commit=True``), so the git log is the run history.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import calibflow.flows  # noqa: F401
from calibflow.flows import server

DEPLOYMENT = "nightly"


def serve(
    cron: str = "0 2 * * *",
    name: str = DEPLOYMENT,
    parameters: dict[str, Any] | None = None,
    port: int = server.DEFAULT_PORT,
) -> None:
    """Register the deployment with ``cron`` and run its scheduled flow runs until interrupted."""
    # The one local server: set before prefect is imported (validate_cron imports it), so Prefect never
    # starts an ephemeral second server nor warns that it cannot schedule.
    os.environ["PREFECT_API_URL"] = server.api_url(port)
    validate_cron(cron)
    if not server.ours(port):  # never register with another checkout's server (or anything else on the port)
        raise RuntimeError(
            f"no Prefect server of this project at {server.api_url(port)}: run `calibflow server start`"
        )
    from calibflow.flows.pipeline import pipeline

    params = {"commit": True, **(parameters or {})}
    pipeline.serve(name=name, cron=cron, parameters=params, print_starting_message=False)


def validate_cron(cron: str) -> None:
    """Reject a bad cron string before anything is registered (Prefect's own schedule validation)."""
    from prefect.client.schemas.schedules import CronSchedule

    try:
        CronSchedule(cron=cron)
    except Exception as exc:  # pydantic's ValidationError; its text names the problem
        raise ValueError(f"invalid cron expression {cron!r}: {exc}") from exc


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cron", default="0 2 * * *")
    ap.add_argument("--name", default=DEPLOYMENT)
    ap.add_argument("--parameters", default="{}", help="JSON object of flow parameters")
    ap.add_argument("--port", type=int, default=server.DEFAULT_PORT)
    a = ap.parse_args(argv)
    serve(a.cron, a.name, json.loads(a.parameters), a.port)


if __name__ == "__main__":
    main()
