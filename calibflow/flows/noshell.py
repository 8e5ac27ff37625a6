"""The "shell" calibflow hands DVC: a stage command runs as an argument list, never through a shell.

DVC runs each stage command as ``$SHELL -c CMD``. Every command calibflow starts DVC with (``calibflow run``,
``repro``, ``validate``, ``make repro``, served and triggered runs, ``--params-file`` experiments) gets
``SHELL`` pointing at :func:`launcher`, which splits ``CMD`` with ``shlex`` and executes it directly: a value
interpolated into a command (``platt; touch X``) can only ever be an argument (``;``, ``&&``, ``$(...)`` are
inert text). calibflow's stage commands (``python -m calibflow.pipeline.<step> ARG``) use no shell syntax.
The schema (params_schema.py) still keeps such names out first.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from calibflow.flows import stage_host


def command_argv(cmd: str) -> list[str]:
    """The argument list of a stage command; ``python`` is this interpreter (as DVC's PATH would give)."""
    words = shlex.split(cmd)
    if not words:
        raise ValueError("empty stage command")
    if words[0] == "python":
        words[0] = sys.executable
    return words


def main(argv: list[str] | None = None) -> int:
    """``launcher [opts] -c CMD``: exec CMD's argument list in place of this process."""
    args = sys.argv[1:] if argv is None else argv
    if "-c" not in args or args.index("-c") + 1 >= len(args):
        print("calibflow noshell: expected `-c COMMAND`", file=sys.stderr)
        return 2
    try:
        words = command_argv(args[args.index("-c") + 1])
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    code = _in_host(words)
    if code is not None:
        return code
    import shutil

    exe = shutil.which(words[0]) or words[0]
    try:
        os.execv(exe, words)
    except OSError as exc:
        print(f"error: stage command could not start: {words[0]}: {exc.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


def _in_host(words: list[str]) -> int | None:
    """The command run by the run's warm stage host (``calibflow.flows.stage_host``), when there is one and
    it takes the command (a calibflow stage of this interpreter): its exit status; None to run it here."""
    path = os.environ.get(stage_host.ENV)
    return stage_host.delegate(path, words) if path else None


def launcher() -> str:
    """The path of an executable that runs ``main`` with this interpreter (written once per interpreter).

    A two-line ``/bin/sh`` script that only execs Python with its own arguments (``"$@"``): the stage
    command is passed as a string and never evaluated by ``sh``. Python starts without ``site`` (``-S``)
    and finds calibflow where this one is: the launcher needs the standard library and calibflow only,
    and ``site`` (the installed packages' path hooks) was half of its 40 ms of CPU, paid once per stage.
    """
    import hashlib
    import tempfile

    import calibflow

    home = str(Path(calibflow.__file__).resolve().parents[1])
    code = f"import sys; sys.path.insert(0, {home!r}); from calibflow.flows import noshell; noshell.run()"
    text = f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -c {shlex.quote(code)} \"$@\"\n"
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"calibflow-noshell-{os.getuid()}-{key}"
    if not (path.is_file() and os.access(path, os.X_OK) and path.read_text() == text):
        from calibflow.io import write_text

        write_text(path, text)
        path.chmod(0o755)
    return str(path)


def run() -> None:
    """The launcher's entry: ``main``'s status as the exit status."""
    raise SystemExit(main())


if __name__ == "__main__":
    run()
