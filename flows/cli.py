"""The ``calibflow`` command line: run, repro, serve, server, report, datasets, validate.

Prefect is imported lazily inside the commands that need it, after ``--quiet`` has chosen the log
level, so ``calibflow datasets list`` stays fast and server noise never reaches the terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import webbrowser
from pathlib import Path

import typer

from flows import project_root
from flows.dvc_stages import stage_env

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="calibflow: calibrated probabilities, with the evidence."
)
server_app = typer.Typer(no_args_is_help=True, help="The local Prefect server that runs schedules.")
datasets_app = typer.Typer(no_args_is_help=True, help="The real datasets calibflow knows.")
app.add_typer(server_app, name="server")
app.add_typer(datasets_app, name="datasets")

REPORT = Path("reports/index.html")


def _set_verbosity(quiet: bool) -> None:
    # Must happen before prefect is imported (it reads settings at import time).
    os.environ["PREFECT_LOGGING_LEVEL"] = "WARNING" if quiet else "INFO"


def _task_runner(kind: str, address: str | None, workers: int):
    if kind == "sequential":
        return None
    if kind != "dask":
        raise typer.BadParameter(f"task runner must be 'sequential' or 'dask', got {kind!r}")
    from prefect_dask import DaskTaskRunner

    if address:
        return DaskTaskRunner(address=address)
    return DaskTaskRunner(
        cluster_kwargs={"n_workers": workers, "threads_per_worker": 1, "dashboard_address": None}
    )


@app.command()
def run(
    targets: list[str] = typer.Argument(None, help="DVC stages to reproduce (default: all)."),
    params_file: str = typer.Option(None, help="A params YAML to use for this run instead of params.yaml."),
    pull: bool = typer.Option(False, help="dvc pull before running."),
    push: bool = typer.Option(False, help="dvc push after running."),
    commit: bool = typer.Option(False, help="git commit dvc.lock, metrics and the summary."),
    task_runner: str = typer.Option("sequential", help="sequential | dask"),
    dask_address: str = typer.Option(None, help="Scheduler address of an existing Dask cluster."),
    dask_workers: int = typer.Option(2, help="Workers of the local Dask cluster."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and the final line."),
) -> None:
    """Run the pipeline flow locally (the main job): every stale stage, then the report."""
    _set_verbosity(quiet)
    from flows.pipeline import pipeline

    runner = _task_runner(task_runner, dask_address, dask_workers)
    flow = pipeline.with_options(task_runner=runner) if runner else pipeline
    result = flow(
        targets=targets or None,
        params_file=params_file,
        pull_first=pull,
        push_after=push,
        commit=commit,
        parallel=runner is not None,
        root=str(project_root()),
    )
    ran = [s["name"] for s in result["stages"] if s.get("ran")]
    secs = result["seconds"]
    typer.echo(f"calibflow run: {len(ran)} stage(s) ran in {secs:.1f} s; report: {project_root() / REPORT}")


@app.command()
def repro(args: list[str] = typer.Argument(None, help="Extra arguments for dvc repro.")) -> None:
    """Plain ``dvc repro`` (no Prefect)."""
    raise typer.Exit(_dvc_repro(*(args or [])))


@app.command()
def serve(
    cron: str = typer.Option("0 2 * * *", help="Cron schedule of the deployment."),
    name: str = typer.Option("nightly", help="Deployment name."),
    parameters: str = typer.Option("{}", help="JSON object of flow parameters (targets, params_file, ...)."),
    port: int = typer.Option(4200, help="Local Prefect server port."),
) -> None:
    """Serve the pipeline on a schedule against the local server (starts it if needed)."""
    from flows import server as srv
    from flows.serve import serve as do_serve
    from flows.serve import validate_cron

    validate_cron(cron)
    srv.start(port)
    typer.echo(
        f"serving deployment calibflow-pipeline/{name} on {cron!r} at {srv.api_url(port)} (Ctrl-C to stop)"
    )
    do_serve(cron=cron, name=name, parameters=json.loads(parameters), port=port)


@server_app.command("start")
def server_start(port: int = typer.Option(4200)) -> None:
    from flows import server as srv

    typer.echo(f"Prefect server healthy at {srv.start(port)}")


@server_app.command("stop")
def server_stop() -> None:
    from flows import server as srv

    srv.stop()
    typer.echo("Prefect server stopped")


@server_app.command("status")
def server_status(port: int = typer.Option(4200)) -> None:
    from flows import server as srv

    st = srv.status(port)
    typer.echo(json.dumps(st))
    raise typer.Exit(0 if st["healthy"] else 1)


@app.command()
def report(open_: bool = typer.Option(False, "--open", help="Open the report in a browser.")) -> None:
    """Print (or open) the path of the last generated report."""
    path = project_root() / REPORT
    if not path.exists():
        typer.echo(f"no report at {path}: run `calibflow run` first", err=True)
        raise typer.Exit(1)
    typer.echo(str(path))
    if open_:
        webbrowser.open(path.as_uri())


@datasets_app.command("list")
def datasets_list() -> None:
    from calibflow import datasets

    for name in datasets.available():
        info = datasets.info(name)
        typer.echo(f"{name:20s} {getattr(info, 'description', '')}")


@datasets_app.command("fetch")
def datasets_fetch(
    name: str, data_dir: str = typer.Option(None, help="Cache folder (default data/raw).")
) -> None:
    from calibflow import datasets

    try:
        path = datasets.fetch(name, data_dir=data_dir)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"{name}: {path}")


@app.command()
def validate(quiet: bool = typer.Option(False, "--quiet", "-q")) -> None:
    """Run the Great Expectations validation stage and print its summary."""
    raise typer.Exit(_dvc_repro("validate", quiet=quiet))


def _dvc_repro(*args: str, quiet: bool = False) -> int:
    """``dvc repro ARGS`` in the project, stage commands seeing this interpreter first on PATH."""
    cmd = [sys.executable, "-m", "dvc", "repro", *args]
    return subprocess.run(cmd, cwd=project_root(), env=stage_env(), capture_output=quiet).returncode


from flows.cli_sources import register as _register_sources  # noqa: E402, I001  (issue 12: init, apply)
_register_sources(app)

if __name__ == "__main__":
    app()
