"""One declaration of the stages (calibflow.pipeline.dag): the benchmark's dvc.yaml is checked against it, a
user project's dvc.yaml is rendered from it, and the in-process runner walks its order.

- the benchmark's dvc.yaml agrees with the declaration, and the checker catches a stage renamed, a data dep
  dropped, a params section dropped and an output's cache flag changed;
- the rendered full shape names the same stages, deps, params and outputs as the declaration; the score shape
  has no fetch or train, its prepare writes the predictions, and nothing depends on an output no stage writes;
- ``order`` is what DVC plans for a rendered project, stage for stage.
"""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml
from helpers.dvc_repo import REPO

from calibflow.pipeline import dag

SCORE_PARAMS = {
    "datasets": {"names": []},
    "sources": {"ads": {"path": "s.parquet", "score": "p", "label": "y"}},
}


def _benchmark() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())


def test_the_benchmark_dvc_yaml_agrees_with_the_declaration():
    assert dag.check(_benchmark()) == []


def _body(doc: dict, name: str) -> dict:
    return doc["stages"][name].get("do") or doc["stages"][name]


@pytest.mark.parametrize(
    ("edit", "found"),
    [
        (lambda d: d["stages"].update(trainer=d["stages"].pop("train")), "stages"),
        (lambda d: _body(d, "evaluate")["deps"].remove("data/calibrated_segments"), "evaluate: data deps"),
        (lambda d: _body(d, "select")["params"].remove("evaluate"), "select: params sections"),
        (lambda d: _body(d, "train")["outs"][2]["metrics/train.json"].pop("cache"), "train: output metrics"),
        (lambda d: d["stages"]["validate"]["foreach"]["raw"].update(data="data/x"), "validate: phases"),
    ],
)
def test_the_checker_catches_a_dvc_yaml_that_drifted(edit, found):
    doc = copy.deepcopy(_benchmark())
    edit(doc)
    problems = dag.check(doc)
    assert any(p.startswith(found) for p in problems), problems


def _flat(doc: dict) -> dict[str, dict]:
    return {name: (st.get("do") or st) for name, st in doc["stages"].items()}


def test_the_rendered_shapes_follow_the_declaration():
    full, scores = (_flat(yaml.safe_load(dag.render(scores=s))) for s in (False, True))
    assert list(full) == [s.name for s in dag.stages()]
    assert list(scores) == [n for n in full if n not in ("fetch", "train")]
    for st in dag.stages():
        body = full[st.name]
        assert body["cmd"] == st.cmd
        assert body["deps"] == [".calibflow/code.json", *st.deps]
        assert [next(iter(o)) for o in body["outs"]] == [o.path for o in st.outs]
    assert scores["prepare"]["cmd"].endswith(dag.SCORE_PREDICTIONS)
    made = {next(iter(o)) for b in scores.values() for o in b["outs"]}
    made |= {f"reports/validation/{phase}.json" for phase in dag.PHASES}
    assert {"data/predictions", "metrics/train.json"} <= made
    items = yaml.safe_load(dag.render(scores=True))["stages"]["validate"]["foreach"]
    reads = {d for b in scores.values() for d in b["deps"] if not d.startswith(("${", ".calibflow"))}
    reads |= {v for item in items.values() for k, v in item.items() if k != "param"}
    # every input is written by a stage of the shape (or holds what they write, or is the user's data)
    def written(d: str) -> bool:
        return any(d == m or d.startswith(m + "/") or m.startswith(d + "/") for m in made)

    assert all(d == "data/sources" or written(d) for d in reads), reads


def test_the_shape_follows_the_sources():
    assert dag.scores_only(SCORE_PARAMS)
    with_features = copy.deepcopy(SCORE_PARAMS)
    with_features["sources"]["feat"] = {"path": "f.parquet", "label": "y", "features": ["x"]}
    assert not dag.scores_only(with_features)
    assert not dag.scores_only({**SCORE_PARAMS, "datasets": {"names": ["adult"]}})
    names = [n for n, _ in dag.order(SCORE_PARAMS)]
    assert "fetch" not in names and "train" not in names
    assert ("train", None) in dag.order(with_features)


@pytest.mark.slow
@pytest.mark.parametrize("scores", [True, False])
def test_the_declared_order_is_what_dvc_plans(tmp_path, scores):
    from calibflow.flows import dvc_stages, project

    params = copy.deepcopy(SCORE_PARAMS)
    if not scores:
        params["sources"]["feat"] = {"path": "f.parquet", "label": "y", "features": ["x"]}
    project.create(tmp_path)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    project.sync_dvc_yaml(tmp_path)
    for name in ("s.parquet", "f.parquet"):
        (tmp_path / name).write_bytes(b"x")
    planned = [s.name for s in dvc_stages.plan(tmp_path)]
    assert planned == [f"{n}@{k}" if k else n for n, k in dag.order(params)]
    assert ("train" in planned) is not scores


@pytest.mark.parametrize("threshold", [10**9, 1000])  # rows, and the streamed source (tables, no rows file)
def test_prepare_predictions_writes_what_train_wrote(tmp_path, threshold):
    """The score shape's ``prepare --predictions`` and the full shape's train give the same files."""
    from helpers.source_data import scores_frame, write
    from helpers.sources_pipeline import source_params

    from calibflow.pipeline import fetch, fingerprint, prepare, train, validate

    roots = {shape: tmp_path / shape for shape in ("full", "scores")}
    for root in roots.values():
        write(scores_frame(n=3000, days=30, seed=7), "parquet", root / "userdata")
    params = source_params("userdata/scores.parquet", with_features=False)
    params["scale"] = {**(params.get("scale") or {}), "row_threshold": threshold}
    assert dag.scores_only(params)
    full, scores = roots["full"], roots["scores"]
    for root in roots.values():
        fingerprint.run("ads", params, root)
    fetch.run(params, full)
    validate.run("raw", params, full)
    prepare.run(params, full)
    train.run(params, full)
    validate.run("raw", params, scores)
    prepare.run(params, scores, predictions=True)

    assert not (scores / "data/raw").exists() and not (scores / "data/models").exists()
    files = sorted(p.relative_to(full / "data/predictions") for p in (full / "data/predictions").rglob("*"))
    assert files and files == sorted(
        p.relative_to(scores / "data/predictions") for p in (scores / "data/predictions").rglob("*")
    )
    for f in files:
        a, b = full / "data/predictions" / f, scores / "data/predictions" / f
        if f.suffix == ".parquet":
            pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))
        else:
            assert a.read_bytes() == b.read_bytes()
    assert (full / "metrics/train.json").read_text() == (scores / "metrics/train.json").read_text()


def test_prepare_predictions_refuses_a_source_that_needs_a_model(tmp_path):
    from calibflow.pipeline import _scores
    from calibflow.pipeline._common import StageError, as_params

    params = copy.deepcopy(SCORE_PARAMS)
    params["sources"]["feat"] = {"path": "f.parquet", "label": "y", "features": ["x"]}
    with pytest.raises(StageError, match="feat need.* a trained model.*no train stage"):
        _scores.write_all(as_params(params), tmp_path)
