"""One run per checkout: a file lock (always) and a Prefect global concurrency limit (with a server).

DVC holds a repository lock while a command runs, so a second ``dvc repro`` in the same checkout
fails at once with ``LockError``. calibflow queues instead, or says in one line who holds it:

- ``checkout_lock(root, wait=False)``: a non-blocking ``flock`` on ``.dvc/tmp/calibflow-run.lock``.
  The kernel drops it when the holder exits, even on SIGKILL, so a crash never leaves a stale lock.
  The holder's pid, command and start time are written into the file for the message.
- ``prefect_slot(root)``: a Prefect global concurrency limit named after the checkout
  (``calibflow-checkout-<sha1 of the path>``, limit 1), created on first use. Two triggers of a
  served deployment then queue on the server (visible in the UI) instead of racing for DVC's lock.
  Slots are leased, so a SIGKILLed run gives its slot back when the lease expires.

Both are re-entrant within a process (the CLI takes the file lock before the flow starts; the flow
takes it again).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
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
_HELD_GUARD = threading.Lock()


class CheckoutBusy(RuntimeError):
    """Another run holds this checkout; the message is one line for the user."""


def lock_path(root: str | os.PathLike[str]) -> Path:
    return Path(root).resolve() / ".dvc" / "tmp" / LOCK_NAME


def limit_name(root: str | os.PathLike[str]) -> str:
    """The Prefect global concurrency limit of a checkout (names must be short and plain)."""
    digest = hashlib.sha1(str(Path(root).resolve()).encode()).hexdigest()[:12]  # noqa: S324 (a name, not security)
    return f"calibflow-checkout-{digest}"


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
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not wait or (deadline is not None and time.monotonic() > deadline):
                    raise CheckoutBusy(_busy_message(base)) from None
                time.sleep(poll)
        info = {
            "pid": os.getpid(),
            "command": " ".join(sys.argv)[:200],
            "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        with _HELD_GUARD:
            _HELD[key] = 1
        try:
            yield path
        finally:
            with _HELD_GUARD:
                _HELD.pop(key, None)
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def ensure_limit(root: str | os.PathLike[str]) -> str:
    """Create the checkout's global concurrency limit (limit 1) on the current Prefect API if missing."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound

    name = limit_name(root)
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            with contextlib.suppress(ObjectAlreadyExists):  # another run created it just now
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=1))
    return name


@contextlib.contextmanager
def prefect_slot(root: str | os.PathLike[str], timeout: float | None = None) -> Iterator[str]:
    """Occupy the checkout's one Prefect concurrency slot for the block (queues behind other runs)."""
    from prefect.concurrency.sync import concurrency

    name = ensure_limit(root)
    with concurrency(name, occupy=1, timeout_seconds=timeout, strict=True):
        yield name
