"""One run per checkout: the file lock across real processes, and the Prefect limit on a real server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import calibflow.flows  # noqa: F401  (environment before prefect)
from calibflow.flows.checkout_lock import CheckoutBusy, checkout_lock, lock_path

HOLD = textwrap.dedent(
    """
    import sys, time
    from calibflow.flows.checkout_lock import checkout_lock
    with checkout_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def hold(root: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_second_run_is_refused_in_one_line_naming_the_holder(tmp_path):
    proc = hold(tmp_path, 30)
    try:
        with pytest.raises(CheckoutBusy) as err, checkout_lock(tmp_path):
            pass
        msg = str(err.value)
        assert "\n" not in msg and f"pid {proc.pid}" in msg and "--wait" in msg and str(tmp_path) in msg
    finally:
        proc.kill()
        proc.wait()


def test_sigkilled_holder_releases_the_lock(tmp_path):
    proc = hold(tmp_path, 30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with checkout_lock(tmp_path) as path:
        assert path == lock_path(tmp_path)


def test_wait_queues_behind_the_holder(tmp_path):
    proc = hold(tmp_path, 1.5)
    t0 = time.monotonic()
    with checkout_lock(tmp_path, wait=True, poll=0.1, timeout=30):
        waited = time.monotonic() - t0
    proc.wait()
    assert 0.5 < waited < 30


def test_reentrant_in_one_process(tmp_path):
    with checkout_lock(tmp_path), checkout_lock(tmp_path):
        pass
    with checkout_lock(tmp_path):  # released fully afterwards
        pass
