"""The pipeline flow: pull, reproduce each stale DVC stage as a Prefect task, publish, push, commit.

Shape (stack.md, "Combining Prefect and DVC"): ``dvc.yaml`` owns the DAG and the cache, and its
stage commands are plain CLIs, so ``dvc repro`` works without Prefect. This flow adds what a
scheduler gives: one task run per stage with its log and timing, retries on the network steps,
artifacts in the UI, and a git commit per run so each scheduled run is a reviewable revision.

A failing stage fails the flow with that stage's error. Stages after it do not run, so the last good
report stays in place (the report stage writes atomically, and DVC only reaches it when everything
upstream succeeded).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

import calibflow.flows  # noqa: F401  (configures the environment before prefect is imported)
from calibflow.flows import dvc_stages, gitops, project_root, runlog
from calibflow.flows.checkout_lock import checkout_lock

SUMMARY = Path("reports/summary.md")
VALIDATION = Path("reports/validation.json")


@task(name="dvc-pull", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def pull(root: str) -> str:
    return dvc_stages.remote_sync(Path(root), "pull")


@task(name="dvc-push", retries=2, retry_delay_seconds=5, cache_policy=NO_CACHE)
def push(root: str) -> str:
    return dvc_stages.remote_sync(Path(root), "push")


@task(name="plan", cache_policy=NO_CACHE)
def plan_stages(root: str, targets: list[str] | None) -> list[dvc_stages.StageInfo]:
    return dvc_stages.plan(Path(root), targets)


@task(cache_policy=NO_CACHE, task_run_name="{name}")
def reproduce(root: str, name: str, outs: list[str] | None = None, step: str = "") -> dict[str, Any]:
    """One DVC stage. Network stages (fetch) retry via ``with_options`` in the flow.

    ``step`` (``"[k/N] "``) prefixes the progress lines: one when the stage is done, and a heartbeat
    after every 10 s without output saying what the stage last said it was doing.
    """
    logger = get_run_logger()
    label = f"{step}{name}"
    with runlog.Heartbeat(label, lambda msg: runlog.console(logger, "%s", msg)) as beat:

        def on_line(line: str) -> None:
            # Each line of the stage's output goes to the run's logs as it comes (run log, UI and API).
            beat.saw(line)
            logger.info("%s", line)

        run = dvc_stages.reproduce_stage(Path(root), name, on_line=on_line, outs=outs)
    runlog.console(logger, "%s ... %s in %.1f s", label, "done" if run.ran else "up to date", run.seconds)
    return run.to_dict()


@task(cache_policy=NO_CACHE, task_run_name="{name}")
def run_command(root: str, name: str, cmd: str) -> dict[str, Any]:
    """A stage's command run directly, for parallel (Dask) execution; committed to DVC afterwards."""
    return dvc_stages.run_stage_command(Path(root), name, cmd).to_dict()


@task(name="dvc-commit", cache_policy=NO_CACHE)
def commit_stages(root: str, names: list[str]) -> None:
    for name in names:
        dvc_stages.commit_stage(Path(root), name)


@task(name="publish", cache_policy=NO_CACHE)
def publish(root: str) -> dict[str, Any]:
    """Validation results as a table artifact and the report summary as a markdown artifact."""
    base = Path(root)
    out: dict[str, Any] = {}
    if (base / VALIDATION).exists():
        rows = validation_rows(json.loads((base / VALIDATION).read_text()))
        if rows:
            create_table_artifact(key="validation", table=rows, description="Great Expectations suites")
        out["validation_suites"] = len(rows)
        out["validation_failed"] = sum(1 for r in rows if not r["success"])
    if (base / SUMMARY).exists():
        text = (base / SUMMARY).read_text()
        create_markdown_artifact(key="report-summary", markdown=text, description="calibflow report summary")
        out["summary_chars"] = len(text)
    return out


def validation_rows(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One table row per suite of the report stage's ``reports/validation.json`` ({"suites": [...]})."""
    keys = ("name", "success", "evaluated", "failed")
    return [{k: s[k] for k in keys} for s in payload["suites"]]


@task(name="git-commit", cache_policy=NO_CACHE)
def git_commit(root: str, message: str, branch: str | None = gitops.DEFAULT_BRANCH) -> str | None:
    """Commit dvc.lock, params and the declared git-tracked outputs to ``branch`` (not the checkout).

    Only what dvc.yaml declares (``cache: false`` outputs) is committed, so stray files (a crashed
    stage's temporary folder) never are. Returns the new revision, or None when nothing changed.
    """
    base = Path(root)
    paths = [p for p in ["dvc.lock", "params.yaml", *dvc_stages.git_outputs(base)] if (base / p).exists()]
    if not paths:
        return None
    return gitops.commit_paths(base, paths, message, branch=branch)


@task(name="dvc-exp-run", cache_policy=NO_CACHE)
def experiment(root: str, params_file: str, name: str | None) -> dict[str, Any]:
    """The whole pipeline as a DVC experiment with ``params_file``'s values: params.yaml stays as is."""
    logger = get_run_logger()
    run = dvc_stages.run_experiment(
        Path(root), Path(root) / params_file, name, on_line=lambda line: logger.info("%s", line)
    )
    logger.info("dvc exp run %s in %.1f s", run.name, run.seconds)
    return run.to_dict()


@flow(name="calibflow-pipeline", log_prints=True)
def pipeline(
    targets: list[str] | None = None,
    params_file: str | None = None,
    pull_first: bool = False,
    push_after: bool = False,
    commit: bool = False,
    parallel: bool = False,
    root: str | None = None,
    commit_branch: str = gitops.DEFAULT_BRANCH,
    experiment_name: str | None = None,
    check_params: bool = True,
) -> dict[str, Any]:
    """Run the calibflow DVC pipeline as Prefect tasks, one run per checkout at a time.

    targets: DVC stages to reproduce (default: the whole dvc.yaml). params_file: a params YAML to
    run with instead of params.yaml, as a DVC experiment (``dvc exp run --temp``, named
    ``experiment_name``): params.yaml and the workspace stay untouched and the run is recorded by DVC.
    parallel: run independent stale stages concurrently on the flow's task runner (Dask), recording
    them with ``dvc commit`` afterwards. commit: record dvc.lock and the git-tracked outputs as a
    commit on ``commit_branch`` (the checked-out branch is never moved). check_params: validate
    params.yaml / params_file against calibflow.pipeline.params_schema first.
    A second run of the same checkout queues on the checkout's file lock (saying once whom it waits for)
    instead of failing on DVC's repository lock.
    """
    base = Path(root) if root else project_root()
    if check_params:
        _check_params(base, params_file)
    # the kernel's file lock alone: it dies with its holder (a Prefect slot outlived a killed run)
    with checkout_lock(base, wait=True):
        return _pipeline_body(
            base,
            targets,
            params_file,
            pull_first,
            push_after,
            commit,
            parallel,
            commit_branch,
            experiment_name,
        )


def _check_params(base: Path, params_file: str | None) -> None:
    from calibflow.pipeline.params_schema import load_and_validate

    load_and_validate(base / (params_file or "params.yaml"))


def _pipeline_body(
    base: Path,
    targets: list[str] | None,
    params_file: str | None,
    pull_first: bool,
    push_after: bool,
    commit: bool,
    parallel: bool,
    commit_branch: str,
    experiment_name: str | None,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    if pull_first:
        pull(str(base))
    if params_file and (base / params_file).resolve() != (base / "params.yaml").resolve():
        exp = experiment(str(base), params_file, experiment_name)
        return {
            "stages": [],
            "experiment": exp,
            "published": {},
            "revision": None,
            "seconds": time.perf_counter() - t0,
        }
    stages = plan_stages(str(base), targets)
    stale = [s for s in stages if s.stale]
    runlog.console(
        get_run_logger(),
        "%d of %d stages to run: %s",
        len(stale),
        len(stages),
        ", ".join(s.name for s in stale) or "none",
    )
    # --commit records dvc.lock on its own branch: DVC's autostage must not stage it in the user's index
    with gitops.index_kept(base) if commit else contextlib.nullcontext():
        runs = _run_parallel(base, stages) if parallel else _run_serial(base, stale)
    published = publish(str(base))
    if push_after:
        push(str(base))
    revision = git_commit(str(base), _commit_message(runs), commit_branch) if commit else None
    return {"stages": runs, "published": published, "revision": revision, "seconds": time.perf_counter() - t0}


def _run_serial(base: Path, stale: list[dvc_stages.StageInfo]) -> list[dict[str, Any]]:
    runs = []
    for k, st in enumerate(stale, 1):
        # fetch reaches the network (PyPI, public URLs) when the cache and mirror miss: retry it.
        t = (
            reproduce.with_options(retries=2, retry_delay_seconds=5)
            if st.name.startswith("fetch")
            else reproduce
        )
        runs.append(t(str(base), st.name, st.outs, f"[{k}/{len(stale)}] "))
    return runs


def _run_parallel(base: Path, stages: list[dvc_stages.StageInfo]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    total = sum(1 for st in stages if st.stale)
    logger = get_run_logger()
    for layer in dvc_stages.layers(stages):
        futures = [run_command.submit(str(base), st.name, st.cmd) for st in layer]
        for f in futures:
            runs.append(f.result())
            r = runs[-1]
            runlog.console(logger, "[%d/%d] %s ... done in %.1f s", len(runs), total, r["name"], r["seconds"])
        commit_stages(str(base), [st.name for st in layer])
    return runs


def _commit_message(runs: list[dict[str, Any]]) -> str:
    ran = [r["name"] for r in runs if r.get("ran")]
    return f"calibflow run: {len(ran)} stage(s) reproduced" + (f" ({', '.join(ran[:8])})" if ran else "")
