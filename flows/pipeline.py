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

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

import flows  # noqa: F401  (configures the environment before prefect is imported)
from flows import dvc_stages, project_root

SUMMARY = Path("reports/summary.md")
VALIDATION = Path("reports/validation.json")
# What a run commits: the lock, the params it ran with, and the git-tracked (cache: false) outputs.
COMMIT_PATHS = ["dvc.lock", "params.yaml", "metrics", "plots", "reports/summary.md"]


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
def reproduce(root: str, name: str) -> dict[str, Any]:
    """One DVC stage. Network stages (fetch) retry via ``with_options`` in the flow."""
    run = dvc_stages.reproduce_stage(Path(root), name)
    get_run_logger().info(
        "%s: %s in %.1f s\n%s", name, "ran" if run.ran else "up to date", run.seconds, run.log_tail
    )
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
def git_commit(root: str, message: str) -> str | None:
    """Commit dvc.lock, params, metrics and the summary; returns the new revision or None if clean."""
    paths = [p for p in COMMIT_PATHS if (Path(root) / p).exists()]
    if not paths:
        return None
    subprocess.run(["git", "add", "--", *paths], cwd=root, check=True, capture_output=True)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=root)
    if staged.returncode == 0:
        return None
    subprocess.run(["git", "commit", "-q", "-m", message], cwd=root, check=True, capture_output=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
    ).stdout.strip()


def apply_params_file(root: Path, params_file: str | None) -> None:
    """Use another params file for this run: its content becomes params.yaml (committed with the run)."""
    if not params_file:
        return
    src = (root / params_file).resolve()
    dst = (root / "params.yaml").resolve()
    if src == dst:
        return
    if not src.exists():
        raise FileNotFoundError(f"params file {params_file!r} not found under {root}")
    from calibflow.io import write_text

    write_text(dst, src.read_text())


@flow(name="calibflow-pipeline", log_prints=True)
def pipeline(
    targets: list[str] | None = None,
    params_file: str | None = None,
    pull_first: bool = False,
    push_after: bool = False,
    commit: bool = False,
    parallel: bool = False,
    root: str | None = None,
) -> dict[str, Any]:
    """Run the calibflow DVC pipeline as Prefect tasks.

    targets: DVC stages to reproduce (default: the whole dvc.yaml). params_file: a params YAML
    to use for this run. parallel: run independent stale stages concurrently on the flow's task
    runner (use with a Dask task runner), recording them with ``dvc commit`` afterwards.
    """
    base = Path(root) if root else project_root()
    t0 = time.perf_counter()
    apply_params_file(base, params_file)
    if pull_first:
        pull(str(base))
    stages = plan_stages(str(base), targets)
    stale = [s for s in stages if s.stale]
    print(f"{len(stale)} of {len(stages)} stages to run: {', '.join(s.name for s in stale) or 'none'}")
    runs = _run_parallel(base, stages) if parallel else _run_serial(base, stale)
    published = publish(str(base))
    if push_after:
        push(str(base))
    revision = git_commit(str(base), _commit_message(runs)) if commit else None
    return {"stages": runs, "published": published, "revision": revision, "seconds": time.perf_counter() - t0}


def _run_serial(base: Path, stale: list[dvc_stages.StageInfo]) -> list[dict[str, Any]]:
    runs = []
    for st in stale:
        # fetch reaches the network (PyPI, public URLs) when the cache and mirror miss: retry it.
        t = (
            reproduce.with_options(retries=2, retry_delay_seconds=5)
            if st.name.startswith("fetch")
            else reproduce
        )
        runs.append(t(str(base), st.name))
    return runs


def _run_parallel(base: Path, stages: list[dvc_stages.StageInfo]) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for layer in dvc_stages.layers(stages):
        futures = [run_command.submit(str(base), st.name, st.cmd) for st in layer]
        runs.extend(f.result() for f in futures)
        commit_stages(str(base), [st.name for st in layer])
    return runs


def _commit_message(runs: list[dict[str, Any]]) -> str:
    ran = [r["name"] for r in runs if r.get("ran")]
    return f"calibflow run: {len(ran)} stage(s) reproduced" + (f" ({', '.join(ran[:8])})" if ran else "")
