"""A real `dvc repro` on a tiny user source in a temporary git repository.

The source is a folder of daily Parquet files inside the repository. Checks: every stage runs (the
fingerprint stage ``sources@ads`` and ``select`` included) and writes the chosen calibrator and its card; a
second repro runs nothing; touching a file without changing its bytes runs nothing; changing one day's file
makes the source's stages stale (and re-stamps only that file); a bad file (NaN scores) stops the pipeline
at ``validate@raw`` with a one-line message and leaves the last good calibrator and report byte-identical.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
from helpers.dvc_repo import FAKE_EXPERIMENT, TINY, copy_repo, dvc, git, write_params
from helpers.source_data import scores_frame, write

pytestmark = pytest.mark.slow


def _params() -> dict:
    params = json.loads(json.dumps(TINY))
    params["datasets"]["names"] = []
    params["sources"] = {
        "ads": {
            "path": "userdata/daily",
            "label": "clicked",
            "score": "p_model",
            "time": "date",
            "segments": ["country"],
        }
    }
    params["validate"] = {"min_class_count": 10}
    params["select"] = {"rule": "auto"}
    params["scale"] = {"row_threshold": 5_000_000}
    return params


def test_dvc_repro_on_a_source(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    copy_repo(root)
    write_params(root, _params())
    (root / "calibflow/experiments/fake.py").write_text(FAKE_EXPERIMENT)
    frame = scores_frame(n=1500, days=30, seed=4)
    folder = write(frame, "folder", root / "userdata")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "tiny source pipeline")

    first = dvc(root, "repro")
    log = first.stdout + first.stderr
    for stage in [
        "sources@ads",
        "fetch",
        "validate@raw",
        "prepare",
        "train",
        "calibrate@platt",
        "calibrate_segments",
        "evaluate",
        "select",
        "report",
    ]:
        assert f"Running stage '{stage}'" in log, stage
    card = json.loads((root / "models/ads/card.json").read_text())
    assert card["kind"] == "source" and card["data"]["split"]["kind"] == "time"
    assert len(card["data"]["fingerprint"]["files"]) == 30

    # nothing changed: nothing runs; a touched file with the same bytes: nothing runs
    assert "Running stage" not in dvc(root, "repro").stdout
    day = folder / "2026-09-28.parquet"
    os.utime(day, None)
    assert "Running stage" not in dvc(root, "repro").stdout

    # one day's labels change: the source's stages re-run, the fingerprint records the new sha256
    old_fp = json.loads((root / "data/sources/ads/fingerprint.json").read_text())
    part = pd.read_parquet(day)
    part["clicked"] = 1 - part["clicked"]
    part.to_parquet(day, index=False)
    stale = set(json.loads(dvc(root, "status", "--json").stdout))
    assert "sources@ads" in stale and "reproduce@fake" not in stale
    dvc(root, "repro", "--single-item", "sources@ads")  # (the rest of the re-run is what `select` etc. do)
    new_fp = json.loads((root / "data/sources/ads/fingerprint.json").read_text())
    changed = [a["path"] for a, b in zip(old_fp["files"], new_fp["files"], strict=True) if a != b]
    assert changed == ["2026-09-28.parquet"]
    stale = set(json.loads(dvc(root, "status", "--json").stdout))
    assert {"fetch", "prepare"} <= stale and "sources@ads" not in stale and "reproduce@fake" not in stale

    # a bad file: validate@raw fails in one line, nothing downstream runs, the last good outputs stay
    keep = {f: (root / f).read_bytes() for f in ("models/ads/calibrator.json", "reports/index.html")}
    bad = pd.read_parquet(day)
    bad.loc[bad.index[:2], "p_model"] = np.nan
    bad.to_parquet(day, index=False)
    proc = dvc(root, "repro", check=False)
    assert proc.returncode != 0
    assert "source 'ads': column 'p_model': 2 score(s) not finite (NaN or inf)" in proc.stderr
    assert "Running stage 'prepare'" not in proc.stdout
    assert {f: (root / f).read_bytes() for f in keep} == keep
