"""The report for a person: verdict colours, one number format, the glossary, readable diagrams."""

from __future__ import annotations

import numpy as np
from helpers.row_reference import reliability_records
from scipy.special import expit, logit

from calibflow import calibrators as C
from calibflow import plots
from calibflow.report import figures
from calibflow.report._format import fmt_sig
from calibflow.report.answers import answer_block
from calibflow.report.glossary import METHODS, render_glossary
from calibflow.report.html import render_paper_page
from calibflow.results import Figure, Reproduction, Table


def _ctr(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A click log at a ~4% base rate, scored by an overconfident model that predicts too high."""
    rng = np.random.default_rng(seed)
    z = -3.6 + 0.9 * rng.normal(size=n) - 0.6 * rng.normal(size=n)
    y = (rng.random(n) < expit(z)).astype(np.float64)
    return y, expit(1.25 * z + 0.9)


def _axis_fraction(x: np.ndarray, lim: float | tuple[float, float]) -> np.ndarray:
    """Where each value sits along the axis, 0 (left) to 1 (right)."""
    if isinstance(lim, tuple):
        lo, hi = logit(lim[0]), logit(lim[1])
        return (logit(x) - lo) / (hi - lo)
    return x / lim


def test_ctr_before_vs_chosen_bins_spread_over_the_plot():
    """At a 4% base rate the overlay is on logit axes and its 15 bins cover most of the width; on the zoomed
    linear axes the same bins crowd into the left part (the issue: 12 of 15 bins in 20 px)."""
    y_cal, p_cal = _ctr(60_000, 1)
    y, p = _ctr(50_000, 2)
    platt = C.make("platt", input="probability").fit(p_cal, y_cal)
    before = reliability_records(y, p, 15)
    chosen = reliability_records(y, platt.predict(p), 15)
    curves = {"before": before, "chosen": chosen}
    lim = figures.panel_limits(curves)
    assert isinstance(lim, tuple) and figures.base_rate(before) < figures.LOGIT_BELOW
    for recs in curves.values():
        x = _axis_fraction(np.array([r["mean_pred"] for r in recs]), lim)
        assert x.min() >= 0 and x.max() <= 1 and x.max() - x.min() > 0.6
        assert np.median(np.diff(x)) > 0.02  # neighbours apart, not on top of each other
        linear = _axis_fraction(np.array([r["mean_pred"] for r in recs]), figures.zoom_limit(curves))
        assert np.sum(linear < 0.2) >= 10 > np.sum(x < 0.2)
    svg = figures.reliability_overlay(before, chosen, "platt")
    assert "platt" in svg and "uncalibrated" in svg and "logit axis" in svg


def test_linear_axes_above_ten_percent_and_slivers_do_not_stretch_them():
    rng = np.random.default_rng(3)
    p = rng.uniform(0.05, 0.35, 20_000)
    y = (rng.random(p.size) < p).astype(np.float64)
    recs = reliability_records(y, p, 15)
    sliver = {"count": 2.0, "mean_pred": 0.01, "observed": 0.5, "low": 0.1, "high": 0.95}
    lim = figures.panel_limits({"a": recs, "b": [sliver, *recs]})
    assert lim == figures.zoom_limit({"a": recs}) and lim <= 0.4


def _card(verdict: str, method: str) -> dict:
    ll = {"uncalibrated": 0.2, "calibrated": 0.19, "delta": -0.01, "delta_ci": [-0.012, -0.008]}
    return {
        "name": "ads",
        "kind": "source",
        "method": method,
        "verdict": verdict,
        "reason": "r",
        "metrics": {"log_loss": ll, "calibration_ratio": {"uncalibrated": 1.1, "calibrated": 1.0}},
        "selection": {
            "runner_up": "spline",
            "margin": 0.0002,
            "log_loss_uncalibrated": 0.2,
            "comparisons": {"spline": {"delta": -0.00015, "low": -0.0004, "high": 0.0001}},
        },
    }


def test_card_colour_and_pick_follow_the_verdict():
    keep = answer_block(_card("keep", "identity"))
    assert 'class="answer keep"' in keep and "Keep your scores" in keep
    # the keep card shows what the best calibrator would have changed, and the margin it missed
    assert "spline (not used)" in keep and "−0.000200" in keep and "[-0.000400, +0.000100]" in keep
    use = answer_block(_card("calibrate", "platt"))
    assert 'class="answer calibrate"' in use and "Use <code>platt</code>" in use
    assert "-0.0100" in use and "[-0.0120, -0.00800]" in use


def test_one_number_format():
    assert [fmt_sig(v) for v in (0.000312345, 0.43123, 1.0234, 6.722e-05, 0.999999, 12)] == [
        "0.000312", "0.431", "1.02", "6.72e-05", "1.00", "12",
    ]
    assert fmt_sig(-0.0123, signed=True) == "-0.0123" and fmt_sig(0.5, signed=True) == "+0.500"


def test_glossary_has_a_line_and_a_reference_for_every_method():
    for m in C.available("scores"):
        assert m in METHODS and METHODS[m][0] and METHODS[m][1], m
    page = render_glossary(["platt", "spline"])
    assert page.index("<code>identity</code>") < page.index("<code>platt</code>") and "Platt, 1999" in page


def test_legends_move_under_the_panels():
    fig, axes = plots.small_multiples(2, ncols=2)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a")
        ax.plot([0, 1], [1, 0], label="b")
        ax.legend()
    plots.legends_outside(fig)
    assert all(ax.get_legend() is None for ax in axes)
    assert len(fig.legends) == 1 and [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b"]
    plots.plt.close(fig)


def test_paper_page_opens_with_the_verdict_table():
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="5" height="5"/></svg>'
    rep = Reproduction(
        "k",
        "A paper",
        "quick",
        tables=[Table("Detail", ["x"], [[1.0]]), Table("Claims", ["claim", "verdict"], [["c", "holds"]])],
        figures=[Figure("Fig", svg, "")],
    )
    page = render_paper_page(rep)
    assert page.index("Claims") < page.index("<figure") < page.index("Detail")
