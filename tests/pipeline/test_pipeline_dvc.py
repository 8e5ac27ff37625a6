"""``dvc repro`` end to end on a tiny params file, in a temporary copy of the repository.

The copy gets its own git repository, a fake paper experiment (``calibflow/experiments/fake.py``) and a
params file with one subsampled dataset, so the real ``dvc.yaml`` runs every stage in about a minute. The
tests then check the outputs and metrics, that a second ``dvc repro`` runs nothing, that a param change
makes only the downstream stages stale, the ``dvc push``/``dvc pull`` round trip to a local remote, and
(last, since it breaks the copy) that a corrupted input makes its stage fail without overwriting the last
good output. The report's rendering in Chromium is tested in ``test_pipeline_tasks.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

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
STAGES = [
    "fetch",
    "validate@raw",
    "prepare",
    "validate@prepared",
    "train",
    "calibrate@platt",
    "calibrate@isotonic",
    "calibrate_segments",
    "validate@calibrated",
    "evaluate",
    "select",
    "reproduce@fake",
    "paper_page@fake",
    "report",
]


def _env() -> dict[str, str]:
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
        [sys.executable, "-m", "dvc", *args], cwd=root, env=_env(), capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"dvc {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=root, env=_env(), capture_output=True, text=True, check=True
    ).stdout


def _copy_repo(dst: Path) -> None:
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


def _make_repo(root: Path) -> str:
    _copy_repo(root)
    write_params(root, TINY)
    (root / "calibflow/experiments/fake.py").write_text(FAKE_EXPERIMENT)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tiny pipeline")
    first = dvc(root, "repro")
    return first.stdout + first.stderr


def test_dvc_pipeline_end_to_end(tmp_path):
    """One test, steps in order: they share one repository and the later steps change it.

    (One test rather than several sharing a fixture: pytest-xdist 3.8 with pytest 9 does not keep an
    ``xdist_group`` on one worker here, which would build the repository once per worker.)
    """
    root = tmp_path / "repo"
    root.mkdir()
    log = _make_repo(root)
    _repro_runs_every_stage_and_writes_outputs(root, log)
    _noop_repro_runs_nothing(root)
    _param_change_makes_only_downstream_stale(root)
    _push_pull_round_trip(root, tmp_path)
    _corrupted_input_fails_stage_and_keeps_last_good_output(root)


def _repro_runs_every_stage_and_writes_outputs(root: Path, log: str) -> None:
    for stage in STAGES:
        assert f"Running stage '{stage}'" in log, stage
    for rel in [
        "reports/index.html",
        "reports/summary.md",
        "reports/validation.json",
        "reports/reproductions/fake.json",
        "data/models/bank_marketing.json",
        "data/calibrated/platt/bank_marketing.json",
    ]:
        assert (root / rel).is_file(), rel
    assert (root / "reports/pages/paper-fake.html").is_file()
    index = (root / "reports/index.html").read_text()
    assert 'href="pages/paper-fake.html"' in index
    # The select stage's card is the answer the index opens with (before the detail tables).
    card = json.loads((root / "models/bank_marketing/card.json").read_text())
    assert index.index('data-card="bank_marketing"') < index.index('id="calibration"')
    assert f"<code>{card['method']}</code>" in index or "Keep your scores" in index
    assert "dvc.lock" in git(root, "diff", "--cached", "--name-only")  # core.autostage
    _metrics_show_lists_only_the_headline(root)
    _plots_show_renders_offline(root)


def _metrics_show_lists_only_the_headline(root: Path) -> None:
    """`dvc metrics show`: one file, a few numbers per dataset; the detail is not listed."""
    shown = json.loads(dvc(root, "metrics", "show", "--json").stdout)
    files = next(iter(shown.values()))["data"]
    assert list(files) == ["metrics/headline.json"]
    head = files["metrics/headline.json"]["data"]["bank_marketing"]  # the select stage's verdict
    assert head["method"] in ("platt", "isotonic", "identity") and head["verdict"] in ("keep", "calibrate")
    assert head["delta_best_low"] <= head["delta_best"] <= head["delta_best_high"] and len(head) <= 8
    table = dvc(root, "metrics", "show").stdout.splitlines()
    header = table[0].split()
    assert header[0] == "Path" and len(header) <= 9 and "-" not in table[1].split()  # no sparse grid
    # The detail stays readable on demand.
    detail = json.loads(dvc(root, "metrics", "show", "--json", "metrics/reproductions/fake.json").stdout)
    assert next(iter(detail.values()))["data"]["metrics/reproductions/fake.json"]["data"] == {
        "ece": 0.012,
        "seed": 11,
    }


def _plots_show_renders_offline(root: Path) -> None:
    """`dvc plots show`: the report's reliability SVGs as image plots; the page loads nothing remote."""
    dvc(root, "plots", "show", "-o", "dvc_plots")
    page = (root / "dvc_plots/index.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', page)
    assert srcs and all(src.endswith(".svg") for src in srcs), srcs
    for src in srcs:
        assert (root / "dvc_plots" / src).is_file() and (root / "dvc_plots" / src).stat().st_size > 1000
    assert "<script" not in page and "http://" not in page and "https://" not in page


def _noop_repro_runs_nothing(root: Path) -> None:
    out = dvc(root, "repro")
    assert "Running stage" not in out.stdout + out.stderr
    assert "up to date" in dvc(root, "status").stdout


def _param_change_makes_only_downstream_stale(root: Path) -> None:
    text = (root / "params.yaml").read_text()
    params = yaml.safe_load(text)
    params["evaluate"]["n_bootstrap"] = 30
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        stale = set(json.loads(dvc(root, "status", "--json").stdout))
        assert stale == {"evaluate", "select", "report"}  # the report shows all params; nothing upstream
        diff = dvc(root, "params", "diff", "--json").stdout
        change = json.loads(diff)["params.yaml"]["evaluate.n_bootstrap"]
        assert (change["old"], change["new"]) == (20, 30)
    finally:
        (root / "params.yaml").write_text(text)


def _push_pull_round_trip(root: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    dvc(root, "remote", "modify", "--local", "local", "url", str(remote))
    dvc(root, "push")
    model = root / "data/models/bank_marketing.json"
    want = model.read_bytes()
    shutil.rmtree(root / "data/models")
    shutil.rmtree(root / ".dvc/cache")
    status = dvc(root, "status").stdout
    assert "not in cache" in status and "data/models" in status
    dvc(root, "pull")
    assert model.read_bytes() == want
    assert "up to date" in dvc(root, "status").stdout


def _corrupted_input_fails_stage_and_keeps_last_good_output(root: Path) -> None:
    out = root / "data/calibrated/platt/bank_marketing.json"
    good = out.read_bytes()
    report = (root / "reports/index.html").read_bytes()
    pred = root / "data/predictions/bank_marketing.parquet"
    pred.unlink()  # may be a hardlink into the DVC cache: replace the file, never write through it
    pred.write_bytes(b"garbage, not parquet")
    # One stage, as the Prefect flow runs them (a full `dvc repro` would first rerun `train`, whose output
    # this file is, and so repair it).
    proc = dvc(root, "repro", "--single-item", "calibrate@platt", check=False)
    assert proc.returncode != 0
    assert "Parquet" in proc.stderr or "parquet" in proc.stderr
    assert out.read_bytes() == good
    assert (root / "reports/index.html").read_bytes() == report
    dvc(root, "checkout", "--force", "data/predictions")  # the cache still holds the good copy
    assert "Running stage" not in dvc(root, "repro").stdout
