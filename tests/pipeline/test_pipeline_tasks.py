"""The pipeline stages called through their importable ``run``/``main`` on a tiny real configuration.

One module-scoped run of every stage (two real datasets subsampled to 1,500 rows, a 15-tree model, three
calibrators, 30 bootstrap resamples) in a temporary project root; the tests then inspect its outputs and
break things on purpose. Needs the real data: a missing mirror fails loudly in ``fetch``.
"""

from __future__ import annotations

import copy
import html
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from calibflow import intervals, metrics
from calibflow.calibrators import from_json
from calibflow.pipeline import (
    _common,
    calibrate,
    evaluate,
    fetch,
    prepare,
    report,
    reproduce,
    select,
    train,
    validate,
)
from calibflow.results import Figure, Reproduction, Table

pytestmark = pytest.mark.xdist_group("pipeline_tasks")

DATASETS = ["bank_marketing", "hillstrom"]
METHODS = ["platt", "isotonic", "temperature"]
TINY = {
    "seed": 7,
    "datasets": {"names": DATASETS, "targets": {"hillstrom": "visit"}, "max_rows": 1500},
    "prepare": {"fractions": {"train": 0.5, "calib": 0.25, "test": 0.25}, "stratify": True},
    # the model stated in full: a stage fills what a dict leaves out from the schema (subsample 0.8, ...)
    "model": {"n_estimators": 15, "max_depth": 3, "learning_rate": 0.3, "n_jobs": 1, "subsample": 1.0,
              "colsample_bytree": 1.0},
    "calibrate": {"methods": METHODS, "input": "logit", "options": {}},
    "evaluate": {"n_bins": 10, "n_bootstrap": 30, "ci_level": 0.95, "selection_alpha": 0.1, "hist_bins": 20},
    "papers": [],
    "reproduce": {"profile": "quick"},
}


@pytest.fixture(scope="session")  # session: xdist may interleave modules on a worker
def project(tmp_path_factory):
    """A project root where every stage ran once, in DAG order."""
    root = tmp_path_factory.mktemp("pipeline")
    params = copy.deepcopy(TINY)
    fetch.run(params, root)
    validate.run("raw", params, root)
    prepare.run(params, root)
    validate.run("prepared", params, root)
    train.run(params, root)
    for m in METHODS:
        calibrate.run(m, params, root)
    validate.run("calibrated", params, root)
    evaluate.run(params, root)
    select.run(params, root)  # the verdicts: models/<name>/, metrics/headline.json
    report.run(params, root)
    return root, params


def test_fetch_manifest_records_verified_checksums(project):
    from calibflow import datasets

    root, _ = project
    manifest = json.loads((root / "data/raw/manifest.json").read_text())
    assert sorted(manifest) == sorted(DATASETS)
    for name, files in manifest.items():
        for rel, meta in files.items():
            path = root / "data/raw" / name / rel
            assert datasets.sha256_file(path) == meta["sha256"]
            assert path.stat().st_size == meta["bytes"]


def test_prepare_is_deterministic_and_recorded(project, tmp_path):
    root, params = project
    rec = json.loads((root / "data/prepared/splits.json").read_text())
    for name in DATASETS:
        d = rec["datasets"][name]
        assert d["n_rows"] == 1500 and sum(d["counts"].values()) == 1500
        assert d["counts"]["train"] == 750
        frame = pd.read_parquet(root / "data/prepared" / f"{name}.parquet")
        assert set(frame["split"]) == {"train", "calib", "test"}
        assert frame["row"].is_unique
    assert "treatment" in pd.read_parquet(root / "data/prepared/hillstrom.parquet").columns
    # Same params and seed, same split: a second run in a fresh root records identical row hashes.
    shutil.copytree(root / "data/raw", tmp_path / "data/raw")
    again = prepare.run(params, tmp_path)
    for name in DATASETS:
        assert again["datasets"][name]["rows_sha256"] == rec["datasets"][name]["rows_sha256"]
    # A different seed gives a different split.
    other = prepare.run({**params, "seed": 8}, tmp_path)
    assert (
        other["datasets"]["bank_marketing"]["rows_sha256"] != rec["datasets"]["bank_marketing"]["rows_sha256"]
    )


def test_train_saves_json_model_and_margin_prob_predictions(project):
    from calibflow import models

    root, _ = project
    for name in DATASETS:
        preds = pd.read_parquet(root / "data/predictions" / f"{name}.parquet")
        assert {"row", "split", "y", "margin", "prob"} <= set(preds.columns)
        np.testing.assert_allclose(preds["prob"], expit(preds["margin"]), rtol=1e-6, atol=1e-7)
        frame = pd.read_parquet(root / "data/prepared" / f"{name}.parquet")
        model = models.load_model(root / "data/models" / f"{name}.json")
        X = frame[[c for c in frame.columns if c.startswith("f:")]].to_numpy()
        np.testing.assert_allclose(models.predict_margin(model, X), preds["margin"], rtol=1e-6, atol=1e-6)
    assert set(json.loads((root / "metrics/train.json").read_text())) == set(DATASETS)


def test_calibrate_saves_reloadable_calibrators(project):
    root, _ = project
    for m in METHODS:
        for name in DATASETS:
            out = pd.read_parquet(root / "data/calibrated" / m / f"{name}.parquet")
            cal = from_json((root / "data/calibrated" / m / f"{name}.json").read_text())
            np.testing.assert_array_equal(cal.predict(out["margin"].to_numpy()), out["prob"].to_numpy())
            assert out["prob"].between(0, 1).all()


def test_calibrate_and_evaluate_outputs_are_byte_identical_on_rerun(project):
    """No wall-clock fields in DVC outputs: the same inputs give the same bytes."""
    root, params = project

    def snapshot(*dirs: str) -> dict[str, bytes]:
        return {
            str(f.relative_to(root)): f.read_bytes()
            for d in dirs
            for f in sorted((root / d).rglob("*"))
            if f.is_file()
        }

    before = snapshot("data/calibrated/" + METHODS[0], "metrics/evaluation")
    calibrate.run(METHODS[0], params, root)
    evaluate.run(params, root)
    after = snapshot("data/calibrated/" + METHODS[0], "metrics/evaluation")
    assert after == before
    assert "seconds" not in (root / "data/calibrated" / METHODS[0] / "fit.json").read_text()


def test_evaluate_writes_metrics_with_intervals_for_every_pair(project):
    root, _ = project
    for name in DATASETS:
        files = sorted(p.stem for p in (root / "metrics/evaluation" / name).glob("*.json"))
        assert files == sorted([*METHODS, "uncalibrated"])
        for m in files:
            rec = json.loads((root / "metrics/evaluation" / name / f"{m}.json").read_text())
            for k in intervals.METRIC_KEYS:
                assert np.isfinite(rec[k])
                assert rec["ci"][k]["low"] <= rec["ci"][k]["high"]
            assert rec["selection"]["n_selected"] == int(np.ceil(0.1 * rec["n_test"]))
            rel = json.loads((root / "plots/reliability" / name / f"{m}.json").read_text())
            assert sum(r["count"] for r in rel) == rec["n_test"]
    # Temperature and Platt keep the base model's ranking: same AUC as uncalibrated.
    uncal = json.loads((root / "metrics/evaluation/bank_marketing/uncalibrated.json").read_text())
    platt = json.loads((root / "metrics/evaluation/bank_marketing/platt.json").read_text())
    assert platt["auc"] == pytest.approx(uncal["auc"], abs=1e-9)


def test_headline_and_reliability_bins_are_readable_on_hillstrom(project):
    """metrics/headline.json: a few numbers per dataset; hillstrom's diagram zoomed, equal-mass, intervals."""
    from calibflow.report.figures import zoom_limit

    root, _ = project
    head = json.loads((root / "metrics/headline.json").read_text())
    assert sorted(head) == sorted(DATASETS)
    for name, entry in head.items():  # the select stage's verdict with its interval
        card = json.loads((root / "models" / name / "card.json").read_text())
        assert len(entry) <= 8 and entry["verdict"] == card["verdict"] and entry["method"] == card["method"]
        assert entry["method"] in [*METHODS, "identity"]
        uncal = json.loads((root / "metrics/evaluation" / name / "uncalibrated.json").read_text())
        assert entry["log_loss_uncal"] == pytest.approx(uncal["log_loss"], rel=1e-5)
        assert entry["delta_best_low"] <= entry["delta_best"] <= entry["delta_best_high"]
        assert entry["margin"] == pytest.approx(0.001 * uncal["log_loss"], rel=1e-4)
        if entry["verdict"] == "keep":  # nothing cleared the margin, the best calibrator included
            assert entry["delta_best_high"] >= -entry["margin"]
        # sum p / sum y, 1 is perfect (not the library's sum p / sum y - 1)
        assert 0.5 < uncal["calibration_ratio"] < 1.5
        ci = uncal["ci"]["calibration_ratio"]
        assert ci["low"] <= uncal["calibration_ratio"] <= ci["high"]
    curves = {
        m.stem: json.loads(m.read_text())
        for m in sorted((root / "plots/reliability/hillstrom").glob("*.json"))
    }
    probs = pd.read_parquet(root / "data/predictions/hillstrom.parquet")
    assert zoom_limit(curves) < 0.75 and zoom_limit(curves) > probs["prob"].quantile(0.9)
    for recs in curves.values():
        counts = [r["count"] for r in recs]
        assert len(recs) >= 5 and max(counts) < 0.35 * sum(counts)  # equal mass, up to ties of the scores
        assert all(r["low"] <= r["observed"] <= r["high"] for r in recs)


def test_bootstrap_matches_library_weighted_metrics():
    """The vectorised bootstrap equals calibflow.metrics with the resample's multiplicities as weights."""
    rng = np.random.default_rng(3)
    s = rng.normal(size=800)
    y = (rng.random(800) < expit(s - 1)).astype(float)
    p = np.round(expit(1.4 * s - 0.8), 2)  # rounded: many ties, the hard case for AUC and KS
    counts = intervals.resample_counts(4, y, 11)
    vec = intervals.resample_metrics(y, p, counts, 10)
    for b in range(4):
        ref = metrics.summary(y, p, n_bins=10, sample_weight=counts[b])
        for k, v in ref.items():
            assert vec[k][b] == pytest.approx(v, rel=1e-10, abs=1e-12), k


def test_validation_results_saved_and_passing(project):
    root, _ = project
    for phase in validate.PHASES:
        res = json.loads((root / "reports/validation" / f"{phase}.json").read_text())
        assert res["success"] and res["suites"]
        assert all(s["evaluated"] > 0 for s in res["suites"])
    assert not (root / "gx").exists()


def test_failing_suite_stops_with_readable_summary_and_keeps_last_good(project, tmp_path, capsys):
    root, params = project
    work = tmp_path / "proj"
    shutil.copytree(root, work)
    good = (work / "reports/validation/calibrated.json").read_bytes()
    bad = work / "data/calibrated/platt/bank_marketing.parquet"
    frame = pd.read_parquet(bad)
    frame.loc[frame.index[:3], "prob"] = [1.5, -0.2, np.nan]
    frame.to_parquet(bad)
    argv = ["calibrated", "--root", str(work), "--params", str(_write_params(tmp_path, params))]
    assert validate.main(argv) == 1
    err = capsys.readouterr().err
    assert "validation calibrated: FAILED" in err
    assert "[FAILED] calibrated.platt.bank_marketing" in err
    assert "expect_column_values_to_be_between(column='prob', min_value=0.0, max_value=1.0)" in err
    assert "expect_column_values_to_not_be_null(column='prob')" in err
    assert "[ok] calibrated.isotonic.bank_marketing" in err
    assert (work / "reports/validation/calibrated.json").read_bytes() == good
    failed = json.loads((work / "reports/validation/calibrated.failed.json").read_text())
    assert not failed["success"]


def test_raw_suite_catches_a_broken_column():
    frame = pd.DataFrame({"y": ["yes", "no", "maybe"], "age": [30, 200, 40]})
    spec_frame, exps = validate.raw_suite("bank_marketing", frame)
    res = validate.run_suites([("raw.bank_marketing", spec_frame, exps)])[0]
    assert not res["success"]
    messages = " ".join(f["message"] for f in res["failures"])
    assert "expect_table_row_count_to_equal(value=45211): observed 3" in messages
    assert "expect_column_values_to_be_in_set(column='y'" in messages and "'maybe'" in messages
    assert "expect_column_to_exist(column='job')" in messages


def test_monotone_order_violation_is_caught():
    df = pd.DataFrame(
        {
            "margin": [2.0, -1.0, 0.0, 1.0, 3.0],
            "prob": [0.9, 0.1, 0.5, 0.4, 0.9 - 1e-17],
            "y": [0, 1, 0, 1, 1],
        }
    )
    frame, exps = validate.calibrated_suite(df, monotone=True)
    res = validate.run_suites([("calibrated.platt.toy", frame, exps)])[0]
    (fail,) = res["failures"]  # the 0.5 -> 0.4 reversal; the 1e-17 rounding dip at the end is tolerated
    assert fail["kwargs"]["column"] == "prob_drop" and fail["unexpected_count"] == 1
    assert fail["examples"] == [pytest.approx(0.1)]
    frame, exps = validate.calibrated_suite(df, monotone=False)
    assert validate.run_suites([("calibrated.other.toy", frame, exps)])[0]["success"]


def test_corrupted_input_fails_without_overwriting_last_good(project, tmp_path):
    root, params = project
    work = tmp_path / "proj"
    shutil.copytree(root, work)
    before = {p.name: p.read_bytes() for p in (work / "data/calibrated/platt").iterdir()}
    (work / "data/predictions/hillstrom.parquet").write_bytes(b"not a parquet file")
    with pytest.raises(Exception, match=r"(?i)parquet|magic"):
        calibrate.run("platt", params, work)
    after = {p.name: p.read_bytes() for p in (work / "data/calibrated/platt").iterdir()}
    assert after == before
    assert not [p for p in (work / "data/calibrated").iterdir() if p.name.startswith(".")]


def test_calibrate_rejects_special_and_unknown_methods(project):
    root, params = project
    with pytest.raises(_common.StageError, match="needs inputs beyond"):
        calibrate.run("vad", params, root)
    with pytest.raises(_common.StageError, match="unknown calibrator 'nope'"):
        calibrate.run("nope", params, root)
    with pytest.raises(_common.StageError, match="calibrate.methods lists"):
        _common.methods({"calibrate": {"methods": ["platt", "calem"]}})


def _fake_experiment(key: str, calls: list):
    def run(config, seed):
        import matplotlib.pyplot as plt

        from calibflow.plots import to_svg

        calls.append((config, seed))
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [0, config["n"]])
        return Reproduction(
            key=key,
            paper="A fake paper (2026)",
            profile="quick",
            tables=[Table("Table 1", ["method", "ours", "paper"], [["x", 0.5, 0.51]])],
            figures=[Figure("a line", to_svg(fig))],
            notes=["a note"],
            choices=["a choice"],
            metrics={"ece": 0.01, "bad": float("nan")},
        )

    return types.SimpleNamespace(run=run)


def test_reproduce_runs_the_configured_profile(project, tmp_path, monkeypatch):
    _, params = project
    calls: list = []
    monkeypatch.setitem(sys.modules, "calibflow.experiments.fake", _fake_experiment("fake", calls))
    p = {**params, "reproduce": {"profile": "quick", "fake": {"quick": {"n": 3}, "full": {"n": 100}}}}
    rep = reproduce.run("fake", p, tmp_path)
    assert calls == [({"n": 3}, 7)]
    saved = Reproduction.load(tmp_path / "reports/reproductions/fake.json")
    assert saved.tables[0].rows == [["x", 0.5, 0.51]]
    # Wall-clock time is not in the DVC output (byte-identical reruns) but in an untracked timings file.
    assert saved.elapsed_s == rep.elapsed_s == 0.0
    assert json.loads((tmp_path / "reports/timings/reproduce-fake.json").read_text())["seconds"] >= 0
    first = (tmp_path / "reports/reproductions/fake.json").read_bytes()
    reproduce.run("fake", p, tmp_path)
    assert (tmp_path / "reports/reproductions/fake.json").read_bytes() == first
    assert json.loads((tmp_path / "metrics/reproductions/fake.json").read_text()) == {
        "ece": 0.01,
        "bad": None,
    }
    reproduce.run("fake", p, tmp_path, profile="full")
    assert calls[-1] == ({"n": 100}, 7)


def test_reproduce_keeps_experiment_downloads_out_of_data_raw(tmp_path, monkeypatch):
    """Experiments fetch with the default data dir; that must not touch data/raw (fetch's DVC output)."""
    seen = []
    monkeypatch.delenv("CALIBFLOW_DATA_DIR", raising=False)

    def run(config, seed):
        from calibflow.datasets import resolve_data_dir

        seen.append(resolve_data_dir())
        return Reproduction(key="fake", paper="p", profile="quick")

    monkeypatch.setitem(sys.modules, "calibflow.experiments.fake", types.SimpleNamespace(run=run))
    p = {"seed": 1, "reproduce": {"profile": "quick", "fake": {"quick": {}}}}
    reproduce.run("fake", p, tmp_path)
    assert seen == [tmp_path / "data/papers"]
    assert "CALIBFLOW_DATA_DIR" not in __import__("os").environ
    monkeypatch.setenv("CALIBFLOW_DATA_DIR", str(tmp_path / "data/raw"))
    reproduce.run("fake", p, tmp_path)
    assert seen[-1] == tmp_path / "data/papers"


def test_reproduce_errors_are_readable(project, tmp_path, monkeypatch):
    _, params = project
    p = {**params, "reproduce": {"profile": "quick", "nosuch": {"quick": {}}, "fake": {"quick": {}}}}
    with pytest.raises(_common.StageError, match=r"no experiment module calibflow.experiments.nosuch"):
        reproduce.run("nosuch", p, tmp_path)
    with pytest.raises(_common.StageError, match=r"reproduce.absent is missing"):
        reproduce.run("absent", p, tmp_path)
    monkeypatch.setitem(sys.modules, "calibflow.experiments.fake", types.SimpleNamespace(run=lambda c, s: {}))
    with pytest.raises(_common.StageError, match="returned dict, not a Reproduction"):
        reproduce.run("fake", p, tmp_path)
    assert (
        reproduce.main(["nosuch", "--params", str(_write_params(tmp_path, p)), "--root", str(tmp_path)]) == 1
    )


def test_report_renders_every_section(project, tmp_path, monkeypatch):
    root, params = project
    work = tmp_path / "proj"
    shutil.copytree(root, work)
    monkeypatch.setitem(sys.modules, "calibflow.experiments.fake", _fake_experiment("fake", []))
    p = {
        **params,
        "papers": ["fake", "missing"],
        "reproduce": {"profile": "quick", "fake": {"quick": {"n": 2}}},
    }
    reproduce.run("fake", p, work)
    paper = report.run_paper("fake", work).read_text()
    out = report.run(p, work)
    page = out["html"].read_text()
    # Index: per dataset the answer's before-vs-chosen diagram, the reliability grid and the histograms;
    # the paper's figure lives on its own page.
    assert page.count("<figure") == 3 * len(DATASETS)
    assert page.count("<svg") == page.count("<figure")
    assert 'href="pages/paper-fake.html">Paper reproduction: A fake paper (2026)' in page
    assert "No result file for: missing" in page
    assert "A fake paper (2026)" in paper and paper.count("<svg") == 1 and "a choice" in paper
    assert "★" in page and "bank_marketing" in page
    for text in (page, paper):
        assert "<script" not in text and "http://" not in text.replace(
            'xmlns="http://www.w3.org/2000/svg"', ""
        ).replace('xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    # dvc plots show: the same reliability diagrams as image files
    images = sorted(x.name for x in (work / "plots/report").iterdir())
    assert images == [f"reliability-{d}.svg" for d in DATASETS]
    summary = out["summary"].read_text()
    assert "### bank_marketing" in summary and "**fake**" in summary and "no result file" in summary
    agg = json.loads((work / "reports/validation.json").read_text())
    assert agg["success"] and len(agg["suites"]) > 3


def test_atomic_dir_keeps_old_folder_on_failure(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), _common.atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("new")
        raise RuntimeError("boom")
    assert (target / "a.txt").read_text() == "old"
    with _common.atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert [p.name for p in target.iterdir()] == ["b.txt"]


def _write_params(tmp_path, params):
    import yaml

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_params_lists_every_standard_calibrator():
    """calibrate.methods in params.yaml: every method that fits on (score, label) alone but identity."""
    from pathlib import Path

    from calibflow.calibrators import available
    from calibflow.pipeline.params_schema import OUT_OF_DEFAULTS

    params = _common.load_params(Path(__file__).resolve().parents[2] / "params.yaml")
    standard = sorted(set(available()) - _common.SPECIAL_METHODS - {"identity"})  # written by select
    # issue 36: a standard method leaves the defaults only with a stated reason (bbq: worse than its peer)
    assert all(OUT_OF_DEFAULTS.values()) and set(OUT_OF_DEFAULTS) <= set(standard)
    assert sorted(_common.methods(params)) == sorted(set(standard) - set(OUT_OF_DEFAULTS))


CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
#: Desktop and phone widths the report must work at.
WIDTHS = (1400, 390)
SVG_CHECK = """<script>
(function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var out = [];
  document.querySelectorAll('figure svg').forEach(function (s) {
    var r = s.getBoundingClientRect(), b = s.getBBox();
    var refs = Array.from(s.querySelectorAll('[clip-path]')).map(function (e) {
      return e.getAttribute('clip-path').replace(/^url\\(#|\\)$/g, '');
    });
    var missing = refs.filter(function (id) { return !document.getElementById(id); }).length;
    out.push({w: r.width, h: r.height, bw: b.width, bh: b.height,
              drawn: s.querySelectorAll('path, use, line, rect, text').length, missing: missing});
  });
  parent.postMessage(JSON.stringify({figures: document.querySelectorAll('figure').length, svgs: out,
    page_w: document.documentElement.scrollWidth, view_w: window.innerWidth,
    answers: document.querySelectorAll('.answer').length}), '*');
})();
</script>"""
#: Headless Chromium will not make a window narrower than 500 px: the page goes in an iframe of the width
#: under test, and the probe posts its measurements to this frame page, which --dump-dom then prints.
FRAME = """<!DOCTYPE html><html><body style="margin:0">
<pre id="svgcheck" style="display:none">none</pre><script>
window.addEventListener('message', function (e) {
  document.getElementById('svgcheck').textContent = e.data;
});
</script><iframe src="SRC" style="border:0;width:Wpx;height:Hpx"></iframe></body></html>"""


def _chromium(tmp_path: Path, width: int, height: int, *args: str) -> subprocess.CompletedProcess:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'ud'}",
        f"--window-size={max(width, 500)},{height}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _frame(page: Path, width: int, height: int) -> Path:
    frame = page.parent / f".frame-{page.stem}-{width}.html"
    text = FRAME.replace("SRC", page.name).replace("Wpx", f"{width}px").replace("Hpx", f"{height}px")
    frame.write_text(text)
    return frame


def render_in_chromium(page: Path, tmp_path: Path, width: int = 1280) -> dict:
    """Open ``page`` at ``width`` with a probe script appended; return what it measured after layout."""
    probe = page.parent / f".probe-{page.stem}.html"  # beside the page, so relative links resolve the same
    probe.write_text(page.read_text().replace("</body>", SVG_CHECK + "</body>"))
    frame = _frame(probe, width, 2000)
    args = ("--virtual-time-budget=10000", "--dump-dom", frame.as_uri())
    dom = _chromium(tmp_path, width, 2000, *args).stdout
    probe.unlink()
    frame.unlink()
    start = dom.index(">", dom.index('id="svgcheck"')) + 1
    return json.loads(html.unescape(dom[start : dom.index("</pre>", start)]))


def screenshot(page: Path, out: Path, width: int, height: int = 3000) -> Path:
    """A PNG of the page's first ``height`` CSS pixels at ``width`` (to look at; the test checks its size)."""
    frame = _frame(page, width, height)
    _chromium(out.parent, width, height, f"--screenshot={out}", frame.as_uri())
    frame.unlink()
    return out


def test_report_renders_in_headless_chromium(project, tmp_path, monkeypatch):
    """The index and a paper page at 1400 px and at a phone width: figures laid out, drawn, no overflow."""
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium package")
        pytest.xfail("chromium is not installed here (apt-get install chromium); CI runs this check")
    root, params = project
    work = tmp_path / "proj"
    shutil.copytree(root, work)
    monkeypatch.setitem(sys.modules, "calibflow.experiments.fake", _fake_experiment("fake", []))
    p = {**params, "papers": ["fake"], "reproduce": {"profile": "quick", "fake": {"quick": {"n": 2}}}}
    reproduce.run("fake", p, work)
    paper = report.run_paper("fake", work)
    page = report.run(p, work)["html"]
    for width in WIDTHS:
        result = render_in_chromium(page, tmp_path, width)
        # per dataset: the answer's overlay, reliability grid, histograms (folded: the probe opens <details>)
        assert result["figures"] == 3 * len(DATASETS) == len(result["svgs"])
        assert result["answers"] == len(DATASETS)  # one card per dataset (the select stage ran)
        # Nothing wider than the window: wide tables scroll inside their own box.
        assert result["page_w"] <= result["view_w"] + 1, (width, result["page_w"])
        for s in result["svgs"]:
            assert s["w"] > 50 and s["h"] > 50 and s["bw"] > 0 and s["bh"] > 0, s
            # (on a phone a figure keeps its natural size and scrolls in its own box: page_w above)
            assert s["drawn"] > 10 and s["missing"] == 0, s
        on_paper = render_in_chromium(paper, tmp_path, width)
        assert on_paper["figures"] == 1 and on_paper["svgs"][0]["w"] > 50
        assert on_paper["page_w"] <= on_paper["view_w"] + 1
        shots = Path(os.environ.get("CALIBFLOW_SCREENSHOTS", tmp_path))  # set it to keep them and look
        shots.mkdir(parents=True, exist_ok=True)
        assert screenshot(page, shots / f"index-{width}.png", width).stat().st_size > 10_000
        assert screenshot(paper, shots / f"paper-{width}.png", width).stat().st_size > 10_000
    # The probe itself can fail: a figure squashed to nothing is reported as such.
    broken = work / "reports/broken.html"
    broken.write_text(page.read_text().replace("<svg ", '<svg style="width:0;height:0" ', 1))
    assert render_in_chromium(broken, tmp_path)["svgs"][0]["w"] == 0


def test_train_replicas_are_saved_and_differ(tmp_path):
    """``replicas: {n: 2}`` adds two JSON models and their margins, each different from the served model."""
    from calibflow import models

    params = copy.deepcopy(TINY)
    params["datasets"] = {"names": ["bank_marketing"], "max_rows": 800}
    params["replicas"] = {"n": 2, "scheme": "bootstrap"}
    fetch.run(params, tmp_path)
    prepare.run(params, tmp_path)
    train.run(params, tmp_path)
    preds = pd.read_parquet(tmp_path / "data/predictions/bank_marketing.parquet")
    for r in (1, 2):
        rep = models.load_model(tmp_path / "data/models" / f"bank_marketing.replica{r}.json")
        frame = pd.read_parquet(tmp_path / "data/prepared/bank_marketing.parquet")
        X = frame[[c for c in frame.columns if c.startswith("f:")]].to_numpy()
        np.testing.assert_allclose(models.predict_margin(rep, X), preds[f"margin_replica{r}"], atol=1e-6)
        assert np.abs(preds[f"margin_replica{r}"] - preds["margin"]).max() > 1e-3


def test_reproduce_standard_profile_falls_back_to_quick(project, tmp_path, monkeypatch):
    """Issue 16: a paper with a ``standard`` block runs it; a paper without one runs its quick block."""
    _, params = project
    calls: list = []
    monkeypatch.setitem(sys.modules, "calibflow.experiments.fake", _fake_experiment("fake", calls))
    p = {**params, "reproduce": {"profile": "standard", "fake": {"quick": {"n": 3}, "standard": {"n": 30}}}}
    reproduce.run("fake", p, tmp_path)
    assert calls[-1] == ({"n": 30}, 7)
    p = {**params, "reproduce": {"profile": "standard", "fake": {"quick": {"n": 3}, "full": {"n": 100}}}}
    reproduce.run("fake", p, tmp_path)
    assert calls[-1] == ({"n": 3}, 7)
