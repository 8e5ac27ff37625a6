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
import os
import signal
import sys
from typing import Any

from calibflow.flows import forking
from calibflow.flows.gcpause import collector_paused

#: The server process's name (``ps``, ``top``, /proc/PID/comm): how calibflow and its benchmarks know it.
NAME = forking.SERVER_NAME


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
        forking.become(NAME, parent, signal.SIGTERM, stderr=True)  # its errors are the run's to show
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
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


def main(argv: list[str] | None = None) -> int:
    """``python -m calibflow.flows.temp_server PORT PARENT [KEY=VALUE ...]``: the server in a new interpreter
    (where forking the run was not safe)."""
    args = sys.argv[1:] if argv is None else argv
    port, parent = int(args[0]), int(args[1])
    settings = dict(a.split("=", 1) for a in args[2:])
    forking.die_with(parent, signal.SIGTERM)
    forking.set_name(NAME)
    serve(port, settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
