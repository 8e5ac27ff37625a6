"""A killed run never blocks the checkout: real `calibflow run`s, real SIGKILLs.

Before, every flow run also occupied a Prefect concurrency slot whose lease lived in the granting server's
memory: SIGKILL the run (its temporary server goes with it) or the server, and every later run hung with no
message. Now the one lock is the kernel's flock, which dies with its holder; the holder records the
process group of its running stage, and the next run stops that group if the holder died without doing so
(an orphaned `dvc repro` would hold DVC's repository lock).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers.crash import gone, sleeper_project, start_run

from calibflow.flows.checkout_lock import checkout_lock


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


@pytest.mark.parametrize("victim", ["run", "server"])
def test_a_second_run_starts_within_seconds_after_sigkill(tmp_path, home, victim):
    root = sleeper_project(tmp_path / "p")
    first, server, stage = start_run(root, home)
    os.kill(first.pid if victim == "run" else server, signal.SIGKILL)
    first.communicate(timeout=60)  # killed, or (server) exits 1 on its own: the API stopped answering
    (root / "stage.pid").unlink()
    t0 = time.monotonic()
    second, _, stage2 = start_run(root, home)
    try:
        waited = time.monotonic() - t0
        # a fresh temporary server (about 6-13 s on 2 cores), then the stage; before: hung for good
        assert waited < 60, f"the second run took {waited:.0f} s to start its stage"
        assert stage2 != stage
        assert gone(stage, 10), "the killed run's stage still runs beside the new one"
    finally:
        _stop(second)
        with contextlib.suppress(ProcessLookupError):
            os.kill(stage2, signal.SIGKILL)


HOLD = textwrap.dedent(
    """
    import sys, time
    from calibflow.flows.checkout_lock import checkout_lock
    with checkout_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
    """
)


def test_a_waiting_run_says_what_it_waits_for_and_since_when(tmp_path, capfd):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "1.5"], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with checkout_lock(tmp_path, wait=True, poll=0.1, timeout=30):
            pass
    finally:
        holder.kill()
        holder.wait()
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1, err  # said once, not once per poll
    assert f"waiting for the checkout {tmp_path.resolve()}: held by pid {holder.pid}" in err[0]
    assert " since 20" in err[0] and "UTC" in err[0]


def test_a_dead_holders_orphaned_stage_is_stopped_and_a_live_unrelated_group_is_not(tmp_path):
    from calibflow.flows.checkout_lock import _start_time, reap_orphan

    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        assert reap_orphan({"stage": {"pgid": other.pid, "start": "1"}}) is None  # a reused pgid: kept
        assert other.poll() is None
        assert reap_orphan({"stage": {"pgid": orphan.pid, "start": _start_time(orphan.pid)}}) == orphan.pid
        assert orphan.wait(timeout=10) == -signal.SIGKILL
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()
