"""User sources through every stage (run in-process), the chosen calibrator, `calibflow apply`, bad inputs.

Generated tables with known ground truth (helpers.source_data): a miscalibrated score ``p_model`` of a known
true probability, a date and a country segment; and the same rows as a features table. Each as CSV, as
Parquet and as a folder of daily Parquet files.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.source_data import scores_frame, write
from helpers.sources_pipeline import METHODS, run_pipeline, source_params
from scipy.special import expit, logit
from typer.testing import CliRunner

from calibflow import sources as src
from calibflow import timesplit
from calibflow.calibrators import from_json
from calibflow.io import read_json
from calibflow.pipeline import (
    _sources,
    calibrate,
    evaluate,
    fetch,
    fingerprint,
    prepare,
    report,
    select,
    train,
    validate,
)

REPO = Path(__file__).resolve().parents[2]
@pytest.mark.parametrize("kind", ["csv", "parquet", "folder"])
def test_sources_end_to_end(tmp_path, kind):
    frame = scores_frame(n=2400, days=30, seed=3)
    path = write(frame, kind, tmp_path / "userdata")
    params = source_params(str(path.relative_to(tmp_path)))
    run_pipeline(params, tmp_path, with_report=kind == "parquet")  # the report: once is enough

    # the time split: calib = the 14 days before the last 7, test = the last 7 days; past -> future.
    # Issue 35: prepare keeps tables, not rows, for a score source; the split's rows are the row split's
    # (prepare_source), and the stage's per-split counts and positives are checked equal to them
    spec = _sources.specs(params, tmp_path)["ads"]
    prep, _ = prepare.prepare_source(spec, int(params["seed"]))
    rec = read_json(tmp_path / "data/prepared/splits.json")["datasets"]["ads"]
    for k in ("calib", "test"):
        part = prep[prep["split"] == k]
        assert rec["counts"][k] == len(part) and rec["positives"][k] == int(part["y"].sum()), k
    t = timesplit.to_datetime(prep["time"])
    assert t[prep["split"] == "calib"].max() < t[prep["split"] == "test"].min()
    assert t[prep["split"] == "test"].min() == pd.Timestamp("2026-09-24")
    assert t[prep["split"] == "calib"].min() == pd.Timestamp("2026-09-10")
    assert prep["row"].is_unique and len(prep) == len(frame)
    # rows are the source's rows: labels line up with the generated table
    np.testing.assert_array_equal(prep["y"].to_numpy(), frame["clicked"].to_numpy()[prep["row"]])

    card = read_json(tmp_path / "models/ads/card.json")
    assert card["kind"] == "source" and card["method"] in METHODS
    assert card["data"]["split"]["kind"] == "time"
    assert card["data"]["split"]["test"] == ["2026-09-24T00:00:00", "2026-10-01T00:00:00"]
    assert card["data"]["split"]["rows"]["test"] == int((prep["split"] == "test").sum())
    assert card["data"]["fingerprint"]["method"] == "sha256"
    assert {s["value"] for s in card["segments"]} == {"FR", "DE", "US"}
    met = card["metrics"]["log_loss"]
    assert met["delta"] == pytest.approx(met["calibrated"] - met["uncalibrated"])
    lo, hi = met["delta_ci"]
    assert lo <= met["delta"] <= hi

    # ground truth: the chosen calibrator moves the model's probabilities towards the true ones
    cal = from_json((tmp_path / "models/ads/calibrator.json").read_text())
    test_rows = prep.loc[prep["split"] == "test", "row"].to_numpy()
    p_true = expit((logit(frame["p_model"].to_numpy()) - 0.7) / 1.8)[test_rows]
    p_model = frame["p_model"].to_numpy()[test_rows]
    p_cal = cal.predict(src.calibrator_input(p_model, "probability", "logit"))
    assert np.mean(np.abs(p_cal - p_true)) < 0.6 * np.mean(np.abs(p_model - p_true))

    # the features source trained its own XGBoost model and got a card too
    assert (tmp_path / "data/models/feat.json").is_file()
    assert read_json(tmp_path / "models/feat/card.json")["data"]["split"]["kind"] == "random"
    # manifest and report carry the fingerprints
    manifest = read_json(tmp_path / "data/raw/manifest.json")
    assert set(manifest) == {"ads", "feat"}
    if kind == "parquet":
        html = (tmp_path / "reports/index.html").read_text()
        fp = card["data"]["fingerprint"]["files"][0]
        assert fp["sha256"][:16] in html and "time split: calib 2026-09-10" in html

    # apply: streamed in small batches, every column kept, equal to from_json(...).predict(...)
    out = tmp_path / "scored.parquet"
    res = CliRunner().invoke(
        _app(),
        [
            "apply",
            "--calibrator",
            str(tmp_path / "models/ads/calibrator.json"),
            "--input",
            str(path),
            "--score",
            "p_model",
            "--output",
            str(out),
            "--batch-rows",
            "500",
        ],
    )
    assert res.exit_code == 0, res.output
    scored = pd.read_parquet(out)
    assert list(scored.columns) == [*frame.columns, "calibrated"] and len(scored) == len(frame)
    want = cal.predict(src.calibrator_input(frame["p_model"].to_numpy(), "probability", "logit"))
    np.testing.assert_array_equal(scored["calibrated"].to_numpy(), want)


def _app():
    from calibflow.cli.main import app

    return app


# ------------------------------------------------------------------------------------------ bad inputs


@pytest.fixture(scope="module")
def good_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("good")
    frame = scores_frame(n=1500, days=30, seed=5)
    path = write(frame, "parquet", root / "userdata")
    params = source_params(str(path.relative_to(root)), with_features=False)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_pipeline(params, root)
    return root, frame, params


def _snapshot(root: Path) -> dict[str, bytes]:
    files = [
        "models/ads/calibrator.json",
        "models/ads/card.json",
        "reports/index.html",
        # issue 35: a score source of any size is prepared to tables; train's output for it is the marker
        # naming them (this listed data/predictions/ads.parquet, the row path's predictions file)
        "data/predictions/ads.skipped.json",
    ]
    return {f: (root / f).read_bytes() for f in files}


def _repro_until_failure(root: Path, params_file: Path) -> tuple[int, str]:
    """The stages' CLIs in order, stopping at the first failure (what `dvc repro` does)."""
    import contextlib
    import io

    argv = ["--params", str(params_file), "--root", str(root)]
    steps = (
        [
            (fingerprint.main, ["ads"]),
            (fetch.main, []),
            (validate.main, ["raw"]),
            (prepare.main, []),
            (validate.main, ["prepared"]),
            (train.main, []),
        ]
        + [(calibrate.main, [m]) for m in METHODS]
        + [(validate.main, ["calibrated"]), (evaluate.main, []), (select.main, []), (report.main, [])]
    )
    err = io.StringIO()
    for fn, extra in steps:
        with contextlib.redirect_stderr(err):
            rc = fn(argv + extra)
        if rc:
            return rc, err.getvalue()
    return 0, err.getvalue()


def _bad(frame: pd.DataFrame, what: str) -> pd.DataFrame:
    df = frame.copy()
    if what == "nan":
        df.loc[[3, 40, 41], "p_model"] = np.nan
    elif what == "inf":
        df.loc[[7], "p_model"] = np.inf
    elif what == "label":
        df.loc[[11, 12], "clicked"] = 2
    elif what == "single":
        df["clicked"] = 0
    elif what == "range":
        df.loc[[5], "p_model"] = 1.5
    elif what == "weight":
        df.loc[[9], "weight"] = -1.0
    return df


BAD = [
    (
        "nan",
        {},
        r"source 'ads': column 'p_model': 3 score\(s\) not finite \(NaN or inf\) of 1500 rows, "
        r"e\.g\. rows 3, 40, 41",
    ),
    ("inf", {}, r"column 'p_model': 1 score\(s\) not finite .* rows 7 "),
    ("label", {}, r"column 'clicked': 2 label\(s\) missing or not in \{0, 1\} .* rows 11, 12 .*positive"),
    ("single", {}, r"column 'clicked': only one class \(0 positives, 1500 negatives"),
    ("range", {}, r"column 'p_model': 1 probabilit\(ies\) outside \[0, 1\] .* rows 5 .*score_kind"),
    ("weight", {}, r"column 'weight': 1 weight\(s\) not finite or negative .* rows 9 "),
    ("ok", {"label": "clickd"}, r"source 'ads': column 'clickd' not found .*did you mean 'clicked'\?"),
    ("ok", {"score": "p_model "}, r"column 'p_model ' not found .*did you mean 'p_model'\?"),
    (
        "ok",
        {"score_kind": "prob"},
        r"sources\.ads\.score_kind: 'prob' is not one of .*did you mean 'probability'",
    ),
    (
        "ok",
        {"split": {"kind": "time", "test_last": "40d"}},
        r"source 'ads': time split: the test window starts",
    ),
]


@pytest.mark.parametrize(("what", "decl", "pattern"), BAD, ids=[f"{w}-{list(d)}" for w, d, _ in BAD])
def test_bad_input_one_line_and_nothing_lost(good_run, tmp_path, what, decl, pattern):
    import re

    root, frame, params = good_run
    before = _snapshot(root)
    bad = copy.deepcopy(params)
    data = write(_bad(frame, what), "parquet", tmp_path / "bad")
    bad["sources"]["ads"]["path"] = str(data)
    bad["sources"]["ads"].update(decl)
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(bad, sort_keys=False))
    rc, err = _repro_until_failure(root, pfile)
    assert rc == 1
    assert re.search(pattern, err), err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 3, err
    assert _snapshot(root) == before


def test_too_few_positives_in_a_window(good_run, tmp_path):
    root, frame, params = good_run
    before = _snapshot(root)
    df = frame.copy()
    t = pd.to_datetime(df["date"])
    df.loc[(t >= "2026-09-24").to_numpy(), "clicked"] = 0  # no positive in the test window
    bad = copy.deepcopy(params)
    bad["sources"]["ads"]["path"] = str(write(df, "parquet", tmp_path / "bad"))
    pfile = tmp_path / "params.yaml"
    pfile.write_text(yaml.safe_dump(bad, sort_keys=False))
    rc, err = _repro_until_failure(root, pfile)
    assert rc == 1
    assert "source 'ads': split 'test' [2026-09-24T00:00:00 .. 2026-10-01T00:00:00) has 0 positives" in err
    assert _snapshot(root) == before


def test_apply_bad_input_and_atomic_output(good_run, tmp_path):
    root, frame, _ = good_run
    cal = root / "models/ads/calibrator.json"
    out = tmp_path / "out.parquet"
    out.write_bytes(b"previous output")
    df = _bad(frame, "nan")
    inp = write(df, "parquet", tmp_path / "in")
    res = CliRunner().invoke(
        _app(),
        [
            "apply",
            "--calibrator",
            str(cal),
            "--input",
            str(inp),
            "--score",
            "p_model",
            "--output",
            str(out),
            "--batch-rows",
            "1000",
        ],
    )
    assert res.exit_code == 1
    assert (
        "column 'p_model': 3 null or NaN score(s), the first at row 3; drop them, or pass --on-null pass"
        in res.output
    )
    assert out.read_bytes() == b"previous output" and list(tmp_path.glob(".out.parquet.*")) == []
    res = CliRunner().invoke(
        _app(),
        ["apply", "--calibrator", str(cal), "--input", str(inp), "--score", "p_modl", "--output", str(out)],
    )
    assert res.exit_code == 1 and "did you mean 'p_model'?" in res.output
    # CSV in, CSV out, every column kept
    csv_in = write(frame, "csv", tmp_path / "csv")
    res = CliRunner().invoke(
        _app(),
        [
            "apply",
            "--calibrator",
            str(cal),
            "--input",
            str(csv_in),
            "--score",
            "p_model",
            "--output",
            str(tmp_path / "o.csv"),
            "--batch-rows",
            "400",
        ],
    )
    assert res.exit_code == 0, res.output
    back = pd.read_csv(tmp_path / "o.csv")
    want = from_json(cal.read_text()).predict(
        src.calibrator_input(frame["p_model"].to_numpy(), "probability", "logit")
    )
    np.testing.assert_allclose(back["calibrated"].to_numpy(), want, rtol=1e-12)
    assert list(back.columns) == [*frame.columns, "calibrated"]


def test_init_writes_params_and_refuses_overwrite(tmp_path):
    frame = scores_frame(n=800, days=10, seed=9)
    data = write(frame, "folder", tmp_path / "userdata")
    pfile = tmp_path / "params.yaml"
    original = (REPO / "params.yaml").read_text()
    pfile.write_text(original)
    args = [
        "init",
        "--data",
        str(data),
        "--label",
        "clicked",
        "--score",
        "p_model",
        "--time",
        "date",
        "--segments",
        "country",
        "--name",
        "ads",
        "--params",
        str(pfile),
    ]
    res = CliRunner().invoke(_app(), args)
    assert res.exit_code == 0, res.output
    assert "800 rows" in res.output and "2026-09-01 to 2026-09-10" in res.output
    assert "next: calibflow run" in res.output
    text = pfile.read_text()
    decl = yaml.safe_load(text)["sources"]["ads"]
    assert decl == {
        "path": "userdata/daily",
        "label": "clicked",
        "score": "p_model",
        "score_kind": "probability",
        "time": "date",
        "segments": ["country"],
    }
    # every other line, comments included, is kept
    kept = [ln for ln in original.splitlines() if not ln.startswith("sources:")]
    assert all(ln in text.splitlines() for ln in kept)
    again = CliRunner().invoke(_app(), args)
    assert again.exit_code == 1 and "already in" in again.output and pfile.read_text() == text
    typo = CliRunner().invoke(
        _app(), [*args[:-4], "--name", "b", "--params", str(pfile), "--label", "clickd"]
    )
    assert typo.exit_code == 1 and "did you mean 'clicked'?" in typo.output and pfile.read_text() == text
