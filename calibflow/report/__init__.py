"""The pipeline's report: one self-contained offline HTML page and a short markdown summary.

Pure library: it takes dicts and paths, never reads ``params.yaml`` and never imports the orchestration
stack. ``load_report_data`` gathers the stage outputs from explicit paths into a ``ReportData``;
``render_html`` and ``render_summary`` turn that into ``reports/index.html`` and ``reports/summary.md``.
Figures are inline SVG from ``calibflow.plots`` (no CDN, no scripts, no external CSS), so the page works
offline and can be attached to a pull request or archived as it is. The index opens with one answer block
per ``models/<name>/card.json`` (``answers``); paper reproductions get their own pages
(``render_paper_page``); every SVG passes the allow-list in ``svg.sanitize_svg`` before it is inlined;
``chrome.page`` is the shared page skeleton for other renderers (monitoring pages).
"""

from calibflow.report.chrome import page
from calibflow.report.data import (
    METRICS,
    RANKING_BASELINES,
    MetricSpec,
    ReportData,
    best_methods,
    load_report_data,
)
from calibflow.report.html import render_html, render_paper_page
from calibflow.report.markdown import render_summary

__all__ = [
    "METRICS",
    "RANKING_BASELINES",
    "MetricSpec",
    "ReportData",
    "best_methods",
    "load_report_data",
    "page",
    "render_html",
    "render_paper_page",
    "render_summary",
]
