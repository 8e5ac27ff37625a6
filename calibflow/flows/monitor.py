"""The daily monitor flow: new matured windows, champion scores, the gate, alerts, registry, commit.

    calibflow monitor run [--source ads] [--now ...]          # once, now
    calibflow monitor serve --cron "0 6 * * *"                # daily, against the local Prefect server

Per source (``monitor.sources`` in params.yaml): one task runs ``calibflow.pipeline.monitor.run`` (the same
code as
``python -m calibflow.pipeline.monitor``); then every new alert becomes a Prefect event
``calibflow.calibration.drift``
(resource ``calibflow.source.<source>``; payload: source, segment, metric, value, band, window, version) that
an automation can react to (docs/monitoring.md), and the run gets a markdown artifact ``monitor-<source>``.
With ``commit`` (default from ``monitor.commit``), the state, history, metrics and champion files are
committed to ``monitor.branch`` (default ``calibflow/runs``), never to the checked-out branch, and each
promotion is registered in GTO (``calibflow/flows/registry.py``) at that commit with the ``prod`` stage.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import calibflow.flows  # noqa: F401  (environment before prefect)
from calibflow.flows import project_root, registry
from calibflow.flows.gitops import DEFAULT_BRANCH

EVENT = "calibflow.calibration.drift"


def drift_event(alert: dict[str, Any]) -> dict[str, Any]:
    """The event's resource and payload for one alert (what automations match on)."""
    band = [None if b is None else float(b) for b in alert["band"]]
    return {
        "event": EVENT,
        "resource": {
            "prefect.resource.id": f"calibflow.source.{alert['source']}",
            "prefect.resource.name": alert["source"],
            "calibflow.segment": alert["segment"],
            "calibflow.metric": alert["metric"],
        },
        "payload": {
            "source": alert["source"],
            "segment": alert["segment"],
            "metric": alert["metric"],
            "value": float(alert["value"]),
            "band": band,
            "window": alert["window"],
            "version": int(alert["version"]),
        },
    }


def artifact_markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Monitor: {res['source']}",
        "",
        f"{len(res['windows'])} new window(s); champion v{res['champion']}.",
    ]
    if res["alerts"]:
        lines += [
            "",
            "## Calibration drift",
            "",
            "| window | segment | metric | value | band |",
            "|---|---|---|---|---|",
        ]
        for a in res["alerts"]:
            lines.append(
                f"| {a['window'][:10]} | {a['segment']} | {a['metric']} | {a['value']:.4f} | {a['band']} |"
            )
    for v in res["promotions"]:
        lines += [
            "",
            f"Promoted v{v['version']} ({v['method']}) after {v['promoted_after'][:10]}: fitted on "
            f"{v['fitted_on']}, judged on {v['judged_on']}.",
        ]
    for n in res["notes"]:
        lines.append(f"- note: {n}")
    return "\n".join(lines)


def drift_automation(name: str = "calibflow-drift", actions: list | None = None, source: str = "*"):
    """Create (on the configured server) an automation that fires on every ``calibflow.calibration.drift``.

    ``actions`` default to ``DoNothing`` (the trigger is still recorded as ``prefect.automation.triggered``);
    a team passes e.g. ``[SendNotification(block_document_id=..., subject=..., body=...)]`` or
    ``[RunDeployment(source="selected", deployment_id=..., parameters={...})]`` (``prefect.events.actions``).
    """
    from prefect.automations import Automation
    from prefect.events.actions import DoNothing
    from prefect.events.schemas.automations import EventTrigger, Posture

    trigger = EventTrigger(
        expect={EVENT},
        match={"prefect.resource.id": f"calibflow.source.{source}"},
        posture=Posture.Reactive,
        threshold=1,
    )
    return Automation(name=name, trigger=trigger, actions=actions or [DoNothing()]).create()


def _is_git(root: Path) -> bool:
    return (root / ".git").exists()


def monitor_source(root: str, source: str, now: str | None, max_windows: int | None, registry_on: bool):
    from calibflow.pipeline._common import load_params
    from calibflow.pipeline.monitor import run

    params = load_params(Path(root) / "params.yaml")
    prod = registry.prod_version(root, source) if registry_on and _is_git(Path(root)) else None
    return run(root, params, source, now=now, max_windows=max_windows, prod_version=prod)


def publish(res: dict[str, Any]) -> int:
    """Events for the new alerts and the run's artifact; returns the number of events emitted."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.events import emit_event

    for alert in res["alerts"]:
        emit_event(**drift_event(alert))
    key = "monitor-" + registry.artifact_name(res["source"]).removesuffix("-calibrator")
    create_markdown_artifact(markdown=artifact_markdown(res), key=key, description="calibflow monitor")
    return len(res["alerts"])


def commit_and_register(root: str, res: dict[str, Any], branch: str, registry_on: bool) -> str | None:
    """Commit the run's files to ``branch`` (never the checked-out one); register promotions in GTO."""
    from calibflow.flows.gitops import commit_paths

    msg = (
        f"calibflow monitor {res['source']}: {len(res['windows'])} window(s), "
        f"{len(res['alerts'])} alert(s), {len(res['promotions'])} promotion(s)"
    )
    sha = commit_paths(root, res["files"], msg, branch=branch)
    if sha and registry_on:
        import subprocess

        have = registry.registered(root, res["source"])
        if 1 not in have:  # the select stage's calibrator: at the checked-out commit that holds it
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
            registry.promote(root, res["source"], 1, head.stdout.strip(), "initial champion (select stage)")
        if res["promotions"]:  # GTO: one version per commit, so the newest promotion of this run
            v = res["promotions"][-1]
            registry.promote(root, res["source"], v["version"], sha, f"promoted after {v['promoted_after']}")
    return sha


@contextlib.contextmanager
def one_run_per_checkout(root: str) -> Iterator[None]:
    """Queue behind any other calibflow run of this checkout: the Prefect limit of one, then the file lock.

    Same order as the pipeline flow (calibflow/flows/pipeline.py), so a monitor run and a pipeline run can
    never
    each hold one and wait for the other.
    """
    from calibflow.flows.checkout_lock import checkout_lock

    with checkout_lock(root, wait=True):  # the kernel's lock: it dies with its holder (issue 30)
        yield


def _flow():
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE

    run_task = task(monitor_source, name="monitor-source", cache_policy=NO_CACHE)
    publish_task = task(publish, name="publish-alerts", cache_policy=NO_CACHE)
    commit_task = task(commit_and_register, name="commit-and-register", cache_policy=NO_CACHE)

    @flow(name="calibflow-monitor", log_prints=True)
    def monitor(
        root: str | None = None,
        sources: list[str] | None = None,
        now: str | None = None,
        commit: bool | None = None,
        branch: str | None = None,
        registry_on: bool | None = None,
        max_windows: int | None = None,
    ) -> dict[str, Any]:
        from calibflow.pipeline._common import load_params
        from calibflow.pipeline.monitor import sources_to_monitor

        root_path = str(Path(root) if root else project_root())
        sec = load_params(Path(root_path) / "params.yaml").get("monitor") or {}
        commit = bool(sec.get("commit", False)) if commit is None else commit
        branch = branch or sec.get("branch") or DEFAULT_BRANCH
        reg = bool(sec.get("registry", True)) if registry_on is None else registry_on
        out = []
        with one_run_per_checkout(root_path):  # overlapping triggers queue here, never race
            for name in sources or sources_to_monitor({"monitor": sec}, None):
                res = run_task(root_path, name, now, max_windows, reg)
                res["events"] = publish_task(res)
                if commit:
                    res["revision"] = commit_task(root_path, res, branch, reg)
                print(
                    f"monitor {name}: {len(res['windows'])} window(s), {len(res['alerts'])} alert(s), "
                    f"{len(res['promotions'])} promotion(s), champion v{res['champion']}"
                )
                out.append(res)
        return {"sources": out}

    return monitor


monitor = _flow()


def serve(
    cron: str = "0 6 * * *",
    name: str = "daily",
    parameters: dict[str, Any] | None = None,
    port: int | None = None,
) -> None:
    """Serve the monitor flow on ``cron`` against the local Prefect server (blocks; each run a subprocess)."""
    from calibflow.flows import server
    from calibflow.flows.serve import validate_cron

    validate_cron(cron)
    port = port or server.DEFAULT_PORT
    os.environ["PREFECT_API_URL"] = server.api_url(port)
    if not server.healthy(port):
        raise RuntimeError(f"no Prefect server at {server.api_url(port)}: run `calibflow server start` first")
    monitor.serve(name=name, cron=cron, parameters=parameters or {}, print_starting_message=False)


def main(argv: list[str] | None = None) -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Serve the calibflow monitor flow on a schedule.")
    ap.add_argument("--cron", default="0 6 * * *")
    ap.add_argument("--name", default="daily")
    ap.add_argument("--parameters", default="{}", help="JSON object of flow parameters")
    ap.add_argument("--port", type=int, default=None)
    a = ap.parse_args(argv)
    serve(a.cron, a.name, json.loads(a.parameters), a.port)


if __name__ == "__main__":
    main()
