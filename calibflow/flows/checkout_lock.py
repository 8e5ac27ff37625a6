"""One run per checkout: a file lock (always) and a Prefect global concurrency limit (with a server).

DVC holds a repository lock while a command runs, so a second ``dvc repro`` in the same checkout
fails at once with ``LockError``. calibflow queues instead, or says in one line who holds it:

- ``checkout_lock(root, wait=False)``: a non-blocking ``flock`` on ``.dvc/tmp/calibflow-run.lock``.
  The kernel drops it when the holder exits, even on SIGKILL, so a crash never leaves a stale lock,
  and no server has to outlive anybody. The holder's pid, command and start time are written into the
  file for the message; a waiting run says once what it waits for and since when. The flows (served,
  triggered and local runs, the monitor) queue on it with ``wait=True``.
- The holder also records the process group of the stage it is running (``note_stage``). A run that
  gets the lock finds a group recorded by a dead holder still alive (a SIGKILLed run's orphaned
  ``dvc repro``, which would hold DVC's repository lock) and stops it first (``reap_orphan``).
- No Prefect concurrency slot: its lease lived in the granting server's memory, so a run SIGKILLed with
  its temporary server left the slot taken for good and every later run hung. A kernel file lock dies
  with its holder.

The file lock is re-entrant within a process (the CLI takes it before the flow starts; the flow takes
it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

LOCK_NAME = "calibflow-run.lock"
_HELD: dict[str, int] = {}  # lock path -> re-entrancy depth (this process)
_FDS: dict[str, int] = {}  # lock path -> the open, locked file (to record the running stage)
_HELD_GUARD = threading.Lock()


class CheckoutBusy(RuntimeError):
    """Another run holds this checkout; the message is one line for the user."""


def lock_path(root: str | os.PathLike[str]) -> Path:
    return Path(root).resolve() / ".dvc" / "tmp" / LOCK_NAME


def holder(root: str | os.PathLike[str]) -> dict | None:
    """What the current holder wrote (pid, command, started), or None if unreadable."""
    try:
        return json.loads(lock_path(root).read_text() or "null")
    except (OSError, ValueError):
        return None


def _busy_message(root: Path) -> str:
    info = holder(root) or {}
    who = f"pid {info.get('pid', '?')}, started {info.get('started', '?')}"
    return (
        f"another calibflow run ({who}) holds the checkout {root}; "
        "wait for it, or rerun with --wait to queue behind it"
    )


def _waiting_message(root: Path) -> str:
    info = holder(root) or {}
    what = str(info.get("command", "?"))[:80]
    return (
        f"calibflow: waiting for the checkout {root}: held by pid {info.get('pid', '?')} ({what}) "
        f"since {info.get('started', '?')}"
    )


def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None when it is gone: a pid and
    its start time name one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _write_info(fd: int, info: dict) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)


def note_stage(root: str | os.PathLike[str], pgid: int | None) -> None:
    """Record (or clear) the process group of the stage this process runs under the checkout lock."""
    fd = _FDS.get(str(lock_path(root)))
    if fd is None:
        return
    info = holder(root) or {}
    info.pop("stage", None)
    if pgid is not None and (start := _start_time(pgid)) is not None:
        info["stage"] = {"pgid": pgid, "start": start}
    _write_info(fd, info)


def reap_orphan(info: dict | None) -> int | None:
    """Stop the stage group a dead holder recorded, if that very process still runs; its pgid or None."""
    import signal

    stage = (info or {}).get("stage") or {}
    pgid = stage.get("pgid")
    if not isinstance(pgid, int) or pgid <= 1 or _start_time(pgid) != stage.get("start"):
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    for _ in range(50):  # DVC's repository lock goes with the process
        if _start_time(pgid) is None:
            break
        time.sleep(0.1)
    return pgid


@contextlib.contextmanager
def checkout_lock(
    root: str | os.PathLike[str], wait: bool = False, poll: float = 0.5, timeout: float | None = None
) -> Iterator[Path]:
    """Hold the checkout's run lock; raise ``CheckoutBusy`` at once (or after ``timeout`` when waiting)."""
    base = Path(root).resolve()
    path = lock_path(base)
    key = str(path)
    with _HELD_GUARD:
        if _HELD.get(key):
            _HELD[key] += 1
            reentrant = True
        else:
            reentrant = False
    if reentrant:
        try:
            yield path
        finally:
            with _HELD_GUARD:
                _HELD[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, base, wait, poll, timeout)
        orphan = reap_orphan(holder(base))  # we hold the lock: whoever recorded a stage is dead
        if orphan is not None:
            print(f"calibflow: stopped the stage a killed run left running (process group {orphan})",
                  file=sys.stderr, flush=True)
        info = {
            "pid": os.getpid(),
            "command": " ".join(sys.argv)[:200],
            "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        }
        _write_info(fd, info)
        with _HELD_GUARD:
            _HELD[key] = 1
            _FDS[key] = fd
        try:
            yield path
        finally:
            with _HELD_GUARD:
                _HELD.pop(key, None)
                _FDS.pop(key, None)
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _acquire(fd: int, base: Path, wait: bool, poll: float, timeout: float | None) -> None:
    """Take the flock; without ``wait`` raise ``CheckoutBusy`` at once, with it say once who we wait for."""
    deadline = None if timeout is None else time.monotonic() + timeout
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if not wait or (deadline is not None and time.monotonic() > deadline):
                raise CheckoutBusy(_busy_message(base)) from None
            if not told:
                print(_waiting_message(base), file=sys.stderr, flush=True)
                told = True
            time.sleep(poll)
