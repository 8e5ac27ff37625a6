"""A local Prefect server for schedules: start, stop, status (wrapping ``prefect server start``).

The ephemeral API server a plain flow run starts does not schedule; deployments need a real
server. Ours uses SQLite under the project's ``PREFECT_HOME`` and listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import flows  # noqa: F401

DEFAULT_PORT = 4200


def api_url(port: int = DEFAULT_PORT) -> str:
    return f"http://127.0.0.1:{port}/api"


def healthy(port: int = DEFAULT_PORT, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url(port)}/health", timeout=timeout) as resp:  # noqa: S310 (loopback)
            return resp.status == 200
    except OSError:
        return False


def _prefect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "prefect", *args], capture_output=True, text=True, env=os.environ.copy()
    )


def start(port: int = DEFAULT_PORT, wait: float = 60.0) -> str:
    """Start the server in the background (idempotent) and wait until /health answers."""
    if healthy(port):
        return api_url(port)
    proc = _prefect("server", "start", "--background", "--no-ui", "--host", "127.0.0.1", "--port", str(port))
    if proc.returncode != 0 and "already running" not in (proc.stdout + proc.stderr):
        raise RuntimeError(f"prefect server failed to start:\n{proc.stdout}{proc.stderr}")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if healthy(port):
            return api_url(port)
        time.sleep(0.5)
    raise RuntimeError(f"prefect server did not become healthy on port {port} within {wait:.0f} s")


def stop() -> None:
    proc = _prefect("server", "stop")
    if proc.returncode != 0 and "no server" not in (proc.stdout + proc.stderr).lower():
        raise RuntimeError(f"prefect server stop failed:\n{proc.stdout}{proc.stderr}")


def status(port: int = DEFAULT_PORT) -> dict[str, object]:
    return {"url": api_url(port), "healthy": healthy(port), "prefect_home": os.environ.get("PREFECT_HOME")}
