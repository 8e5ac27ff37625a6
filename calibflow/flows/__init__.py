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
