"""The flow's view of DVC, on a real DVC repository (no Prefect server needed)."""

from __future__ import annotations

import pytest
import yaml
from helpers.flow_fixtures import make_toy_repo

from calibflow.flows import dvc_stages


@pytest.fixture
def toy(tmp_path):
    return make_toy_repo(tmp_path / "toy")


def test_plan_orders_upstream_first_and_marks_stale(toy):
    plan = dvc_stages.plan(toy)
    names = [s.name for s in plan]
    assert names.index("a") < names.index("b") < names.index("report")
    assert names.index("a") < names.index("c") < names.index("report")
    assert all(s.stale for s in plan)
    layers = [[s.name for s in layer] for layer in dvc_stages.layers(plan)]
    assert layers[0] == ["a"] and sorted(layers[1]) == ["b", "c"] and layers[2] == ["report"]


def test_reproduce_then_noop_then_param_change(toy):
    for st in dvc_stages.plan(toy):
        assert dvc_stages.reproduce_stage(toy, st.name).ran
    assert not any(s.stale for s in dvc_stages.plan(toy))
    # `fail` is a param of a, b and report but not c: c is still stale through a (upstream rule).
    params = yaml.safe_load((toy / "params.yaml").read_text())
    params["scale"] = 2
    (toy / "params.yaml").write_text(yaml.safe_dump(params))
    stale = {s.name for s in dvc_stages.plan(toy) if s.stale}
    assert stale == {"a", "b", "c", "report"}
    assert dvc_stages.reproduce_stage(toy, "a").ran


def test_failed_stage_names_itself_and_keeps_last_good_output(toy):
    for st in dvc_stages.plan(toy):
        dvc_stages.reproduce_stage(toy, st.name)
    good = (toy / "out/b.json").read_text()
    (toy / "params.yaml").write_text("scale: 1\nfail: a\n")
    with pytest.raises(dvc_stages.StageFailed, match=r"(?s)stage .a. failed.*told to fail"):
        dvc_stages.reproduce_stage(toy, "a")
    assert (toy / "out/b.json").read_text() == good
    assert (toy / "reports/index.html").exists()


def test_direct_command_plus_commit_records_the_stage(toy):
    plan = {s.name: s for s in dvc_stages.plan(toy)}
    for name in ("a", "b", "c", "report"):
        dvc_stages.run_stage_command(toy, name, plan[name].cmd)
        dvc_stages.commit_stage(toy, name)
    assert not any(s.stale for s in dvc_stages.plan(toy))


def test_remote_sync_rejects_unknown_action(toy):
    with pytest.raises(ValueError, match="pull' or 'push"):
        dvc_stages.remote_sync(toy, "fetch")


def test_stage_commands_get_this_interpreter_first_on_path(monkeypatch):
    import os
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    path = dvc_stages.stage_env()["PATH"].split(os.pathsep)
    assert path[0] == str(Path(sys.executable).parent) and path[1:] == ["/usr/bin", "/bin"]
