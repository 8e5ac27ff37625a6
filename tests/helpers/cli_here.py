"""``python -m calibflow.cli ARGS`` run in the test's own process: one import of the command for many cases.

For refusals where the process boundary is not the point (a bomb, a crash, an endless file, the real exit
of an interpreter are): ``runpy`` runs the module as ``python -m`` does, with the same argv, working folder
and environment; stderr is captured at the file descriptor and the warnings Python would print are added
as lines; any exception other than SystemExit fails the test. Each test module keeps at least one case per
command running the real command in a subprocess.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

MODULE = "calibflow.cli"
CLI = [sys.executable, "-m", MODULE]


def run_here(
    args: list[str], monkeypatch, capfd, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """The command's exit status, stdout and stderr, as ``subprocess.run([*CLI, *args], ...)`` returns them.
    ``cwd``/``env``: as for the subprocess (None: this process's); the caller's fixtures restore both."""
    if cwd is not None:
        monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", [MODULE, *args])
    if env is not None:
        os.environ.clear()  # the conftest's autouse fixture puts the test's environment back
        os.environ.update(env)
    capfd.readouterr()
    code: int | str | None = 0
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # what a fresh interpreter prints, but DeprecationWarning
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        try:
            runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            code = exc.code
    out, err = capfd.readouterr()
    err += "".join(warnings.formatwarning(w.message, w.category, w.filename, w.lineno, w.line) for w in seen)
    if isinstance(code, str):  # sys.exit("text"): Python prints the text and exits 1
        err, code = err + code + "\n", 1
    return subprocess.CompletedProcess([*CLI, *args], 0 if code is None else code, out, err)
