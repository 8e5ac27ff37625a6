"""``calibflow monitor``: run the monitor now, serve it daily, show the registry, roll back.

Registered in calibflow/cli/main.py with ``app.add_typer(monitor_app, name="monitor")``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import typer
import yaml

from calibflow.errors import fail
from calibflow.flows import project_root, runlog

monitor_app = typer.Typer(no_args_is_help=True, help="Calibration over time: champion, challengers, alerts.")


def _run_now(
    sources: list[str] | None,
    now: str | None,
    commit: bool | None,
    max_windows: int | None,
    rescore_from: str | None = None,
    start: str | None = None,
) -> None:
    """One flow run; prints each source's lines; exit 1 when a source failed or refused a file."""
    from calibflow.flows import check_writable
    from calibflow.flows.project import outside_message

    # before any log, file or server is made there
    if message := outside_message(project_root(), needs=("params.yaml",)):
        fail(ValueError(message))
    try:  # a read-only project, a full disk: one line before any server starts
        root = project_root()  # a monitor-only project may have no .dvc: check it only where it exists
        check_writable(root, ".prefect", *((".dvc/tmp",) if (root / ".dvc").is_dir() else ()), dvc=False)
    except OSError as exc:
        from calibflow.errors import os_brief

        fail(exc, os_brief)
    proc, url = _api()  # before Prefect is imported: its own ephemeral server would outlive a kill -9
    from calibflow.flows.monitor import monitor

    if proc is not None:
        # The step's own stack (pandas, DuckDB, the kernels, the page) is imported while the temporary
        # server starts (its start outlasted Prefect's import), instead of after, in the first subflow.
        import calibflow.pipeline.monitor  # noqa: F401
        import calibflow.report.monitoring  # noqa: F401
        from calibflow.flows import server as srv

        try:
            srv.wait_temporary(proc, url)
        except RuntimeError as exc:  # ServerFailed: one line
            fail(exc)
    runlog.open_run_log(project_root(), "monitor")
    try:
        out = monitor(
            root=str(project_root()),
            sources=sources or None,
            now=now,
            commit=commit,
            max_windows=max_windows,
            rescore_from=rescore_from,
            start=start,
        )
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        fail(exc, notes=runlog.note_lines())
    from calibflow.pipeline.monitor import report_lines

    for res in out["sources"]:
        typer.echo("\n".join(report_lines(res)))
    problems = [*out["failed"], *(f"refused: {x}" for r in out["sources"] for x in r["refused"])]
    for line in problems:
        typer.echo(f"error: {line}", err=True)
    if problems:
        raise typer.Exit(1)


def _api() -> tuple[Any, str | None]:
    """The API the flow reports to: $PREFECT_API_URL, this project's server if up, else a temporary one of
    ours (``server.spawn_temporary``: it dies with this process, ``kill -9`` included; Prefect's own
    ephemeral server does not)."""
    from calibflow.flows import server as srv

    url = os.environ.get("PREFECT_API_URL")
    if url:
        return None, url
    if srv.ours(srv.DEFAULT_PORT):
        os.environ["PREFECT_API_URL"] = srv.api_url(srv.DEFAULT_PORT)
        return None, os.environ["PREFECT_API_URL"]
    return srv.spawn_temporary()


@monitor_app.command("run")
def run(
    source: list[str] = typer.Option(None, "--source", help="Source(s) (default: monitor.sources)."),  # noqa: B008
    now: str = typer.Option(None, help="The run's clock, ISO timestamp (default: now, UTC)."),
    commit: bool = typer.Option(
        None, "--commit/--no-commit", help="Commit to monitor.branch (default: params)."
    ),
    max_windows: int = typer.Option(None, help="Process at most N windows this run."),
    start: str = typer.Option(None, "--start", help="Never score windows before this date (kept)."),
) -> None:
    """Score every new matured window now (a Prefect flow run: events, artifact, registry).

    A window (monitor.period on the grid monitor.origin + k * period) is
    scored once it has matured: its end + monitor.label_delay <= now
    (default 2D: a day's labels are taken as complete two days after it
    ends). Windows still waiting (labels not due or not all in, or behind
    one that is) are printed one line each as "pending", and the run exits
    0; a window without all its labels monitor.label_deadline after its
    end, or with no file monitor.delivery_deadline after its end, is an
    incident. Exit 1 only when a source failed or a file was refused. The
    page: reports/pages/monitoring-<source>.html; the state:
    monitoring/<source>/state.json; the served calibrator:
    monitoring/<source>/calibrator.json.
    """
    _run_now(source, now, commit, max_windows, start=start)


@monitor_app.command("rescore")
def rescore(
    source: str = typer.Option(..., "--source", help="The source to rescore."),
    from_date: str = typer.Option(..., "--from", help="Rescore from the window holding this date."),
    now: str = typer.Option(None, help="The run's clock, ISO timestamp (default: now, UTC)."),
    commit: bool = typer.Option(
        None, "--commit/--no-commit", help="Commit to monitor.branch (default: params)."
    ),
) -> None:
    """Backfill: drop the scores, gates and promotions from DATE on and score those windows again."""
    _run_now([source], now, commit, None, rescore_from=from_date)


@monitor_app.command("serve")
def serve(
    cron: str = typer.Option("0 6 * * *", help="Cron schedule (default: daily at 06:00)."),
    name: str = typer.Option("daily", help="Deployment name."),
    parameters: str = typer.Option("{}", help="JSON object of flow parameters."),
    port: int = typer.Option(4200, help="Local Prefect server port."),
) -> None:
    """Serve the monitor flow on a schedule against the local Prefect server (starts it if needed)."""
    from calibflow.flows import server as srv
    from calibflow.flows.monitor import serve as do_serve

    try:
        srv.start(port)
    except srv.PortTaken as exc:  # another checkout's server, or anything else, on the port
        fail(exc, notes=runlog.note_lines())
    typer.echo(f"serving calibflow-monitor/{name} on {cron!r} at {srv.api_url(port)} (Ctrl-C to stop)")
    do_serve(cron=cron, name=name, parameters=json.loads(parameters), port=port)


def _pin_path(source: str):
    return project_root() / "monitoring" / source / "pin.json"


@monitor_app.command("rollback")
def rollback(
    source: str = typer.Option(..., help="Source whose calibrator to roll back."),
    to_version: int = typer.Option(..., help="Monitor version to put back in prod (1 = the select stage's)."),
) -> None:
    """Pin an earlier version: the next runs serve it and promote nothing until `monitor release`.

    With a git checkout and registered versions, GTO's ``prod`` stage is assigned to it as well."""
    from calibflow.flows import registry
    from calibflow.io import write_json

    state = project_root() / "monitoring" / source / "state.json"
    try:
        if not state.exists():
            raise ValueError(f"source {source!r} has no monitor state ({state}): nothing to roll back")
        from calibflow.io import MAX_STATE_BYTES, read_bounded

        n = len(json.loads(read_bounded(state, MAX_STATE_BYTES, "the monitor state"))["versions"])
        if not 1 <= to_version <= n:
            raise ValueError(f"source {source!r} has versions 1..{n}, not {to_version}")
        if (project_root() / ".git").exists() and registry.registered(project_root(), source):
            registry.rollback(project_root(), source, to_version)
    except ValueError as exc:
        fail(exc, notes=runlog.note_lines())
    write_json(_pin_path(source), {"version": to_version})
    typer.echo(
        f"{source}: v{to_version} pinned (served by the next run; no promotion until "
        f"`calibflow monitor release --source {source}`)"
    )


@monitor_app.command("release")
def release(source: str = typer.Option(..., help="Source whose rollback pin to release.")) -> None:
    """Release a rollback's pin: the gate may promote again from the next run."""
    pin = _pin_path(source)
    if not pin.exists():
        typer.echo(f"{source}: no pin to release")
        return
    pin.unlink()
    typer.echo(f"{source}: pin released (the gate may promote from the next run)")


@monitor_app.command("status")
def status(
    source: str = typer.Option(..., help="Source."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object instead of lines."),
) -> None:
    """The registry's prod version and the monitor's newest numbers for a source."""
    from calibflow.flows import registry

    path = project_root() / "metrics" / "monitoring" / f"{source}.json"
    latest = json.loads(path.read_text()) if path.exists() else {}
    out = {"prod": registry.prod_version(project_root(), source), **latest}
    if as_json:
        typer.echo(json.dumps(out))
        return
    typer.echo("\n".join(status_lines(source, out)))


def status_lines(source: str, s: dict) -> list[str]:
    """``monitor status`` for people: what serves, the newest window's numbers, what is open."""
    if "windows" not in s:
        return [f"{source}: no monitor run yet (calibflow monitor run)"]
    lines = [
        f"{source}: champion v{s.get('champion_version')} serves (registry prod: {s.get('prod') or 'n/a'}); "
        f"{s['windows']} window(s) scored, {s.get('promotions', 0)} promotion(s)",
        f"  incidents: {s.get('open_incidents', 0)} open of {s.get('incidents', 0)}; "
        f"{s.get('pending', 0)} window(s) pending",
    ]
    if s.get("window"):
        lines.append(
            f"  newest window {str(s['window'])[:10]}: sum p / sum y {s['calibration_ratio']:.3f}, "
            f"ECE {s['ece']:.4f}, {s['positives']} positives of {s['n']} rows"
        )
    lines.append(f"  page: reports/pages/monitoring-{source}.html")
    return lines


def add_monitor_source(params_path: Path, name: str) -> None:
    """Add ``name`` to ``monitor.sources`` in ``params_path``, keeping every other line and comment.

    Edits the flow list (``sources: [a, b]``) or appends a ``monitor:`` section; anything else (a block
    list) is refused with the line to add by hand. The result is re-read: nothing else may change."""
    from calibflow.io import MAX_PARAMS_BYTES, read_bounded, write_text

    text = read_bounded(params_path, MAX_PARAMS_BYTES, "a params file")
    before = yaml.safe_load(text) or {}
    have = list((before.get("monitor") or {}).get("sources") or [])
    if name in have:
        return
    lines = text.splitlines(keepends=True)
    top = next((i for i, ln in enumerate(lines) if re.match(r"^monitor:\s*(#.*)?$", ln)), None)
    if top is None:
        sep = "" if not text or text.endswith("\n") else "\n"
        new = text + sep + f"\nmonitor:\n  sources: [{name}]\n"
    else:
        end = next((j for j in range(top + 1, len(lines)) if re.match(r"^\S", lines[j])), len(lines))
        hit = next((j for j in range(top + 1, end) if re.match(r"^\s+sources:\s*\[", lines[j])), None)
        if hit is None:
            raise ValueError(f"add `{name}` to monitor.sources in {params_path} by hand (a list there)")
        listed = "[" + ", ".join([*have, name]) + "]"
        lines[hit] = re.sub(r"\[([^\]]*)\]", lambda m: listed, lines[hit], count=1)
        new = "".join(lines)
    after = yaml.safe_load(new) or {}
    want = {**before, "monitor": {**(before.get("monitor") or {}), "sources": [*have, name]}}
    if after != want:
        raise ValueError(f"could not add {name!r} to monitor.sources in {params_path} safely; add it by hand")
    write_text(params_path, new)
