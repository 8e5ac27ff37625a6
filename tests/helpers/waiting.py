"""Wait on a condition instead of sleeping a fixed time: fast when the machine is, patient when it is not."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path


def wait_until(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Poll ``condition`` until it returns something truthy, and return that; after ``timeout`` seconds
    fail with a message naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux ``/proc``): e.g. a run that reached a lock file."""
    target = os.path.realpath(path)
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except FileNotFoundError:  # the process is gone
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == target:
                return True
        except OSError:  # closed while we looked
            continue
    return False


class Output:
    """A child's stdout and stderr, drained by threads while the test waits on something else (a full pipe
    would stall the child; reading it directly would block the test)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self._out: list[str] = []
        self._err: list[str] = []
        self._threads = [
            threading.Thread(target=self._drain, args=(stream, sink), daemon=True)
            for stream, sink in ((proc.stdout, self._out), (proc.stderr, self._err))
            if stream is not None
        ]
        for t in self._threads:
            t.start()

    @staticmethod
    def _drain(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._err)

    def communicate(self, timeout: float) -> tuple[str, str]:
        """Wait for the child to exit; its whole stdout and stderr."""
        self.proc.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=30)
        return "".join(self._out), self.stderr
