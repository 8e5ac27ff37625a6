"""Every entry point that can start a stage checks params first, and no stage command reaches a shell.

The issue-30 probe: a source named ``a; touch X; true`` in params.yaml, then `calibflow repro`, `calibflow
validate` or `make repro` (which ran plain `dvc repro`, no schema): DVC's shell ran ``touch X``. Here each
entry point refuses in one line and X is never created; and with the schema bypassed (the flow's own stage
runner called directly), DVC runs the command through calibflow's no-shell launcher, so X is still not made.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable


def _project(root: Path, source: str) -> Path:
    """A real git + DVC repository with calibflow's dvc.yaml and a hostile source name in params.yaml."""
    root.mkdir(parents=True, exist_ok=True)
    # calibflow's own dvc.yaml without its code deps: a calibflow/ folder in the project would shadow the
    # installed package for every `python -m` run from the project
    pipeline = yaml.safe_load((REPO / "dvc.yaml").read_text())
    for stage in pipeline["stages"].values():
        body = stage.get("do", stage)
        body["deps"] = [d for d in body.get("deps", []) if not str(d).startswith("calibflow/")]
    (root / "dvc.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    (root / "data.csv").write_text("p,y\n0.2,0\n0.7,1\n")
    from calibflow.pipeline.params_schema import with_paper_profiles

    params = with_paper_profiles(yaml.safe_load((REPO / "params.yaml").read_text()), REPO / "params.yaml")
    decl = {"path": "data.csv", "label": "y", "score": "p", "score_kind": "probability"}
    params["sources"] = {source: decl}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run = lambda *a: subprocess.run(a, cwd=root, check=True, capture_output=True)  # noqa: E731
    run("git", "init", "-q")
    run(PY, "-m", "dvc", "init", "-q")
    return root


def _env(root: Path) -> dict[str, str]:
    env = {**os.environ, "CALIBFLOW_ROOT": str(root), "PYTHONPATH": str(REPO), "DVC_NO_ANALYTICS": "1"}
    env.pop("CALIBFLOW_DEBUG", None)
    return env


@pytest.mark.parametrize("command", [["repro"], ["repro", "sources"], ["validate"]])
def test_calibflow_repro_and_validate_check_params_first(tmp_path, command):
    marker = tmp_path / "X"
    root = _project(tmp_path / "proj", f"a; touch {marker}; true")
    proc = subprocess.run([PY, "-m", "calibflow.cli", *command], cwd=root, env=_env(root),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a source name" in lines[0], proc.stderr
    assert not marker.exists()


def test_make_repro_checks_params_first(tmp_path):
    marker = tmp_path / "X"
    root = _project(tmp_path / "proj", f"a; touch {marker}; true")
    venv = Path(PY).parent.parent
    make = ["make", "-f", str(REPO / "Makefile"), f"VENV={venv}", "-o", f"{venv}/.run-installed", "repro"]
    proc = subprocess.run(make, cwd=root, env=_env(root), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "is not a source name" in proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_dvc_stage_commands_run_without_a_shell_even_past_the_schema(tmp_path):
    """The flow's serial stage runner (`dvc repro --single-item`) with the schema bypassed: DVC hands the
    command to calibflow's launcher, so `;` is an argument of the stage, not a second command."""
    from calibflow.flows.dvc_stages import StageFailed, reproduce_stage


    marker = tmp_path / "X"
    root = _project(tmp_path / "proj", f"a; touch {marker}; true")
    with pytest.raises(StageFailed) as err:
        reproduce_stage(root, f"sources@a; touch {marker}; true")
    assert not marker.exists()
    said = " ".join(err.value.summary) + str(err.value)
    assert "unrecognized arguments" in said, said


def test_the_launcher_runs_clean_commands_and_keeps_shell_syntax_inert(tmp_path):
    from calibflow.flows.dvc_stages import stage_env

    marker = tmp_path / "X"
    shell = stage_env()["SHELL"]
    code = "import sys; open(sys.argv[1], 'w').write(repr(sys.argv[2:]))"
    out = tmp_path / "argv.txt"
    cmd = f"python -c \"{code}\" {out} 'platt; touch {marker}' ; touch {marker} $(touch {marker})"
    proc = subprocess.run([shell, "-c", cmd], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists()
    want = [f"platt; touch {marker}", ";", "touch", str(marker), "$(touch", f"{marker})"]
    assert out.read_text() == repr(want)


def test_serve_and_trigger_cannot_turn_the_check_off(tmp_path):
    """`serve` checks params whatever --parameters says; a trigger may not pass check_params: false.
    Both refuse in one line before any server starts."""
    marker = tmp_path / "X"
    root = _project(tmp_path / "proj", f"a; touch {marker}; true")
    env = {**_env(root), "PREFECT_HOME": str(tmp_path / "home")}
    off = '{"check_params": false}'
    cases = [
        (["serve", "--parameters", off, "--port", "1"], "is not a source name"),
        (["trigger", "--parameters", off, "--port", "1"], "check_params cannot be turned off"),
    ]
    for args, message in cases:
        proc = subprocess.run([PY, "-m", "calibflow.cli", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and message in lines[0], proc.stderr
    home = tmp_path / "home"
    assert not marker.exists() and (not home.exists() or not any(home.iterdir()))  # no server started
