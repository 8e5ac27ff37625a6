"""Mistakes a user makes get one or two lines on stderr, before any server or stage starts.

Each case runs the real ``calibflow`` CLI in a subprocess with a fresh ``PREFECT_HOME``; that folder
staying empty (no database, no temporary-server pidfile) is the proof that no server started.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CALIBFLOW = [sys.executable, "-m", "calibflow.cli"]


def calibflow(tmp_path: Path, *args: str, debug: bool = False) -> tuple[subprocess.CompletedProcess, float]:
    home = tmp_path / "prefect-home"
    env = {**os.environ, "PREFECT_HOME": str(home), "CALIBFLOW_ROOT": str(ROOT)}
    env.pop("PREFECT_API_URL", None)
    env.pop("CALIBFLOW_DEBUG", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [*CALIBFLOW, *(["--debug"] if debug else []), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    secs = time.monotonic() - t0
    assert not home.exists() or not any(home.iterdir()), f"a server started: {list(home.iterdir())}"
    return proc, secs


def params_file(tmp_path: Path, edit) -> str:
    from calibflow.pipeline.params_schema import with_paper_profiles

    p = with_paper_profiles(yaml.safe_load((ROOT / "params.yaml").read_text()), ROOT / "params.yaml")
    edit(p)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(p))
    return str(path)


def one_or_two_lines(proc: subprocess.CompletedProcess) -> list[str]:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert 1 <= len(lines) <= 2 and "Traceback" not in proc.stderr, proc.stderr
    return lines


def test_typo_stage_suggests_the_real_one(tmp_path):
    proc, secs = calibflow(tmp_path, "run", "calibrate@plat")
    (line,) = one_or_two_lines(proc)
    assert line == "error: unknown stage 'calibrate@plat' in dvc.yaml (did you mean calibrate@platt?)"
    assert secs < 60  # on a loaded 2-core machine; the point is: no server start, no stage


def test_missing_params_file(tmp_path):
    proc, _ = calibflow(tmp_path, "run", "--params-file", str(tmp_path / "nope.yaml"))
    (line,) = one_or_two_lines(proc)
    assert "params file not found" in line and "nope.yaml" in line


def test_wrong_value_type_names_the_key(tmp_path):
    f = params_file(tmp_path, lambda p: p["evaluate"].__setitem__("n_bootstrap", "lots"))
    proc, _ = calibflow(tmp_path, "run", "--params-file", f)
    (line,) = one_or_two_lines(proc)
    assert "evaluate.n_bootstrap" in line and "'lots'" in line


def test_unknown_dataset_name(tmp_path):
    f = params_file(tmp_path, lambda p: p["datasets"].__setitem__("names", ["adult", "bank_marketin"]))
    proc, _ = calibflow(tmp_path, "run", "--params-file", f)
    (line,) = one_or_two_lines(proc)
    assert "datasets.names" in line and "did you mean 'bank_marketing'?" in line


def test_typo_key(tmp_path):
    f = params_file(tmp_path, lambda p: p["evaluate"].__setitem__("n_bin", 5))
    proc, _ = calibflow(tmp_path, "run", "--params-file", f)
    (line,) = one_or_two_lines(proc)
    assert line.endswith("params: evaluate.n_bin: unknown key (did you mean n_bins?)")


def test_bad_cron(tmp_path):
    proc, _ = calibflow(tmp_path, "serve", "--cron", "61 25 * * *", "--port", "1")
    (line,) = one_or_two_lines(proc)
    assert line.startswith("error: invalid cron expression '61 25 * * *'") and "'0 2 * * *'" in line


def test_debug_shows_the_traceback(tmp_path):
    proc, _ = calibflow(tmp_path, "run", "calibrate@plat", debug=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "calibrate@platt" in proc.stderr


def test_injection_through_a_method_name_runs_nothing(tmp_path):
    """A hostile probe: a method 'platt; touch X', then `calibflow run 'calibrate@platt; touch X'`."""
    marker = tmp_path / "X"
    name = f"platt; touch {marker}"
    f = params_file(tmp_path, lambda p: p["calibrate"]["methods"].append(name))
    proc, _ = calibflow(tmp_path, "run", "--params-file", f, f"calibrate@{name}")
    (line,) = one_or_two_lines(proc)
    assert "calibrate.methods" in line and "is not a method name" in line
    assert not marker.exists()


def test_stage_commands_run_without_a_shell(tmp_path):
    """Where calibflow runs a stage command itself (Dask path), shell syntax is inert argv text."""
    from calibflow.flows.dvc_stages import StageFailed, run_stage_command

    marker = tmp_path / "X"
    cmd = f"python -c 'import sys; print(sys.argv[1:])' 'platt; touch {marker}' ; touch {marker}"
    run = run_stage_command(tmp_path, "probe", cmd)
    assert not marker.exists()
    assert f"'platt; touch {marker}', ';', 'touch'" in run.log_tail
    with pytest.raises(StageFailed):
        run_stage_command(tmp_path, "probe", f"false; touch {marker}")  # 'false;' is no program
    assert not marker.exists()


def test_busy_checkout_is_one_line_naming_the_holder(tmp_path):
    hold = (
        "import sys, time\nfrom calibflow.flows.checkout_lock import checkout_lock\n"
        "with checkout_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(ROOT)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        proc, _ = calibflow(tmp_path, "run")
        (line,) = one_or_two_lines(proc)
        assert f"another calibflow run (pid {holder.pid}" in line and "--wait" in line
    finally:
        holder.kill()
        holder.wait()


def test_trigger_without_a_server_says_what_to_start(tmp_path):
    from helpers.flow_fixtures import free_port

    proc, _ = calibflow(tmp_path, "trigger", "--port", str(free_port()))
    (line,) = one_or_two_lines(proc)
    assert "no Prefect server at" in line and "calibflow serve" in line
