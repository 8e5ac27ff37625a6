"""Calibration per segment: partial pooling, the shared segment reading, the per-segment check,
and a source with segments through every stage, select's choice, the card, the report and `calibflow apply`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers.sources_pipeline import run_pipeline
from scipy.special import expit, logit
from typer.testing import CliRunner

from calibflow import calibrators as C
from calibflow import segments as S
from calibflow.io import read_json

REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------------------ the method
def _one_column(rng, sizes: dict[str, int], bias: dict[str, float]):
    seg = np.concatenate([np.full(n, k, dtype=object) for k, n in sizes.items()])
    z = rng.normal(-1.0, 1.2, seg.size)
    shift = np.array([bias[k] for k in seg])
    y = (rng.random(seg.size) < expit(z + shift)).astype(float)
    return z, y, seg


def _unpooled(cal, z, y, seg, value):
    """The level's own estimate at the fit: its offset plus one Newton step of its unpenalised score."""
    p = cal.predict(z, segments={"country": seg})
    m = seg == value
    k = cal.vocab_[0].index(value)
    return cal.blocks_[0]["offset"][k] + (y[m] - p[m]).sum() / (p[m] * (1 - p[m])).sum()


def test_partial_pooling_shrinks_by_evidence(rng):
    """Same true bias for a segment with ~30 positives and one with ~30,000: the first moves little, the
    second fully. Twenty other segments spread N(0, 0.15) so the prior variance has something to learn from;
    the small segment's offset is its own estimate times tau^2 / (tau^2 + 1/I), the empirical Bayes rule."""
    others = {f"m{i}": b for i, b in enumerate(np.random.default_rng(7).normal(0, 0.15, 20))}
    sizes = {"big": 90_000, "small": 90, **{k: 8000 for k in others}}
    z, y, seg = _one_column(rng, sizes, {"big": 0.3, "small": 0.3, **others})
    assert 20 <= y[seg == "small"].sum() <= 45 and y[seg == "big"].sum() > 25_000
    cal = C.make("partial_pooling", input="logit", slopes=False).fit(z, y, segments={"country": seg})
    off = dict(zip(cal.vocab_[0], cal.blocks_[0]["offset"], strict=True))
    ratio_small = off["small"] / _unpooled(cal, z, y, seg, "small")
    ratio_big = off["big"] / _unpooled(cal, z, y, seg, "big")
    assert ratio_big > 0.99
    assert ratio_small < 0.6
    tau2 = cal.blocks_[0]["tau2"]
    p = cal.predict(z, segments={"country": seg})
    m = seg == "small"
    info = (p[m] * (1 - p[m])).sum()
    assert ratio_small == pytest.approx(tau2 / (tau2 + 1 / info), abs=0.03)
    # the big segment is calibrated: sum p / sum y within 1% on its rows
    m = seg == "big"
    assert abs(p[m].sum() / y[m].sum() - 1) < 0.01


def test_partial_pooling_no_heterogeneity_means_no_offsets(rng):
    z, y, seg = _one_column(rng, {f"v{i}": 5000 for i in range(6)}, {f"v{i}": 0.0 for i in range(6)})
    cal = C.make("partial_pooling", input="logit").fit(z, y, segments={"c": seg})
    platt = C.make("platt", input="logit").fit(z, y)
    p, q = cal.predict(z, segments={"c": seg}), platt.predict(z)
    assert np.max(np.abs(p - q)) < 0.01  # pooled all the way back to the global map


def test_partial_pooling_contract_nulls_unseen_weights(rng):
    n = 30_000
    country = rng.choice(np.array(["FR", "DE", "US", None], dtype=object), n, p=[0.3, 0.3, 0.3, 0.1])
    device = rng.choice(np.array([1.0, 2.0, np.nan]), n)
    z = rng.normal(-1, 1.5, n)
    shift = np.select([country == "FR", pd.isna(country)], [0.5, -0.7], 0.0)
    y = (rng.random(n) < expit(0.8 * z + shift)).astype(float)
    segs = {"country": country, "device": device}
    cal = C.make("partial_pooling", input="logit").fit(z, y, segments=segs)
    assert "(null)" in cal.vocab_[0] and cal.vocab_[1] == ["(null)", "1", "2"]
    # JSON round trip, exact; a state cut short is refused when read, not at predict
    again = C.from_json(cal.to_json())
    np.testing.assert_array_equal(again.predict(z, segments=segs), cal.predict(z, segments=segs))
    payload = json.loads(cal.to_json())
    payload["state"]["blocks_"][0]["offset"]["__ndarray__"].pop()
    with pytest.raises(ValueError, match="malformed"):
        C.from_json(json.dumps(payload))
    # the null level learned its own offset (-0.7 in truth): its rows are calibrated
    p = cal.predict(z, segments=segs)
    m = pd.isna(country)
    assert abs(p[m].sum() / y[m].sum() - 1) < 0.05
    # monotone in the score within a segment
    grid = np.linspace(-6, 6, 200)
    for c in ("FR", "DE", None, "never seen"):
        one = {"country": np.full(200, c, dtype=object), "device": np.full(200, 1.0)}
        pg = cal.predict(grid, segments=one)
        assert np.all(np.diff(pg) > 0)
    # a value never seen: that column adds nothing; both unseen -> exactly the global map; counted
    both = {"country": np.full(3, "BR", dtype=object), "device": np.array([7.0, 7.0, 7.0])}
    a, b, c = cal.global_
    np.testing.assert_allclose(cal.predict([-1.0, 0.0, 1.0], segments=both),
                               expit(a + np.exp(b) * (np.array([-1.0, 0.0, 1.0]) - c)))
    assert cal.unseen_counts(both, 3) == {"country": 3, "device": 3}
    assert cal.unseen_counts(segs, n) == {"country": 0, "device": 0}
    # weights are counts: weight 2 on a row equals the row twice
    w = rng.integers(1, 3, n).astype(float)
    rep = np.repeat(np.arange(n), w.astype(int))
    fw = C.make("partial_pooling", input="logit").fit(z, y, sample_weight=w, segments=segs)
    fr = C.make("partial_pooling", input="logit").fit(
        z[rep], y[rep], segments={k: v[rep] for k, v in segs.items()}
    )
    np.testing.assert_allclose(fw.predict(z, segments=segs), fr.predict(z, segments=segs), atol=1e-6)


def test_partial_pooling_intersections_only_when_supported(rng):
    n = 60_000
    country = rng.choice(np.array(["FR", "DE", "US", "IT"]), n)
    device = rng.choice(np.array(["ios", "web", "android"]), n)
    z = rng.normal(-1.5, 1.3, n)
    main = np.where(country == "FR", 0.4, 0.0) + np.where(device == "ios", -0.3, 0.0)
    inter = np.where((country == "US") & (device == "web"), 0.8, 0.0)
    segs = {"country": country, "device": device}
    for with_inter, expect in ((True, True), (False, False)):
        y = (rng.random(n) < expit(z + main + (inter if with_inter else 0))).astype(float)
        cal = C.make("partial_pooling", input="logit").fit(z, y, segments=segs)
        (test,) = cal.pair_tests_
        assert test["included"] is expect, test
        assert len(cal.blocks_) == 2 + int(expect)
        if expect:  # the US x web cell is calibrated
            p = cal.predict(z, segments=segs)
            m = (country == "US") & (device == "web")
            assert abs(p[m].sum() / y[m].sum() - 1) < 0.03


def test_multicalibration_shares_the_reading_and_counts_unseen(rng):
    n = 20_000
    country = rng.choice(np.array(["FR", "DE", None], dtype=object), n)
    z = rng.normal(-1, 1.2, n)
    y = (rng.random(n) < expit(z + np.where(country == "FR", 0.8, 0.0))).astype(float)
    mc = C.make("multicalibration", input="logit").fit(z, y, segments={"country": country})
    assert mc.vocab_ == [["(null)", "DE", "FR"]]
    segs = pd.DataFrame({"other": np.zeros(3), "country": ["FR", "XX", None]})  # by name, extra column ok
    assert mc.unseen_counts(segs, 3) == {"country": 1}
    assert mc.predict([0.0, 0.0, 0.0], segments=segs).shape == (3,)


# ------------------------------------------------------------------------------------------ the check
def test_segment_check_counts_add_up_and_flags(rng):
    n = 20_000
    values = np.array(["A", "B", None] + [f"t{i}" for i in range(30)], dtype=object)
    col = rng.choice(values, n, p=[0.2, 0.2, 0.2] + [0.4 / 30] * 30)
    y = (rng.random(n) < 0.3).astype(float)
    p_ok = np.full(n, 0.3)
    p_bad = np.where(col == "A", 0.45, 0.3)  # 50% too high on A only
    rows = S.segment_check(y, p_ok, p_bad, {"c": col}, n_boot=100, seed=1, top=5)
    assert sum(r["n"] for r in rows) == n
    values = [r["value"] for r in rows]
    assert "(null)" in values and any(v.startswith("(other values)") for v in values)
    flagged = [r["value"] for r in rows if r["flagged"]]
    # A is off by 50%; the others are calibrated, so only chance flags them (95% intervals: ~5% of them)
    assert "A" in flagged and len(flagged) - 1 <= 3
    # chance counts every value tested (33 values, then the pooled row's own interval), not the rows shown
    assert len(rows) < 33 and S.tested_intervals(rows) == 33 + 1
    assert S.chance_flags(rows, 0.95) == pytest.approx(0.05 * 34)
    lines = S.flag_lines(rows)
    assert lines[0].startswith("c = A: sum p / sum y 1.5") and len(lines) == len(flagged)
    # paired test (the one the stages use): the good probabilities beat the bad ones beyond noise; the
    # same ones do not beat themselves
    from calibflow.selection import paired_log_loss

    assert paired_log_loss(y, p_bad, p_ok).high < 0
    same = paired_log_loss(y, p_ok, p_ok)
    assert same.delta == 0 and not same.high < 0


# ------------------------------------------------------------------------------------------ the product
def ctr_frame(n: int, days: int, seed: int, biased: bool) -> pd.DataFrame:
    """A CTR export whose model misses a country effect (BR, IN under-predicted), 5% null countries."""
    rng = np.random.default_rng(seed)
    x1 = rng.normal(size=n)
    country = rng.choice(np.array(["US", "FR", "DE", "BR", "IN", None], dtype=object), n,
                         p=[0.35, 0.2, 0.15, 0.13, 0.12, 0.05])
    shift = np.select([country == "BR", country == "IN"], [0.6, 0.8], 0.0) if biased else np.zeros(n)
    base = -1.6 + 1.1 * x1
    y = (rng.random(n) < expit(base + shift)).astype(np.int64)
    p_model = expit(1.4 * base + 0.3)
    day = pd.Timestamp("2026-09-01") + pd.to_timedelta(np.sort(rng.integers(0, days, n)), unit="D")
    return pd.DataFrame({"date": day.date, "country": country, "p_model": p_model, "clicked": y})


def _params(paths: dict[str, str]) -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["datasets"]["names"] = []
    params["papers"] = []
    params["calibrate"]["methods"] = ["platt", "isotonic"]
    params["evaluate"].update(n_bootstrap=100, n_bins=10)
    params["sources"] = {
        name: {"path": p, "label": "clicked", "score": "p_model", "score_kind": "probability",
               "time": "date", "segments": ["country"]}
        for name, p in paths.items()
    }
    return params


@pytest.fixture(scope="module")
def seg_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("segrun")
    frames = {"ads": ctr_frame(24_000, 28, 5, biased=True), "flat": ctr_frame(24_000, 28, 6, biased=False)}
    (root / "userdata").mkdir()
    for name, frame in frames.items():
        frame.to_parquet(root / "userdata" / f"{name}.parquet", index=False)
    params = _params({n: f"userdata/{n}.parquet" for n in frames})
    (root / "params.used.yaml").write_text(yaml.safe_dump(params))
    run_pipeline(params, root, segments=True)
    return root, frames


def test_segmented_chosen_only_on_evidence(seg_run):
    root, _ = seg_run
    ads, flat = (read_json(root / f"models/{n}/card.json") for n in ("ads", "flat"))
    # biased source: the segmented calibrator wins the paired test and is deployed
    assert ads["segmented"]["chosen"] is True
    assert ads["method"] == ads["segmented"]["segmented_method"] in ("partial_pooling", "multicalibration")
    assert ads["segmented"]["delta_ci"][1] < 0
    assert "better on the test split" in ads["segment_reason"] and ads["input"]["segments"] == ["country"]
    # control: no segment effect, so the global calibrator is kept and the card says why
    assert flat["segmented"]["chosen"] is False
    assert flat["method"] == flat["segmented"]["global_method"] in ("platt", "isotonic")
    assert "the global" in flat["segment_reason"] and "is kept" in flat["segment_reason"]


def test_card_segments_before_after_and_counts(seg_run):
    root, _ = seg_run
    card = read_json(root / "models/ads/card.json")
    # issue 35: prepare keeps a score source's tables, not its rows; the split's rows are the row split's
    # (prepare_source), its test count checked equal to the stage's
    from calibflow.pipeline import _sources, prepare

    params = yaml.safe_load((root / "params.used.yaml").read_text())
    prep, _ = prepare.prepare_source(_sources.specs(params, root)["ads"], int(params["seed"]))
    n_test = int((prep["split"] == "test").sum())
    assert n_test == read_json(root / "data/prepared/splits.json")["datasets"]["ads"]["counts"]["test"]
    rows = {r["value"]: r for r in card["segments"]}
    assert sum(r["n"] for r in card["segments"]) == n_test  # nulls included
    assert rows["(null)"]["n"] == int(((prep["split"] == "test") & (prep["s:country"] == "(null)")).sum())
    for c in ("BR", "IN"):  # the global model left them off; after: their intervals cover 1
        lo_b, hi_b = rows[c]["ratio_uncalibrated_ci"]
        assert hi_b < 0.9, rows[c]
        lo, hi = rows[c]["ratio_ci"]
        assert lo <= 1 <= hi and not rows[c]["flagged"]
    # every flagged segment has its own line on the card
    flagged = [r for r in card["segments"] if r["flagged"]]
    assert len(card["segment_flags"]) == len(flagged)
    html = (root / "reports/index.html").read_text()
    assert "better on the test split" in html and "country = (null)" in html
    assert html.count("better on the test split") == 1  # the deployed challenger's line once, not twice


def test_apply_reads_segments_and_counts_unseen(seg_run, tmp_path):
    from calibflow.cli.main import app

    root, frames = seg_run
    cal_path = root / "models/ads/calibrator.json"
    cal = C.from_json(cal_path.read_text())
    new = frames["ads"].iloc[:3000].copy()
    new.loc[new.index[:40], "country"] = "ZZ"  # a market the calibrator never saw
    inp, out = tmp_path / "new.parquet", tmp_path / "scored.parquet"
    new.to_parquet(inp, index=False)
    res = CliRunner().invoke(app, ["apply", "--calibrator", str(cal_path), "--input", str(inp),
                                   "--score", "p_model", "--output", str(out), "--batch-rows", "700"])
    assert res.exit_code == 0, res.output
    assert "40 rows have a country value unseen in fitting" in res.output
    scored = pd.read_parquet(out)
    z = logit(np.clip(new["p_model"].to_numpy(), 1e-12, 1 - 1e-12))
    want = cal.predict(z, segments={"country": new["country"].to_numpy(dtype=object)})
    np.testing.assert_allclose(scored["calibrated"].to_numpy(), want, rtol=0, atol=1e-12)
    # the segment column missing: one line naming it, nothing written
    inp2, out2 = tmp_path / "nocountry.parquet", tmp_path / "out2.parquet"
    new.drop(columns=["country"]).to_parquet(inp2, index=False)
    res = CliRunner().invoke(app, ["apply", "--calibrator", str(cal_path), "--input", str(inp2),
                                   "--score", "p_model", "--output", str(out2)])
    assert res.exit_code != 0 and "segment column(s) ['country']" in res.output
    assert "Traceback" not in res.output and not out2.exists()
    assert json.loads(cal_path.read_text())["method"] in ("partial_pooling", "multicalibration")


def test_readme_init_with_two_segment_columns(tmp_path, monkeypatch):
    """The README's first command (init --segments country,device) declares both columns."""
    import re
    import shlex

    from calibflow.cli.main import app

    readme = (REPO / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("calibflow init "))
    args = shlex.split(line)[1:]
    assert args[args.index("--segments") + 1] == "country,device"
    frame = ctr_frame(3000, 10, 1, biased=True).rename(columns={"date": "day"})
    frame["device"] = np.random.default_rng(2).choice(["ios", "web"], len(frame))
    frame.to_parquet(tmp_path / "scores.parquet", index=False)
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    monkeypatch.chdir(tmp_path)  # the README's paths are relative to the project folder
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    decl = yaml.safe_load((tmp_path / "params.yaml").read_text())["sources"]["ads"]
    assert decl["segments"] == ["country", "device"]
    assert re.search(r"calibflow apply --calibrator models/ads/calibrator.json", readme)


def test_params_segmented_names_only_segmented_methods():
    from calibflow.pipeline.params_schema import ParamsError, validate_params, with_paper_profiles

    params = with_paper_profiles(yaml.safe_load((REPO / "params.yaml").read_text()), REPO / "params.yaml")
    assert validate_params(params) is not None
    params["calibrate"]["segmented"] = ["platt"]
    with pytest.raises(ParamsError, match="'platt' is not a segmented method"):
        validate_params(params)


def test_aggregate_records_count_the_pooled_values_as_tested():
    """The table path's records pool values past ``top``; each was tested, so chance counts them all."""
    import pandas as pd

    from calibflow.aggregate.segments import records_from_metrics

    k = 200
    mu = pd.DataFrame({"value": [f"c{i}" for i in range(k)], "n": np.arange(k, 0, -1) * 100.0,
                       "positives": np.arange(k, 0, -1) * 30.0, "calibration_ratio": np.ones(k),
                       "sum_p": np.arange(k, 0, -1) * 30.0})
    mc = mu.assign(calibration_ratio_low=0.98, calibration_ratio_high=1.02)
    mc.loc[150, ["calibration_ratio_low", "calibration_ratio_high"]] = [1.01, 1.05]  # one flagged, past top
    rows = records_from_metrics(mu, mc, "country", top=20)
    assert len(rows) == 20 + 1 + 1 and rows[-1]["value"].startswith(S.OTHER_LEVEL)
    assert rows[-1]["tested"] == k - 21 and S.tested_intervals(rows) == k
    assert S.chance_flags(rows, 0.95) == pytest.approx(0.05 * k)


def _records_reference(mu, mc, column, top=None):
    """``records_from_metrics`` as it was written before the columns were taken out once (a pandas
    lookup per value and field): the card's rows must not change."""
    from calibflow.aggregate.segments import _pooled

    def ratio_ci(m, i):
        if "calibration_ratio_low" in m.columns and np.isfinite(m["calibration_ratio_low"].iloc[i]):
            return [float(m["calibration_ratio_low"].iloc[i]), float(m["calibration_ratio_high"].iloc[i])]
        return None

    order = np.argsort(-mu["n"].to_numpy(), kind="stable")
    out, rest = [], []
    for rank, i in enumerate(order):
        ci, ci_u = ratio_ci(mc, i), ratio_ci(mu, i)
        pos = float(mu["positives"].iloc[i])
        flagged = S.is_flagged(ci, pos)
        if top and rank >= top and not flagged:
            rest.append(i)
            continue
        out.append({
            "column": column,
            "value": S.NULL_LEVEL if pd.isna(mu["value"].iloc[i]) else str(mu["value"].iloc[i]),
            "n": int(round(mu["n"].iloc[i])),
            "positives": int(round(pos)),
            "ratio_uncalibrated": float(mu["calibration_ratio"].iloc[i]) if pos else None,
            "ratio": float(mc["calibration_ratio"].iloc[i]) if pos else None,
            "ratio_ci": ci,
            "ratio_uncalibrated_ci": ci_u,
            "flagged": flagged,
            "too_few": not S.enough_evidence(pos),
        })
    if rest:
        out.append(_pooled(mu, mc, rest, column))
    return out


@pytest.mark.parametrize("top", [None, 20])
def test_aggregate_records_equal_the_per_value_lookups(top):
    """230 values of a string column from a real table pass (``segment_metrics`` with intervals), a
    null value among them, many values with 0-3 positives, ties in size: the records are the previous
    formula's, field for field."""
    from calibflow.aggregate.segments import records_from_metrics, segment_metrics

    rng = np.random.default_rng(5)
    k, rows = 230, 60_000
    names = np.array([f"site_{i:03d}" for i in range(k)] + [None], dtype=object)
    share = 1.0 / np.arange(1, k + 2) ** 1.1
    value = rng.choice(k + 1, size=rows, p=share / share.sum())
    q = expit(rng.normal(-4.6, 1.0, rows))
    y = (rng.random(rows) < q * 1.3).astype(np.int64)
    bucket = np.minimum((logit(q) + 16) / 32 * 64, 63).astype(np.int64)
    frame = pd.DataFrame({"code": value, "bucket": bucket, "label": y, "q": q})
    t = frame.groupby(["code", "bucket", "label"], as_index=False).agg(
        n=("q", "size"), sum_q=("q", "sum"), sum_q2=("q", lambda v: float((v * v).sum())),
        sum_ll=("q", lambda v: 0.0))
    t["n"] = t["n"].astype(np.float64)
    t["sum_ll"] = np.where(t["label"] == 1, -np.log(t["sum_q"] / t["n"]), -np.log1p(-t["sum_q"] / t["n"]))
    t["sum_ll"] *= t["n"]
    t["seg_0"] = names[t["code"].to_numpy()]
    mu = segment_metrics(t, replicates=16, seed=1)
    cal = t.assign(sum_q=t["sum_q"] * 0.8, sum_q2=t["sum_q2"] * 0.64)
    mc = segment_metrics(cal, replicates=16, seed=1)
    assert len(mu) == k + 1 and mu["value"].isna().sum() == 1
    assert ((mu["positives"] <= 3) & (mu["positives"] >= 0)).sum() > 50 and (mu["positives"] == 0).any()
    got = records_from_metrics(mu, mc, "site", top)
    want = _records_reference(mu, mc, "site", top)
    assert got == want
    assert any(r["value"] == S.NULL_LEVEL for r in got) or top
    assert any(r["flagged"] for r in got) and any(r["too_few"] for r in got)
