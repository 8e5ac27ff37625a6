"""A stage for the stage host's tests (``calibflow.flows.stage_host``): says where it runs, then either
exits with the status its first argument names or, given ``wait``, waits to be interrupted."""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":
    print(f"stage pid {os.getpid()} parent {os.getppid()} cwd {os.getcwd()}", flush=True)
    print(f"env {os.environ.get('HOSTED_STAGE_VALUE', '-')} argv {sys.argv[1:]}", flush=True)
    if sys.argv[1:2] == ["wait"]:
        try:
            time.sleep(120)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise SystemExit(130) from None
    print("to stderr", file=sys.stderr, flush=True)
    raise SystemExit(int(sys.argv[1]))
