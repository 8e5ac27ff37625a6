"""The documented sequences end to end, with the score's scale read from the calibrator file.

`calibflow fit -> calibflow apply` (the README's line, no --score-kind) and `calibflow init -> the stages ->
calibflow apply` on a probability source give sum p / sum y close to 1 and the log loss of the correct map.
On main before this change, apply fed the probability calibrator logits (ratio 1.78, log loss 0.609).
The commands run for real; the refusals among them run the same command in this process
(helpers.cli_here: same argv, stderr captured at the file descriptor).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from helpers.cli_here import run_here
from helpers.source_data import scores_frame, write
from helpers.sources_pipeline import METHODS, run_pipeline, source_params
from typer.testing import CliRunner

from calibflow import metrics
from calibflow.calibrators import from_json
from calibflow.sources import calibrate_scores


def _cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "calibflow.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def _day(path: Path, n: int, seed: int, kind: str) -> None:
    """y ~ Bernoulli(sigmoid(0.6 z - 0.5)); the score column is sigmoid(z) or z itself."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-1, 1.5, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.6 * z - 0.5)))).astype(np.int8)
    s = 1 / (1 + np.exp(-z)) if kind == "probability" else z
    pq.write_table(pa.table({"s": s, "y": y}), path)


@pytest.fixture(scope="module", params=["probability", "logit"])
def fitted(request, tmp_path_factory):
    kind = request.param
    d = tmp_path_factory.mktemp(f"fit-{kind}")
    _day(d / "calib.parquet", 60_000, 1, kind)
    _day(d / "new.parquet", 60_000, 2, kind)
    extra = [] if kind == "probability" else ["--score-kind", "logit"]
    r = _cli("fit", "--calib", str(d / "calib.parquet"), "--score", "s", "--label", "y",
             "--methods", "platt,isotonic", "--out", str(d / "cal"), *extra)
    assert r.returncode == 0, r.stderr
    return kind, d


@pytest.mark.parametrize("method", ["platt", "isotonic"])
def test_fit_then_apply_without_score_kind_gives_the_correct_map(fitted, method, tmp_path):
    kind, d = fitted
    cal_path = d / "cal" / f"{method}.json"
    assert json.loads(cal_path.read_text())["score_kind"] == kind
    out = tmp_path / "scored.parquet"
    r = _cli("apply", "--calibrator", str(cal_path), "--input", str(d / "new.parquet"), "--score", "s",
             "--output", str(out))
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out)
    y, s, p = (t[c].to_numpy().astype(np.float64) for c in ("y", "s", "calibrated"))
    assert p.sum() / y.sum() == pytest.approx(1.0, abs=0.03)
    # the correct map: the true link sigmoid(0.6 z - 0.5) of this generator
    z = np.log(s / (1 - s)) if kind == "probability" else s
    truth = metrics.log_loss(y, 1 / (1 + np.exp(-(0.6 * z - 0.5))))
    assert metrics.log_loss(y, p) == pytest.approx(truth, abs=0.003)
    raw = metrics.log_loss(y, np.clip(1 / (1 + np.exp(-z)), 1e-15, 1 - 1e-15))
    assert metrics.log_loss(y, p) < raw - 0.01


def test_a_conflicting_score_kind_is_refused_in_one_line(fitted, tmp_path, monkeypatch, capfd):
    kind, d = fitted
    other = "logit" if kind == "probability" else "probability"
    out = tmp_path / "scored.parquet"
    r = run_here(["apply", "--calibrator", str(d / "cal" / "platt.json"), "--input", str(d / "new.parquet"),
                  "--score", "s", "--output", str(out), "--score-kind", other], monkeypatch, capfd)
    assert r.returncode == 1 and f"fitted on {kind} scores, not {other}" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


def test_an_old_file_without_a_kind_needs_score_kind(fitted, tmp_path, monkeypatch, capfd):
    kind, d = fitted
    payload = json.loads((d / "cal" / "platt.json").read_text())
    del payload["score_kind"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(payload))
    out = tmp_path / "scored.parquet"
    args = ["apply", "--calibrator", str(old), "--input", str(d / "new.parquet"), "--score", "s",
            "--output", str(out)]
    r = run_here(args, monkeypatch, capfd)
    assert r.returncode == 1 and "pass --score-kind" in r.stderr and not out.exists()
    r = _cli(*args, "--score-kind", kind)
    assert r.returncode == 0, r.stderr
    t = pq.read_table(out)
    assert t["calibrated"].to_numpy().sum() / t["y"].to_numpy().sum() == pytest.approx(1.0, abs=0.03)


def _apply(cal: Path, inp: Path, out: Path, *extra: str, here=None) -> subprocess.CompletedProcess:
    """``calibflow apply``; ``here``: (monkeypatch, capfd) to run it in this process (a refusal)."""
    args = ["apply", "--calibrator", str(cal), "--input", str(inp), "--output", str(out), *extra]
    return _cli(*args) if here is None else run_here(args, *here)


def test_fit_then_apply_without_score_gives_the_same_file(fitted, tmp_path):
    """`calibflow fit` records the score column in each calibrator file; `apply` without --score reads it."""
    kind, d = fitted
    cal = d / "cal" / "isotonic.json"
    assert json.loads(cal.read_text())["score_column"] == "s"
    r = _apply(cal, d / "new.parquet", tmp_path / "with.parquet", "--score", "s")
    assert r.returncode == 0, r.stderr
    r = _apply(cal, d / "new.parquet", tmp_path / "without.parquet")
    assert r.returncode == 0, r.stderr
    with_score = pq.read_table(tmp_path / "with.parquet")
    without = pq.read_table(tmp_path / "without.parquet")
    assert without.column_names == ["s", "y", "calibrated"] and without.equals(with_score)


def test_an_explicit_score_wins_and_none_anywhere_is_one_line(fitted, tmp_path, monkeypatch, capfd):
    kind, d = fitted
    t = pq.read_table(d / "new.parquet").rename_columns(["s2", "y"])
    pq.write_table(t, tmp_path / "renamed.parquet")
    cal = d / "cal" / "platt.json"
    r = _apply(cal, tmp_path / "renamed.parquet", tmp_path / "out.parquet", here=(monkeypatch, capfd))
    assert r.returncode == 1 and "column 's' not found" in r.stderr and "'s2'" in r.stderr, r.stderr
    r = _apply(cal, tmp_path / "renamed.parquet", tmp_path / "out.parquet", "--score", "s2")
    assert r.returncode == 0, r.stderr
    want = calibrate_scores(from_json(cal.read_text()), t["s2"].to_numpy())
    np.testing.assert_allclose(pq.read_table(tmp_path / "out.parquet")["calibrated"], want, rtol=1e-12)
    payload = json.loads(cal.read_text())
    del payload["score_column"]  # a file written before calibrators named their column, and no card
    (tmp_path / "old.json").write_text(json.dumps(payload))
    r = _apply(tmp_path / "old.json", d / "new.parquet", tmp_path / "old.parquet", here=(monkeypatch, capfd))
    assert r.returncode == 1 and "pass --score" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "old.parquet").exists()


def test_init_then_stages_then_apply_reads_the_kind_from_the_calibrator(tmp_path):
    """`calibflow init` on a probability column (kind guessed from the values), the pipeline's stages
    in dvc.yaml's order, then `calibflow apply` with no --score-kind and no card beside the calibrator."""
    from calibflow.cli.main import app

    frame = scores_frame(n=3000, days=30, seed=7)
    path = write(frame, "parquet", tmp_path / "userdata")
    base = source_params("unused", with_features=False)
    del base["sources"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    init = ["init", "--data", str(path), "--label", "clicked", "--score", "p_model", "--time", "date",
            "--name", "ads", "--params", str(tmp_path / "params.yaml")]
    res = CliRunner().invoke(app, init)
    assert res.exit_code == 0, res.output
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    assert params["sources"]["ads"]["score_kind"] == "probability"
    assert params["calibrate"]["methods"] == METHODS
    run_pipeline(params, tmp_path, with_report=False)
    cal_path = tmp_path / "models/ads/calibrator.json"
    assert json.loads(cal_path.read_text())["score_kind"] == "probability"
    (tmp_path / "models/ads/card.json").unlink()  # the file alone carries the scale

    out = tmp_path / "scored.parquet"
    res = CliRunner().invoke(app, ["apply", "--calibrator", str(cal_path), "--input", str(path),
                                   "--score", "p_model", "--output", str(out)])
    assert res.exit_code == 0, res.output
    scored = pq.read_table(out).to_pandas()
    test = scored["date"].astype(str) >= "2026-09-24"  # the test days of the time split
    y, p = scored.loc[test, "clicked"].to_numpy(float), scored.loc[test, "calibrated"].to_numpy()
    assert p.sum() / y.sum() == pytest.approx(1.0, abs=0.12)
    cal = from_json(cal_path.read_text())
    q = scored.loc[test, "p_model"].to_numpy()
    right = cal.predict(np.log(q / (1 - q))) if cal.input == "logit" else cal.predict(q)
    np.testing.assert_allclose(p, right, rtol=1e-12)
    assert metrics.log_loss(y, p) < metrics.log_loss(y, q)
    # without --score: the calibrator file names its column (the card is gone), and the file is the same
    out2 = tmp_path / "scored_no_score.parquet"
    res = CliRunner().invoke(app, ["apply", "--calibrator", str(cal_path), "--input", str(path),
                                   "--output", str(out2)])
    assert res.exit_code == 0, res.output
    assert pq.read_table(out2).equals(pq.read_table(out))
