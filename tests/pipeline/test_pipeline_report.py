"""calibflow.report as a pure library: best-value marking, formatting, SVG ids, empty and failing inputs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html.parser import HTMLParser

import matplotlib.pyplot as plt
import numpy as np
import pytest

from calibflow.plots import to_svg
from calibflow.report import METRICS, ReportData, best_methods, render_html, render_summary
from calibflow.report._format import fmt_interval, fmt_num
from calibflow.report.figures import scope_svg

SPEC = {s.key: s for s in METRICS}


def test_best_methods_follow_each_metric_goal():
    rows = {
        "a": {"ece": 0.02, "auc": 0.80, "calibration_ratio": 0.99},
        "b": {"ece": 0.01, "auc": 0.80 + 1e-12, "calibration_ratio": 1.05},
        "c": {"ece": float("nan"), "auc": 0.70, "calibration_ratio": 1.02},
    }
    assert best_methods(rows, SPEC["ece"]) == {"b"}  # lowest; NaN ignored
    assert best_methods(rows, SPEC["auc"]) == {"a", "b"}  # highest; numerically equal values tie
    assert best_methods(rows, SPEC["calibration_ratio"]) == {"a"}  # sum p / sum y closest to 1, either side
    assert best_methods({"a": {"ece": None}}, SPEC["ece"]) == set()


def test_number_formatting():
    assert fmt_num(0.012345) == "0.0123"
    assert fmt_num(12) == "12"
    assert fmt_num(None) == "–"
    assert fmt_num(float("nan")) == "nan"
    assert fmt_num(123456.0) == "1.235e+05"
    assert fmt_num(2e-5) == "2.000e-05"
    assert fmt_num(9.2e-4) == "0.0009"  # stays in a column of 4-decimal numbers
    assert fmt_num("x") == "x"
    assert fmt_interval({"low": 0.1, "high": 0.2}) == "[0.1000, 0.2000]"
    assert fmt_interval(None) == ""


def _svg() -> str:
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([0, 1], [0, 1])
    return to_svg(fig)


def test_scope_svg_makes_ids_unique_and_keeps_references_consistent():
    a, b = scope_svg(_svg(), "f1-"), scope_svg(_svg(), "f2-")
    ids_a = set(re.findall(r'id="([^"]+)"', a))
    ids_b = set(re.findall(r'id="([^"]+)"', b))
    assert ids_a and not ids_a & ids_b
    for svg, ids in ((a, ids_a), (b, ids_b)):
        refs = set(re.findall(r'(?:href="#|url\(#)([^")]+)', svg))
        assert refs and refs <= ids
    assert "<metadata>" not in a


def test_empty_data_renders_a_page_that_says_what_is_missing():
    page = render_html(ReportData())
    assert page.startswith("<!DOCTYPE html>") and page.endswith("</html>\n")
    for text in ("No validation results found", "No evaluation results found", "No extra pages"):
        assert text in page
    assert "## calibflow report" in render_summary(ReportData())


def test_failed_validation_is_shown_unfolded_with_its_messages():
    failure = {"message": "expect_column_values_to_not_be_null(column='prob'): 1 unexpected value(s)"}
    suites = [
        {
            "name": "calibrated.platt.adult",
            "success": False,
            "evaluated": 5,
            "failed": 1,
            "failures": [failure],
        },
        {"name": "calibrated.isotonic.adult", "success": True, "evaluated": 5, "failed": 0, "failures": []},
    ]
    data = ReportData(validation=[{"phase": "calibrated", "success": False, "suites": suites}])
    page = render_html(data)
    assert "<details open>" in page and "FAILED" in page
    assert "expect_column_values_to_not_be_null(column=&#x27;prob&#x27;)" in page
    assert "FAILED (calibrated.platt.adult)" in render_summary(data)


def test_metric_table_marks_best_and_prints_intervals():
    rows = {
        "uncalibrated": {"ece": 0.03, "auc": 0.9, "n_test": 100, "ci": {"ece": {"low": 0.02, "high": 0.04}}},
        "platt": {"ece": 0.01, "auc": 0.9, "n_test": 100},
    }
    page = render_html(ReportData(evaluation={"toy": rows}))
    assert page.count('class="best"') >= 3  # platt's ECE, both AUCs
    assert "[0.0200, 0.0400]" in page
    assert page.index("<code>uncalibrated</code>") < page.index("<code>platt</code>")  # baseline first
    summary = render_summary(ReportData(evaluation={"toy": rows}))
    assert "| `platt` | **0.0100** |" in summary


def test_report_library_imports_no_orchestration_stack():
    code = (
        "import sys, calibflow.report\n"
        "bad = [m for m in ('great_expectations', 'prefect', 'dvc') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- Answers first -------------------------------------------------------------------------


def card(name: str, method: str = "beta", kind: str = "dataset", **extra) -> dict:
    """A card in the exact shape of docs/card.md (what the select stage writes)."""
    c = {
        "name": name,
        "kind": kind,
        "method": method,
        "params": {"a": 1.0},
        "rule": "lowest test log loss among monotone methods, paired bootstrap vs uncalibrated",
        "reason": f"{method} lowers log loss on {name} and its interval excludes 0",
        "metrics": {
            "log_loss": {
                "uncalibrated": 0.19,
                "calibrated": 0.18,
                "delta": -0.01,
                "delta_ci": [-0.012, -0.008],
            },
            "ece": {"uncalibrated": 0.03, "calibrated": 0.028, "delta": -0.002, "delta_ci": [-0.004, 0.001]},
            "brier": {
                "uncalibrated": 0.06,
                "calibrated": 0.059,
                "delta": -0.001,
                "delta_ci": [-0.002, -0.0005],
            },
            "calibration_ratio": {"uncalibrated": 1.1, "calibrated": 1.0, "ci": [0.97, 1.03]},
        },
        "segments": [
            {
                "column": "country",
                "value": "FR",
                "n": 1234,
                "positives": 56,
                "ratio_uncalibrated": 1.2,
                "ratio": 1.01,
                "ratio_ci": [0.9, 1.1],
            }
        ],
        "data": {
            "fingerprint": {"files": [], "method": "stat"},
            "time_range": None,
            "split": {
                "kind": "random",
                "calib": None,
                "test": None,
                "rows": {"train": 0, "calib": 500, "test": 500},
            },
        },
        "calibflow_version": "0.1.0",
    }
    c.update(extra)
    return c


def _rows(methods, ratio=1.0):
    return {
        m: {
            "ece": 0.01 * (i + 1),
            "log_loss": 0.2,
            "calibration_ratio": ratio,
            "auc": 0.8,
            "n_test": 100,
            "positive_rate": 0.1,
        }
        for i, m in enumerate(methods)
    }


def test_index_opens_with_answers_from_cards_and_ends_with_run_metadata(tmp_path):
    from calibflow.report import load_report_data

    for c in (
        card("adult"),
        card("ads", kind="source", method="isotonic"),
        card("bank", method="uncalibrated"),
    ):
        (tmp_path / "models" / c["name"]).mkdir(parents=True)
        (tmp_path / "models" / c["name"] / "card.json").write_text(json.dumps(c))
    data = load_report_data(
        cards_dir=tmp_path / "models",
        metadata={"packages": {"numpy": "2.4"}, "checksums": {"adult": {"a.csv": {"sha256": "ab" * 32}}}},
        validation_files=[],
    )
    data.evaluation = {
        "adult": _rows(["uncalibrated", "beta"]),
        "hillstrom": _rows(["uncalibrated", "platt"]),
    }
    page = render_html(data)
    order = [
        page.index(t)
        for t in (
            'id="answers"',
            'id="pages"',
            'id="calibration"',
            'id="validation"',
            'id="run"',
            "Package versions",
            "Data checksums",
        )
    ]
    assert order == sorted(order)
    answers = page[page.index('id="answers"') : page.index('id="pages"')]
    assert [m for m in re.findall(r'data-card="([^"]+)"', answers)] == [
        "adult",
        "bank",
        "ads",
    ]  # datasets first
    assert "Use <code>beta</code>" in answers and "Keep your scores" in answers
    # the card's colour is its verdict (a card from before the verdict field: read from its interval)
    assert 'data-card="adult" data-verdict="calibrate"' in answers and 'class="answer keep"' in answers
    assert "-0.0100" in answers and "[-0.0120, -0.00800]" in answers and "better" in answers  # 3 sig. digits
    assert "no clear change" in answers  # the ECE interval straddles 0
    assert "[0.970, 1.03]" in answers and "1 = perfect" in answers
    assert "beta lowers log loss on adult" in answers and "country = FR" in answers
    # a dataset evaluated without a card is named, not silently dropped
    assert "models/hillstrom/card.json</code> is missing" in answers
    summary = render_summary(data)
    assert "- **adult**: use `beta` (log loss -0.0100 [-0.0120, -0.00800]" in summary
    assert "- **bank**: keep your scores." in summary


def test_ranking_baselines_are_explained_and_out_of_the_comparison():
    rows = _rows(["uncalibrated", "platt", "sigmoid", "minmax"])
    page = render_html(ReportData(evaluation={"toy": rows}))
    main_table, folded = page.split("Ranking-paper baselines", 1)
    main_table = main_table[main_table.index('id="calibration"') :]
    assert "<code>platt</code>" in main_table
    assert "<code>sigmoid</code>" not in main_table and "<code>minmax</code>" not in main_table
    assert "the base model" in folded and "no probability meaning" in folded
    assert "<code>sigmoid</code>" in folded and "<code>minmax</code>" in folded
    assert "`sigmoid`" not in render_summary(ReportData(evaluation={"toy": rows}))


def test_paper_page_is_self_contained_and_linked_from_the_index(tmp_path):
    from calibflow.results import Figure, Reproduction, Table

    rep = Reproduction(
        "toy",
        "Toy et al. (2026)",
        "quick",
        tables=[Table("T1", ["a", "b"], [["x", 1.0]])],
        figures=[Figure("line", _svg())],
        notes=["a note"],
    )
    from calibflow.report import render_paper_page

    paper = render_paper_page(rep)
    assert paper.startswith("<!DOCTYPE html>") and "Toy et al. (2026)" in paper
    assert paper.count("<svg") == 1 and "a note" in paper and 'href="../index.html"' in paper
    index = render_html(
        ReportData(
            pages=[
                ("pages/paper-toy.html", "Paper reproduction: Toy"),
                ("pages/monitoring-ads.html", "Monitoring ads"),
            ]
        )
    )
    assert 'href="pages/paper-toy.html"' in index and 'href="pages/monitoring-ads.html"' in index
    assert "<svg" not in index  # the paper's figures live on its page only


# ---- Reliability diagrams at low base rates -------------------------------------------------------------


def _low_base_rate(n=6000, seed=5):
    """Ads-like data: true probabilities with a 1-3% mean, a model that is 1.5x over-confident."""
    rng = np.random.default_rng(seed)
    true_p = rng.beta(0.6, 30.0, size=n)
    y = (rng.random(n) < true_p).astype(float)
    return y, np.clip(true_p * 1.5, 0, 1)


def test_equal_mass_bins_with_intervals_at_a_two_percent_base_rate():
    from helpers.row_reference import reliability_records

    from calibflow.intervals import jeffreys_interval

    y, p = _low_base_rate()
    assert 0.01 <= y.mean() <= 0.03
    recs = reliability_records(y, p, n_bins=15)
    counts = [r["count"] for r in recs]
    assert len(recs) == 15 and max(counts) - min(counts) <= 1  # equal mass: 400 rows per bin
    uniform = reliability_records(y, p, n_bins=15, strategy="uniform")
    assert max(r["count"] for r in uniform) > 0.8 * y.size  # equal width: nearly every row in a few bins
    for r in recs:
        assert r["low"] <= r["observed"] <= r["high"] and r["positives"] == round(r["observed"] * r["count"])
    # Jeffreys against a known value: 2 of 300 -> Beta(2.5, 298.5) quantiles
    lo, hi = jeffreys_interval(np.array([2.0, 0.0]), np.array([300.0, 300.0]), 0.95)
    assert lo[0] == pytest.approx(0.00135, abs=2e-4) and hi[0] == pytest.approx(0.0216, abs=1e-3)
    assert lo[1] == 0.0 and 0 < hi[1] < 0.01


def test_reliability_axes_zoom_to_the_data_and_show_counts():
    from helpers.row_reference import reliability_records

    from calibflow.report.figures import reliability_grid, zoom_limit

    y, p = _low_base_rate()
    curves = {"uncalibrated": reliability_records(y, p, 15), "platt": reliability_records(y, p / 1.5, 15)}
    lim = zoom_limit(curves)
    top = max(max(r["mean_pred"], r["high"]) for c in curves.values() for r in c)
    assert top < lim <= 1.6 * top + 0.02 and lim < 0.5  # zoomed, not [0, 1]
    assert zoom_limit({"a": [{"mean_pred": 0.95, "observed": 0.9, "high": 0.97}]}) == 1.0
    svg = reliability_grid(curves)
    assert "n/bin 400" in svg  # matplotlib keeps text as a comment beside its glyph paths


def test_a_reliability_grid_is_drawn_once_per_report_for_the_page_and_plots(monkeypatch):
    from helpers.row_reference import reliability_records

    from calibflow import plots
    from calibflow.report import figures

    y, p = _low_base_rate()
    curves = {"uncalibrated": reliability_records(y, p, 15), "platt": reliability_records(y, p / 1.4, 15)}
    drawn = []
    real = plots.small_multiples
    monkeypatch.setattr(plots, "small_multiples", lambda *a, **k: drawn.append(1) or real(*a, **k))
    first = figures.reliability_grid(curves, {"platt": 0.01})
    assert figures.reliability_grid(curves, {"platt": 0.01}) == first and len(drawn) == 1
    other = figures.reliability_grid(curves, {"platt": 0.02})  # other inputs: drawn, and drawn differently
    assert len(drawn) == 2 and other != first and "0.02" in other


# ---- Issue 19: no markup from data reaches the page ---------------------------------------------------

HOSTILE_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="alert(1)" '
    'width="10" height="10"><script>alert(2)</script><g onclick="alert(3)"><rect width="5" height="5" '
    'style="fill:url(http://evil.example/x)"/><path d="M0 0L5 5" onmouseover="alert(4)"/></g>'
    '<foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><script>alert(5)</script></div></foreignObject>'
    '<a xlink:href="javascript:alert(6)"><text>click</text></a><use xlink:href="http://evil.example/#a"/>'
    '<style>@import url(http://evil.example/c.css);</style><image href="http://evil.example/i.png"/>'
    "<title>&lt;/svg&gt;&lt;script&gt;alert(7)&lt;/script&gt;</title></svg>"
)


class _Tags(HTMLParser):
    """Every start tag and attribute of a page as a browser's tokenizer sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(k, v or "") for k, v in attrs]


def assert_inert(page: str) -> None:
    parsed = _Tags()
    parsed.feed(page)
    bad_tags = {"script", "iframe", "object", "embed", "foreignobject", "image", "img"} & set(parsed.tags)
    assert not bad_tags, bad_tags
    assert not [k for k, _ in parsed.attrs if k.startswith("on")], parsed.attrs
    for k, v in parsed.attrs:
        if k in ("href", "xlink:href", "src"):
            assert v.startswith(("#", "pages/", "../index.html")), (k, v)
        assert "javascript:" not in v.lower() and "evil.example" not in v, (k, v)
    assert "evil.example" not in page and "<script" not in page.lower()


def test_sanitiser_drops_scripts_handlers_and_external_references():
    from calibflow.report.svg import UnsafeSvg, sanitize_svg

    clean = sanitize_svg(HOSTILE_SVG)
    assert_inert(clean)
    assert "<rect" in clean and "<path" in clean and "&lt;script&gt;" in clean  # drawing and text kept
    with pytest.raises(UnsafeSvg):
        sanitize_svg('<!DOCTYPE svg [<!ENTITY a "aaaa">]><svg xmlns="http://www.w3.org/2000/svg">&a;</svg>')
    with pytest.raises(UnsafeSvg):
        sanitize_svg("<html><script>alert(1)</script></html>")
    with pytest.raises(UnsafeSvg):
        sanitize_svg("<svg onload=alert(1)>")  # not XML: dropped whole
    # Our own matplotlib output passes through unchanged in what it draws.
    ours = _svg()
    assert sanitize_svg(ours).count("<path") == ours.count("<path") > 0


def test_hostile_names_and_figures_never_become_markup(tmp_path):
    from calibflow.report import render_paper_page
    from calibflow.results import Figure, Reproduction, Table

    ds = "ds<script>alert(1)</script>"
    meth = 'm" onload="alert(1)'
    rows = _rows(["uncalibrated", meth])
    rel = {
        m: [
            {
                "bin": 0,
                "count": 50.0,
                "positives": 5.0,
                "mean_pred": 0.1,
                "observed": 0.1,
                "low": 0.04,
                "high": 0.2,
            }
        ]
        for m in rows
    }
    bad_card = card(ds, method="<img src=x onerror=alert(1)>", reason="<script>alert(1)</script>")
    data = ReportData(
        evaluation={ds: rows},
        reliability={ds: rel},
        cards=[bad_card],
        pages=[("pages/paper-x.html", "<script>alert(1)</script>")],
        metadata={"git_revision": "<script>x</script>"},
    )
    page = render_html(data)
    assert_inert(page)
    assert "&lt;script&gt;" in page and page.count("<svg") == 2  # the card's overlay and the grid
    rep = Reproduction(
        "x",
        "<script>alert(1)</script>",
        "quick",
        tables=[Table('<b onmouseover="x">T</b>', ["<script>"], [["<img src=x>"]])],
        figures=[Figure("<script>t</script>", HOSTILE_SVG, "cap<script>")],
        notes=["<script>n"],
    )
    paper = render_paper_page(rep)
    assert_inert(paper)
    assert paper.count("<svg") == 1 and "<rect" in paper
    broken = render_paper_page(Reproduction("x", "p", "quick", figures=[Figure("t", "<svg><script>")]))
    assert "figure not shown" in broken and "<script" not in broken


def test_unknown_reliability_binning_names_the_key():
    from helpers.row_reference import evaluate_dataset

    from calibflow.pipeline._common import StageError
    from calibflow.pipeline.params_schema import Evaluate, construct

    y, p = _low_base_rate(n=300)
    cfg = construct(Evaluate, {"reliability_bins": "equal", "n_bootstrap": 0})  # as a stage sees it
    with pytest.raises(StageError, match="evaluate.reliability_bins is 'equal'; use quantile or uniform"):
        evaluate_dataset(y, {"uncalibrated": p}, cfg, 1)
