"""``calibflow monitor``: run the monitor now, serve it daily, show the registry, roll back.

Registered in calibflow/flows/cli.py with ``app.add_typer(monitor_app, name="monitor")``.
"""

from __future__ import annotations

import json
import os

import typer

from calibflow.flows import project_root

monitor_app = typer.Typer(no_args_is_help=True, help="Calibration over time: champion, challengers, alerts.")


def _fail(exc: Exception) -> None:
    if os.environ.get("CALIBFLOW_DEBUG"):
        raise exc
    typer.echo(f"error: {exc}", err=True)
    from calibflow.flows import runlog

    if runlog.current() is not None:  # Prefect's tracebacks went there, not to the terminal
        typer.echo(f"run log: {runlog.current()} (--debug prints it here)", err=True)
    raise typer.Exit(1)


@monitor_app.command("run")
def run(
    source: list[str] = typer.Option(None, "--source", help="Source(s) (default: monitor.sources)."),  # noqa: B008
    now: str = typer.Option(None, help="The run's clock, ISO timestamp (default: now, UTC)."),
    commit: bool = typer.Option(
        None, "--commit/--no-commit", help="Commit to monitor.branch (default: params)."
    ),
    max_windows: int = typer.Option(None, help="Process at most N windows this run."),
) -> None:
    """Score every new matured window now (a Prefect flow run: events, artifact, registry)."""
    from calibflow.flows import runlog
    from calibflow.flows.monitor import monitor

    runlog.open_run_log(project_root(), "monitor")
    try:
        out = monitor(
            root=str(project_root()), sources=source or None, now=now, commit=commit, max_windows=max_windows
        )
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        _fail(exc)
    for res in out["sources"]:
        for a in res["alerts"]:
            typer.echo(
                f"ALERT {res['source']} {a['window'][:10]} {a['segment']} {a['metric']}={a['value']:.4f}"
            )


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
        _fail(exc)
    typer.echo(f"serving calibflow-monitor/{name} on {cron!r} at {srv.api_url(port)} (Ctrl-C to stop)")
    do_serve(cron=cron, name=name, parameters=json.loads(parameters), port=port)


@monitor_app.command("rollback")
def rollback(
    source: str = typer.Option(..., help="Source whose calibrator to roll back."),
    to_version: int = typer.Option(..., help="Monitor version to put back in prod (1 = the select stage's)."),
) -> None:
    """Assign the GTO ``prod`` stage to an earlier version; the next monitor run serves it."""
    from calibflow.flows import registry

    try:
        registry.rollback(project_root(), source, to_version)
    except ValueError as exc:
        _fail(exc)
    typer.echo(f"{registry.artifact_name(source)}: prod -> {registry.semver(to_version)} (next run uses it)")


@monitor_app.command("status")
def status(source: str = typer.Option(..., help="Source.")) -> None:
    """The registry's prod version and the monitor's newest numbers for a source."""
    from calibflow.flows import registry

    path = project_root() / "metrics" / "monitoring" / f"{source}.json"
    latest = json.loads(path.read_text()) if path.exists() else {}
    typer.echo(json.dumps({"prod": registry.prod_version(project_root(), source), **latest}))
