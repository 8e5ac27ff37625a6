"""The run's warm stage host (``calibflow.flows.stage_host``): a stage it runs is the same process a direct
``python -m`` would be (arguments, folder, environment, streams, exit status, Ctrl-C), its outputs are the
same bytes, and no stage outlives its launcher or its host.

Real parts: real host processes on real Unix sockets, the real no-shell launcher DVC runs, a real calibflow
stage (``fingerprint``) in a project made by ``calibflow init``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from helpers.waiting import wait_until

from calibflow.flows import dvc_stages, stage_host

TESTS = Path(__file__).resolve().parents[1]


def _host(tmp_path: Path, prefix: str | None = "helpers.") -> dvc_stages.StageHost:
    """The host a run starts (``prefix`` None: calibflow's stages), or one for the tests' own stage module."""
    env = {**dvc_stages.stage_env(), "PYTHONPATH": str(TESTS)}
    env.pop(stage_host.OFF_ENV, None)
    if prefix is None:
        host = dvc_stages.StageHost.start(tmp_path, env)
        assert host is not None
    else:
        folder = tempfile.mkdtemp(prefix="calibflow-host-test-")
        argv = [sys.executable, "-m", "calibflow.flows.stage_host", f"{folder}/host", "--prefix", prefix]
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, start_new_session=True)
        host = dvc_stages.StageHost(proc, folder)
    wait_until(lambda: os.path.exists(host.path), timeout=30, what="the host's socket")
    return host


def _launch(host: dvc_stages.StageHost | None, cmd: str, cwd: Path, **env: str) -> subprocess.Popen[str]:
    """The no-shell launcher as DVC runs it: ``$SHELL -c CMD``."""
    full = {**dvc_stages.stage_env(), "PYTHONPATH": str(TESTS), **env}
    full.pop(stage_host.ENV, None)
    if host is not None:
        full[stage_host.ENV] = host.path
    argv = [sys.executable, "-m", "calibflow.flows.noshell", "-c", cmd]
    return subprocess.Popen(
        argv, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def test_a_hosted_stage_is_the_command_a_direct_run_would_be(tmp_path):
    host = _host(tmp_path)
    try:
        for status in ("0", "3"):
            cmd = f"python -m helpers.hosted_stage {status} 'two words'"
            hosted = _launch(host, cmd, tmp_path, HOSTED_STAGE_VALUE="from the launcher")
            out, err = hosted.communicate(timeout=60)
            direct = _launch(None, cmd, tmp_path, HOSTED_STAGE_VALUE="from the launcher")
            d_out, d_err = direct.communicate(timeout=60)
            assert hosted.returncode == direct.returncode == int(status)
            assert (
                f"parent {host.proc.pid} cwd {tmp_path}" in out
            )  # forked by the host, in the launcher's folder
            assert f"parent {direct.pid}" not in out
            tail = "env from the launcher argv ['" + status + "', 'two words']"
            assert tail in out and tail in d_out
            assert err == d_err == "to stderr\n"
    finally:
        host.close()
    assert not os.path.exists(host.path) and not os.path.exists(host.folder)


def test_ctrl_c_reaches_the_hosted_stage_and_a_killed_launcher_takes_it_along(tmp_path):
    host = _host(tmp_path)
    try:
        for sig in (signal.SIGINT, signal.SIGKILL):
            launcher = _launch(host, "python -m helpers.hosted_stage wait", tmp_path)
            wait_until(lambda: len(_children(host.proc.pid)) == 1, timeout=30, what="the hosted stage")
            (stage,) = _children(host.proc.pid)
            time.sleep(0.5)  # past the stage's first lines, into its wait
            launcher.send_signal(sig)
            out, _ = launcher.communicate(timeout=30)
            wait_until(lambda: _children(host.proc.pid) == [], timeout=30, what="the stage's end")
            assert not Path(f"/proc/{stage}").exists()
            if sig == signal.SIGINT:
                assert launcher.returncode == 130 and "interrupted" in out
    finally:
        host.close()


def test_the_host_ends_with_its_parent_and_takes_its_stages_along(tmp_path):
    host = _host(tmp_path)
    launcher = _launch(host, "python -m helpers.hosted_stage wait", tmp_path)
    wait_until(lambda: len(_children(host.proc.pid)) == 1, timeout=30, what="the hosted stage")
    (stage,) = _children(host.proc.pid)
    host.proc.stdin.close()  # what the parent's death does to the pipe
    host.proc.wait(timeout=30)
    wait_until(
        lambda: not Path(f"/proc/{stage}").exists() or _zombie(stage), timeout=30, what="the stage's end"
    )
    launcher.communicate(timeout=30)
    assert launcher.returncode != 0  # a stage cut short is a failed stage, never a silent success
    assert not os.path.exists(host.path)
    host.close()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True


def test_only_this_interpreters_calibflow_stages_go_to_the_host():
    py = sys.executable
    assert stage_host.stage_module([py, "-m", "calibflow.pipeline.evaluate"]) == "calibflow.pipeline.evaluate"
    assert (
        stage_host.stage_module([py, "-m", "calibflow.pipeline.validate", "raw"])
        == "calibflow.pipeline.validate"
    )
    for argv in (
        ["/usr/bin/python3", "-m", "calibflow.pipeline.evaluate"],  # another interpreter: its own modules
        [py, "-m", "calibflow.pipeline._common"],
        [py, "-m", "calibflow.pipeline.x.y"],
        [py, "-c", "import calibflow.pipeline.evaluate"],
        [py, "-m", "calibflow.flows.noshell"],
        [py, "-m"],
    ):
        assert stage_host.stage_module(argv) is None, argv


def test_a_command_the_host_refuses_runs_directly(tmp_path):
    host = _host(tmp_path, prefix=None)  # calibflow's stages only
    try:
        code = (
            "import sys; from calibflow.flows import stage_host as h;"
            f"print(h.delegate({host.path!r}, [sys.executable, '-m', 'helpers.hosted_stage', '0']))"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
        assert out.strip() == "None"
        launched = _launch(host, "python -m helpers.hosted_stage 4", tmp_path)
        out, _ = launched.communicate(timeout=60)
        assert launched.returncode == 4 and f"parent {host.proc.pid}" not in out
    finally:
        host.close()


def _project(folder, seed: int) -> None:
    """A git folder with a 3,000-row score source ``ads`` (``calibflow init``)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 0.2, 3000)
    pd.DataFrame({"p": p, "y": (rng.random(3000) < p).astype(int)}).to_parquet(folder / "s.parquet")
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    init = [sys.executable, "-m", "calibflow.cli", "init", "--data", "s.parquet", "--label", "y"]
    subprocess.run([*init, "--score", "p", "--name", "ads"], cwd=folder, check=True, capture_output=True)


@pytest.mark.parametrize("args", [["ads"], ["nosuchsource"]])
def test_a_real_stage_writes_the_same_bytes_hosted_and_direct(tmp_path, args):
    _project(tmp_path, seed=0)
    host = _host(tmp_path, prefix=None)
    out = tmp_path / "data/sources/ads/fingerprint.json"
    try:
        results = []
        for h in (host, None):
            out.unlink(missing_ok=True)
            run = _launch(h, "python -m calibflow.pipeline.fingerprint " + " ".join(args), tmp_path)
            stdout, stderr = run.communicate(timeout=120)
            results.append((run.returncode, stdout, stderr, out.read_bytes() if out.exists() else None))
        assert results[0] == results[1]
        assert (results[0][0] == 0) == (args == ["ads"])
    finally:
        host.close()


def test_a_hosted_validation_writes_the_same_bytes_and_the_host_keeps_only_what_stages_use(tmp_path):
    """Great Expectations imported in the host without its PySpark and SQLAlchemy back ends, numba's target
    built there once: a real validation writes the same bytes hosted as run directly (which imports both)."""
    _project(tmp_path, seed=1)
    fingerprint = [sys.executable, "-m", "calibflow.pipeline.fingerprint", "ads"]
    subprocess.run(fingerprint, cwd=tmp_path, check=True, capture_output=True, env=dvc_stages.stage_env())
    host = _host(tmp_path, prefix=None)
    out = tmp_path / "reports/validation/raw.json"
    try:
        results = []
        for h in (host, None):
            out.unlink(missing_ok=True)
            run = _launch(h, "python -m calibflow.pipeline.validate raw", tmp_path)
            stdout, stderr = run.communicate(timeout=180)
            results.append((run.returncode, stdout, stderr, out.read_bytes() if out.exists() else None))
        assert results[0][0] == 0, results[0][2][-2000:]
        assert results[0][3] is not None and results[0][3] == results[1][3]  # the report, byte for byte
        assert results[0][:2] == results[1][:2]
        # the messages, less what the direct run's PySpark import warns and GX's random temporary folder
        assert _said(results[0][2]) == _said(results[1][2]) and "validation raw: passed" in results[0][2]
        assert "PySpark" not in results[0][2]
    finally:
        host.close()


def _said(stderr: str) -> list[str]:
    noise = ("PySpark", "require_minimum_pandas_version", "ephemeral docs site")
    return [line for line in stderr.splitlines() if not any(n in line for n in noise)]


_WARM = """
import sys, threading
from calibflow.flows import stage_host
for step in ("validate", "calibrate"):
    stage_host._warm("calibflow.pipeline." + step)
print("great_expectations" in sys.modules, "pyspark" in sys.modules, "sqlalchemy" in sys.modules)
from numba.core.registry import cpu_target
print(sorted(stage_host._WARMED), "numba.np.arraymath" in sys.modules, threading.active_count())
import pyspark, sqlalchemy  # importable again for the stages
print(sys.modules["pyspark"] is not None, sys.modules["sqlalchemy"] is not None)
"""


def test_the_host_hides_only_gx_s_unused_back_ends_and_warms_numba_without_a_thread():
    proc = subprocess.run([sys.executable, "-c", _WARM], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.split("\n")
    assert lines[0] == "True False False"  # GX imported, its Spark and SQL back ends not
    # numba's lowering registries in place before any fork; still one thread, so the host may fork
    assert lines[1] == "['numba', 'pyarrow.parquet'] True 1"
    assert lines[2] == "True True"
