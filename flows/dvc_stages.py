"""DVC as the flow sees it: which stages are stale, in what order, and how to run one.

``dvc.yaml`` stays the source of truth for the DAG and the cache; the flow only asks DVC for the
plan (the post-order DVC itself uses for ``dvc repro``) and then reproduces one stage at a time, so
each appears as its own Prefect task run. DVC holds a repository lock, so every call here is made
from one thread at a time (``_DVC_LOCK``); parallel execution (Dask) runs stage *commands* and
records them with ``dvc commit`` serially afterwards.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

_DVC_LOCK = threading.Lock()


@dataclass
class StageInfo:
    name: str  # the addressing DVC uses, e.g. "calibrate@platt"
    cmd: str
    upstream: list[str]
    stale: bool


@dataclass
class StageRun:
    name: str
    ran: bool
    seconds: float
    log_tail: str

    def to_dict(self) -> dict:
        return asdict(self)


class StageFailed(RuntimeError):
    """A DVC stage's command failed; the message carries the stage name and the end of its output."""


def plan(root: Path, targets: list[str] | None = None) -> list[StageInfo]:
    """The stages ``dvc repro [targets]`` would visit, upstream first, each marked stale or not.

    A stage is stale when its own dependencies, params or outputs changed, or when a stage it depends
    on is stale (its outputs may change when rerun).
    """
    from dvc.repo import Repo
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    # DVC resolves targets ("dvc.yaml", "train") against the working directory: plan from the root.
    with _DVC_LOCK, contextlib.chdir(root), Repo(str(root)) as repo, repo.lock:
        graph = get_active_graph(repo.index.graph)
        steps = plan_repro(graph, collect_stages(repo, targets or ["dvc.yaml"]))
        stale: set[str] = set()
        out: list[StageInfo] = []
        for st in steps:
            ups = [u.addressing for u in graph.successors(st)]
            is_stale = bool(st.changed()) or any(u in stale for u in ups)
            if is_stale:
                stale.add(st.addressing)
            cmd = st.cmd if isinstance(st.cmd, str) else " && ".join(st.cmd or [])
            out.append(StageInfo(st.addressing, cmd, ups, is_stale))
        return out


def stage_env() -> dict[str, str]:
    """The environment stage commands run in: this interpreter's bin folder first on PATH.

    Stage commands say ``python -m tasks.<step>``; DVC runs them through the shell with the caller's
    PATH, so an unactivated virtual environment would otherwise hand them the system Python.
    """
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        path = bindir + os.pathsep + path
    return {**os.environ, "PATH": path, "DVC_NO_ANALYTICS": "1"}


def _dvc(root: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    exe = [sys.executable, "-m", "dvc", *args]
    return subprocess.run(exe, cwd=root, env=stage_env(), capture_output=True, text=True, timeout=timeout)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def reproduce_stage(root: Path, name: str) -> StageRun:
    """``dvc repro --single-item <name>``; raises ``StageFailed`` with the stage's output on error."""
    t0 = time.perf_counter()
    with _DVC_LOCK:
        proc = _dvc(root, "repro", "--single-item", name)
    secs = time.perf_counter() - t0
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise StageFailed(f"stage {name!r} failed (exit {proc.returncode}):\n{_tail(output)}")
    ran = "didn't change, skipping" not in output
    return StageRun(name, ran, secs, _tail(output, 15))


def run_stage_command(root: Path, name: str, cmd: str) -> StageRun:
    """Run a stage's command directly (no DVC lock): the unit of work a Dask worker executes."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, shell=True, cwd=root, env=stage_env(), capture_output=True, text=True)
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise StageFailed(
            f"stage {name!r} failed (exit {proc.returncode}): {shlex.quote(cmd)}\n{_tail(output)}"
        )
    return StageRun(name, True, time.perf_counter() - t0, _tail(output, 15))


def commit_stage(root: Path, name: str) -> None:
    """Record a stage run outside DVC (``dvc commit --force``): hashes its deps and outs into dvc.lock."""
    with _DVC_LOCK:
        proc = _dvc(root, "commit", "--force", name)
    if proc.returncode != 0:
        raise StageFailed(f"dvc commit {name!r} failed:\n{_tail(proc.stdout + proc.stderr)}")


def layers(stages: list[StageInfo]) -> list[list[StageInfo]]:
    """Group stale stages into layers with no dependency inside a layer (for parallel execution)."""
    depth: dict[str, int] = {}
    for st in stages:  # post-order: upstream stages come first
        depth[st.name] = 1 + max((depth.get(u, -1) for u in st.upstream), default=-1)
    grouped: dict[int, list[StageInfo]] = {}
    for st in stages:
        if st.stale:
            grouped.setdefault(depth[st.name], []).append(st)
    return [grouped[k] for k in sorted(grouped)]


def remote_sync(root: Path, action: str, timeout: float = 600) -> str:
    """``dvc pull`` or ``dvc push``; raises with DVC's message on failure (the flow task retries)."""
    if action not in ("pull", "push"):
        raise ValueError(f"action must be 'pull' or 'push', got {action!r}")
    with _DVC_LOCK:
        proc = _dvc(root, action, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"dvc {action} failed:\n{_tail(proc.stdout + proc.stderr)}")
    return _tail(proc.stdout + proc.stderr, 5)
