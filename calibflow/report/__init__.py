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

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names for type checkers, and the imports the stages' code deps are read from
    # (``calibflow.flows.stage_deps`` reads import statements: a stage that imports this package still
    # depends on every renderer it may load)
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

#: Each public name's module, imported on first use: a stage that needs one formatter
#: (``calibflow.report._format``) must not pay matplotlib's import for the figures (~1 s of CPU).
_WHERE = {
    "page": "chrome",
    "METRICS": "data",
    "RANKING_BASELINES": "data",
    "MetricSpec": "data",
    "ReportData": "data",
    "best_methods": "data",
    "load_report_data": "data",
    "render_html": "html",
    "render_paper_page": "html",
    "render_summary": "markdown",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


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
