"""Several sources scored ahead in worker processes (``flows.monitor.sources_ahead``) give what one process
gives, errors included; no Prefect server needed (the subflows only take the results)."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
import yaml
from helpers.monitor_data import make_project

from calibflow.experiments.monitoring import DAY0
from calibflow.flows import monitor as FM


def _two_sources(root) -> None:
    make_project(root, "base_rate", days=8, shift_day=4, monitor={"methods": ["platt"]})
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["sources"]["b2"] = {**params["sources"]["ads"], "path": "data/b2"}
    params["sources"]["gone"] = {**params["sources"]["ads"], "path": "data/nowhere"}
    params["monitor"]["sources"] = ["gone", "ads", "b2"]
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    shutil.copytree(root / "data/stream", root / "data/b2")
    shutil.copytree(root / "models/ads", root / "models/b2")
    shutil.copytree(root / "models/ads", root / "models/gone")


def _run(root, names, workers, monkeypatch) -> dict:
    monkeypatch.setenv("CALIBFLOW_MONITOR_WORKERS", str(workers))
    now = (DAY0 + pd.Timedelta(days=10)).isoformat()
    out = {}
    with FM.sources_ahead(str(root), names, now, None, False, None, None):
        assert len(FM._AHEAD) == (len(names) if workers > 1 else 0)
        for name in names:
            try:
                out[name] = FM._scored(str(root), name, now, None, False, None, None)
            except FM._expected() as exc:  # what the subflow reports in one line
                out[name] = (type(exc).__name__, str(exc))
    assert not FM._AHEAD
    return out


def test_workers_score_as_one_process_does(tmp_path, monkeypatch):
    one, two = tmp_path / "one", tmp_path / "two"
    _two_sources(one)
    shutil.copytree(one, two)
    names = ["gone", "ads", "b2"]
    seq, par = _run(one, names, 1, monkeypatch), _run(two, names, 2, monkeypatch)
    assert isinstance(seq["gone"], tuple) and "data/nowhere" in seq["gone"][1]
    # the worker's error re-raised: same type, same line (each project names its own folder)
    assert par["gone"] == (seq["gone"][0], seq["gone"][1].replace(str(one), str(two)))
    for name in ("ads", "b2"):
        assert len(par[name]["windows"]) == len(seq[name]["windows"]) >= 5
        assert par[name]["promotions"] == seq[name]["promotions"]
        for f in ("state.json", "card.json", "calibrator.json"):
            assert (two / "monitoring" / name / f).read_text() == (one / "monitoring" / name / f).read_text()
        assert (two / f"reports/pages/monitoring-{name}.html").read_text() == (
            one / f"reports/pages/monitoring-{name}.html").read_text()


@pytest.mark.parametrize("n, env, want", [(1, "", 1), (5, "", 1), (5, "2", 2), (1, "2", 1), (3, "4", 3)])
def test_worker_count(monkeypatch, n, env, want):
    monkeypatch.setenv("CALIBFLOW_MONITOR_WORKERS", env)
    assert FM._workers(n) == want
