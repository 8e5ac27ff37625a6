"""The README's segmented path, exactly its three commands, in an empty folder: ``calibflow init --segments
country,device`` -> ``calibflow run`` -> ``calibflow apply``.

The data: a CTR export whose model misses a country effect (BR and IN under-predicted by 0.6 and 0.8 on
the logit), a device column without effect, 5% rows with a null country. After ``calibflow run``, every
segment value's ``sum p / sum y`` interval on the card covers 1 or the card flags that value (the control:
before calibration BR's and IN's ratios are off); each segment column's rows add up to the test rows, the
null country included; the report draws the worst segments' reliability. ``calibflow apply`` serves the
chosen calibrator (segmented or not) from the segment columns it names. The same commands on a source above
``scale.row_threshold`` (streamed by prepare, no rows kept) deploy the per-segment calibrator from select's
pass over the source's test rows, and ``apply`` serves exactly it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.special import expit, logit

from calibflow.calibrators import from_json
from calibflow.segments import NULL_LEVEL

pytestmark = [pytest.mark.dvc, pytest.mark.server, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def ctr(n: int, days: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    country = rng.choice(np.array(["US", "FR", "DE", "BR", "IN", None], dtype=object), n,
                         p=[0.35, 0.2, 0.15, 0.13, 0.12, 0.05])
    device = rng.choice(np.array(["ios", "android", "web"]), n)
    base = -1.6 + 1.1 * x
    shift = np.select([country == "BR", country == "IN"], [0.6, 0.8], 0.0)
    y = (rng.random(n) < expit(base + shift)).astype(int)
    day = pd.Timestamp("2026-09-01") + pd.to_timedelta(np.sort(rng.integers(0, days, n)), unit="D")
    return pd.DataFrame({"day": day.date, "country": country, "device": device,
                         "p_model": expit(1.4 * base + 0.3), "clicked": y})


def _readme_commands() -> dict[str, list[str]]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S).group(1)
    lines = [ln.split(" #")[0].strip() for ln in block.splitlines()]
    return {ln.split()[1]: shlex.split(ln)[1:] for ln in lines if ln.startswith("calibflow ")}


def _env(proj: Path) -> dict[str, str]:
    drop = ("CALIBFLOW_ROOT", "PREFECT_API_URL", "CALIBFLOW_DEBUG", "CALIBFLOW_RUN_LOG")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)  # the calibflow under test, whatever is installed beside it
    env.update(PREFECT_HOME=str(proj / ".prefect"), DVC_NO_ANALYTICS="1", GX_ANALYTICS_ENABLED="false",
               PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@x.invalid", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@x.invalid")
    return env


def calibflow(proj: Path, args: list[str]) -> str:
    proc = subprocess.run([sys.executable, "-m", "calibflow.cli", *args], cwd=proj, env=_env(proj),
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, f"calibflow {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    proj = tmp_path_factory.mktemp("segproject")
    ctr(30_000, 30, 1).to_parquet(proj / "scores.parquet", index=False)
    cmds = _readme_commands()
    assert cmds["init"][cmds["init"].index("--segments") + 1] == "country,device"
    calibflow(proj, cmds["init"])
    calibflow(proj, cmds["run"])
    return proj, cmds


def test_every_segment_covers_one_or_is_flagged(project):
    proj, _ = project
    card = json.loads((proj / "models/ads/card.json").read_text())
    segs = card["segments"]
    assert {s["column"] for s in segs} == {"country", "device"}
    before = {s["value"]: s["ratio_uncalibrated"] for s in segs if s["column"] == "country"}
    assert before["BR"] < 0.85 and before["IN"] < 0.85  # the control: the model misses them
    flags = card.get("segment_flags") or []
    for s in segs:
        if s["ratio_ci"] is None:  # no positive in the test rows: no ratio to check
            assert s["positives"] == 0, s
            continue
        lo, hi = s["ratio_ci"]
        covers = lo <= 1.0 <= hi
        assert covers or s["flagged"], s
        if s["flagged"]:
            assert any(f.startswith(f"{s['column']} = {s['value']}:") for f in flags), (s, flags)
    n_test = card["segment_test_rows"]
    for col in ("country", "device"):
        assert sum(s["n"] for s in segs if s["column"] == col) == n_test, col
    assert any(s["value"] == NULL_LEVEL for s in segs if s["column"] == "country")  # nulls counted


def test_report_shows_the_worst_segments_reliability(project):
    proj, _ = project
    card = json.loads((proj / "models/ads/card.json").read_text())
    assert card["segment_reliability"] and all(p["bins"] for p in card["segment_reliability"])
    html = (proj / "reports/index.html").read_text()
    assert 'class="segment-reliability"' in html and "each adds up to the" in html


def test_apply_serves_the_chosen_calibrator_with_the_segment_columns(project):
    proj, cmds = project
    new = ctr(5000, 3, 7)
    new.drop(columns=["clicked"]).to_parquet(proj / "new.parquet", index=False)
    out = calibflow(proj, cmds["apply"])
    scored = pd.read_parquet(proj / "scored.parquet")
    cal = from_json((proj / "models/ads/calibrator.json").read_text())
    z = logit(np.clip(new["p_model"].to_numpy(), 1e-12, 1 - 1e-12))
    s = z if cal.input == "logit" else new["p_model"].to_numpy()
    if "segments" in cal.needs:
        want = cal.predict(s, segments={c: new[c].to_numpy(dtype=object) for c in cal.segment_names_})
    else:
        want = cal.predict(s)
    np.testing.assert_allclose(scored["calibrated"].to_numpy(), want, rtol=0, atol=1e-9)
    card = json.loads((proj / "models/ads/card.json").read_text())
    assert card["method"] == json.loads((proj / "models/ads/calibrator.json").read_text())["method"]
    if "segments" in cal.needs:  # the segmented one was chosen: apply read the country column
        assert set(cal.segment_names_) <= {"country", "device"}
        y = new["clicked"].to_numpy()
        for c in ("BR", "IN"):
            m = new["country"].to_numpy(dtype=object) == c
            assert abs(scored["calibrated"].to_numpy()[m].sum() / y[m].sum() - 1) < 0.15, (c, out)


@pytest.fixture(scope="module")
def streamed_project(tmp_path_factory):
    """The same three commands with ``scale.row_threshold`` below the rows: prepare streams the source to
    tables (no rows kept) and select scores the per-segment calibrator in one pass over the source."""
    proj = tmp_path_factory.mktemp("segstreamed")
    ctr(30_000, 30, 1).to_parquet(proj / "scores.parquet", index=False)
    cmds = _readme_commands()
    calibflow(proj, cmds["init"])
    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["scale"] = {"row_threshold": 1000}
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    calibflow(proj, cmds["run"])
    return proj, cmds


def test_streamed_source_deploys_and_serves_the_segmented_calibrator(streamed_project):
    proj, cmds = streamed_project
    splits = json.loads((proj / "data/prepared/splits.json").read_text())["datasets"]["ads"]
    assert splits["rows_path"] == "streaming"
    card = json.loads((proj / "models/ads/card.json").read_text())
    assert card["path"] == "aggregate" and card["method"] == "partial_pooling", card["reason"]
    assert card["segmented"]["chosen"] and card["reason"].startswith("Use partial_pooling: per-segment")
    new = ctr(5000, 3, 7)
    new.drop(columns=["clicked"]).to_parquet(proj / "new.parquet", index=False)
    calibflow(proj, cmds["apply"])
    scored = pd.read_parquet(proj / "scored.parquet")
    cal = from_json((proj / "models/ads/calibrator.json").read_text())
    assert "segments" in cal.needs and set(cal.segment_names_) == {"country", "device"}
    z = logit(np.clip(new["p_model"].to_numpy(), 1e-15, 1 - 1e-15))
    want = cal.predict(z, segments={c: new[c].to_numpy(dtype=object) for c in cal.segment_names_})
    np.testing.assert_allclose(scored["calibrated"].to_numpy(), want, rtol=0, atol=1e-9)
    y = new["clicked"].to_numpy()
    for c in ("BR", "IN"):  # the countries the model misses are served near their rate
        m = new["country"].to_numpy(dtype=object) == c
        assert abs(scored["calibrated"].to_numpy()[m].sum() / y[m].sum() - 1) < 0.15, c
