"""Helper processes forked from the run instead of started as new interpreters.

A run's helpers need much of what the run has imported by the time it starts them: the DVC worker, DVC
(the run's status check); the stage host, NumPy, SciPy, DuckDB, PyArrow, pydantic and calibflow's
calibrators (the params check's); the temporary Prefect server, Prefect's client. A new interpreter imports
them again; a fork starts with them (their pages shared until written). Forking is only safe while the run
has one thread (a fork copies the calling thread only, and a lock another thread held stays held in the
child) and standard streams writing to its descriptors 1 and 2, so ``can_fork`` is asked first, and the
helper starts as a new interpreter otherwise. A forked helper closes every descriptor it inherited but
those it was given (the run's checkout lock and the other helpers' pipes end with the run, not with this
helper) and names itself, so ``ps``, ``top`` and the benchmarks know it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

#: Set to 1 to start every helper as a new interpreter (the comparison the tests make, a debugging aid).
OFF_ENV = "CALIBFLOW_NO_FORK"


def can_fork() -> bool:
    """Whether a helper may be forked from this process: one Python thread (once tqdm's monitor is ended,
    ``stop_progress_monitor``), and standard streams that write to descriptors 1 and 2 (a test runner's
    capture objects write to files a forked child closes, and so would the logging handlers bound to
    them; colorama's wrappers, which DVC puts around them, write to 1 and 2)."""
    if os.environ.get(OFF_ENV) == "1":
        return False
    stop_progress_monitor()
    return _writes_to(sys.stdout, 1) and _writes_to(sys.stderr, 2) and threading.active_count() == 1


def _writes_to(stream: object, fd: int) -> bool:
    try:
        return stream.fileno() == fd  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False


def stop_progress_monitor() -> None:
    """End tqdm's monitor threads (DVC's status check starts one, for its own tqdm class; it wakes every
    10 s to fix the refresh rate of stuck progress bars) and start no other: the run draws no progress bar
    that needs one."""
    std = sys.modules.get("tqdm.std")
    if std is None:
        return
    std.tqdm.monitor_interval = 0  # inherited by DVC's subclass
    for thread in threading.enumerate():
        owner = getattr(thread, "tqdm_cls", None)
        if owner is not None and hasattr(thread, "was_killed"):  # a tqdm._monitor.TMonitor
            owner.monitor = None
            with contextlib.suppress(Exception):
                thread.exit()


def fork() -> int:
    """``os.fork`` after flushing this process's standard streams (nothing buffered is written twice)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    return os.fork()


def become(
    name: str, parent: int, death_signal: int | None, keep: tuple[int, ...] = (), stderr: bool = False
) -> None:
    """In a forked child: ``death_signal`` when ``parent`` dies (Linux's parent-death signal, even on its
    SIGKILL; None: the child watches for that itself), the process name ``name`` (15 characters at
    most), standard output (and standard error unless ``stderr``) to /dev/null, every other descriptor but
    ``keep`` closed."""
    if death_signal is not None:
        die_with(parent, death_signal)
    set_name(name)
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1,) if stderr else (1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _max_fd())


def detach(name: str, keep: tuple[int, ...], cwd: str | os.PathLike[str], env: dict[str, str]) -> None:
    """In a forked helper that stands alone as a new interpreter started in its own session would (the
    stage host, the DVC worker): its own session, ``become`` (it watches its pipes ``keep`` for the run's
    end itself), ``cwd`` and exactly ``env``, the default SIGTERM, SIGHUP and SIGCHLD handling, and
    ``fresh_interpreter_state``."""
    os.setsid()
    become(name, os.getppid(), None, keep)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    fresh_interpreter_state()


#: The temporary Prefect server's process name (``temp_server``).
SERVER_NAME = "cf-prefect-api"
#: The stage host's process name (``stage_host``).
HOST_NAME = "cf-stage-host"
#: The DVC worker's process name (``dvc_worker``).
DVC_NAME = "cf-dvc-worker"


def fresh_interpreter_state() -> None:
    """In a forked child that runs code of its own, what a new interpreter would have: the collector on
    (the run may have paused it for its imports) and a root logger with no handler at WARNING, so that
    what the child configures is configured as in its own process."""
    import gc
    import logging

    gc.enable()
    root = logging.getLogger()
    for handler in root.handlers[:]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def die_with(parent: int, death_signal: int = signal.SIGTERM) -> None:
    """``death_signal`` to this process when ``parent`` dies; exit now if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(death_signal))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(1)


def set_name(name: str) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(15, name[:15].encode(), 0, 0, 0)  # PR_SET_NAME


def _max_fd() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 1 << 16)
    except (OSError, ValueError):
        return 4096


class Forked:
    """A forked child, as much of ``subprocess.Popen`` as calibflow's callers use (``stdin``, ``stdout``:
    this end of the pipes to and from it, when it was given them)."""

    def __init__(self, pid: int, stdin: IO | None = None, stdout: IO | None = None) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                done, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, its status unknown (as Popen says 0)
                self.returncode = 0
            else:
                if done:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return self.returncode  # type: ignore[return-value]  (set by poll)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
