"""Prefect flows over the DVC pipeline.

Importing this package configures the environment before Prefect is imported anywhere: a
project-local ``PREFECT_HOME`` (SQLite under ``.prefect/``), analytics off, and quiet server logs
(see ``calibflow/flows/logging.yml`` and ``../shared/notes/stack.md``). Values already set by the user win.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def project_root() -> Path:
    """The calibflow checkout: ``$CALIBFLOW_ROOT``, else the nearest parent of cwd with dvc.yaml."""
    env = os.environ.get("CALIBFLOW_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "dvc.yaml").exists():
            return d
    return here


def check_writable(root: Path, *folders: str, dvc: bool = True) -> None:
    """Before any server or stage starts: write a byte in each folder a command writes (``.dvc/tmp`` and
    ``folders``, created if missing), so that a read-only project, a permission denied or a full disk
    is the ``OSError`` naming that path (one line: ``calibflow.errors.os_fix``), not DVC's or Prefect's
    traceback; ``dvc``: the project must have its ``.dvc`` folder."""
    import errno
    import tempfile

    if dvc and not (root / ".dvc").is_dir():
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(root / ".dvc"))
    for sub in ((".dvc/tmp",) if dvc else ()) + folders:
        folder = root / sub
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd, name = tempfile.mkstemp(dir=folder, prefix=".calibflow-write-check-")
            try:
                os.write(fd, b"x")  # a full disk fails on the write, not on the create
            finally:
                os.close(fd)
                os.unlink(name)
        except OSError as exc:  # name the folder, not the probe file
            raise OSError(exc.errno, exc.strerror, str(folder)) from None


def configure_environment(quiet: bool = True) -> None:
    """Set Prefect/DVC/GX environment defaults; call before importing prefect."""
    defaults = {
        "PREFECT_HOME": str(project_root() / ".prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING" if quiet else "INFO",
        "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
        "PREFECT_LOGGING_SETTINGS_PATH": str(PACKAGE_DIR / "logging.yml"),
        "PREFECT_UI_ENABLED": "false",
        "DVC_NO_ANALYTICS": "1",
        "GX_ANALYTICS_ENABLED": "false",
    }
    for key, value in defaults.items():
        os.environ.setdefault(key, value)


configure_environment()
