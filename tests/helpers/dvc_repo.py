"""A temporary copy of this repository as a real git + DVC project, with a tiny params file and a fake
paper experiment, so the real ``dvc.yaml`` runs every stage in about a minute."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "seed": 11,
    "datasets": {"names": ["bank_marketing"], "targets": {}, "max_rows": 1500},
    "prepare": {
        "fractions": {"train": 0.5, "calib": 0.25, "test": 0.25},
        "stratify": True,
        "balance_tolerance": 0.03,
    },
    "model": {"n_estimators": 10, "max_depth": 3, "learning_rate": 0.3, "n_jobs": 1},
    "replicas": {"n": 0, "scheme": "seeds"},
    "calibrate": {"methods": ["platt", "isotonic"], "input": "logit", "options": {}},
    "evaluate": {"n_bins": 10, "n_bootstrap": 20, "ci_level": 0.95, "selection_alpha": 0.1, "hist_bins": 20},
    "sources": {},
    "validate": {"min_class_count": 10},
    "select": {"rule": "auto"},
    "scale": {"row_threshold": 5_000_000},
    "papers": ["fake"],
    "reproduce": {"profile": "quick", "fake": {"quick": {"n": 2}, "full": {"n": 50}}},
}
FAKE_EXPERIMENT = '''"""A stand-in paper experiment for the pipeline test."""

import matplotlib.pyplot as plt

from calibflow.plots import to_svg
from calibflow.results import Figure, Reproduction, Table


def run(config, seed):
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot(range(config["n"]), range(config["n"]))
    table = Table("Table 1", ["method", "ours", "paper"], [["platt", 0.012, 0.011]])
    return Reproduction(key="fake", paper="Fake et al. (2026)", profile="quick", tables=[table],
                        figures=[Figure("identity", to_svg(fig))], metrics={"ece": 0.012, "seed": seed})
'''
def dvc_env() -> dict[str, str]:
    env = dict(os.environ)
    # Stage commands run `python -m calibflow.pipeline...` from PATH: this interpreter first, no PYTHONPATH.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    for key in ("PREFECT_API_URL", "CALIBFLOW_DEBUG", "CALIBFLOW_RUN_LOG"):  # set by a test run before
        env.pop(key, None)
    env.update(DVC_NO_ANALYTICS="1", GX_ANALYTICS_ENABLED="false", PYTHONHASHSEED="0")
    env.update(
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@x.invalid",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@x.invalid",
    )
    return env


def dvc(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=root, env=dvc_env(), capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"dvc {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, env=dvc_env(), capture_output=True, text=True, check=True
    ).stdout


def copy_repo(dst: Path) -> None:
    """The repository's tracked and new (not ignored) files, without its DVC cache, outputs or git history."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if (
            not src.is_file()
            or rel.startswith(("metrics/", "plots/"))
            or rel in ("dvc.lock", "reports/summary.md")
        ):
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)


def write_params(root: Path, params: dict) -> None:
    """``params`` as a project states them: params.yaml, and the papers' profile blocks in
    params-papers.yaml, where the reproduce stages track them (dvc.yaml)."""
    from calibflow.pipeline.params_schema import PROFILES_FILE

    rep = dict(params.get("reproduce") or {})
    main = {**params, "reproduce": {k: v for k, v in rep.items() if k == "profile"}}
    (root / "params.yaml").write_text(yaml.safe_dump(main, sort_keys=False))
    blocks = {k: v for k, v in rep.items() if k != "profile"}
    (root / PROFILES_FILE).write_text(yaml.safe_dump({"reproduce": blocks}, sort_keys=False))


def make_repo(root: Path) -> str:
    copy_repo(root)
    write_params(root, TINY)
    (root / "calibflow/experiments/fake.py").write_text(FAKE_EXPERIMENT)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tiny pipeline")
    first = dvc(root, "repro")
    return first.stdout + first.stderr


def tiny_repo(dst: Path, tmp_path_factory) -> str:
    """:func:`make_repo`'s repository in ``dst``, built once per test session and copied: the pipeline tests
    that start from it (test_pipeline_dvc, test_project) were each running the same first ``dvc repro``.

    Under xdist the build lives beside the workers' own temporary folders (their common parent, which is
    this session's), behind a file lock: the first worker to ask builds it, any other waits and copies.
    Returns the first ``dvc repro``'s output. The copy is a plain copy (git history, DVC cache and lock,
    modification times): DVC compares content hashes, so the copy is up to date as the original is."""
    import fcntl

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if worker else base
    built, log_file = shared / "tiny-repo", shared / "tiny-repo.log"
    with open(shared / "tiny-repo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not log_file.exists():
            if built.exists():  # a build that failed half-way
                shutil.rmtree(built)
            built.mkdir()
            log_file.write_text(make_repo(built))
    shutil.copytree(built, dst, symlinks=True, dirs_exist_ok=True)
    return log_file.read_text()
