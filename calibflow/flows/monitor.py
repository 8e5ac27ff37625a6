"""The daily monitor flow: new matured windows, champion scores, the gate, incidents, registry, commit.

    calibflow monitor run [--source ads] [--now ...]          # once, now
    calibflow monitor serve --cron "0 6 * * *"                # daily, against the project's Prefect server

Each source in ``monitor.sources`` runs as its own subflow ``calibflow-monitor-source`` (the same code as
``python -m calibflow.pipeline.monitor``): one source's failure ends that subflow Failed with one line and
an event ``calibflow.monitor.failed``, and the other sources still run. Per source, events for what a person
acts on, not one per out-of-band window: ``calibflow.calibration.drift`` when an incident opens,
``calibflow.calibration.recovered`` when it closes, ``calibflow.calibrator.promoted`` for a promotion and
``calibflow.monitor.refused`` for delivered files or windows refused (resource ``calibflow.source.<source>``),
``calibflow.monitor.labels_overdue`` / ``calibflow.monitor.delivery_missing`` for a window waiting past
``monitor.label_deadline`` / ``delivery_deadline`` (``calibflow.monitor.arrived`` when it comes in),
plus a markdown artifact ``monitor-<source>``. With ``commit`` (default from ``monitor.commit``), the
monitor's files are committed to ``monitor.branch`` (default ``calibflow/runs``), never to the checked-out
branch, and each promotion is registered in GTO (``calibflow/flows/registry.py``) with the ``prod`` stage.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import calibflow.flows  # noqa: F401  (environment before prefect)
from calibflow.flows import project_root, registry
from calibflow.flows.gitops import DEFAULT_BRANCH
from calibflow.flows.monitor_worker import monitor_source

EVENT = "calibflow.calibration.drift"
RECOVERED = "calibflow.calibration.recovered"
PROMOTED = "calibflow.calibrator.promoted"
#: A window that waited past its deadline has its own events (a data feed's fault, not drift).
OVERDUE = {"labels_overdue": "calibflow.monitor.labels_overdue",
           "delivery_missing": "calibflow.monitor.delivery_missing"}
ARRIVED = "calibflow.monitor.arrived"
FAILED = "calibflow.monitor.failed"
REFUSED = "calibflow.monitor.refused"


def _resource(source: str, **labels: str) -> dict[str, str]:
    return {"prefect.resource.id": f"calibflow.source.{source}", "prefect.resource.name": source, **labels}


def incident_event(inc: dict[str, Any], closed: bool = False) -> dict[str, Any]:
    """The event of an incident opening (``EVENT``) or closing (``RECOVERED``): what automations match."""
    band = [None if b is None else float(b) for b in (inc.get("band") or [None, None])]
    labels = {"calibflow.segment": inc["segment"], "calibflow.metric": inc["metric"]}
    payload = {
        "source": inc["source"],
        "segment": inc["segment"],
        "metric": inc["metric"],
        "incident": inc["id"],
        "opened": inc["opened"],
        "closed": inc["closed"],
        "worst": float(inc["worst"]),
        "windows_out": int(inc["windows"]),
        "band": band,
        "window": inc["closed"] if closed else inc["opened"],
        "version": int(inc["version"]),
    }
    name = RECOVERED if closed else EVENT
    if inc["metric"] in OVERDUE:
        name = ARRIVED if closed else OVERDUE[inc["metric"]]
    return {"event": name, "resource": _resource(inc["source"], **labels), "payload": payload}


def promotion_event(source: str, v: dict[str, Any]) -> dict[str, Any]:
    judged = v.get("judged") or {}
    payload = {
        "source": source,
        "version": int(v["version"]),
        "method": v["method"],
        "replaces": v.get("replaces"),
        "promoted_after": v["promoted_after"],
        "gain": judged.get("delta"),
        "gain_ci": judged.get("delta_ci"),
        "metric": judged.get("metric"),
    }
    return {"event": PROMOTED, "resource": _resource(source), "payload": payload}


def artifact_markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Monitor: {res['source']}",
        "",
        f"{len(res['windows'])} new window(s); champion v{res['champion']}.",
    ]
    if res["incidents_open"] or res["closed"]:
        lines += [
            "",
            "## Calibration drift: incidents",
            "",
            "| segment | metric | opened | closed | windows out | worst |",
            "|---|---|---|---|---|---|",
        ]
        for i in [*res["incidents_open"], *res["closed"]]:
            lines.append(
                f"| {i['segment']} | {i['metric']} | {i['opened'][:10]} | {(i['closed'] or 'open')[:10]} | "
                f"{i['windows']} | {i['worst']:.4f} |"
            )
    for v in res["promotions"]:
        lines += [
            "",
            f"Promoted v{v['version']} ({v['method']}) after {v['promoted_after'][:10]}: fitted on "
            f"{v['fitted_on']}, judged on {v['judged_on']}.",
        ]
    for n in [*res["notes"], *res["notices"]]:
        lines.append(f"- note: {n}")
    for n in res["refused"]:
        lines.append(f"- **refused**: {n}")
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


#: Sources scored at once in worker processes when a run has several (``CALIBFLOW_MONITOR_WORKERS``).
#: Default 1 (one after another in the flow's own process): on the shared 2-core machine two workers gave
#: the same CPU and a longer wall at load 5 (64.9 s against 52.3 s for 5 sources x 1e5 rows) and twice
#: the memory (1.76 GB against 0.93 GB, every process); they pay where cores are idle.
WORKERS = 1
#: The results being computed ahead of each source's subflow: ``(root, source) -> Future``.
_AHEAD: dict[tuple[str, str], Future] = {}


def _workers(n_sources: int) -> int:
    want = int(os.environ.get("CALIBFLOW_MONITOR_WORKERS") or WORKERS)
    return max(1, min(want, n_sources))


@contextlib.contextmanager
def sources_ahead(root: str, names: list[str], *args: Any) -> Iterator[None]:
    """Score the sources' windows in ``_workers`` processes while the subflows run one after another.

    Why: a source's morning is CPU work in one process (the gate's fits, the bootstrap, the page's
    figures: about 7 s of CPU for a day of 1e5 rows), and the subflows run in order, so five sources
    used one core of two. Each subflow still owns its source: it takes the result (or the error, re-raised
    in the subflow and reported as before) of ``monitor_source(root, name, *args)`` computed ahead in a
    worker, then publishes and commits. Sources write only their own files; the checkout lock is held by
    the flow around all of it. One source, or one worker (the default, ``WORKERS``): nothing ahead, the
    subflow computes it itself."""
    workers = _workers(len(names))
    if workers < 2:
        yield
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from calibflow.flows import monitor_worker

    spawn = multiprocessing.get_context("spawn")  # not fork: the flow's process runs Prefect's threads
    pool = ProcessPoolExecutor(workers, mp_context=spawn, initializer=monitor_worker.init)
    keys = [(root, name) for name in names]
    try:
        for key in keys:
            _AHEAD[key] = pool.submit(monitor_worker.monitor_source, root, key[1], *args)
        yield
    finally:
        for key in keys:
            fut = _AHEAD.pop(key, None)
            if fut is not None:
                fut.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def _scored(root: str, name: str, *args: Any) -> dict[str, Any]:
    """The source's result: computed ahead by a worker (``sources_ahead``), else here."""
    fut = _AHEAD.pop((root, name), None)
    return fut.result() if fut is not None else monitor_source(root, name, *args)


def events_of(res: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of one source's run: incidents opened and closed, promotions, refusals."""
    out = [incident_event(i) for i in res["opened"]]
    out += [incident_event(i, closed=True) for i in res["closed"]]
    out += [promotion_event(res["source"], v) for v in res["promotions"]]
    out += [
        {
            "event": REFUSED,
            "resource": _resource(res["source"]),
            "payload": {"source": res["source"], "line": x},
        }
        for x in res["refused"]
    ]
    return out


def publish(res: dict[str, Any]) -> int:
    """Events and the run's artifact; returns the number of events emitted."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.events import emit_event

    events = events_of(res)
    for ev in events:
        emit_event(**ev)
    key = "monitor-" + registry.artifact_name(res["source"]).removesuffix("-calibrator")
    create_markdown_artifact(markdown=artifact_markdown(res), key=key, description="calibflow monitor")
    return len(events)


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
        elif registry.prod_version(root, res["source"]) != res["champion"]:
            # A rescore withdrew the version in prod: prod follows the champion back (registered or not).
            registry.promote(root, res["source"], res["champion"], sha, "champion after a rescore")
    return sha


@contextlib.contextmanager
def one_run_per_checkout(root: str) -> Iterator[None]:
    """Queue behind any other calibflow run of this checkout: the Prefect limit of one, then the file lock.

    Same order as the pipeline flow (calibflow/flows/pipeline.py), so a monitor run and a pipeline run can
    never
    each hold one and wait for the other.
    """
    from calibflow.flows.checkout_lock import checkout_lock

    with checkout_lock(root, wait=True):  # the kernel's lock: it dies with its holder
        yield


#: Errors a source's run reports in one line (anything else is a bug and keeps its traceback in the logs).
def _expected() -> tuple[type[BaseException], ...]:
    from calibflow.pipeline._common import StageError

    return (StageError, ValueError, FileNotFoundError, OSError, RuntimeError, KeyError)


def _flows():
    from prefect import flow
    from prefect.states import Failed

    @flow(name="calibflow-monitor-source", flow_run_name="monitor-{name}", log_prints=True)
    def monitor_one(
        root: str,
        name: str,
        now: str | None = None,
        max_windows: int | None = None,
        registry_on: bool = True,
        commit: bool = False,
        branch: str = DEFAULT_BRANCH,
        rescore_from: str | None = None,
        start: str | None = None,
    ):
        """One source: scored, published, committed; a failure ends this subflow Failed in one line."""
        from prefect.events import emit_event

        try:
            res = _scored(root, name, now, max_windows, registry_on, rescore_from, start)
            res["events"] = publish(res)
            if commit:
                res["revision"] = commit_and_register(root, res, branch, registry_on)
        except _expected() as exc:
            text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
            line = f"monitor {name}: failed: {(text.strip().splitlines() or [repr(exc)])[0]}"
            emit_event(event=FAILED, resource=_resource(name), payload={"source": name, "error": line})
            return Failed(message=line)
        return res

    @flow(name="calibflow-monitor", log_prints=True)
    def monitor(
        root: str | None = None,
        sources: list[str] | None = None,
        now: str | None = None,
        commit: bool | None = None,
        branch: str | None = None,
        registry_on: bool | None = None,
        max_windows: int | None = None,
        rescore_from: str | None = None,
        start: str | None = None,
    ) -> dict[str, Any]:
        """Every source in its own subflow; returns ``{"sources": [result...], "failed": [line...]}``."""
        from calibflow.pipeline._common import load_params
        from calibflow.pipeline.monitor import report_lines, sources_to_monitor

        root_path = str(Path(root) if root else project_root())
        sec = load_params(Path(root_path) / "params.yaml").monitor or {}
        commit = bool(sec.get("commit", False)) if commit is None else commit
        branch = branch or sec.get("branch") or DEFAULT_BRANCH
        reg = bool(sec.get("registry", True)) if registry_on is None else registry_on
        out: list[dict[str, Any]] = []
        failed: list[str] = []
        names = list(sources or sources_to_monitor({"monitor": sec}, None))
        with (
            one_run_per_checkout(root_path),  # overlapping triggers queue here, never race
            sources_ahead(root_path, names, now, max_windows, reg, rescore_from, start),
        ):
            for name in names:
                state = monitor_one(
                    root_path,
                    name,
                    now,
                    max_windows,
                    reg,
                    commit,
                    branch,
                    rescore_from,
                    start,
                    return_state=True,
                )
                if state.is_failed():
                    failed.append(state.message or f"monitor {name}: failed")
                    print(failed[-1])
                    continue
                res = state.result()
                print("\n".join(report_lines(res)))
                out.append(res)
        return {"sources": out, "failed": failed}

    return monitor_one, monitor


monitor_one, monitor = _flows()


def serve(
    cron: str = "0 6 * * *",
    name: str = "daily",
    parameters: dict[str, Any] | None = None,
    port: int | None = None,
) -> None:
    """Serve the monitor flow on ``cron`` against the project's Prefect server (blocks; each run a
    subprocess). The API address is set for this call whatever was imported before: never an ephemeral
    server, which cannot schedule."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from calibflow.flows import server
    from calibflow.flows.serve import validate_cron

    validate_cron(cron)
    port = port or server.DEFAULT_PORT
    if not server.ours(port):  # a server of another checkout (or anything else) on the port is not ours
        if server.listening(port):
            raise RuntimeError(server.taken_message(port))
        raise RuntimeError(f"no Prefect server at {server.api_url(port)}: run `calibflow server start` first")
    with temporary_settings(updates={PREFECT_API_URL: server.api_url(port)}):
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
