"""A warm parent for stage processes: a run pays each stage's imports once, not once per stage.

A 10-stage ``calibflow run`` on 1e5 rows spent about 14 of its 42 s of CPU importing the same libraries in
every stage process (numpy, pandas, scipy, scikit-learn, DuckDB) and Great Expectations three times. Now the
DVC worker (``dvc_stages.DvcWorker``) starts one host beside it, forked from the run (``forking``: it
starts with the modules the run's params check imported) or, while the run has threads, a new
interpreter. DVC still runs every stage exactly as
before (its lock, its hashes, ``$SHELL -c CMD`` through calibflow's no-shell launcher); the launcher hands a
``python -m calibflow.pipeline.<step> ...`` command to the host, which imports the stage module once and
forks a child that runs it as ``__main__`` with the launcher's arguments, working folder, environment and
standard streams. The child is the stage process: its output goes straight to DVC, its exit status is the
launcher's. Without a host (``dvc repro`` by hand, ``CALIBFLOW_STAGE_HOST`` unset, a host that cannot take
the command) the launcher runs the same command itself: same code, same numbers.

Protocol, over a Unix ``SOCK_SEQPACKET`` socket in a private (0700) folder whose path is
``CALIBFLOW_STAGE_HOST``: the launcher sends one JSON message ``{"argv", "cwd", "env"}`` with its fds
0, 1 and 2 attached; the host answers ``pid N`` when the child has started, or ``no REASON`` (the launcher
then runs the command itself), and later ``exit N`` (a child killed by signal S: 128 + S, as a shell says).
A ``signal N`` message from the launcher goes to the child's process group; a launcher that goes away
(Ctrl-C's SIGKILL after its grace) takes the child with it. The host ends when its stdin closes: the
process that started it is gone.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import threading
from typing import TYPE_CHECKING

from calibflow.flows.gcpause import collector_paused

if TYPE_CHECKING:  # the launcher imports this module, on every stage: only what it uses
    from pathlib import Path

#: The environment variable naming the host's socket; set for the DVC worker, inherited by DVC's stages.
ENV = "CALIBFLOW_STAGE_HOST"
#: Set to 1 to run every stage as its own process (the comparison the tests make, a debugging aid).
OFF_ENV = "CALIBFLOW_NO_STAGE_HOST"
#: The modules a host runs: calibflow's stages, nothing else.
PREFIX = "calibflow.pipeline."
#: A request is one JSON message (arguments, folder, environment): bounded before it is parsed.
MAX_REQUEST = 1 << 20
#: How often the host looks for ended children between messages, in seconds.
POLL_S = 0.02


def stage_module(argv: list[str], prefix: str = PREFIX) -> str | None:
    """The stage module of ``[this python, -m, calibflow.pipeline.<step>, ...]``, or None for any other
    command (another interpreter runs its own command: the host's modules are this interpreter's)."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2].startswith(prefix):
        step = argv[2][len(prefix) :]
        if step.isidentifier() and not step.startswith("_"):
            return argv[2]
    return None


# ---------------------------------------------------------------------------------------------- the launcher
def delegate(path: str, argv: list[str]) -> int | None:
    """Run ``argv`` in the host at ``path``: its exit status, or None when the host cannot take it."""
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sock.connect(path)
        request = {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}
        socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    except OSError:
        return None
    # from here a signal is the stage's: the host passes it on once the stage exists (it may be importing)
    got: list[int] = []
    forward = _forward_signals(sock, got)
    try:
        first = _receive(sock)
        if not first.startswith("pid "):
            return 128 + got[0] if got else None  # interrupted before anything ran: run nothing
        while True:
            msg = _receive(sock)
            if msg.startswith("exit "):
                return int(msg.split()[1])
            if not msg:  # the host died under its child: a failed stage, not a silent success
                print("error: calibflow's stage host ended while the stage ran", file=sys.stderr)
                return 1
    finally:
        for sig, old in forward.items():
            signal.signal(sig, old)


def _receive(sock: socket.socket) -> str:
    while True:
        try:
            return sock.recv(256).decode()
        except InterruptedError:
            continue
        except OSError:
            return ""


def _forward_signals(sock: socket.socket, got: list[int]) -> dict[int, object]:
    """SIGINT, SIGTERM and SIGHUP to this launcher are passed on to the stage (DVC's Ctrl-C, the watchdog)."""

    def handler(signum: int, _frame: object) -> None:
        got.append(signum)
        with contextlib.suppress(OSError):
            sock.send(f"signal {signum}".encode())

    return {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


# ------------------------------------------------------------------------------------------------- the host
def serve(path: str, control: int = 0, prefix: str = PREFIX) -> int:
    """Take requests to run a module under ``prefix`` on ``path`` until ``control`` (the parent's pipe)
    closes."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ, None)
    sel.register(control, selectors.EVENT_READ, None)
    children: dict[int, socket.socket] = {}
    try:
        while True:
            for key, _ in sel.select(timeout=POLL_S):
                if key.fileobj is server:
                    _accept(server, sel, children, prefix)
                elif key.fileobj == control:
                    if not os.read(control, 4096):
                        return 0
                else:
                    _from_launcher(key.fileobj, key.data, sel, children)  # type: ignore[arg-type]
            _reap(sel, children)
    finally:
        for pid in children:
            _kill_group(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.unlink(path)


def _accept(
    server: socket.socket, sel: selectors.BaseSelector, children: dict[int, socket.socket], prefix: str
) -> None:
    conn, _ = server.accept()
    fds: list[int] = []
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, MAX_REQUEST, 3)
        request = json.loads(data)
        module = stage_module(request["argv"], prefix)
        if module is None or len(fds) != 3:
            raise ValueError("not a calibflow stage command")
        _warm(module)
        if threading.active_count() > 1:  # forking a process with threads can copy a held lock: run it apart
            raise RuntimeError("the host has threads")
    except Exception as exc:  # the launcher runs the command itself: never worse than without a host
        with contextlib.suppress(OSError):
            conn.send(f"no {type(exc).__name__}".encode())
        conn.close()
        for fd in fds:
            os.close(fd)
        return
    host = os.getpid()
    pid = os.fork()
    if pid == 0:
        for sock in (server, conn, *children.values()):
            sock.close()
        _child(request, module, fds, host)
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    sel.register(conn, selectors.EVENT_READ, pid)
    try:
        conn.send(f"pid {pid}".encode())
    except OSError:  # the launcher is already gone (Ctrl-C while the host imported): so is its stage
        _kill_group(pid, signal.SIGKILL)


#: Optional back ends a preloaded library imports when they are installed, for data sources no stage uses
#: through it: Great Expectations imports PySpark (0.4 s of CPU, SciPy's sparse module with it), SQLAlchemy
#: (0.25 s), boto3 and Google Cloud's clients (0.07 s) for its Spark, SQL, S3 and GCS sources and stores;
#: calibflow validates pandas frames in an ephemeral context only. Hidden while the host imports the library
#: (it takes them for absent, as on an install without them), importable again for the stages right after (a
#: Spark-engine stage imports PySpark itself).
PRELOAD_WITHOUT = {"great_expectations": ("pyspark", "sqlalchemy", "boto3", "botocore", "google")}


def _numba_target() -> None:
    """Numba's CPU target, built: a process's first compiled call (a cached one too) imports and installs
    numba's typing and lowering registries first, 0.4 s of CPU that each numba stage paid again."""
    from numba.core.registry import cpu_target

    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()


#: What the first use of an imported library costs later, done in the host once that library is imported:
#: every child then starts with it done (a numba stage's first call 0.48 s -> 0.06 s of CPU).
WARM_AFTER = {
    "numba": _numba_target,
    "pyarrow.parquet": lambda: importlib.import_module("pyarrow.dataset"),  # what reading a file imports
}
_WARMED: set[str] = set()


def _warm(module: str) -> None:
    """Import the stage module and what it imports late (``HOST_PRELOAD``) here, once for every child.

    With the cyclic collector paused (``gcpause``: 2.9 s -> 2.6 s of CPU for every stage's imports), then
    frozen: out of every later collection of the host and its children, whose pages stay shared.
    """
    with collector_paused():
        mod = importlib.import_module(module)
        for name in getattr(mod, "HOST_PRELOAD", ()):
            with _hidden(PRELOAD_WITHOUT.get(name.split(".")[0], ())):
                importlib.import_module(name)
        for lib, warm in WARM_AFTER.items():
            if lib in sys.modules and lib not in _WARMED:
                _WARMED.add(lib)  # once, even when it fails: a stage then pays it itself, as without a host
                with contextlib.suppress(Exception):
                    warm()


@contextlib.contextmanager
def _hidden(names: tuple[str, ...]):
    """Imports of ``names`` fail (ImportError, as for a package not installed) inside the block; a module
    already imported is left alone."""
    hide = [n for n in names if n not in sys.modules]
    for name in hide:
        sys.modules[name] = None  # type: ignore[assignment]  (the import system's "not importable")
    try:
        yield
    finally:
        for name in hide:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]


def _child(request: dict, module: str, fds: list[int], host: int) -> None:
    """The stage process: the launcher's streams, folder, environment and arguments, then the stage."""
    code = 1
    try:
        _die_with_host(host)
        _name(module)
        os.setpgid(0, 0)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = [module, *request["argv"][3:]]
        sys.modules.pop(module, None)  # run fresh as __main__, as `python -m` does (no runpy warning)
        import runpy

        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _die_with_host(host: int) -> None:
    """SIGKILL this stage if the host dies (Linux's parent-death signal): no stage outlives its run."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != host:  # the host was already gone
        os._exit(1)


def _name(module: str) -> None:
    """The stage's name as ``ps``/``top`` show it (a fork keeps the host's command line): ``cf:evaluate``."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(15, ("cf:" + module.rsplit(".", 1)[-1])[:15].encode(), 0, 0, 0)  # PR_SET_NAME


def _exit_code(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _from_launcher(
    conn: socket.socket, pid: int, sel: selectors.BaseSelector, children: dict[int, socket.socket]
) -> None:
    try:
        msg = conn.recv(256).decode()
    except OSError:
        msg = ""
    if msg.startswith("signal "):
        _kill_group(pid, int(msg.split()[1]))
    elif not msg:  # the launcher is gone (killed): so is its stage
        _kill_group(pid, signal.SIGKILL)
        sel.unregister(conn)


def _reap(sel: selectors.BaseSelector, children: dict[int, socket.socket]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == 0:
            continue
        conn = children.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        with contextlib.suppress(OSError):
            conn.send(f"exit {code if code >= 0 else 128 - code}".encode())
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        conn.close()


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def child_main(path: str, control: int, cwd: Path, env: dict[str, str]) -> None:
    """The host forked from the run (``dvc_stages.StageHost``), as a new interpreter's host is started
    (``forking.detach``), ending when ``control`` closes; never returns (``os._exit``)."""
    from calibflow.flows import forking

    code = 1
    try:
        forking.detach(forking.HOST_NAME, (control,), cwd, env)
        code = main([path], control=control)
    finally:
        os._exit(code)


def main(argv: list[str] | None = None, control: int = 0) -> int:
    """``python -m calibflow.flows.stage_host SOCKET [--prefix P]`` (``--prefix``: the tests' own modules)."""
    args = sys.argv[1:] if argv is None else argv
    prefix = PREFIX
    if len(args) == 3 and args[1] == "--prefix":
        args, prefix = args[:1], args[2]
    if len(args) != 1:
        print("usage: python -m calibflow.flows.stage_host SOCKET [--prefix MODULE_PREFIX]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the stages; the host ends with its parent
    import ctypes  # noqa: F401  what every child uses, imported once here
    import runpy  # noqa: F401

    return serve(args[0], control=control, prefix=prefix)


if __name__ == "__main__":
    raise SystemExit(main())
