"""GTO as the calibrator registry: promotions become versions and the prod stage; rollback is honoured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from helpers.monitor_data import make_project

from calibflow.experiments.monitoring import DAY0
from calibflow.flows import registry
from calibflow.pipeline import monitor as tm

# The gto console script of this interpreter (make test does not activate the venv).
GTO = str(Path(sys.executable).with_name("gto"))


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def test_promotions_are_registered_and_a_rollback_is_served(tmp_path, monkeypatch):
    make_project(tmp_path, "base_rate", days=12, shift_day=6, monitor={"methods": ["platt"]})
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "project")
    params = tm.load_params(tmp_path / "params.yaml")
    project = _git(tmp_path, "rev-parse", "HEAD").strip()
    assert registry.prod_version(tmp_path, "ads") is None
    res = tm.run(tmp_path, params, "ads", now=DAY0 + pd.Timedelta(days=10), render=False)
    assert res["promotions"], "the shift should have promoted a challenger"
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "monitor run")
    sha = _git(tmp_path, "rev-parse", "HEAD").strip()
    registry.promote(tmp_path, "ads", 1, project, "initial")
    newest = res["promotions"][-1]["version"]
    registry.promote(tmp_path, "ads", newest, sha, "promoted")
    assert registry.prod_version(tmp_path, "ads") == newest
    assert registry.registered(tmp_path, "ads") == {1, newest}
    tags = _git(tmp_path, "tag").split()
    assert f"ads-calibrator@v{newest}.0.0" in tags and any(t.startswith("ads-calibrator#prod#") for t in tags)
    gto = subprocess.run([GTO, "show"], cwd=tmp_path, capture_output=True, text=True)
    assert "ads-calibrator" in gto.stdout and f"v{newest}.0.0" in gto.stdout
    hist = subprocess.run([GTO, "history", "ads-calibrator"], cwd=tmp_path, capture_output=True, text=True)
    assert hist.stdout.count("registration") == 2 and hist.stdout.count("assignment") == 2

    registry.rollback(tmp_path, "ads", 1)
    assert registry.prod_version(tmp_path, "ads") == 1
    res = tm.run(
        tmp_path,
        params,
        "ads",
        now=DAY0 + pd.Timedelta(days=12),
        render=False,
        prod_version=registry.prod_version(tmp_path, "ads"),
    )
    state = json.loads((tmp_path / "monitoring/ads/state.json").read_text())
    assert any("set to version 1" in n for n in res["notes"])
    first_new = next(r for r in state["history"] if r["window"] == res["windows"][0])
    assert first_new["version"] == 1  # the rolled-back calibrator is the one scored
    card = json.loads((tmp_path / "monitoring/ads/card.json").read_text())
    assert card["version"] == state["champion"] == 1 and card["pinned"] == 1
    # The rollback holds: the shifted windows after it promote nothing until the pin is released.
    assert not res["promotions"] and all("pins v1" in g["reason"] for g in state["gates"][-2:])
    # Released: the pin file is gone and a rescore of the same windows lets the gate promote again.
    from typer.testing import CliRunner

    from calibflow.cli.main import app

    monkeypatch.setenv("CALIBFLOW_ROOT", str(tmp_path))
    out = CliRunner().invoke(app, ["monitor", "release", "--source", "ads"])
    assert (
        out.exit_code == 0
        and "pin released" in out.output
        and not (tmp_path / "monitoring/ads/pin.json").exists()
    )
    res = tm.run(
        tmp_path,
        params,
        "ads",
        now=DAY0 + pd.Timedelta(days=12),
        render=False,
        rescore_from=res["windows"][0],
    )
    state = json.loads((tmp_path / "monitoring/ads/state.json").read_text())
    assert state["pinned"] is None and not any("pins" in g["reason"] for g in state["gates"])
    try:
        registry.rollback(tmp_path, "ads", 99)
    except ValueError as exc:
        assert "no registered version v99.0.0" in str(exc)
    else:
        raise AssertionError("rollback to an unknown version must fail")


def test_cli_rollback_without_registry_is_one_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from calibflow.cli.main import app

    _git(tmp_path, "init", "-q")
    monkeypatch.setenv("CALIBFLOW_ROOT", str(tmp_path))
    out = CliRunner().invoke(app, ["monitor", "rollback", "--source", "ads", "--to-version", "1"])
    assert out.exit_code == 1
    assert "source 'ads' has no monitor state" in out.output
    assert "Traceback" not in out.output
