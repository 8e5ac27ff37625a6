"""The documented path on a PROBABILITY source: `calibflow init --monitor` -> `calibflow run` ->
`calibflow monitor run`, then the monitor's champion served with `calibflow apply`.

The select stage's champion for a probability source is declared ``input: logit``; the monitor must feed it
logit(p) exactly as select and apply do. On a stable stream the served probabilities must add up to the
clicks day by day (sum p / sum y within 0.05 of 1) and no incident may open. A copy of the repository
runs the real pipeline (DVC stages through the Prefect flow) on a tiny params file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.dvc_repo import FAKE_EXPERIMENT, TINY, copy_repo, dvc_env, git, write_params
from scipy.special import expit, logit

from calibflow import calibrators

pytestmark = pytest.mark.slow

START = pd.Timestamp("2026-03-01")
ROWS = 12_000  # a day: about 3,500 clicks, so a day's ratio has sd ~0.017 (0.05 is 3 sd)
HISTORY, STREAM = 21, 14  # days known at `calibflow run`; days delivered afterwards


def deliver(folder: Path, days: range, seed: int = 3) -> None:
    """One Parquet file per day: four countries, a miscalibrated probability ``p_model``, ``clicked``."""
    folder.mkdir(parents=True, exist_ok=True)
    for d in days:
        rng = np.random.default_rng([seed, d])
        country = rng.choice(np.array(["FR", "DE", "US", "UK"]), size=ROWS)
        shift = np.select([country == "FR", country == "DE"], [0.3, -0.3], 0.0)
        p_true = expit(-1.0 + 1.3 * rng.normal(size=ROWS) + shift)
        day = START + pd.Timedelta(days=d)
        pd.DataFrame(
            {
                "ts": day + pd.to_timedelta(np.sort(rng.uniform(0, 86_399, ROWS)), unit="s"),
                "country": country,
                "p_model": expit(1.6 * logit(p_true) + 0.8),  # over-confident and too high
                "clicked": (rng.random(ROWS) < p_true).astype(np.int64),
            }
        ).to_parquet(folder / f"day={day.date()}.parquet", index=False)


def calibflow(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**dvc_env(), "CALIBFLOW_ROOT": str(root), "PREFECT_HOME": str(root / ".prefect")}
    env.update(OPENBLAS_NUM_THREADS="1", PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180")
    proc = subprocess.run(
        [sys.executable, "-m", "calibflow.cli", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"calibflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def test_documented_path_on_a_probability_source_serves_calibrated_probabilities(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    copy_repo(root)
    params = yaml.safe_load((root / "params.yaml").read_text())  # the schema wants every key
    for key, value in json.loads(json.dumps(TINY)).items():
        params[key] = {**params[key], **value} if isinstance(value, dict) and key in params else value
    write_params(root, params)
    (root / "calibflow/experiments/fake.py").write_text(FAKE_EXPERIMENT)
    daily = root / "userdata" / "daily"
    deliver(daily, range(HISTORY))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "project")

    out = calibflow(
        root,
        "init",
        "--data",
        "userdata/daily",
        "--label",
        "clicked",
        "--score",
        "p_model",
        "--time",
        "ts",
        "--segments",
        "country",
        "--name",
        "ads",
        "--monitor",
    )
    declared = yaml.safe_load((root / "params.yaml").read_text())
    assert declared["sources"]["ads"]["score_kind"] == "probability", out.stdout
    assert declared["monitor"]["sources"] == ["ads"]  # `--monitor` listed it

    calibflow(root, "run", "--quiet")
    selected = json.loads((root / "models/ads/calibrator.json").read_text())
    assert selected["params"]["input"] == "logit"  # the case the monitor used to get wrong

    deliver(daily, range(HISTORY, HISTORY + STREAM))
    first_new = (START + pd.Timedelta(days=HISTORY)).date().isoformat()
    now = (START + pd.Timedelta(days=HISTORY + STREAM + 2)).isoformat()
    res = calibflow(root, "monitor", "run", "--now", now, "--start", first_new, "--no-commit")
    state = json.loads((root / "monitoring/ads/state.json").read_text())
    assert state["score_kind"] == "probability" and len(state["processed"]) == STREAM
    kinds = {json.loads(v["calibrator"]).get("score_kind") for v in state["versions"]}
    assert kinds == {"probability"}  # every version records the scale it was fitted on
    assert state["alerts"] == [], res.stdout  # stable windows: no alert, so no incident
    assert "0 incident(s) opened" in res.stdout
    card = json.loads((root / "monitoring/ads/card.json").read_text())
    assert card["input"] == {"score": "p_model", "score_kind": "probability", "calibrator_input": "logit"}
    assert not (root / "models/ads/champion.json").exists()  # select's folder is select's alone

    calibflow(
        root,
        "apply",
        "--calibrator",
        "monitoring/ads/calibrator.json",
        "--input",
        "userdata/daily",
        "--score",
        "p_model",
        "--output",
        "scored.parquet",
    )
    scored = pd.read_parquet(root / "scored.parquet")
    scored = scored[scored["ts"] >= pd.Timestamp(first_new)]
    per_day = scored.groupby(scored["ts"].dt.date).apply(lambda g: g["calibrated"].sum() / g["clicked"].sum())
    assert len(per_day) == STREAM
    assert (per_day.sub(1).abs() < 0.05).all(), per_day.round(3).to_dict()
    # Controls: the check above can fail. The raw score is off, and so is the champion fed raw p as if it
    # were a logit (what the monitor used to do: sum p / sum y was 0.004 in the probe).
    assert abs(scored["p_model"].sum() / scored["clicked"].sum() - 1) > 0.1
    champ = calibrators.from_json((root / "monitoring/ads/calibrator.json").read_text())
    assert abs(champ.predict(scored["p_model"].to_numpy()).sum() / scored["clicked"].sum() - 1) > 0.3
