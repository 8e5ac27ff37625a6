"""calibflow as a tool you install: a wheel, a virtualenv outside the repository, a project anywhere.

Exactly what a new user does: build the wheel (``pip wheel --no-deps``), install it into a fresh
virtualenv, then in an empty folder ``git init``, ``calibflow init`` on a generated Parquet file,
``calibflow run``, ``calibflow apply``. The new environment sees the test interpreter's site-packages
through a ``.pth`` line (numpy, dvc, prefect... are not downloaded again), but calibflow itself must come
from the wheel: the editable install's finder is not loaded by a plain path line, and the test asserts
``calibflow.__file__`` lies inside the new environment.

Checks: only the source's stages run (no dataset fetched, no paper reproduced), the report and the headline
metrics hold only that source, ``dvc exp show`` has at most 40 columns, and the applied probabilities on
held-out rows are calibrated (ECE under 0.02, sum p / sum y near 1) where the raw scores are not (ECE
above 0.05: the control).
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers.dvc_repo import REPO
from helpers.source_data import scores_frame

from calibflow import metrics

pytestmark = pytest.mark.slow

# a score source: no fetch (nothing to download) and no train (no model to fit), calibflow.pipeline.dag
STAGES = {
    "sources@ads",
    "validate@raw",
    "prepare",
    "validate@prepared",
    "calibrate_segments",
    "calibrate",
    "validate@calibrated",
    "evaluate",
    "select",
    "report",
}


def _env(venv: Path) -> dict[str, str]:
    drop = ("PYTHONPATH", "CALIBFLOW_ROOT", "PREFECT_HOME", "PREFECT_API_URL", "CALIBFLOW_DEBUG",
            "CALIBFLOW_RUN_LOG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env.update(DVC_NO_ANALYTICS="1", GX_ANALYTICS_ENABLED="false", PYTHONHASHSEED="0")
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@x.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@x.invalid",
    )
    return env


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def _source_tree(dst: Path) -> Path:
    """The repository's tracked and new files (what a fresh clone has), so the build writes nothing here."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file() and not rel.startswith(("data/", "reports/", "metrics/", "plots/")):
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
    return dst


def _install_wheel(tmp: Path) -> Path:
    src = _source_tree(tmp / "clone")
    wheels = tmp / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            ".",
        ],
        src,
        dict(os.environ),
    )
    (wheel,) = wheels.glob("calibflow-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    # The dependencies from this interpreter's environment: a plain path line, so its editable calibflow
    # finder (a .pth hook) is not loaded and the wheel's calibflow comes first.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    py = str(venv / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp, _env(venv))
    return venv


def test_wheel_init_run_apply_in_an_empty_folder(tmp_path):
    venv = _install_wheel(tmp_path)
    env = _env(venv)
    py = str(venv / "bin" / "python")
    where = _run([py, "-c", "import calibflow; print(calibflow.__file__)"], tmp_path, env).strip()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where

    proj = tmp_path / "myproject"
    proj.mkdir()
    frame = scores_frame(n=6000, days=30, seed=21)
    frame.to_parquet(proj / "scores.parquet", index=False)
    cli = str(venv / "bin" / "calibflow")
    _run(["git", "init", "-q"], proj, env)
    out = _run(
        [
            cli,
            "init",
            "--data",
            "scores.parquet",
            "--label",
            "clicked",
            "--score",
            "p_model",
            "--time",
            "date",
            "--segments",
            "country",
            "--name",
            "ads",
        ],
        proj,
        env,
    )
    assert "new calibflow project" in out and "6,000 rows" in out
    out = _run([cli, "run", "-q"], proj, env)
    assert f"{len(STAGES)} stage(s) ran" in out, out

    lock = yaml.safe_load((proj / "dvc.lock").read_text())
    assert set(lock["stages"]) == STAGES
    assert not (proj / "data/raw").exists()  # no dataset fetched: no fetch stage at all
    assert sorted(p.name for p in (proj / "models").iterdir()) == ["ads"]
    assert list(json.loads((proj / "metrics/headline.json").read_text())) == ["ads"]
    html = (proj / "reports/index.html").read_text()
    assert "ads" in html
    assert "No data checksums recorded" not in html  # the source's fingerprint, without a fetch stage
    # benchmark datasets or paper pages (the glossary may cite a paper: a reference, not a page)
    leaked = ("bank_marketing", "hillstrom", "Coat", "paper-calem", "paper-ranking", "paper-vad")
    assert not any(d in html for d in leaked), "benchmark in report"

    _run(["git", "add", "-A"], proj, env)  # what the user does next; exp show lists commits
    _run(["git", "commit", "-qm", "calibflow project"], proj, env)
    shown = _run([py, "-m", "dvc", "exp", "show", "--csv"], proj, env)
    header = next(csv.reader(io.StringIO(shown)))
    assert "sources.ads.path" in header and len(header) <= 40, (len(header), header)

    held_out = scores_frame(n=20000, days=30, seed=22)
    held_out.drop(columns=["clicked"]).to_parquet(proj / "new.parquet", index=False)
    _run(
        [
            cli,
            "apply",
            "--calibrator",
            "models/ads/calibrator.json",
            "--input",
            "new.parquet",
            "--score",
            "p_model",
            "--output",
            "scored.parquet",
        ],
        proj,
        env,
    )
    scored = pd.read_parquet(proj / "scored.parquet")
    y = held_out["clicked"].to_numpy()
    p = scored["calibrated"].to_numpy()
    raw, cal = metrics.ece(y, held_out["p_model"].to_numpy()), metrics.ece(y, p)
    assert raw > 0.05, raw  # the control: the model's own scores are overconfident
    assert cal < 0.02, (cal, raw)  # the true probabilities score about 0.0075 here
    assert abs(p.sum() / y.sum() - 1.0) < 0.05, p.sum() / y.sum()
