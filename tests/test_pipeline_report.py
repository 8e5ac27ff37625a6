"""calibflow.report as a pure library: best-value marking, formatting, SVG ids, empty and failing inputs."""

from __future__ import annotations

import re
import subprocess
import sys

import matplotlib.pyplot as plt

from calibflow.plots import to_svg
from calibflow.report import METRICS, ReportData, best_methods, render_html, render_summary
from calibflow.report._format import fmt_interval, fmt_num
from calibflow.report.figures import scope_svg

SPEC = {s.key: s for s in METRICS}


def test_best_methods_follow_each_metric_goal():
    rows = {
        "a": {"ece": 0.02, "auc": 0.80, "calibration_ratio": -0.01},
        "b": {"ece": 0.01, "auc": 0.80 + 1e-12, "calibration_ratio": 0.05},
        "c": {"ece": float("nan"), "auc": 0.70, "calibration_ratio": 0.02},
    }
    assert best_methods(rows, SPEC["ece"]) == {"b"}  # lowest; NaN ignored
    assert best_methods(rows, SPEC["auc"]) == {"a", "b"}  # highest; numerically equal values tie
    assert best_methods(rows, SPEC["calibration_ratio"]) == {"a"}  # closest to zero, sign ignored
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
    for text in ("No validation results found", "No evaluation results found", "No reproductions were run"):
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
