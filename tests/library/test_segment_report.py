"""The report's per-segment part: the worst segments' reliability diagrams and the row totals.

Generated rows with one badly calibrated segment (country BR, predictions 40% too low): it must come first
among the worst segments and be flagged; each reliability panel's bins hold exactly the segment's rows; the
section draws one panel per worst segment and says the columns' rows add up to the test rows (nulls
included), or names the column that does not.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from calibflow import segments as seg
from calibflow.aggregate.segments import segment_metrics, segment_records
from calibflow.report._format import fmt_num
from calibflow.report.segments import segment_section


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(4)
    n = 20_000
    country = rng.choice(np.array(["US", "FR", "BR", None], dtype=object), n, p=[0.5, 0.25, 0.2, 0.05])
    device = rng.choice(np.array(["ios", "web"]), n)
    p_true = expit(rng.normal(-1.5, 1.0, n))
    y = (rng.random(n) < p_true).astype(float)
    p = np.where(country == "BR", 0.6 * p_true, p_true)
    segments = {"country": country, "device": device}
    check = seg.segment_check(y, p, p, segments, n_boot=100, seed=0)
    return y, p, segments, check


def test_worst_segments_put_the_flagged_one_first(rows):
    _, _, _, check = rows
    worst = seg.worst_segments(check, k=3)
    assert (worst[0]["column"], worst[0]["value"], worst[0]["flagged"]) == ("country", "BR", True)
    assert len(worst) == 3 and all(not w["value"].startswith(seg.OTHER_LEVEL) for w in worst)


def test_segment_reliability_bins_hold_the_segment_rows(rows):
    y, p, segments, check = rows
    panels = seg.segment_reliability(y, p, segments, seg.worst_segments(check, k=3))
    for panel, row in zip(panels, seg.worst_segments(check, k=3), strict=True):
        assert sum(b["count"] for b in panel["bins"]) == row["n"]
        assert all(b["low"] <= b["observed"] <= b["high"] for b in panel["bins"])
    br = panels[0]["bins"]
    # BR's predictions are 40% low: the observed rate is above the mean prediction in most bins
    assert sum(b["observed"] > b["mean_pred"] for b in br) >= len(br) - 1


def test_section_draws_the_worst_segments_and_checks_the_row_totals(rows):
    y, p, segments, check = rows
    card = {
        "segments": check,
        "segment_flags": seg.flag_lines(check),
        "segment_reliability": seg.segment_reliability(y, p, segments, seg.worst_segments(check)),
        "segment_test_rows": int(y.size),
    }
    html = segment_section(card)
    assert html.count("<svg") == 1 and 'class="segment-reliability"' in html
    assert "country = BR" in html and f"each adds up to the {fmt_num(y.size)} test rows" in html
    # the caption states the choice whole: a less-tested value may be further off than the one drawn
    assert f"among the values with at least {seg.WORST_MIN_POSITIVES} positives" in html
    nulls = int(sum(v is None for v in segments["country"]))
    assert f"({fmt_num(nulls)} null)" in html
    bad = {**card, "segment_test_rows": int(y.size) + 1}
    assert "country, device do not add up" in segment_section(bad)


def test_aggregate_records_pool_the_rest_so_counts_add_up():
    """The table path's records: values past ``top`` pooled into one row, the null value named."""
    import pandas as pd

    rng = np.random.default_rng(2)
    k = 30
    table = pd.DataFrame({
        "seg_0": np.r_[np.arange(k).astype(str).astype(object), [None]].repeat(2),
        "code": np.arange(k + 1).repeat(2),
        "bucket": 0,
        "label": np.tile([0, 1], k + 1),
        "n": rng.integers(50, 500, 2 * (k + 1)).astype(float),
    })
    table["sum_q"] = table["n"] * 0.3
    table["sum_ll"] = table["n"] * 0.6
    table["sum_q2"] = table["n"] * 0.09
    out = segment_records(table, None, "campaign", top=10)
    assert len(out) == 11 and out[-1]["value"] == f"{seg.OTHER_LEVEL} x21"
    assert sum(r["n"] for r in out) == int(table["n"].sum())
    assert sum(r["positives"] for r in out) == int(table.loc[table["label"] == 1, "n"].sum())
    full = segment_records(table, None, "campaign")
    assert seg.NULL_LEVEL in {r["value"] for r in full}


def test_the_pooled_row_sums_the_predictions_of_values_with_no_positive():
    """On a calibrated table (sum p = sum y overall), many small values past ``top`` have predictions but
    no positive in the test split. The pooled row's ratio is its summed ``sum p`` over its positives: the
    predictions of the values without a positive count. The control, ``sum p`` rebuilt as ratio x
    positives per value (what the card did), drops them and reads far below 1."""
    import pandas as pd

    k, rows_per = 200, 400
    p = 0.005  # every row predicted at 0.5%; the positives, as a calibrated score gives them, on 40 values
    positives = np.zeros(k)
    carriers = np.random.default_rng(4).choice(np.arange(20, k), 40, replace=False)
    positives[carriers] = rows_per * p * (k - 20) / 40
    values = np.arange(k).astype(str).astype(object)
    n = np.full(k, float(rows_per))
    n[:20] *= 10  # the 20 largest are shown on their own
    positives[:20] = n[:20] * p
    table = pd.DataFrame({
        "seg_0": np.repeat(values, 2), "code": np.arange(k).repeat(2), "bucket": 0,
        "label": np.tile([0, 1], k), "n": np.c_[n - positives, positives].ravel(),
    })
    q = np.full(2 * k, p)
    table["sum_q"] = table["n"] * q
    table["sum_ll"] = table["n"] * 0.03
    table["sum_q2"] = table["n"] * q**2
    pooled = segment_records(table, None, "country", top=20)[-1]
    assert pooled["value"] == f"{seg.OTHER_LEVEL} x{k - 20}"
    assert pooled["ratio"] == pytest.approx(1.0, rel=1e-9)
    assert pooled["ratio_uncalibrated"] == pytest.approx(1.0, rel=1e-9)
    mu = segment_metrics(table)
    rest = mu.sort_values("n", ascending=False, kind="stable").index[20:]
    pos = mu.loc[rest, "positives"]
    rebuilt = np.nansum(mu.loc[rest, "calibration_ratio"] * pos) / pos.sum()
    assert rebuilt < 0.3  # the control: 40 of the 180 values carry positives, the rest's predictions lost
