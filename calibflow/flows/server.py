"""Prefect servers: the local one for schedules (with its UI), and a temporary one per CLI run.

The local server (``calibflow server start``) wraps ``prefect server start --background``: SQLite under
the project's ``PREFECT_HOME``, 127.0.0.1 only, the UI at http://127.0.0.1:4200 unless ``ui=False``.

A ``calibflow run`` with no server up gets a temporary API server of its own (what Prefect's ephemeral
mode starts, but started here: a fork of the run once it imported Prefect's client, ``temp_server``), so
that it dies with the run: the child asks the kernel for SIGTERM when its parent dies
(``PR_SET_PDEATHSIG``, Linux), even on SIGKILL of calibflow, and its pid is kept in
``$PREFECT_HOME/calibflow-temp-server.pid`` so the next start reaps one that outlived its parent anyway
(other systems). ``watch_api`` fails a run fast, in one line, when its API server goes away.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import calibflow.flows  # noqa: F401
from calibflow.flows import forking, temp_server
from calibflow.io import pid_alive

DEFAULT_PORT = 4200
PIDFILE = "calibflow-temp-server.pid"


def api_url(port: int = DEFAULT_PORT) -> str:
    return f"http://127.0.0.1:{port}/api"


def ui_url(port: int = DEFAULT_PORT) -> str:
    return f"http://127.0.0.1:{port}"


class ServerFailed(RuntimeError):
    """A Prefect server that would not start, answer or stop: one line for the user, no traceback."""


def healthy(port: int = DEFAULT_PORT, timeout: float = 2.0, url: str | None = None) -> bool:
    try:
        with urllib.request.urlopen(f"{url or api_url(port)}/health", timeout=timeout) as resp:  # noqa: S310 (loopback)
            return resp.status == 200
    except OSError:
        return False


# ---- which server is this project's -----------------------------------------------------------------
#
# Anything may listen on 127.0.0.1:4200: another checkout's Prefect server, or no Prefect at all. A server is
# this project's only when it says its PREFECT_HOME is ours: Prefect's /api/admin/settings answers with the
# server's own settings, ``home`` included (the marker). Anything else is never used as ours.


def home() -> Path:
    """This project's PREFECT_HOME (set by calibflow.flows.configure_environment unless the user set it)."""
    return Path(os.environ.get("PREFECT_HOME", ".prefect")).expanduser().resolve()


def server_home(port: int = DEFAULT_PORT, timeout: float = 2.0) -> str | None:
    """The PREFECT_HOME the Prefect server on ``port`` says it uses; None when none answers as one."""
    try:
        url = f"{api_url(port)}/admin/settings"
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback)
            got = json.loads(resp.read()).get("home")
    except (OSError, ValueError, AttributeError):
        return None
    return str(got) if got else None


def ours(port: int = DEFAULT_PORT) -> bool:
    """Whether the server on ``port`` is healthy and is this project's (same PREFECT_HOME)."""
    other = server_home(port)
    return other is not None and Path(other).expanduser().resolve() == home() and healthy(port)


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def holder(port: int) -> str:
    """Who listens on 127.0.0.1:``port``, in words: pid and command line (Linux /proc), or what it says."""
    other = server_home(port)
    pid = _listener_pid(port)
    who = f"pid {pid} ({_cmdline(pid).strip()[:120]})" if pid else "another process"
    if other is not None:
        return f"another Prefect server, PREFECT_HOME={other}, {who}"
    return who


def _listener_pid(port: int) -> int | None:
    """The pid with a listening socket on ``port`` (via /proc/net/tcp and each process's fds), if visible."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                f = line.split()
                if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in inodes:
                        return int(proc.name)
    return None


class PortTaken(RuntimeError):
    """The port answers, but not as this project's Prefect server."""


def _prefect(*args: str, ui: bool = True, port: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_UI_ENABLED": "true" if ui else "false"}
    # The UI asks this URL for the API; Prefect defaults it to port 4200 whatever --port says.
    if port is not None:
        env["PREFECT_UI_API_URL"] = api_url(port)
        env["PREFECT_SERVER_API_PORT"] = str(port)
    return subprocess.run([sys.executable, "-m", "prefect", *args], capture_output=True, text=True, env=env)


def start(port: int = DEFAULT_PORT, wait: float = 60.0, ui: bool = True) -> str:
    """Start the local server in the background (idempotent) and wait until /health answers.

    A port held by anything but this project's server is a ``PortTaken`` error naming the holder.
    """
    if ours(port):
        return api_url(port)
    if listening(port):
        raise PortTaken(taken_message(port))
    args = ["server", "start", "--background", "--host", "127.0.0.1", "--port", str(port)]
    proc = _prefect(*args, *([] if ui else ["--no-ui"]), ui=ui, port=port)
    if proc.returncode != 0 and "already running" not in (proc.stdout + proc.stderr):
        raise ServerFailed(f"prefect server failed to start:\n{proc.stdout}{proc.stderr}")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if ours(port):
            return api_url(port)
        time.sleep(0.5)
    raise ServerFailed(f"prefect server did not become healthy on port {port} within {wait:.0f} s "
                       "(a busy machine: run the command again)")


def taken_message(port: int) -> str:
    return (
        f"port {port} is held by {holder(port)}, not this project's Prefect server (PREFECT_HOME={home()}): "
        f"stop it, or use another port (--port {_free_port()} is free)"
    )


def stop() -> None:
    proc = _prefect("server", "stop")
    if proc.returncode != 0 and "no server" not in (proc.stdout + proc.stderr).lower():
        raise ServerFailed(f"prefect server stop failed:\n{proc.stdout}{proc.stderr}")


def status(port: int = DEFAULT_PORT) -> dict[str, object]:
    """``healthy``: this project's server answers on ``port``; ``held_by``: who else holds it, if anyone."""
    mine = ours(port)
    out: dict[str, object] = {"url": api_url(port), "healthy": mine, "prefect_home": str(home())}
    if not mine and listening(port):
        out["held_by"] = holder(port)
    return out


# ---- the temporary server of one run ---------------------------------------------------------


def _pidfile() -> Path:
    return Path(os.environ.get("PREFECT_HOME", ".prefect")) / PIDFILE


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reap_orphan() -> int | None:
    """Kill a temporary server a previous run left (its parent gone); returns its pid, if any."""
    path = _pidfile()
    try:
        pid, parent = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    path.unlink(missing_ok=True)
    if pid_alive(parent) or not pid_alive(pid) or not _is_temporary_server(pid):
        return None
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    return pid


def _is_temporary_server(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == temp_server.NAME
    except OSError:
        return True  # no /proc: trust the pidfile


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def start_temporary(wait: float = 90.0) -> tuple[subprocess.Popen | forking.Forked, str]:
    """A Prefect API server for this process only; it stops when this process exits, however it exits.

    Must be called before ``prefect`` is imported; sets ``PREFECT_API_URL`` to it.
    """
    proc, url = spawn_temporary()
    return proc, wait_temporary(proc, url, wait)


#: Modules every caller of ``spawn_temporary`` imports anyway, imported before the server is forked so that
#: the server builds on them (``temp_server``): Prefect's flow engine, tasks and client, and FastAPI's
#: encoders (a flow run serialises its parameters with them; FastAPI and Starlette are the server's own).
SHARED_IMPORTS = ("prefect.flows", "prefect.tasks", "prefect.client.orchestration", "fastapi.encoders")


def spawn_temporary() -> tuple[subprocess.Popen | forking.Forked, str]:
    """Start the temporary server and set ``PREFECT_API_URL`` to it without waiting for it to answer.

    The caller imports and plans while the server starts (``wait_temporary`` then waits), so its start
    overlaps that work instead of preceding it. A new ``PREFECT_HOME`` gets the migrated template database
    (``server_seed``); a database this Prefect's server already prepared is not prepared again.

    The server is a fork of this process taken after ``SHARED_IMPORTS`` (``temp_server``); a process that
    runs threads gets a new interpreter instead (a fork copies only the calling thread, and any lock another
    one held stays held). Either way it asks for SIGTERM when this process dies, even on SIGKILL
    (``PR_SET_PDEATHSIG``, Linux), and its pid is kept in ``$PREFECT_HOME/calibflow-temp-server.pid`` so the
    next start reaps one that outlived its parent anyway (other systems).
    """
    from calibflow.flows import server_seed

    reap_orphan()
    port = _free_port()
    url = api_url(port)
    fresh = not server_seed.database(home()).exists() and not server_seed.seed(home())
    settings = {"PREFECT_UI_ENABLED": "false", **_skip_preparation(home())}
    stale = "prefect.context" in sys.modules  # Prefect read its settings already, without this API
    os.environ["PREFECT_API_URL"] = url
    proc = _start(port, settings, stale)
    proc.calibflow_fresh_db = fresh  # type: ignore[union-attr]  (wait_temporary keeps it as the template)
    pidfile = _pidfile()
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.write_text(f"{proc.pid} {os.getpid()}\n")
    atexit.register(stop_temporary, proc)
    return proc, url


def _start(port: int, settings: dict[str, str], stale: bool) -> subprocess.Popen | forking.Forked:
    """The server forked once ``SHARED_IMPORTS`` are imported here, or a new interpreter where a fork is not
    safe (``forking.can_fork``, asked after the imports); ``stale``: Prefect's settings are read again."""
    import importlib

    from calibflow.flows.gcpause import collector_paused

    with collector_paused():
        for name in SHARED_IMPORTS:
            importlib.import_module(name)
    if stale:
        from prefect.context import refresh_global_settings_context

        refresh_global_settings_context()
    if not forking.can_fork():
        return _spawn(port, settings)
    parent = os.getpid()
    pid = forking.fork()
    if pid == 0:  # the child never returns into this code, whatever fails
        try:
            temp_server.child_main(port, settings, parent)
        finally:
            os._exit(1)
    return forking.Forked(pid)


def _spawn(port: int, settings: dict[str, str]) -> subprocess.Popen:
    argv = [sys.executable, "-m", "calibflow.flows.temp_server", str(port), str(os.getpid())]
    argv += [f"{key}={value}" for key, value in settings.items()]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL)


#: What a server does to a database before it answers: migrate it (load Alembic's scripts to find nothing to
#: do) and register Prefect's block types (hash the registry to find them registered): 0.6 s of CPU each.
_PREPARATION = (
    "PREFECT_SERVER_DATABASE_MIGRATE_ON_START",
    "PREFECT_SERVER_REGISTER_BLOCKS_ON_START",
    "PREFECT_SERVER_MEMOIZE_BLOCK_AUTO_REGISTRATION",  # else it hashes the registry anyway, and records it
)


def _skip_preparation(prefect_home: Path) -> dict[str, str]:
    """The settings that skip both for a database a server of this Prefect already prepared (none for any
    other: a new one, another version's, one elsewhere). A setting the user made wins."""
    from calibflow.flows import server_seed

    if not server_seed.prepared(prefect_home):
        return {}
    return {key: "false" for key in _PREPARATION if key not in os.environ}


def wait_temporary(proc: subprocess.Popen | forking.Forked, url: str, wait: float = 90.0) -> str:
    """Wait until the server of ``spawn_temporary`` answers; stop it and raise if it never does."""
    from calibflow.flows import server_seed

    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerFailed(f"the temporary Prefect server exited with code {proc.returncode}")
        if healthy(url=url, timeout=1.0):
            if getattr(proc, "calibflow_fresh_db", False):
                server_seed.save(home())
            server_seed.mark_prepared(home())  # it answers: its database is migrated, block types in
            return url
        time.sleep(0.2)
    stop_temporary(proc)
    os.environ.pop("PREFECT_API_URL", None)
    raise ServerFailed(f"the temporary Prefect server did not answer within {wait:.0f} s (a busy machine: "
                       "run the command again, or keep one running with `calibflow server start`)")


def stop_temporary(proc: subprocess.Popen | forking.Forked) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    path = _pidfile()
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text().split()[0]) == proc.pid:
            path.unlink()


def _probe(url: str, timeout: float) -> str:
    """``ok``, ``slow`` (no answer within ``timeout``: a busy machine) or ``down`` (refused, or an error)."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:  # noqa: S310 (loopback)
            return "ok" if resp.status == 200 else "down"
    except urllib.error.URLError as exc:
        return "slow" if isinstance(exc.reason, TimeoutError) else "down"
    except TimeoutError:  # socket.timeout is TimeoutError
        return "slow"
    except OSError:
        return "down"


def watch_api(
    url: str, on_gone: Callable[[str], None], every: float = 1.0, misses: int = 3, slow_for: float = 120.0
) -> threading.Event:
    """Call ``on_gone(message)`` once when ``url``'s /health is refused ``misses`` times in a row, or has not
    answered for ``slow_for`` seconds.

    A server that is gone refuses at once; a server on a saturated machine may take seconds to answer and
    must not stop a healthy run (it did, at load 40 on 2 cores). Runs in a daemon thread; set the
    returned event to stop watching.
    """
    stop = threading.Event()

    def loop() -> None:
        failed, quiet_since = 0, None
        while not stop.wait(every):
            state = _probe(url, timeout=max(every, 2.0))
            failed = failed + 1 if state == "down" else 0
            if state != "slow":
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            if failed >= misses or (quiet_since is not None and time.monotonic() - quiet_since >= slow_for):
                on_gone(f"the Prefect API at {url} stopped answering; the run was stopped (no outputs lost)")
                return

    threading.Thread(target=loop, name="calibflow-api-watch", daemon=True).start()
    return stop
