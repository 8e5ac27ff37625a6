"""Projects of your own (``calibflow init`` in any folder) and true stage dependencies.

- Every stage of the benchmark's dvc.yaml depends on each calibflow file it runs (its import closure,
  calibflow.flows.stage_deps) and on no code folder; the checker catches a dep removed from a copy.
- ``calibflow init`` in an empty folder makes a project: params.yaml that passes the schema with no built-in
  dataset or paper, dvc.yaml as shipped, git and dvc initialised, the code stamp; a second ``--name`` adds a
  source and changes nothing else; a source ``init`` refuses leaves the empty folder empty.
- In the benchmark project, an evaluate-only code change reruns evaluate (and what reads its outputs) only,
  and numba's cache files in ``__pycache__`` change no stage.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from helpers.dvc_repo import REPO, dvc, tiny_repo
from helpers.source_data import scores_frame, write
from typer.testing import CliRunner

from calibflow.cli.main import app
from calibflow.flows import project, stage_deps
from calibflow.pipeline.params_schema import load_and_validate


def test_benchmark_stages_depend_on_every_module_they_run():
    assert stage_deps.missing(REPO / "dvc.yaml", REPO / "params.yaml") == {}
    assert stage_deps.folder_deps(REPO / "dvc.yaml") == {}
    # what --write would produce is what is there: no hand edits drifting from the closure
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    text = (REPO / "dvc.yaml").read_text()
    assert stage_deps.render_code_deps(text, params) == text


def test_checker_catches_a_module_a_stage_runs_without_depending_on_it(tmp_path):
    text = (REPO / "dvc.yaml").read_text()
    # train runs calibflow/sources.py through calibflow/pipeline/_sources.py (the drift the issue found)
    start = text.index("\n  train:\n")
    cut = text.index("      - calibflow/sources.py\n", start)
    (tmp_path / "dvc.yaml").write_text(text[:cut] + text[cut + len("      - calibflow/sources.py\n") :])
    gaps = stage_deps.missing(tmp_path / "dvc.yaml", REPO / "params.yaml")
    assert gaps == {"train": ["calibflow/sources.py"]}


def _init(folder, *extra: str):
    args = ["init", "--data", "scores.parquet", "--label", "clicked", "--score", "p_model", *extra]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(folder)
        return CliRunner().invoke(app, args)


def test_init_makes_an_empty_folder_a_project_and_adds_sources(tmp_path):
    write(scores_frame(n=600, days=10, seed=3), "parquet", tmp_path)
    res = _init(tmp_path, "--time", "date", "--segments", "country", "--name", "ads")
    assert res.exit_code == 0, res.output
    assert "new calibflow project" in res.output
    assert (tmp_path / ".git").is_dir() and (tmp_path / ".dvc").is_dir()
    assert (tmp_path / "dvc.yaml").read_text() == project.render_dvc_yaml(scores=True)
    assert "__pycache__/" in (tmp_path / ".dvcignore").read_text().splitlines()
    stamp = json.loads((tmp_path / ".calibflow/code.json").read_text())
    assert stamp == project.code_stamp() and len(stamp["sha256"]) == 64
    params = load_and_validate(tmp_path / "params.yaml")  # the defaults laid under, schema-checked
    assert params["datasets"]["names"] == [] and params["papers"] == []
    assert list(params["sources"]) == ["ads"] and "reproduce" not in yaml.safe_load(
        (tmp_path / "params.yaml").read_text()
    )

    before = (tmp_path / "params.yaml").read_text()
    res = _init(tmp_path, "--name", "search")
    assert res.exit_code == 0, res.output
    assert "new calibflow project" not in res.output
    after = (tmp_path / "params.yaml").read_text()
    assert list(yaml.safe_load(after)["sources"]) == ["ads", "search"]
    block = re.search(r"\n  search:\n(    .*\n)+", after).group(0)
    assert after.replace(block, "\n", 1) == before  # only the new source's lines were added
    assert (tmp_path / "dvc.yaml").read_text() == project.render_dvc_yaml(scores=True)


def test_a_source_with_features_brings_fetch_and_train_back_and_an_edited_dvc_yaml_stays(tmp_path):
    write(scores_frame(n=600, days=10, seed=3), "parquet", tmp_path)
    assert _init(tmp_path, "--name", "ads").exit_code == 0
    assert (tmp_path / "dvc.yaml").read_text() == project.render_dvc_yaml(scores=True)
    assert "\n  train:\n" not in project.render_dvc_yaml(scores=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        args = ["--label", "clicked", "--features", "x1,x2", "--name", "feat"]
        res = CliRunner().invoke(app, ["init", "--data", "scores.parquet", *args])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "dvc.yaml").read_text() == project.render_dvc_yaml(scores=False)
    assert "rewrote dvc.yaml: the full pipeline" in res.output

    edited = project.render_dvc_yaml(scores=True) + "# mine\n"
    (tmp_path / "dvc.yaml").write_text(edited)
    assert project.sync_dvc_yaml(tmp_path) is None
    assert (tmp_path / "dvc.yaml").read_text() == edited  # the user's file is theirs


def test_init_refused_leaves_the_folder_as_it_was(tmp_path):
    write(scores_frame(n=300, days=5, seed=4), "parquet", tmp_path)
    res = _init(tmp_path, "--name", "ads", "--time", "dte")
    assert res.exit_code == 1 and "dte" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.parquet"]


def test_benchmark_opt_in_adds_the_builtin_datasets(tmp_path):
    write(scores_frame(n=300, days=5, seed=5), "parquet", tmp_path)
    res = _init(tmp_path, "--name", "ads", "--benchmark")
    assert res.exit_code == 0, res.output
    params = load_and_validate(tmp_path / "params.yaml")
    assert params["datasets"]["names"] == project.BENCHMARK_DATASETS["names"]


@pytest.mark.slow
def test_evaluate_only_change_reruns_only_what_reads_evaluate(tmp_path, tmp_path_factory):
    root = tmp_path / "repo"
    root.mkdir()
    tiny_repo(root, tmp_path_factory)  # built once per session: test_pipeline_dvc starts from it too
    # numba writes its cache beside the code while a stage runs: no stage may notice
    cache = root / "calibflow/calibrators/__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "venn_abers._hull-41.py311.nbi").write_bytes(b"numba index")
    (root / "calibflow/aggregate/__pycache__").mkdir(exist_ok=True)
    (root / "calibflow/aggregate/__pycache__/kernel.nbc").write_bytes(b"numba code")
    assert json.loads(dvc(root, "status", "--json").stdout) == {}

    # an evaluate-only change that alters its output (every metrics record gains a field)
    ev = root / "calibflow/pipeline/evaluate.py"
    edit = (
        "_write_json = write_json\n\n\ndef write_json(path, obj):\n"
        "    if 'metrics' in str(path) and isinstance(obj, dict):\n"
        "        obj = {**obj, 'edited': 1.0}\n"
        "    return _write_json(path, obj)\n\n\n"
    )
    main = 'if __name__ == "__main__":'
    ev.write_text(ev.read_text().replace(main, edit + main))
    assert set(json.loads(dvc(root, "status", "--json").stdout)) == {"evaluate"}
    log = dvc(root, "repro").stdout
    ran = set(re.findall(r"Running stage '([^']+)'", log))
    assert {"evaluate", "report"} <= ran <= {"evaluate", "select", "report"}, ran
    records = list((root / "metrics/evaluation").rglob("*.json"))
    assert records and all(json.loads(f.read_text()).get("edited") == 1.0 for f in records)
