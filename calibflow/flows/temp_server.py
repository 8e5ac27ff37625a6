"""A run's temporary Prefect API server: Prefect's own app (``prefect.server.api.server:create_app``),
served by uvicorn in a process of its own that dies with the run (``server.spawn_temporary``).

The process is a fork of the run's, taken after the run has imported the Prefect it needs anyway
(``server.SHARED_IMPORTS``): the server then builds on those modules instead of importing them again in a
new interpreter. A whole new process paid 2.35 s of CPU to answer; a fork pays 1.4 s. Where a fork is not
safe (the caller runs threads), the same ``serve`` runs in a new interpreter (``python -m`` this module).

The app is built with Python's cyclic garbage collector paused: building it imports most of Prefect's
server (FastAPI routes, pydantic schemas, SQLAlchemy models), hundreds of thousands of new objects, and the
collector walked them again and again while they were created, none of them garbage (2.4 -> 1.9 s of CPU
in a new interpreter). They are frozen (``gc.freeze``: they live as long as the server) and the collector
is back on before the server serves anything.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import Any

from calibflow.flows.gcpause import collector_paused

#: The server process's name (``ps``, ``top``, /proc/PID/comm): how calibflow and its benchmarks know it.
NAME = "cf-prefect-api"


def create_app(ephemeral: bool = False) -> Any:
    with collector_paused():
        from prefect.server.api.server import create_app as prefect_app

        return prefect_app(ephemeral=ephemeral)


def serve(port: int, settings: dict[str, str]) -> None:
    """Serve Prefect's API on 127.0.0.1:``port`` until SIGTERM/SIGINT, with the server ``settings`` (env
    vars) on top of the environment. Prefect's services run as in its own ephemeral server."""
    os.environ.update(settings)
    os.environ.pop("PREFECT_API_URL", None)  # the server's own settings, never a client's
    if "prefect.context" in sys.modules:  # a fork: the run's Prefect read its settings before these
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()
    import uvicorn

    app = create_app(ephemeral=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="on")


def child_main(port: int, settings: dict[str, str], parent: int) -> None:
    """The forked server process: never returns (``os._exit``), so nothing of the run's runs twice."""
    code = 1
    try:
        die_with(parent)
        _name()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
        _quiet_descriptors()
        serve(port, settings)
        code = 0
    except KeyboardInterrupt:
        code = 0
    except BaseException:  # noqa: BLE001  (said on stderr; the run then fails in one line: no answer)
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def die_with(parent: int) -> None:
    """SIGTERM this process when ``parent`` dies (Linux's parent-death signal), even on its SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the signal was asked for
        os._exit(1)


def _name() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(15, NAME.encode(), 0, 0, 0)  # PR_SET_NAME


def _quiet_descriptors() -> None:
    """Standard output to /dev/null (uvicorn's lines are not the run's); every descriptor the run had open
    besides the standard three closed: its checkout lock and its DVC worker's pipes must end with the run,
    not with this server."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.closerange(3, _max_fd())


def _max_fd() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 1 << 16)
    except (OSError, ValueError):
        return 4096


def main(argv: list[str] | None = None) -> int:
    """``python -m calibflow.flows.temp_server PORT PARENT [KEY=VALUE ...]``: the server in a new interpreter
    (where forking the run was not safe)."""
    args = sys.argv[1:] if argv is None else argv
    port, parent = int(args[0]), int(args[1])
    settings = dict(a.split("=", 1) for a in args[2:])
    die_with(parent)
    _name()
    serve(port, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
