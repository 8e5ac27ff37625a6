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
import re
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.dvc_repo import dvc, git, tiny_repo

pytestmark = pytest.mark.slow

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


def test_dvc_pipeline_end_to_end(tmp_path, tmp_path_factory):
    """One test, steps in order: they share one repository and the later steps change it.

    (One test rather than several sharing a fixture: pytest-xdist 3.8 with pytest 9 does not keep an
    ``xdist_group`` on one worker here, which would build the repository once per worker.)
    """
    root = tmp_path / "repo"
    root.mkdir()
    log = tiny_repo(root, tmp_path_factory)  # built once per session: test_project starts from it too
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
