"""One line for a mistake the user can fix: how every command (a stage, a ``calibflow`` subcommand) says it.

A command names the errors it expects and how each is told: an exit code (the message is ``error: <the
exception's text>``) or a function giving the lines and the code (``brief``: the first line only, or
``path: reason`` for an OS error). The lines go to stderr, then the command exits with the code.
``CALIBFLOW_DEBUG=1`` (``--debug``) re-raises instead, traceback and all; an error nobody expected is a
bug and keeps its traceback. Both layers use this module: stages through ``exit_code`` (their ``main``
returns the code), the ``calibflow`` commands through ``guarded`` and ``fail``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")
#: How an error is told: its lines and the exit code.
Report = Callable[[BaseException], tuple[list[str], int]]
#: Expected error type(s) -> an exit code (``error: <message>``) or a ``Report``; the first match counts.
Known = Mapping[type[BaseException] | tuple[type[BaseException], ...], int | Report]


def debugging(debug: bool = False) -> bool:
    """Whether tracebacks are wanted: ``--debug`` given (``debug``) or ``CALIBFLOW_DEBUG`` set."""
    return debug or bool(os.environ.get("CALIBFLOW_DEBUG"))


def first_line(exc: BaseException) -> str:
    """``path: reason`` for an OS error, the first line of anything else."""
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


#: What to do about an OS error at the project level, by errno name.
_OS_FIXES = {
    "EROFS": "run calibflow in a writable copy of the project (or remount it read-write)",
    "EACCES": "make the project writable by this user (ls -l; chmod -R u+w), or run as its owner",
    "EPERM": "make the project writable by this user (ls -l; chmod -R u+w), or run as its owner",
    "ENOSPC": "free space on that disk (df -h) and rerun; the last good outputs are kept",
    "EDQUOT": "free space within your quota and rerun; the last good outputs are kept",
    "EMFILE": "raise the open-file limit (ulimit -n) and rerun",
}


def os_fix(exc: OSError) -> str:
    """``path: reason; what to do`` for an OS error, in one line."""
    import errno

    where = exc.filename or "a write (the path was not reported)"
    name = errno.errorcode.get(exc.errno or 0, "")
    fix = _OS_FIXES.get(name)
    if fix is None and name == "ENOENT" and ".dvc" in str(where):
        fix = "not a calibflow project (no .dvc): run `calibflow init` here, or cd to the project"
    reason = exc.strerror or type(exc).__name__
    return f"{where}: {reason}" + (f"; {fix}" if fix else "")


def os_brief(exc: BaseException) -> tuple[list[str], int]:
    """A ``Report`` for an OS error: its path, its reason and what to do, in one line; exit 1."""
    if isinstance(exc, OSError):
        return [f"error: {os_fix(exc)}"], 1
    return brief(exc)


def brief(exc: BaseException) -> tuple[list[str], int]:
    """A ``Report`` for errors whose text runs long (a disk, a corrupt file): their first line, exit 1."""
    return [f"error: {first_line(exc)}"], 1


def input_errors() -> dict[Any, int | Report]:
    """What a command reading the user's files expects: bad input in full; an unwritable folder, a folder
    where a file goes, a full disk or a corrupt input in one line (not 70)."""
    import duckdb

    return {(ValueError, FileNotFoundError, KeyError): 1, OSError: os_brief, duckdb.Error: brief}


def report(exc: BaseException, how: int | Report = 1, notes: Iterable[str] = (), debug: bool = False) -> int:
    """Print ``exc``'s lines (then ``notes``) on stderr and return its exit code; re-raise it when
    debugging. Call it from the ``except`` block that caught ``exc``."""
    if debugging(debug):
        raise exc
    lines, code = how(exc) if callable(how) else ([f"error: {exc}"], int(how))
    for line in [*lines, *notes]:
        print(line, file=sys.stderr, flush=True)
    return code


def fail(
    exc: BaseException, how: int | Report = 1, notes: Iterable[str] = (), debug: bool = False
) -> NoReturn:
    """``report`` then exit with its code (from the ``except`` block that caught ``exc``)."""
    raise SystemExit(report(exc, how, notes, debug)) from None


def _types(known: Known) -> tuple[type[BaseException], ...]:
    return tuple(t for key in known for t in (key if isinstance(key, tuple) else (key,)))


def _how(known: Known, exc: BaseException) -> int | Report:
    return next(how for types, how in known.items() if isinstance(exc, types))


def guarded(fn: Callable[[], T], known: Known, debug: bool = False) -> T:
    """``fn()``; an expected error is told (``report``) and the process exits with its code."""
    try:
        return fn()
    except _types(known) as exc:
        fail(exc, _how(known, exc), debug=debug)


def exit_code(fn: Callable[[], Any], known: Known) -> int:
    """``fn()`` then 0; an expected error is told (``report``) and its code returned (a stage's ``main``)."""
    try:
        fn()
    except _types(known) as exc:
        return report(exc, _how(known, exc))
    return 0
