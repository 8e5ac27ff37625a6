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


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """One wheel built and installed for the module: both tests use the installed wheel, neither changes it
    (building it is ~30 s of CPU, paid once)."""
    return _install_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_init_run_apply_in_an_empty_folder(tmp_path, venv):
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


def _readme_steps() -> list[str]:
    """The README's first bash block: the commands a new user types, comments dropped."""
    import re

    text = (REPO / "README.md").read_text()
    block = re.findall(r"```bash\n(.*?)```", text, re.S)[0]
    return [ln.split("#")[0].strip() for ln in block.splitlines() if ln.split("#")[0].strip()]


def _log(days: int, seed: int, n: int = 3000) -> pd.DataFrame:
    """The README's columns (clicked, p_model, day, country, device) over ``days`` days."""
    import numpy as np

    frame = scores_frame(n=n, days=days, seed=seed).rename(columns={"date": "day"})
    frame["device"] = np.random.default_rng(seed).choice(["ios", "android", "web"], size=len(frame))
    return frame


def test_readme_commands_on_a_seven_day_log_then_every_source_shape(tmp_path, venv):
    """Issue 42: the README's own commands on a 7-day log, with only the options `init` proposes; `dvc exp
    show` lists the run with no git step of the user's; then a CSV file, a folder and a glob of CSVs run."""
    env = _env(venv)
    py, cli = str(venv / "bin" / "python"), str(venv / "bin" / "calibflow")
    proj = tmp_path / "my-project"
    proj.mkdir()
    log = _log(7, seed=31)
    log.to_parquet(proj / "scores.parquet", index=False)
    _log(7, seed=32).drop(columns=["clicked"]).to_parquet(proj / "new.parquet", index=False)
    for step in _readme_steps():
        words = step.split()
        if words[:2] == ["pip", "install"]:
            continue  # the wheel is installed above
        if words[0] == "cd":  # `cd my-project && git init`
            _run(words[words.index("&&") + 1 :], proj, env)
        elif words[:2] == ["calibflow", "init"]:
            refused = subprocess.run([cli, *words[1:]], cwd=proj, env=env, capture_output=True, text=True)
            assert refused.returncode == 1, refused.stdout + refused.stderr
            fix = refused.stderr.strip().splitlines()[-1]
            assert fix.startswith("fix: add --test-last") and fix.endswith("to this command"), fix
            assert sorted(p.name for p in proj.iterdir()) == [".git", "new.parquet", "scores.parquet"]
            proposed = fix.removeprefix("fix: add ").removesuffix(" to this command").split()
            out = _run([cli, *words[1:], *proposed], proj, env)
            assert "committed the project files" in out, out
        elif words[0] == "calibflow":
            out = _run([cli, *words[1:]], proj, env)
        elif words[:3] == ["dvc", "exp", "show"]:  # right after the run, no commit of the user's
            shown = _run([py, "-m", "dvc", "exp", "show", "--csv"], proj, env)
            rows = list(csv.DictReader(io.StringIO(shown)))
            work = next(r for r in rows if r["rev"] == "workspace")
            assert work["ads.verdict"] in ("calibrate", "keep"), work
            assert work["sources.ads.split.test_last"] == proposed[1], work
        else:
            raise AssertionError(f"a README step this test does not know: {step}")
    assert (proj / "scored.parquet").is_file() and (proj / "models/ads/calibrator.json").is_file()
    tracked = _run(["git", "ls-files"], proj, env).split()
    assert "scores.parquet" not in tracked and "params.yaml" in tracked

    # Each source shape the README names, beside the Parquet file: a CSV file, a folder, a glob of CSVs.
    log.to_csv(proj / "scores.csv", index=False)
    (proj / "daily").mkdir()
    (proj / "daily_csv").mkdir()
    for day, part in log.groupby("day"):
        part.to_parquet(proj / "daily" / f"{day}.parquet", index=False)
        part.to_csv(proj / "daily_csv" / f"{day}.csv", index=False)
    (proj / "daily_csv" / "README.txt").write_text("not data: the glob leaves it out")
    split = ["--time", "day", *proposed]
    for name, data in (("csvfile", "scores.csv"), ("folder", "daily"), ("globbed", "daily_csv/*.csv")):
        out = _run([cli, "init", "--data", data, "--label", "clicked", "--score", "p_model", "--name", name,
                    *split], proj, env)
        assert f"{len(log):,} rows" in out, out
    decl = yaml.safe_load((proj / "params.yaml").read_text())["sources"]
    assert decl["globbed"]["path"] == "daily_csv" and decl["globbed"]["glob"] == "*.csv"
    out = _run([cli, "run", "-q"], proj, env)
    lock = yaml.safe_load((proj / "dvc.lock").read_text())["stages"]
    for name in ("ads", "csvfile", "folder", "globbed"):
        assert f"sources@{name}" in lock
        card = json.loads((proj / f"models/{name}/card.json").read_text())
        assert card["data"]["split"]["rows"], card["data"]
    # the same rows in every shape: the same test log loss before calibration
    base = {n: json.loads((proj / f"models/{n}/card.json").read_text())["metrics"]["log_loss"]["uncalibrated"]
            for n in ("ads", "csvfile", "folder", "globbed")}
    assert max(base.values()) - min(base.values()) < 1e-9, base
