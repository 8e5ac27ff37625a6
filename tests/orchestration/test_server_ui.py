"""`calibflow server start` serves the Prefect UI, checked in headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from helpers.flow_fixtures import free_port

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--window-size=1400,900",
    "--virtual-time-budget=15000",
]


@pytest.mark.server
def test_server_start_serves_a_ui_that_reaches_its_api(tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium, "headless Chromium is needed (apt-get install chromium; .ci/run installs it)"
    port = free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home")}
    env.pop("PREFECT_API_URL", None)
    start = subprocess.run(
        [sys.executable, "-m", "calibflow.cli", "server", "start", "--port", str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    try:
        assert start.returncode == 0, start.stderr
        assert f"UI at http://127.0.0.1:{port}" in start.stdout
        dom = subprocess.run(
            [chromium, *CHROMIUM_FLAGS, "--dump-dom", f"http://127.0.0.1:{port}/dashboard"],
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        # The app rendered its navigation, and it talks to this server's API (not the default port 4200).
        assert "Deployments" in dom and "Concurrency" in dom, dom[:500]
        assert "Can't connect" not in dom
    finally:
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "stop"], env=env, capture_output=True, timeout=60
        )
