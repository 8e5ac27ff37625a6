"""The select rule (calibflow.selection): keep your scores, the margin, the simplest near-best, no flips."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from helpers.source_data import scores_frame, write
from helpers.sources_pipeline import run_pipeline, source_params
from scipy.special import expit, logit

from calibflow import calibrators as C
from calibflow import metrics
from calibflow import selection as S
from calibflow.io import read_json
from calibflow.pipeline import select


def _scores(n: int, seed: int, slope: float, shift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Labels from a true probability and a model probability ``sigmoid(slope * logit + shift)``."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-2.0, 1.2, size=n)
    y = (rng.random(n) < expit(z)).astype(np.float64)
    return y, expit(z), expit(slope * z + shift)


def test_clt_interval_matches_the_paired_bootstrap():
    """The deterministic interval is the bootstrap's up to resampling noise (2000 resamples, 3 cases)."""
    for seed, (slope, shift) in enumerate([(0.95, 0.0), (1.1, 0.05), (1.4, 0.3)]):
        y, p_true, p_model = _scores(20_000, seed, slope, shift)
        clt = S.paired_log_loss(y, p_true, p_model, 0.95)
        d = metrics.row_log_loss(y, p_model) - metrics.row_log_loss(y, p_true)
        rng = np.random.default_rng(100 + seed)
        boot = np.array([d[rng.integers(0, d.size, d.size)].mean() for _ in range(2000)])
        lo, hi = np.quantile(boot, [0.025, 0.975])
        width = clt.high - clt.low
        assert clt.delta == pytest.approx(d.mean(), abs=1e-15)
        assert abs(lo - clt.low) < 0.1 * width and abs(hi - clt.high) < 0.1 * width


def test_clt_weights_are_row_counts():
    y, p0, p1 = _scores(3000, 7, 1.3, 0.2)
    w = np.random.default_rng(1).integers(1, 4, size=y.size)
    weighted = S.paired_log_loss(y, p0, p1, 0.9, sample_weight=w)
    repeated = S.paired_log_loss(np.repeat(y, w), np.repeat(p0, w), np.repeat(p1, w), 0.9)
    assert weighted.n == repeated.n == w.sum()
    np.testing.assert_allclose([weighted.low, weighted.high], [repeated.low, repeated.high], rtol=1e-9)


def _paired(delta: float, half: float) -> S.Paired:
    return S.Paired(delta, delta - half, delta + half, half / 1.96, 10_000)


def test_keep_your_scores_when_no_method_clears_the_margin():
    """Best lowers log loss, interval excludes 0, but not the margin (0.1% of 0.4 = 0.0004): keep."""
    d = S.decide(0.4, {"spline": _paired(-0.0005, 0.0002), "platt": _paired(-0.0001, 0.0001)}, {}, 0.001)
    assert d.verdict == S.KEEP and d.method == S.IDENTITY and d.margin == pytest.approx(0.0004)
    assert d.runner_up == "spline" and not d.cleared
    # the same numbers with a 0.05% margin: spline clears it and is written
    d = S.decide(0.4, {"spline": _paired(-0.0005, 0.0002), "platt": _paired(-0.0001, 0.0001)}, {}, 0.0005)
    assert d.verdict == S.CALIBRATE and d.method == "spline"


def test_simplest_of_the_near_best_wins():
    """gaussian is best by 1e-5 (< margin) over beta and platt: platt has fewer parameters and wins."""
    cmp = {
        "gaussian": _paired(-0.0100, 0.001),
        "beta": _paired(-0.00999, 0.001),
        "platt": _paired(-0.00995, 0.001),
        "isotonic": _paired(-0.0050, 0.001),
    }
    n_params = {"gaussian": 3, "beta": 3, "platt": 2, "isotonic": 40}
    d = S.decide(0.2, cmp, n_params, 0.001)
    assert d.verdict == S.CALIBRATE and d.best == "gaussian" and d.method == "platt"
    assert d.equivalent == ["platt", "beta", "gaussian"] and d.runner_up == "beta"
    assert d.cleared == ["gaussian", "beta", "platt", "isotonic"]
    # familiarity breaks a tie in the parameter count
    assert S.preference_key("beta", 3) < S.preference_key("gaussian", 3)


def test_parameter_count_and_the_identity_calibrator():
    """Counts of real fitted calibrators; identity fits nothing, round-trips and is the scores unchanged."""
    y, _, p = _scores(4000, 3, 1.5, 0.4)
    counts = {m: S.parameter_count(json.loads(C.make(m, input="probability").fit(p, y).to_json()))
              for m in ("identity", "temperature", "platt", "beta", "isotonic")}
    assert counts["identity"] == 0 and counts["temperature"] == 1 and counts["platt"] == 2
    assert counts["beta"] == 3 and counts["isotonic"] > 5
    for kind, s in (("probability", p), ("logit", logit(p))):
        ident = C.make("identity", input=kind).fit(s, y)
        again = C.from_json(ident.to_json())
        np.testing.assert_allclose(again.predict(s), p, rtol=0, atol=1e-12)
        assert C.get_class("identity").monotone and np.all(np.diff(again.predict(np.sort(s))) >= 0)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A score source through the stages: miscalibrated ``ads`` and a calibrated copy ``fine``."""
    root = tmp_path_factory.mktemp("select")
    frame = scores_frame(n=6000, days=30, seed=5)
    frame["p_fine"] = expit((logit(frame["p_model"]) - 0.7) / 1.8)  # the true probability
    path = write(frame, "parquet", root / "userdata")
    params = source_params(str(path.relative_to(root)), with_features=False)
    params["sources"]["fine"] = dict(params["sources"]["ads"], score="p_fine")
    run_pipeline(params, root, with_report=False)
    return root, params


def test_select_keeps_calibrated_scores_and_calibrates_miscalibrated_ones(project):
    root, _ = project
    ads, fine = read_json(root / "models/ads/card.json"), read_json(root / "models/fine/card.json")
    assert ads["verdict"] == S.CALIBRATE and ads["method"] in ("platt", "isotonic")
    assert ads["metrics"]["log_loss"]["delta_ci"][1] < -ads["selection"]["margin"]
    assert fine["verdict"] == S.KEEP and fine["method"] == S.IDENTITY
    assert fine["reason"].startswith("Keep your scores") and "margin" in fine["rule"]
    assert fine["runner_up"] in ("platt", "isotonic")
    # the identity calibrator file works like any other: apply gives the scores back
    cal = C.from_json((root / "models/fine/calibrator.json").read_text())
    p = np.array([0.01, 0.2, 0.7])
    np.testing.assert_allclose(cal.predict(logit(p)), p, atol=1e-12)  # calibrate.input is logit
    head = read_json(root / "metrics/headline.json")  # dvc metrics: the verdict and what it rests on
    assert head["fine"]["verdict"] == "keep" and head["ads"]["method"] == ads["method"]
    assert head["ads"]["delta_best_high"] < -head["ads"]["margin"] < 0 and len(head["ads"]) <= 8
    fine_best = fine["selection"]["comparisons"][fine["selection"]["best"]]
    assert head["fine"]["delta_best_high"] == pytest.approx(fine_best["high"], rel=1e-5)
    assert head["fine"]["delta_best_high"] >= -head["fine"]["margin"]  # why it keeps


def test_verdict_does_not_depend_on_the_bootstrap_count(project):
    """n_bootstrap 100, 200 and 1000: the same verdicts, methods and log-loss intervals."""
    root, params = project
    seen = []
    for n_boot in (100, 200, 1000):
        p = copy.deepcopy(params)
        p["evaluate"]["n_bootstrap"] = n_boot
        cards = select.run(p, root)
        seen.append({n: (c["verdict"], c["method"], c["metrics"]["log_loss"]["delta_ci"])
                     for n, c in cards.items()})
    assert seen[0] == seen[1] == seen[2]


def test_named_rules_and_margin_zero(project):
    """rule identity always keeps; a zero margin makes any clear improvement count."""
    root, params = project
    p = copy.deepcopy(params)
    p["select"] = {"rule": "identity", "margin": 0.001}
    assert all(c["method"] == S.IDENTITY for c in select.run(p, root).values())
    p["select"] = {"rule": "auto", "margin": 0.5}  # half the log loss: nothing clears it
    assert all(c["verdict"] == S.KEEP for c in select.run(p, root).values())
    select.run(params, root)  # leave the default answer for the other tests


def test_aggregate_path_gives_the_same_verdicts(project):
    """Above scale.row_threshold select reads bucket tables (replicate intervals): same verdicts and methods,
    the identity written for the calibrated source."""
    root, params = project
    rows = {n: (c["verdict"], c["method"]) for n, c in select.run(params, root).items()}
    p = copy.deepcopy(params)
    p["scale"] = {"row_threshold": 1000, "replicates": 40}
    cards = select.run(p, root)
    assert all(c["path"] == "aggregate" for c in cards.values())
    assert {n: (c["verdict"], c["method"]) for n, c in cards.items()} == rows
    assert cards["fine"]["method"] == S.IDENTITY and "identity" not in cards["fine"]["candidates"]
    select.run(params, root)
