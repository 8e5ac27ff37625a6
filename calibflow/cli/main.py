"""The ``calibflow`` command line: run, repro, serve, trigger, server, report, datasets, validate.

Prefect is imported lazily inside the commands that need it, after ``--quiet`` has chosen the log
level and the API URL is decided, so ``calibflow datasets list`` stays fast and server noise never
reaches the terminal. Mistakes a user makes (a typo'd stage, a missing or invalid params file, a bad
cron) are checked before any server or stage starts and reported in one or two lines; a traceback
only with ``--debug`` (or ``CALIBFLOW_DEBUG=1``). See docs/reliability.md.
"""

from __future__ import annotations

import difflib
import gc
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from calibflow.cli.monitor import monitor_app
from calibflow.flows import check_writable, project_root
from calibflow.flows.dvc_stages import stage_env
from calibflow.flows.gitops import DEFAULT_BRANCH

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="calibflow: calibrated probabilities, with the evidence.",
    epilog="Scheduled runs: `calibflow server start` (UI at http://127.0.0.1:4200), `calibflow serve`, then "
    "`calibflow trigger` to run now (same as `PREFECT_API_URL=http://127.0.0.1:4200/api prefect deployment "
    "run calibflow-pipeline/nightly`).",
)
server_app = typer.Typer(no_args_is_help=True, help="The local Prefect server that runs schedules.")
datasets_app = typer.Typer(no_args_is_help=True, help="The real datasets calibflow knows.")
app.add_typer(server_app, name="server")
app.add_typer(datasets_app, name="datasets")
app.add_typer(monitor_app, name="monitor")

REPORT = Path("reports/index.html")
DEPLOYMENT_FLOW = "calibflow-pipeline"
TRIGGER_HELP = (
    "Trigger a run: `calibflow trigger` (same as `PREFECT_API_URL=http://127.0.0.1:4200/api "
    "prefect deployment run calibflow-pipeline/nightly`)."
)


class UserError(Exception):
    """A mistake the user can fix: printed as its message (one or two lines), exit code 2."""


def _debug() -> bool:
    return bool(os.environ.get("CALIBFLOW_DEBUG"))


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks (same as CALIBFLOW_DEBUG=1)."),
) -> None:
    if debug:
        os.environ["CALIBFLOW_DEBUG"] = "1"


def _friendly(fn: Callable[[], Any]) -> Any:
    """Run a command body; a known error is one or two lines on stderr, a traceback only with --debug."""
    from calibflow.errors import guarded, os_brief
    from calibflow.flows.checkout_lock import CheckoutBusy
    from calibflow.flows.dvc_stages import StageFailed
    from calibflow.flows.server import PortTaken, ServerFailed
    from calibflow.pipeline.params_schema import ParamsError

    told = (UserError, ParamsError, CheckoutBusy, PortTaken)
    return guarded(
        fn, {told: 2, ServerFailed: 1, StageFailed: stage_failed, RunFailed: _run_failed, OSError: os_brief}
    )


class RunFailed(Exception):
    """A run stopped on something other than a stage (a bug, DVC itself): one line, the rest in the log."""


def _run_failed(exc: BaseException) -> tuple[list[str], int]:
    from calibflow.flows import runlog

    return [f"error: {exc}", *runlog.note_lines()], 1


def stage_failed(exc: Any) -> tuple[list[str], int]:
    """At most three lines: the stage's own error line (and the one after it), then where the log is.

    Exits with the stage command's own status (DVC's "exited with N"), not DVC's.
    """
    from calibflow.flows import runlog

    first, *more = exc.summary
    name = f"stage {exc.stage!r}" if exc.stage else "the run"
    lines = [f"error: {name} failed (exit {exc.code}): {first}", *(f"  {line}" for line in more[:1])]
    return [*lines, *runlog.note_lines()], exc.code if 0 < exc.code < 256 else 1


def require_project(root: Path) -> None:
    """A project command outside a calibflow project: one line saying how to make one."""
    from calibflow.flows.project import outside_message

    message = outside_message(root)
    if message:
        raise UserError(message)


def check_source_paths(params: dict[str, Any]) -> None:
    """A source `path` that is a glob: DVC cannot depend on it; name the folder + `glob:` form instead."""
    from calibflow import sources as src

    for name, decl in (params.get("sources") or {}).items():
        path = str((decl or {}).get("path", ""))
        folder, pattern = src.split_glob(path)
        if pattern is not None and not src.is_url(path):
            raise UserError(
                f"sources.{name}.path: {path!r} is a glob, which DVC cannot depend on: write "
                f"`path: {folder}` and `glob: '{pattern}'` (what `calibflow init` writes)"
            )


def check_targets(root: Path, targets: list[str]) -> None:
    """Every target names a stage (or a group such as ``calibrate``) of dvc.yaml; else did-you-mean."""
    from calibflow.flows.dvc_stages import stage_names

    names = stage_names(root)
    groups = {n.split("@", 1)[0] for n in names}
    for t in targets:
        if t in names or t in groups or ":" in t or t.endswith(".yaml"):
            continue
        close = difflib.get_close_matches(t, names + sorted(groups), n=1)
        hint = f"did you mean {close[0]}?" if close else "`dvc stage list` shows them"
        raise UserError(f"unknown stage {t!r} in dvc.yaml ({hint})")


def check_port(port: int) -> None:
    """A port outside 1-65535 is one line, not the socket library's OverflowError."""
    if not 1 <= port <= 65535:
        raise UserError(f"--port {port} is not a TCP port: use 1-65535 (default 4200)")


def check_cron(cron: str) -> None:
    """A bad cron string is a one-line error before anything is registered or started."""
    from calibflow.flows.serve import validate_cron

    try:
        validate_cron(cron)
    except ValueError:
        raise UserError(
            f"invalid cron expression {cron!r}: use five fields (minute hour day-of-month month "
            "day-of-week), e.g. '0 2 * * *' for 02:00 every day"
        ) from None


def _use_server(port: int) -> tuple[subprocess.Popen | None, str]:
    """The API this run reports to: $PREFECT_API_URL, else this project's local server if up (never
    another checkout's or anything else on that port), else a temporary one, started but not yet
    answering (``_ready`` waits for it, after the imports that overlap its start)."""
    from calibflow.flows import server as srv

    url = os.environ.get("PREFECT_API_URL")
    if url:
        if not srv.healthy(url=url):
            raise UserError(
                f"no Prefect API answers at PREFECT_API_URL={url} (unset it, or start that server)"
            )
        return None, url
    if srv.ours(port):
        os.environ["PREFECT_API_URL"] = srv.api_url(port)
        return None, srv.api_url(port)
    return srv.spawn_temporary()


def _ready(proc: subprocess.Popen | None, url: str) -> None:
    """Import what the flow needs while a temporary server starts, then wait until it answers.

    The server (forked once Prefect's client was imported, ``server.spawn_temporary``) builds its app
    beside the rest of the flow's imports (DVC's, the flow's own) instead of after them.
    """
    # Prefect's and DVC's imports build objects by the hundred thousand, none of them garbage: with the
    # cyclic collector paused they cost less CPU, and frozen they stay out of the flow's later collections.
    from calibflow.flows.gcpause import collector_paused

    with collector_paused():  # (``run`` paused it already; any other caller too)
        import dvc.repo.reproduce  # noqa: F401  (the plan's)

        import calibflow.flows.pipeline  # noqa: F401  (prefect)

    if proc is not None:
        from calibflow.flows import server as srv

        srv.wait_temporary(proc, url)


def _guard_run(url: str) -> threading.Event:
    """Fail fast when the API dies mid-run, and make Ctrl-C exit in seconds, stages stopped."""
    from calibflow.flows import dvc_stages
    from calibflow.flows import server as srv

    def gone(message: str) -> None:
        dvc_stages.stop_running(grace=3.0)
        logging.disable(logging.CRITICAL)  # Prefect's client may still be logging its failed requests
        sys.stderr.flush()
        # its own line even when another thread's log line was cut before its newline; last: the line
        # the user reads
        typer.echo(f"\nerror: {message}", err=True)
        sys.stderr.flush()
        os._exit(1)

    def interrupted(signum: int, frame: object) -> None:
        typer.echo("calibflow: interrupted; stopping the running stage (last good outputs kept)", err=True)
        # Let Prefect record the crash if it can; never wait for it for more than a few seconds.
        deadline = threading.Timer(8.0, lambda: os._exit(130))
        deadline.daemon = True  # a clean exit before then is not delayed
        deadline.start()
        dvc_stages.stop_running(grace=3.0)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    return srv.watch_api(url, gone)


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
    params_file: str = typer.Option(
        None,
        help="Run with this params YAML instead of params.yaml, as a DVC experiment "
        "(`dvc exp run --temp`): params.yaml and the workspace stay untouched; "
        "`dvc exp show` lists the result, `dvc exp apply NAME` brings it in.",
    ),
    name: str = typer.Option(None, "--name", help="Experiment name for --params-file runs."),
    pull: bool = typer.Option(False, help="dvc pull before running."),
    push: bool = typer.Option(False, help="dvc push after running."),
    commit: bool = typer.Option(
        False,
        help="Commit dvc.lock and the git-tracked outputs to --commit-branch (the checkout is not moved).",
    ),
    commit_branch: str = typer.Option(DEFAULT_BRANCH, help="Branch that --commit records runs on."),
    wait: bool = typer.Option(False, "--wait", help="Queue behind a run that holds this checkout."),
    task_runner: str = typer.Option("sequential", help="sequential | dask"),
    dask_address: str = typer.Option(None, help="Scheduler address of an existing Dask cluster."),
    dask_workers: int = typer.Option(2, help="Workers of the local Dask cluster."),
    port: int = typer.Option(4200, help="Report to the local server on this port when it is up."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only warnings and the final line."),
) -> None:
    """Run the pipeline flow locally (the main job): every stale stage, then the report.

    One run per checkout: a second `calibflow run` says which run holds it (or queues with --wait).
    """
    _set_verbosity(quiet)
    # The checks' and the flow's imports (the calibrator registry, DVC, Prefect) with the cyclic collector
    # paused: on again, and what they built frozen, once the flow's imports are done (``_ready``).
    gc.disable()
    try:
        root = project_root()
        _friendly(lambda: _run(root, targets or [], params_file, name, pull, push, commit, commit_branch,
                               wait, task_runner, dask_address, dask_workers, port))
    finally:
        gc.enable()  # a refusal or an up-to-date project returns before ``_ready`` turns it back on


def _run(
    root: Path,
    targets: list[str],
    params_file: str | None,
    name: str | None,
    pull: bool,
    push: bool,
    commit: bool,
    commit_branch: str,
    wait: bool,
    task_runner: str,
    dask_address: str | None,
    dask_workers: int,
    port: int,
) -> None:
    from calibflow.flows import runlog
    from calibflow.flows.checkout_lock import checkout_lock
    from calibflow.pipeline.params_schema import load_and_validate

    # Everything a user can get wrong is checked here, before any server or stage starts.
    check_port(port)
    if params_file:
        pf = Path(params_file)
        params_file = str(pf if pf.is_absolute() else Path.cwd() / pf)
    else:
        require_project(root)  # outside a project: how to make one, before what the folder lacks
    check_writable(root, ".prefect")
    if task_runner not in ("sequential", "dask"):
        raise UserError(f"--task-runner must be 'sequential' or 'dask', got {task_runner!r}")
    if not (params_file or targets or pull or push or commit) and _answered_from_status(root, targets, wait):
        return
    check_source_paths(load_and_validate(params_file or root / "params.yaml"))
    if targets:
        check_targets(root, targets)
    with checkout_lock(root, wait=wait):
        runlog.open_run_log(root)
        from calibflow.flows import project

        if project.uses_code_stamp(root):  # a user project: its stages depend on the installed calibflow
            project.write_code_stamp(root)
            if not params_file:  # sources added by hand may need the other shape (fetch and train, or not)
                shape = project.sync_dvc_yaml(root)
                if shape:
                    typer.echo(f"calibflow run: rewrote {shape}", err=True)
        if task_runner == "sequential" and not params_file:
            from calibflow.flows import dvc_stages

            # first: the DVC worker's and its stage host's imports overlap the server's start and ours
            dvc_stages.start_worker(root)
        proc, url = _use_server(port)
        _ready(proc, url)
        watch = _guard_run(url)
        try:
            from calibflow.flows.pipeline import pipeline

            runner = _task_runner(task_runner, dask_address, dask_workers)
            flow = pipeline.with_options(task_runner=runner) if runner else pipeline
            result = _logged(
                flow,
                targets=targets or None,
                params_file=params_file,
                pull_first=pull,
                push_after=push,
                commit=commit,
                commit_branch=commit_branch,
                experiment_name=name,
                parallel=runner is not None,
                root=str(root),
                check_params=False,  # done above
            )
        finally:
            watch.set()
    if result.get("experiment"):
        exp = result["experiment"]
        typer.echo(
            f"calibflow run: experiment {exp['name']} in {result['seconds']:.1f} s "
            f"(params.yaml untouched; `dvc exp show`, `dvc exp apply {exp['name']}`)"
        )
        return
    ran = [s["name"] for s in result["stages"] if s.get("ran")]
    rev = f"; recorded on {commit_branch} as {result['revision'][:10]}" if result.get("revision") else ""
    typer.echo(
        f"calibflow run: {len(ran)} stage(s) ran in {result['seconds']:.1f} s; report: {root / REPORT}{rev}"
    )


def _answered_from_status(root: Path, targets: list[str], wait: bool) -> bool:
    """A no-op run: when DVC says nothing is stale, say so and start no Prefect server and no flow run.

    Before the params check on purpose: nothing stale means params.yaml (every stage of a project depends
    on it, the report on all of it) and the code are those of the last run that passed that check, so only
    the check's imports (the calibrator registry) would be paid. Anything unexpected (a dvc.yaml DVC cannot
    read, an unknown target) goes the ordinary way, which explains it.
    """
    from calibflow.flows import project
    from calibflow.flows.checkout_lock import checkout_lock

    with checkout_lock(root, wait=wait):
        if project.uses_code_stamp(root):  # a new calibflow makes every stage stale
            project.write_code_stamp(root)
        try:
            fresh = up_to_date(root, targets)
        except Exception:  # noqa: BLE001  (the ordinary path reports it in a line)
            return False
    if fresh is None:
        return False
    typer.echo(f"calibflow run: all {fresh} stage(s) up to date, nothing ran; report: {root / REPORT}")
    return True


def up_to_date(root: Path, targets: list[str]) -> int | None:
    """The number of stages ``dvc repro [targets]`` would visit when none is stale, else None."""
    from calibflow.flows.dvc_stages import plan

    stages = plan(root, targets or None)
    return None if any(s.stale for s in stages) else len(stages)


def _logged(flow: Callable[..., Any], **kwargs: Any) -> Any:
    """Call ``flow``; an unexpected exception becomes one line, its traceback written to the run log."""
    import traceback

    from calibflow.flows import runlog
    from calibflow.flows.checkout_lock import CheckoutBusy
    from calibflow.flows.dvc_stages import StageFailed
    from calibflow.pipeline.params_schema import ParamsError

    try:
        return flow(**kwargs)
    except (StageFailed, UserError, ParamsError, CheckoutBusy):
        raise
    except Exception as exc:
        if _debug():
            raise
        runlog.write(traceback.format_exc())
        first = (str(exc).strip().splitlines() or [""])[0]
        raise RunFailed(f"calibflow run stopped: {type(exc).__name__}: {first}") from None


@app.command()
def repro(args: list[str] = typer.Argument(None, help="Extra arguments for dvc repro.")) -> None:
    """``dvc repro`` (no Prefect), after checking params.yaml; stage commands run without a shell."""
    raise typer.Exit(_dvc_repro(*(args or [])))


@app.command(epilog=TRIGGER_HELP)
def serve(
    cron: str = typer.Option("0 2 * * *", help="Cron schedule of the deployment."),
    name: str = typer.Option("nightly", help="Deployment name."),
    parameters: str = typer.Option("{}", help="JSON object of flow parameters (targets, params_file, ...)."),
    port: int = typer.Option(4200, help="Local Prefect server port."),
) -> None:
    """Serve the pipeline on a schedule against the local server (starts it if needed).

    Trigger a run at any time with `calibflow trigger` (or
    `PREFECT_API_URL=http://127.0.0.1:4200/api prefect deployment run calibflow-pipeline/nightly`).
    """
    from calibflow.flows import server as srv

    # The one local server: set before prefect is imported, so no ephemeral second server starts.
    os.environ["PREFECT_API_URL"] = srv.api_url(port)

    def body() -> dict[str, Any]:
        check_cron(cron)
        check_port(port)
        try:
            params = json.loads(parameters)
        except json.JSONDecodeError as exc:
            raise UserError(f"--parameters is not a JSON object: {exc.msg} at column {exc.colno}") from None
        if not isinstance(params, dict):
            raise UserError("--parameters must be a JSON object, e.g. '{\"commit\": true}'")
        from calibflow.pipeline.params_schema import load_and_validate

        # checked now whatever --parameters says; every served run checks them again before its stages
        root = Path(params.get("root") or project_root())
        require_project(root)
        check_writable(root, ".prefect")
        load_and_validate(root / (params.get("params_file") or "params.yaml"))
        return params

    params = _friendly(body)
    from calibflow.flows.serve import serve as do_serve

    _friendly(lambda: srv.start(port))
    typer.echo(
        f"serving deployment {DEPLOYMENT_FLOW}/{name} on {cron!r} at {srv.api_url(port)}, "
        f"UI {srv.ui_url(port)} (Ctrl-C to stop)"
    )
    typer.echo(f"trigger a run now: calibflow trigger --name {name}")
    do_serve(cron=cron, name=name, parameters=params, port=port)


@app.command()
def trigger(
    name: str = typer.Option("nightly", help="Deployment name (as given to `calibflow serve --name`)."),
    parameters: str = typer.Option("{}", help="JSON object of flow parameters overriding the deployment's."),
    wait: bool = typer.Option(False, "--wait", help="Wait for the run to finish and exit with its state."),
    port: int = typer.Option(4200, help="Local Prefect server port."),
) -> None:
    """Trigger a run of a served deployment now (it queues behind a run already going).

    Same as `PREFECT_API_URL=http://127.0.0.1:4200/api prefect deployment run calibflow-pipeline/NAME`.
    """
    from calibflow.flows import server as srv

    os.environ["PREFECT_API_URL"] = srv.api_url(port)

    def body() -> None:
        try:
            params = json.loads(parameters)
        except json.JSONDecodeError as exc:
            raise UserError(f"--parameters is not a JSON object: {exc.msg} at column {exc.colno}") from None
        if isinstance(params, dict) and params.get("check_params", True) is not True:
            raise UserError("--parameters: check_params cannot be turned off for a triggered run")
        if not srv.ours(port):
            if srv.listening(port):
                raise UserError(srv.taken_message(port))
            raise UserError(
                f"no Prefect server at {srv.api_url(port)}: run `calibflow serve` (it starts one)"
            )
        from prefect.deployments import run_deployment
        from prefect.exceptions import ObjectNotFound

        try:
            fr = run_deployment(f"{DEPLOYMENT_FLOW}/{name}", parameters=params or None, timeout=0)
        except ObjectNotFound:
            raise UserError(
                f"no deployment {DEPLOYMENT_FLOW}/{name}: start it with `calibflow serve --name {name}`"
            ) from None
        url = f"{srv.ui_url(port)}/runs/flow-run/{fr.id}"
        if wait:  # its states and progress lines as they come (the run executes in the serve process)
            from calibflow.cli.follow import follow

            typer.echo(f"flow run {fr.name} ({fr.id}): {url}")
            fr = follow(fr.id, typer.echo)
        typer.echo(f"flow run {fr.name} ({fr.id}): {fr.state.type.value if fr.state else 'SCHEDULED'}; {url}")
        if wait and fr.state and not fr.state.is_completed():
            message = (fr.state.message or "").strip().splitlines()
            if message:
                typer.echo(f"error: {message[0]}", err=True)
            raise typer.Exit(1)

    _friendly(body)


@server_app.command("start")
def server_start(
    port: int = typer.Option(4200),
    ui: bool = typer.Option(True, "--ui/--no-ui", help="Serve the Prefect UI at http://127.0.0.1:PORT."),
) -> None:
    from calibflow.flows import server as srv

    def body() -> str:
        check_port(port)
        check_writable(project_root(), ".prefect", dvc=False)  # the server's database lives there
        return srv.start(port, ui=ui)

    url = _friendly(body)
    where = f"; UI at {srv.ui_url(port)}" if ui else ""
    typer.echo(f"Prefect server healthy at {url}{where}")


@server_app.command("stop")
def server_stop() -> None:
    from calibflow.flows import server as srv

    srv.stop()
    typer.echo("Prefect server stopped")


@server_app.command("status")
def server_status(port: int = typer.Option(4200)) -> None:
    from calibflow.flows import server as srv

    st = srv.status(port)
    typer.echo(json.dumps(st))
    raise typer.Exit(0 if st["healthy"] else 1)


@app.command()
def report(open_: bool = typer.Option(False, "--open", help="Open the report in a browser.")) -> None:
    """Print (or open) the path of the last generated report."""
    root = project_root()
    path = root / REPORT
    if not path.exists():
        try:
            require_project(root)
        except UserError as exc:
            typer.echo(f"no report: {exc}, then `calibflow run`", err=True)
            raise typer.Exit(1) from None
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
    """``dvc repro ARGS`` in the project after the params check (the one ``calibflow run`` makes), stage
    commands seeing this interpreter first on PATH and run without a shell (``stage_env``)."""
    from calibflow.pipeline.params_schema import load_and_validate

    root = project_root()
    _friendly(lambda: (require_project(root), check_writable(root), load_and_validate(root / "params.yaml")))
    cmd = [sys.executable, "-m", "dvc", "repro", *args]
    return subprocess.run(cmd, cwd=root, env=stage_env(), capture_output=quiet).returncode


from calibflow.cli.sources import register as _register_sources  # noqa: E402, I001  (init, apply)
_register_sources(app)
from calibflow.cli.scale import register as _register_scale  # noqa: E402, I001  (fit at scale)
_register_scale(app)
from calibflow.cli.export import register as _register_export  # noqa: E402, I001  (export)
_register_export(app)



def main() -> None:
    """The ``calibflow`` command: ``app`` with any OS error at the project level (a read-only folder, a
    full disk, a permission denied, a missing ``.dvc``) told in one line naming the path and what to do,
    whichever command met it (``--debug`` or ``CALIBFLOW_DEBUG=1``: the traceback)."""
    from calibflow.errors import debugging, os_fix

    try:
        app()
    except OSError as exc:
        if debugging() or "--debug" in sys.argv[1:]:
            raise
        print(f"error: {os_fix(exc)}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
