"""One DVC process for all the stages of a run: ``dvc repro --single-item NAME`` per request, in-process.

``python -m dvc repro --single-item NAME`` per stage costs an interpreter start and DVC's imports each time
(0.55 s of 0.65 s for a stage that is up to date, on the 2-core machine; twelve stages in a run). This process
imports DVC once and runs each request through DVC's own command line entry (``dvc.cli.main``), so what runs
is exactly ``dvc repro``: the same lock, the same stage command through ``$SHELL``, the same messages.

Protocol (``calibflow.flows.dvc_stages.DvcWorker``): one JSON argument list per line on stdin; DVC's and the
stage's output go to stdout as they come, then one line ``DONE <exit status>``. A command interrupted by
SIGINT ends the process (the flow is stopping), as would ``python -m dvc``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DONE = "\x1fcalibflow-dvc-worker-done"
#: DVC's exit status for a command interrupted by the user (dvc.cli.main).
INTERRUPTED = 252


def main() -> int:
    from dvc.cli import main as dvc_main

    for line in sys.stdin:
        if not line.strip():
            continue
        argv = json.loads(line)
        code = dvc_main(argv)
        sys.stdout.flush()
        sys.stderr.flush()
        print(f"{DONE} {code}", flush=True)
        if code == INTERRUPTED:
            return code
    return 0


def child_main(stdin: int, stdout: int, cwd: Path, env: dict[str, str]) -> None:
    """The worker forked from the run (``dvc_stages.DvcWorker``), as ``python -u -m`` this module runs:
    its own session, ``stdin``, ``stdout`` (standard error merged into it), ``cwd`` and ``env``; ends when
    ``stdin`` closes. Never returns (``os._exit``)."""
    import os
    import signal

    from calibflow.flows import forking

    status = 1
    try:
        forking.detach(forking.DVC_NAME, (stdin, stdout), cwd, env)
        for fd, target in ((stdin, 0), (stdout, 1), (stdout, 2)):
            os.dup2(fd, target)
        os.close(stdin)
        os.close(stdout)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stdout.reconfigure(line_buffering=True)  # as -u: each line reaches the run as it is printed
        sys.stderr.reconfigure(line_buffering=True)
        status = _main_guarded()
    finally:
        from calibflow.pipeline._common import exit_process

        exit_process(status)


def _main_guarded() -> int:
    try:
        return main()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(_main_guarded())  # the run waits for this exit: DVC's module teardown is not worth its time
