"""Issue 36: per-segment intervals with measured behaviour and flags that mean something.

- ``intervals.ratio_interval`` (``sum p / sum y`` from the counts) never has zero width, is open above with
  no positive, and is the same on the row path, the table path and the streamed pass;
- on null data (scores right per segment, 300 Zipf-sized segments, base rate 0.5%) the number of flags
  after calibration stays inside the binomial 95% band of the stated chance count, on the row and the table
  paths; segments under ``MIN_POSITIVES`` are listed as too few positives, never flagged;
- flags rank by how far off a segment is, not by name.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from calibflow import segments as S
from calibflow.aggregate import segment_compare as sc
from calibflow.aggregate import tables as T
from calibflow.calibrators import make
from calibflow.intervals import ratio_interval
from calibflow.pipeline import _aggregate


def test_ratio_interval_is_never_zero_width():
    # one row, one positive, p = 0.5897: the bootstrap gave [0.5897, 0.5897]
    lo, hi = ratio_interval(1.0, 0.5897, 0.5897 * (1 - 0.5897), 0.95)
    assert 0 < lo < 0.5897 < hi and hi / lo > 10
    # one row, no positive: a proper interval, open above
    lo, hi = ratio_interval(0.0, 0.3, 0.21, 0.95)
    assert 0 < lo < np.inf and hi == np.inf
    rows = S.segment_check([1.0], [0.5897], [0.5897], {"c": ["a"]})
    lo, hi = rows[0]["ratio_ci"]
    assert lo < hi and rows[0]["too_few"] and not rows[0]["flagged"]


def test_ratio_interval_takes_row_counts_as_rows():
    """A value's rows given as (probability, count) groups: the interval of the same rows one by one."""
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.6, 40)
    y = (rng.random(40) < p).astype(float)
    w = rng.integers(1, 5, 40).astype(float)
    rep = np.repeat(np.arange(40), w.astype(int))
    a = ratio_interval(w @ y, w @ p, w @ (p * (1 - p)), 0.95)
    b = ratio_interval(y[rep].sum(), p[rep].sum(), (p[rep] * (1 - p[rep])).sum(), 0.95)
    assert np.allclose(a, b, rtol=1e-12)
    # at small probabilities it is Garwood's exact Poisson interval on the positives
    lo, hi = ratio_interval(3.0, 3.0, 3.0 * (1 - 1e-9), 0.95)
    assert 3.0 / hi == pytest.approx(stats.chi2.ppf(0.025, 6) / 2, rel=1e-6)
    assert 3.0 / lo == pytest.approx(stats.chi2.ppf(0.975, 8) / 2, rel=1e-6)


def test_streamed_pass_interval_is_the_rows():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.001, 0.3, 5_000)
    y = (rng.random(5_000) < p).astype(float)
    row = S.count_interval(y, p, 0.95)
    lo, hi = sc.ratio_interval(np.array([5_000.0]), np.array([y.sum()]), np.array([p.sum()]),
                               np.array([p @ p]), np.array([p @ y]), 0.95)
    assert [lo[0], hi[0]] == pytest.approx(row, rel=1e-10)


def _null_frame(seed: int, n_seg: int = 300, rate: float = 0.005) -> tuple[np.ndarray, ...]:
    """Scores right per segment: each shop has its own offset, and the score knows it."""
    rng = np.random.default_rng(seed)
    sizes = np.round(1e5 * np.arange(1, n_seg + 1) ** (-np.log(1e4) / np.log(n_seg))).astype(int)  # 1e5..10
    shop = np.repeat(np.array([f"shop_{i}" for i in range(n_seg)], dtype=object), sizes)
    offset = np.repeat(rng.normal(0.0, 0.5, n_seg), sizes)
    z = np.log(rate / (1 - rate)) + offset + rng.normal(0.0, 0.8, shop.size)
    p = 1 / (1 + np.exp(-z))
    y = (rng.random(shop.size) < p).astype(float)
    return p, y, shop


def _band(tested: int) -> tuple[float, float]:
    lo, hi = stats.binom.interval(0.95, tested, 0.05)
    return lo, hi


# one seed in make test-fast, all three in make test
@pytest.mark.parametrize(
    "seed", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_null_flags_stay_in_the_chance_band_row_and_table(seed, tmp_path):
    p_cal_fit, y_cal_fit, _ = _null_frame(100 + seed)
    p, y, shop = _null_frame(seed)
    cal = make("platt", input="probability").fit(p_cal_fit, y_cal_fit)
    q = cal.predict(p)
    # the row path
    rows = S.segment_check(y, p, q, {"shop": shop}, top=20)
    flags, tested = sum(r["flagged"] for r in rows), S.tested_intervals(rows)
    lo, hi = _band(tested)
    assert S.chance_flags(rows, 0.95) == pytest.approx(0.05 * tested)
    assert lo <= flags <= hi, (flags, tested, lo, hi)
    # segments with under MIN_POSITIVES positives: listed as such, never flagged
    few = [r for r in rows if r["too_few"] and not r["value"].startswith(S.OTHER_LEVEL)]
    assert few and not any(r["flagged"] for r in few)
    line = S.too_few_line(rows)
    assert line is not None and "Too few positives" in line and few[0]["value"] in line
    assert tested < 300  # the small shops were not tested
    # the table path: the same rows aggregated into (value, bucket, label) groups
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"score": p, "label": y.astype(np.int8), "shop": shop.astype(str)}), path)
    shops = T.TableRows("score", "label", segments=("shop",))
    tabs = T.aggregate_files([str(path)], shops, T.PassOptions(threads=1))
    trows = _aggregate.segment_tables_ratios(tabs, cal, "probability", 0.95, 20, 8, 0)
    tflags, ttested = sum(r["flagged"] for r in trows), S.tested_intervals(trows)
    tlo, thi = _band(ttested)
    # the same values tested (the row path's pooled row is one interval more: the table's has none)
    pooled_own = sum(r["value"].startswith(S.OTHER_LEVEL) and not r["too_few"] for r in rows)
    assert ttested == tested - pooled_own and tlo <= tflags <= thi, (tflags, ttested)
    # the same values flagged on both paths (the table's calibrated sums are within 1e-5 of the rows')
    assert {r["value"] for r in trows if r["flagged"]} == {r["value"] for r in rows if r["flagged"]}


def test_flags_rank_by_effect_size():
    rng = np.random.default_rng(3)
    n = 60_000
    col = rng.choice(np.array(["a", "b", "c", "d"], dtype=object), n)
    p = np.full(n, 0.2)
    y = (rng.random(n) < p).astype(float)
    off = {"a": 1.1, "b": 0.6, "c": 1.4, "d": 1.0}  # c is the furthest off (x1.4), then b (x0.6)
    q = p * np.array([off[v] for v in col])
    lines = S.flag_lines(S.segment_check(y, p, q, {"s": col}))
    assert [ln.split(":")[0] for ln in lines] == ["s = b", "s = c", "s = a"]


def test_click_log_says_the_model_barely_ranks_and_flags_no_item_on_a_click_or_two():
    """Open Bandit (random policy, all campaigns; 0.4% clicks, 80 items): a logistic model on the
    user-item affinities and position, Platt on the next quarter by time, checked on the last quarter."""
    from sklearn.linear_model import LogisticRegression

    from calibflow.datasets import load_obd
    from calibflow.diagnostics import ranking_note

    df = load_obd("random", "all").sort_values("timestamp", kind="stable").reset_index(drop=True)
    X = np.column_stack([df.filter(like="user-item_affinity").to_numpy(float),
                         np.eye(3)[df["position"].to_numpy() - 1]])
    y = df["click"].to_numpy(float)
    n = len(df)
    tr, ca, te = slice(0, n // 2), slice(n // 2, 3 * n // 4), slice(3 * n // 4, n)
    model = LogisticRegression(max_iter=1000).fit(X[tr], y[tr])
    z = model.decision_function(X)
    cal = make("platt", input="logit").fit(z[ca], y[ca])
    p_te = cal.predict(z[te])
    rows = S.segment_check(y[te], 1 / (1 + np.exp(-z[te])), p_te, {"item": df["item_id"].to_numpy()[te]})
    assert not [r for r in rows if r["flagged"] and r["positives"] < S.MIN_POSITIVES]
    one_click = [r for r in rows if r["positives"] in (1, 2)]
    assert one_click and all(r["too_few"] and not r["flagged"] for r in one_click)
    assert "Too few positives" in (S.too_few_line(rows) or "")
    note = ranking_note(y[te], 1 / (1 + np.exp(-z[te])), p_te, float(y[ca].mean()), 1e-4, "platt")
    assert note is not None and note["barely_ranks"], note
    assert note["statement"].startswith("The model barely ranks")


@pytest.mark.slow  # the whole pipeline on a source: make test, not test-fast
@pytest.mark.parametrize("path", ["rows", "aggregate"])
def test_card_and_report_say_first_that_the_model_does_not_rank(tmp_path, path):
    """A source whose score is noise around the base rate: select's card carries ``ranking`` and the
    report puts its statement before the card's reason; every country with under 10 clicks is listed.
    The aggregate path (bucket tables) checks the AUC only."""
    from pathlib import Path

    import pandas as pd
    import yaml
    from helpers.sources_pipeline import run_pipeline

    from calibflow.io import read_json

    repo = Path(__file__).resolve().parents[2]
    rng = np.random.default_rng(7)
    n = 12_000
    days = pd.Timestamp("2026-09-01") + pd.to_timedelta(np.sort(rng.integers(0, 28, n)), unit="D")
    frame = pd.DataFrame({
        "date": days.date,
        "country": rng.choice(np.array([f"c{i}" for i in range(40)], dtype=object), n),
        "p_model": np.clip(rng.normal(0.01, 0.003, n), 1e-4, None),  # noise: ranks nothing
        "clicked": (rng.random(n) < 0.01).astype(int),
    })
    (tmp_path / "userdata").mkdir()
    frame.to_parquet(tmp_path / "userdata" / "noise.parquet", index=False)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["datasets"]["names"], params["papers"] = [], []
    params["calibrate"]["methods"] = ["platt"]
    params["evaluate"].update(n_bootstrap=50, n_bins=10)
    params["sources"] = {"noise": {"path": "userdata/noise.parquet", "label": "clicked", "score": "p_model",
                                   "score_kind": "probability", "time": "date", "segments": ["country"]}}
    if path == "aggregate":
        params["scale"] = {"row_threshold": 1000, "replicates": 40}
    # issue 35: the stages take one path (the tables); "rows" is the row computation they used before
    run_pipeline(params, tmp_path, rows=path == "rows")
    card = read_json(tmp_path / "models/noise/card.json")
    assert card["path"] == path
    note = card["ranking"]
    assert note["barely_ranks"] and note["statement"].startswith("The model barely ranks")
    assert "Too few positives" in card["segment_too_few"] and not card["segment_flags"]
    html = (tmp_path / "reports/index.html").read_text()
    block = html[html.index('data-card="noise"'):]
    assert block.index("The model barely ranks") < block.index("<h4>")


def test_table_path_interval_is_the_rows(tmp_path):
    """On the raw scores a segment table's sums are exact, so its interval is the rows' to rounding."""
    from calibflow.aggregate.segments import segment_metrics

    p, y, shop = _null_frame(5, n_seg=40)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"score": p, "label": y.astype(np.int8), "shop": shop.astype(str)}), path)
    tab = T.aggregate_files([str(path)], T.TableRows("score", "label", segments=("shop",)),
                            T.PassOptions(threads=1)).segments["shop"]
    m = segment_metrics(tab, replicates=4)
    for _, r in m.iterrows():
        rows = shop == r["value"]
        want = S.count_interval(y[rows], p[rows], 0.95)
        if want is None:
            assert np.isnan(r["calibration_ratio_low"])
        else:
            assert [r["calibration_ratio_low"], r["calibration_ratio_high"]] == pytest.approx(want, rel=1e-9)
