"""DVC as the flow sees it: which stages are stale, in what order, and how to run one.

``dvc.yaml`` stays the source of truth for the DAG and the cache; the flow only asks DVC for the
plan (the post-order DVC itself uses for ``dvc repro``) and then reproduces one stage at a time, so
each appears as its own Prefect task run. DVC holds a repository lock, so every call here is made
from one thread at a time (``_DVC_LOCK``); parallel execution (Dask) runs stage *commands* and
records them with ``dvc commit`` serially afterwards.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from calibflow.flows import forking, stage_host
from calibflow.flows.checkout_lock import note_stage

_DVC_LOCK = threading.Lock()
#: Stage subprocesses running now (each in its own process group), for Ctrl-C and the API watchdog.
RUNNING: set[subprocess.Popen] = set()
_RUNNING_GUARD = threading.Lock()


@dataclass
class StageInfo:
    name: str  # the addressing DVC uses, e.g. "calibrate@platt"
    cmd: str
    upstream: list[str]
    stale: bool
    outs: list[str] = field(default_factory=list)  # declared outputs, relative to the root


@dataclass
class StageRun:
    name: str
    ran: bool
    seconds: float
    log_tail: str

    def to_dict(self) -> dict:
        return asdict(self)


class StageFailed(RuntimeError):
    """A DVC stage's command failed; the message carries the stage name and the end of its output.

    ``code`` is the stage command's own exit status (what DVC reports as "exited with N", not DVC's 255)
    and ``summary`` the stage's own error line(s), for the one line the CLI prints.
    """

    def __init__(self, message: str, stage: str = "", code: int = 1, summary: list[str] | None = None):
        super().__init__(message)
        self.stage = stage
        self.code = code
        self.summary = summary or [message.splitlines()[0]]


_EXITED = re.compile(r"exited with (-?\d+)")
#: Lines of a stage's output that are DVC's own, never the stage's explanation.
_DVC_LINE = re.compile(r"^(ERROR:|Running stage |> |Updating lock file|Use `dvc push`|WARNING:)")


def stage_code(output: str, dvc_code: int) -> int:
    """The stage command's exit status from DVC's "failed to run: ..., exited with N" (else DVC's own)."""
    found = _EXITED.findall(output)
    return int(found[-1]) if found else dvc_code


def stage_summary(output: str, max_lines: int = 2) -> list[str]:
    """The stage's own error line and what directly follows it (at most ``max_lines``).

    Stages print ``error: <problem> (<fix>)`` on an expected failure (``calibflow.pipeline._common.cli``);
    a crash ends in the exception's last line. DVC's own lines are skipped.
    """
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    own = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    if own:
        first = own[-1]
        picked = [lines[first][len("error: ") :]]
        for ln in lines[first + 1 :]:
            if len(picked) >= max_lines or _DVC_LINE.match(ln) or ln.startswith("error: "):
                break
            picked.append(ln)
        return picked
    rest = [ln for ln in lines if not _DVC_LINE.match(ln)]
    if rest:
        return [rest[-1]]
    dvc_err = [ln for ln in lines if ln.startswith("ERROR:")]
    return [dvc_err[-1][len("ERROR:") :].strip()] if dvc_err else ["no output"]


def _failed(name: str, what: str, dvc_code: int, output: str) -> StageFailed:
    code = stage_code(output, dvc_code)
    return StageFailed(
        f"stage {name!r} failed (exit {code}){what}:\n{_tail(output)}", name, code, stage_summary(output)
    )


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
            outs = [str(Path(o.fs_path).relative_to(Path(repo.root_dir))) for o in st.outs]
            out.append(StageInfo(st.addressing, cmd, ups, is_stale, outs))
        return out


def stage_env() -> dict[str, str]:
    """The environment stage commands run in: this interpreter's bin folder first on PATH.

    Stage commands say ``python -m calibflow.pipeline.<step>``; DVC runs them as ``$SHELL -c CMD`` with
    the caller's PATH, so an unactivated virtual environment would otherwise hand them the system
    Python. ``SHELL`` is calibflow's no-shell launcher (``calibflow.flows.noshell``): DVC then runs every
    stage command as an argument list, never through a shell.
    """
    from calibflow.flows.noshell import launcher

    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bindir:
        path = bindir + os.pathsep + path
    return {**os.environ, "PATH": path, "DVC_NO_ANALYTICS": "1", "SHELL": launcher()}


def _dvc(root: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    exe = [sys.executable, "-m", "dvc", *args]
    return subprocess.run(exe, cwd=root, env=stage_env(), capture_output=True, text=True, timeout=timeout)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _spawn(
    argv: list[str], root: Path, stdin: bool = False, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A stage process (no shell): its own process group, line-buffered text output with stderr merged,
    registered in RUNNING so Ctrl-C and the API watchdog stop its whole group."""
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env=env or stage_env(),
        stdin=subprocess.PIPE if stdin else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        bufsize=1,
    )
    with _RUNNING_GUARD:
        RUNNING.add(proc)
    return proc


def _stream(
    argv: list[str], root: Path, on_line: Callable[[str], None] | None = None, grace: float = 5.0
) -> tuple[int, str]:
    """Run ``argv`` (no shell) in its own process group, passing each output line to ``on_line``.

    On any exception here (Ctrl-C's KeyboardInterrupt included) the whole group gets SIGINT, then
    SIGKILL after ``grace`` seconds, so an interrupted run exits in seconds and leaves no stage behind.
    """
    proc = _spawn(argv, root)
    note_stage(root, proc.pid)  # a later run stops this group if we die without doing it ourselves
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
        return proc.wait(), "".join(lines)
    except BaseException:
        stop_group(proc, grace)
        raise
    finally:
        note_stage(root, None)
        with _RUNNING_GUARD:
            RUNNING.discard(proc)


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGINT to the process group of ``proc`` (DVC then stops its stage), SIGKILL after ``grace`` s."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stop_running(grace: float = 5.0) -> None:
    """Stop every stage subprocess this process started (Ctrl-C, API gone)."""
    with _RUNNING_GUARD:
        procs = list(RUNNING)
    for proc in procs:
        stop_group(proc, grace)


def clean_stale_temps(root: Path, outs: list[str]) -> list[Path]:
    """Remove what a killed earlier run left beside the declared outputs (see remove_stale_temps)."""
    from calibflow.io import remove_stale_temps

    return [p for o in outs for p in remove_stale_temps(root / o)]


def reproduce_stage(
    root: Path, name: str, on_line: Callable[[str], None] | None = None, outs: list[str] | None = None
) -> StageRun:
    """``dvc repro --single-item <name>``; raises ``StageFailed`` with the stage's output on error.

    ``on_line`` receives the stage's output as it comes (the flow sends it to the run's logs). Stale
    temporary folders beside ``outs`` (a killed earlier run's) are removed first.
    """
    t0 = time.perf_counter()
    for stale in clean_stale_temps(root, outs or []):
        if on_line is not None:
            on_line(f"removed a killed run's leftover {stale.relative_to(root)}")
    with _DVC_LOCK:
        code, output = _worker(root).run(["repro", "--single-item", name], on_line)
    secs = time.perf_counter() - t0
    if code != 0:
        raise _failed(name, "", code, output)
    ran = "didn't change, skipping" not in output
    return StageRun(name, ran, secs, _tail(output, 15))


class DvcWorker:
    """A ``calibflow.flows.dvc_worker`` process: DVC imported once, one ``dvc`` command per request.

    Its own process group (as ``_stream``'s children), recorded as the running stage while a command runs,
    so Ctrl-C, the API watchdog and a later run stop it and its stage as they stopped ``python -m dvc``.
    Used under ``_DVC_LOCK`` only. A worker that died or was stopped is replaced on the next request.
    """

    def __init__(self, root: Path):
        from calibflow.flows.dvc_worker import DONE

        self.root = root
        self.done = DONE
        env = stage_env()
        self.host = StageHost.start(root, env)
        if self.host is not None:
            env[stage_host.ENV] = self.host.path
        if forking.can_fork():  # a fork of this process: DVC is imported here already (the plan's)
            self.proc = _fork_worker(root, env)
        else:
            self.proc = _spawn([sys.executable, "-u", "-m", "calibflow.flows.dvc_worker"], root, True, env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, args: list[str], on_line: Callable[[str], None] | None = None) -> tuple[int, str]:
        """``dvc ARGS`` in the worker; its exit status and output (as ``_stream`` returns them)."""
        import json

        assert self.proc.stdin is not None and self.proc.stdout is not None
        note_stage(self.root, self.proc.pid)
        lines: list[str] = []
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.flush()
            for line in self.proc.stdout:
                if line.startswith(self.done):
                    return int(line.split()[-1]), "".join(lines)
                lines.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            return self.proc.wait(), "".join(lines)  # died mid-command: its status (killed: negative)
        except BaseException:
            self.close(grace=5.0)
            raise
        finally:
            note_stage(self.root, None)

    def close(self, grace: float = 5.0) -> None:
        """End the worker: EOF on its stdin, then the group's SIGINT/SIGKILL if it does not exit."""
        _end_by_eof(self.proc, grace, lambda: stop_group(self.proc, grace))
        with _RUNNING_GUARD:
            RUNNING.discard(self.proc)
        if self.host is not None:
            self.host.close()


def _end_by_eof(proc: subprocess.Popen, grace: float, otherwise: Callable[[], object]) -> None:
    """Close the stdin of ``proc`` (the DVC worker and the stage host end on EOF); then ``otherwise``
    if it has not ended after ``grace`` s."""
    with contextlib.suppress(OSError, ValueError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        otherwise()


class StageHost:
    """The run's warm stage host (``calibflow.flows.stage_host``) and its private socket folder.

    It ends when its stdin (this process's pipe) closes, taking any stage still running with it: on
    ``close``, or when this process dies however it dies.
    """

    def __init__(self, proc: subprocess.Popen[bytes] | forking.Forked, folder: str):
        self.proc = proc
        self.folder = folder
        self.path = os.path.join(folder, "host")

    @classmethod
    def start(cls, root: Path, env: dict[str, str]) -> StageHost | None:
        """The host: a fork of this process (``forking``: it starts with what the run imported, the params
        check's NumPy, SciPy, DuckDB and calibrators), or a new interpreter while threads run here."""
        if env.get(stage_host.OFF_ENV) == "1":
            return None
        folder = tempfile.mkdtemp(prefix="calibflow-host-")  # 0700: only this user's launchers connect
        path = os.path.join(folder, "host")
        if forking.can_fork():
            return cls(_fork_host(root, env, path), folder)
        proc = subprocess.Popen(
            [sys.executable, "-m", "calibflow.flows.stage_host", path],
            cwd=root,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        return cls(proc, folder)

    def close(self, grace: float = 5.0) -> None:
        _end_by_eof(self.proc, grace, lambda: (self.proc.kill(), self.proc.wait()))
        shutil.rmtree(self.folder, ignore_errors=True)


def _fork_worker(root: Path, env: dict[str, str]) -> forking.Forked:
    """The DVC worker forked from this process, as ``_spawn`` starts one: its own session, its stdin and
    its merged stdout and stderr pipes to this process (text, a line at a time), registered in RUNNING."""
    to_worker, worker_in = os.pipe()
    worker_out, from_worker = os.pipe()
    pid = forking.fork()
    if pid == 0:  # the child never returns into this code, whatever fails
        try:
            os.close(worker_in)
            os.close(worker_out)
            from calibflow.flows import dvc_worker

            dvc_worker.child_main(to_worker, from_worker, root, env)
        finally:
            os._exit(1)
    os.close(to_worker)
    os.close(from_worker)
    stdin = os.fdopen(worker_in, "w", buffering=1)
    proc = forking.Forked(pid, stdin=stdin, stdout=os.fdopen(worker_out, "r"))
    with _RUNNING_GUARD:
        RUNNING.add(proc)  # type: ignore[arg-type]  (a Popen to stop_group)
    return proc


def _fork_host(root: Path, env: dict[str, str], path: str) -> forking.Forked:
    """The stage host forked from this process; it ends when the pipe it reads closes (this process gone)."""
    control, write_end = os.pipe()
    pid = forking.fork()
    if pid == 0:  # the child never returns into this code, whatever fails
        try:
            os.close(write_end)
            stage_host.child_main(path, control, root, env)
        finally:
            os._exit(1)
    os.close(control)
    return forking.Forked(pid, stdin=os.fdopen(write_end, "wb"))


_WORKERS: dict[str, DvcWorker] = {}


def _worker(root: Path) -> DvcWorker:
    """This process's DVC worker for ``root`` (started on first use, closed at exit or when another root's
    is asked for); under _DVC_LOCK."""
    key = str(Path(root).resolve())
    for other in [k for k in _WORKERS if k != key]:  # one idle DVC process at most (~60 MB), not one per root
        _WORKERS.pop(other).close(grace=2.0)
    w = _WORKERS.get(key)
    if w is None or not w.alive():
        if w is not None:
            w.close(grace=0.0)
        w = _WORKERS[key] = DvcWorker(Path(root))
        atexit.register(w.close, 2.0)
    return w


def start_worker(root: Path) -> None:
    """Start the DVC worker (and its stage host) for ``root`` now, so their start overlaps other work."""
    with _DVC_LOCK:
        _worker(root)


def run_stage_command(root: Path, name: str, cmd: str) -> StageRun:
    """Run a stage's command directly (no DVC lock, no shell): the unit of work a Dask worker executes.

    The command is split with ``shlex`` and run as an argument list, so a value interpolated into it
    (a method name from params) can never run a second command. Our stage commands use no shell syntax.
    """
    from calibflow.flows.noshell import command_argv

    t0 = time.perf_counter()
    try:
        argv = command_argv(cmd)
    except ValueError as exc:
        raise StageFailed(f"stage {name!r}: {exc}") from None
    try:
        proc = subprocess.run(argv, cwd=root, env=stage_env(), capture_output=True, text=True)
    except OSError as exc:  # no such program: a broken (or hostile) command, never a shell fallback
        raise StageFailed(f"stage {name!r} could not start: {exc}", name) from None
    output = (proc.stdout or "") + (proc.stderr or "")
    if proc.returncode != 0:
        raise _failed(name, f": {shlex.quote(cmd)}", proc.returncode, output)
    return StageRun(name, True, time.perf_counter() - t0, _tail(output, 15))


def git_outputs(root: Path) -> list[str]:
    """The outputs dvc.yaml declares with ``cache: false`` (kept in git), relative to ``root``."""
    from dvc.repo import Repo

    with _DVC_LOCK, contextlib.chdir(root), Repo(str(root)) as repo:
        outs = {
            str(Path(o.fs_path).relative_to(Path(repo.root_dir))) for o in repo.index.outs if not o.use_cache
        }
    return sorted(outs)


def stage_names(root: Path) -> list[str]:
    """Every stage address in dvc.yaml (``train``, ``calibrate@platt``, ...), for did-you-mean."""
    from dvc.repo import Repo

    with _DVC_LOCK, contextlib.chdir(root), Repo(str(root)) as repo:
        return sorted(st.addressing for st in repo.index.stages)


# ---- --params-file as a DVC experiment ---------------------------------------------------------


@dataclass
class ExperimentRun:
    name: str
    seconds: float
    overrides: list[str]
    log_tail: str

    def to_dict(self) -> dict:
        return asdict(self)


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict) and d:
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def _hydra(value: Any) -> str:
    """A value in the override grammar ``dvc exp run -S`` takes (Hydra's)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"cannot express {value!r} as a dvc exp run -S value")


def param_overrides(current: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """``-S`` overrides turning ``current`` (params.yaml) into ``wanted``: set, add (+) and remove (~)."""
    cur, new = _flatten(current), _flatten(wanted)
    out = [f"{'' if k in cur else '+'}{k}={_hydra(v)}" for k, v in new.items() if k not in cur or cur[k] != v]
    out += [f"~{k}" for k in cur if k not in new and not any(n.startswith(k + ".") for n in new)]
    return out


def run_experiment(
    root: Path, params_file: Path, name: str | None = None, on_line: Callable[[str], None] | None = None
) -> ExperimentRun:
    """``dvc exp run --temp -S ...`` with the values of ``params_file``: the workspace is not touched.

    DVC runs the pipeline in a temporary copy and records the result as a named experiment (its
    params, dvc.lock and metrics in a git ref): ``dvc exp show`` lists it, ``dvc exp apply NAME``
    brings its outputs into the workspace. A failed run leaves nothing behind but DVC's log.
    """
    from calibflow.io import MAX_PARAMS_BYTES, read_bounded

    current = yaml.safe_load(read_bounded(root / "params.yaml", MAX_PARAMS_BYTES, "a params file")) or {}
    wanted = yaml.safe_load(read_bounded(params_file, MAX_PARAMS_BYTES, "a params file")) or {}
    overrides = param_overrides(current, wanted)
    argv = [sys.executable, "-m", "dvc", "exp", "run", "--temp"]
    if name:
        argv += ["--name", name]
    for o in overrides:
        argv += ["-S", o]
    t0 = time.perf_counter()
    with _DVC_LOCK:
        code, output = _stream(argv, root, on_line)
    if code != 0:
        raise StageFailed(
            f"dvc exp run with {params_file.name} failed (exit {code}):\n{_tail(output)}",
            "dvc exp run",
            stage_code(output, code),
            stage_summary(output),
        )
    ran = [ln.split(":", 1)[1].strip() for ln in output.splitlines() if ln.startswith("Ran experiment(s):")]
    return ExperimentRun(
        ran[0] if ran else (name or "?"), time.perf_counter() - t0, overrides, _tail(output, 15)
    )


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
