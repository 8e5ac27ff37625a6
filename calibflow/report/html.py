"""``reports/index.html``: one self-contained page (inline CSS and SVG, no scripts, no network)."""

from __future__ import annotations

from typing import Any

import yaml

from calibflow.report import figures
from calibflow.report._format import fmt_sig
from calibflow.report.answers import card_verdict, render_answers
from calibflow.report.chrome import e as _e
from calibflow.report.chrome import page, stacked
from calibflow.report.data import (
    METRICS,
    RANKING_BASELINES,
    ReportData,
    best_methods,
    method_order,
    split_baselines,
)
from calibflow.report.glossary import render_glossary
from calibflow.report.svg import UnsafeSvg, sanitize_svg
from calibflow.results import Reproduction

_NAV = (
    ("answers", "Answers"),
    ("pages", "Pages"),
    ("calibration", "Calibrators"),
    ("validation", "Validation"),
    ("glossary", "Methods"),
    ("run", "Run"),
)

def _table(head: list[str], rows: list[list[str]], left: int = 1, cls: list[list[str]] | None = None) -> str:
    """An HTML table; cells are already-escaped HTML; the first ``left`` columns are left-aligned."""
    th = "".join(f'<th class="{"l" if i < left else ""}">{h}</th>' for i, h in enumerate(head))
    body = []
    for r, row in enumerate(rows):
        tds = []
        for i, cell in enumerate(row):
            c = ["l"] if i < left else []
            if cls and cls[r][i]:
                c.append(cls[r][i])
            tds.append(f'<td class="{" ".join(c)}">{cell}</td>')
        body.append(f"<tr>{''.join(tds)}</tr>")
    # Wrapped so a wide table scrolls inside its box on a phone instead of widening the page.
    table = stacked(f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    return f'<div class="wide">{table}</div>'


class _Figures:
    """Numbers the page's figures and scopes each SVG's ids so they cannot collide."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, svg: str, title: str, caption: str = "") -> str:
        self.n += 1
        try:
            body = figures.scope_svg(sanitize_svg(svg), f"f{self.n}-")
        except UnsafeSvg as exc:  # never inline what the allow-list cannot rebuild
            body = f'<p class="fail">figure not shown: {_e(exc)}</p>'

        text = _e(title) + (". " + _e(caption) if caption else "")
        cap = f"<figcaption><b>Figure {self.n}.</b> {text}</figcaption>"
        return f'<figure data-figure="{self.n}"><div class="svg">{body}</div>{cap}</figure>'


def _metadata(data: ReportData) -> str:
    md = data.metadata
    rev = md.get("git_revision") or "unknown"
    dirty = " (uncommitted changes)" if md.get("git_dirty") else ""
    rows = [
        ["git revision", f"<code>{_e(rev)}</code>{_e(dirty)}"],
        ["python", _e(md.get("python", "–"))],
        ["seed", _e(data.params.get("seed", "–"))],
    ]
    out = ['<section id="run"><h2>Run: revision, packages, data checksums</h2>', _table(["", ""], rows)]
    pk = md.get("packages") or {}
    if pk:
        out.append("<h3>Package versions</h3>")
        out.append(_table(["package", "version"], [[_e(k), _e(v)] for k, v in sorted(pk.items())]))
    out.append(_checksums(md.get("checksums") or {}))
    if data.splits:
        out.append(_splits(data.splits))
    if data.params:
        text = yaml.safe_dump(data.params, sort_keys=False, default_flow_style=None, width=100)
        out.append(f"<details><summary>params.yaml</summary><pre>{_e(text)}</pre></details>")
    out.append("</section>")
    return "".join(out)


def _checksums(sums: dict[str, Any]) -> str:
    if not sums:
        return '<p class="muted">No data checksums recorded.</p>'
    rows = []
    for ds, files in sorted(sums.items()):
        for fname, meta in sorted(files.items()):
            sha = meta.get("sha256", "") if isinstance(meta, dict) else str(meta)
            size = meta.get("bytes") if isinstance(meta, dict) else None
            rows.append(
                [
                    _e(ds),
                    f"<code>{_e(fname)}</code>",
                    f'<code title="{_e(sha)}">{_e(sha[:16])}…</code>',
                    _e(f"{size:,}" if isinstance(size, int) else "–"),
                ]
            )
    return "<h3>Data checksums (sha256)</h3>" + _table(["dataset", "file", "sha256", "bytes"], rows, left=3)


def _splits(splits: dict[str, Any]) -> str:
    rows = []
    for ds, s in sorted((splits.get("datasets") or {}).items()):
        counts = s.get("counts", {})
        rates = s.get("positive_rate", {})
        rows.append(
            [_e(ds), _e(s.get("target") or "–"), _e(s.get("n_features", "–"))]
            + [_e(f"{counts.get(k, 0):,} ({fmt_sig(rates.get(k))})") for k in ("train", "calib", "test")]
        )
    if not rows:
        return ""
    head = ["dataset", "target", "features", "train (pos. rate)", "calib (pos. rate)", "test (pos. rate)"]
    return "<h3>Splits</h3>" + _table(head, rows, left=2)


def _status(ok: bool) -> str:
    return '<span class="ok">passed</span>' if ok else '<span class="fail">FAILED</span>'


def _validation(data: ReportData) -> str:
    """One summary row per phase, each phase's suites in a folded table (unfolded when one failed)."""
    out = ['<section id="validation"><h2>Validation</h2>']
    if not data.validation:
        out.append('<p class="muted">No validation results found.</p></section>')
        return "".join(out)
    out.append(
        "<p>Great Expectations suites on the raw data, the prepared splits and every calibrator's output "
        "(probabilities in [0, 1], no NaN, ranking kept by monotone methods, finite metrics).</p>"
    )
    summary, details, failures = [], [], []
    for phase in data.validation:
        suites = phase.get("suites", [])
        ok = all(s.get("success") for s in suites)
        ev = sum(s.get("evaluated", 0) for s in suites)
        bad = sum(s.get("failed", 0) for s in suites)
        n_ok = sum(1 for s in suites if s.get("success"))
        name = _e(phase.get("phase", "?"))
        summary.append([name, _status(ok), _e(f"{n_ok}/{len(suites)}"), _e(f"{ev - bad}/{ev}")])
        rows = [
            [
                _e(s.get("name", "?")),
                _status(bool(s.get("success"))),
                _e(f"{s.get('evaluated', 0) - s.get('failed', 0)}/{s.get('evaluated', 0)}"),
                _e(s.get("rows", "–")),
            ]
            for s in suites
        ]
        table = _table(["suite", "status", "expectations met", "rows"], rows, left=2)
        fold = "<details>" if ok else "<details open>"
        details.append(f"{fold}<summary>{name}: {len(suites)} suites</summary>{table}</details>")
        failures += [(s.get("name", "?"), f) for s in suites for f in s.get("failures", [])]
    out.append(_table(["phase", "status", "suites passed", "expectations met"], summary, left=2))
    out += details
    if failures:
        items = "".join(f"<li><b>{_e(n)}</b>: {_e(f.get('message', f))}</li>" for n, f in failures)
        out.append(f'<h3 class="fail">Failed expectations</h3><ul class="notes">{items}</ul>')
    out.append("</section>")
    return "".join(out)


def _interval(ci: Any) -> str:
    """``[low, high]`` of a ``{"low", "high"}`` dict or a pair, in the report's one number format."""
    lo, hi = (ci.get("low"), ci.get("high")) if isinstance(ci, dict) else (ci if _pair(ci) else (None, None))
    return "" if lo is None and hi is None else f"[{fmt_sig(lo)}, {fmt_sig(hi)}]"


def _pair(v: Any) -> bool:
    return isinstance(v, list | tuple) and len(v) == 2


def _metric_table(rows: dict[str, dict[str, Any]]) -> str:
    methods = method_order(list(rows))
    best = {spec.key: best_methods(rows, spec) for spec in METRICS}
    body, cls = [], []
    for m in methods:
        r = rows[m]
        ci = r.get("ci") or {}
        cells = [f"<code>{_e(m)}</code>"]
        for spec in METRICS:
            iv = _interval(ci.get(spec.key))
            mark = " ★" if m in best[spec.key] else ""
            cells.append(f"{fmt_sig(r.get(spec.key))}{mark}" + (f"<br><small>{iv}</small>" if iv else ""))
        body.append(cells)
        cls.append([""] + ["best" if m in best[s.key] else "" for s in METRICS])
    head = ["method"] + [_e(s.label) for s in METRICS]
    return _table(head, body, cls=cls)


def _dataset_detail(ds: str, rows: dict[str, dict[str, Any]], data: ReportData, fig: _Figures) -> str:
    main, base = split_baselines(rows)
    any_row = next(iter(rows.values()))
    n = any_row.get("n_test")
    out = [f'<h3 id="ds-{_e(ds)}">{_e(ds)}</h3>']
    out.append(
        f'<p class="muted">test rows: {_e(n if n is not None else "?")}, positive rate '
        f"{fmt_sig(any_row.get('positive_rate'))}</p>"
    )
    out.append(_metric_table(main))
    rel = data.reliability.get(ds) or {}
    rel_main = {m: rel[m] for m in method_order(list(rel)) if m not in RANKING_BASELINES}
    if rel_main:
        ece = {m: rows[m]["ece"] for m in rel_main if m in rows and isinstance(rows[m].get("ece"), float)}
        axes = "logit axes (base rate below 10%)" if figures.use_logit(rel_main) else "linear axes"
        cap = f"Every method, {axes}. Observed positive rate against mean prediction per equal-mass bin "
        cap += "of the test split; bars: "
        cap += "Jeffreys interval per bin; grey band: where a calibrated model's bins would fall "
        cap += "(consistency band); n/bin: test rows per bin; dashed: perfect calibration"
        out.append(fig(figures.reliability_grid(rel_main, ece), f"Reliability diagrams, {ds}", cap))
    hist = data.histograms.get(ds) or {}
    hist_main = {m: hist[m] for m in method_order(list(hist)) if m not in RANKING_BASELINES}
    if hist_main:
        body = fig(
            figures.histogram_grid(hist_main),
            f"Predicted probabilities, {ds}",
            "Test-split densities by class; the first panel is "
            + ("your own scores as they are" if _is_score_source(ds, data) else "the base model itself"),
        )
        out.append(f"<details><summary>Predicted-probability histograms, {_e(ds)}</summary>{body}</details>")
    if base:
        out.append(_baselines(base))
    return "".join(out)


def _baselines(rows: dict[str, dict[str, Any]]) -> str:
    """The ranking paper's baselines, folded, each with what it is (they calibrate nothing)."""
    items = "".join(f"<li><code>{_e(m)}</code>: {_e(RANKING_BASELINES[m])}</li>" for m in rows)
    return (
        "<details><summary>Ranking-paper baselines (not calibrators): "
        f"{_e(', '.join(rows))}</summary>"
        "<p>Kweon et al. (2022) list these as uncalibrated references; they are fitted and validated "
        f'like the others but left out of the comparison above.</p><ul class="notes">{items}</ul>'
        f"{_metric_table(rows)}</details>"
    )


def _is_score_source(name: str, data: ReportData) -> bool:
    """A source declared with its own ``score`` column: no base model is trained for it."""
    decl = (data.params.get("sources") or {}).get(name)
    return isinstance(decl, dict) and decl.get("score") is not None


def _fitted_on(data: ReportData) -> str:
    """What the calibrators were fitted on: the base model's margins, the sources' own scores, or both."""
    score = [ds for ds in data.evaluation if _is_score_source(ds, data)]
    if len(score) == len(data.evaluation):
        return "each source's own scores (no model is trained for a score source)"
    if not score:
        return "the base XGBoost model's margins"
    return (
        "the base XGBoost model's margins (datasets and features sources) or the source's own scores "
        f"({', '.join(score)}: no model trained)"
    )


def _calibration(data: ReportData, fig: _Figures) -> str:
    out = ['<section id="calibration"><h2>Detail: every calibrator on every dataset</h2>']
    if not data.evaluation:
        out.append('<p class="muted">No evaluation results found.</p></section>')
        return "".join(out)
    out.append(
        f"<p>Each calibrator is fitted on the calibration split of {_fitted_on(data)} and "
        "scored on the test split. ★ and green mark the best value per metric (lowest; Σp / Σy, the "
        "calibration ratio, closest to 1, which is perfect; AUC highest). Brackets: percentile bootstrap "
        "intervals over test rows (level in each metrics file, 95% by default). Reliability diagrams use "
        "equal-mass bins (every bin holds the same number of test rows), axes zoomed to the data and "
        "shared by all panels, with a Jeffreys interval per bin and a grey consistency band (a point outside "
        "it is evidence of miscalibration in that bin).</p>"
    )
    out += [_dataset_detail(ds, rows, data, fig) for ds, rows in data.evaluation.items()]
    out.append("</section>")
    return "".join(out)


def _paper_table(t: Any) -> str:
    rows = [[_e(fmt_sig(c)) for c in row] for row in t.rows]
    # Numbers right-aligned, text (labels, "mean ± s.e." strings) left-aligned.
    cls = [["" if isinstance(c, int | float) and not isinstance(c, bool) else "l" for c in r] for r in t.rows]
    out = f"<h3>{_e(t.title)}</h3>" + _table([_e(c) for c in t.columns], rows, cls=cls)
    return out + (f'<p class="muted">{_e(t.caption)}</p>' if t.caption else "")


def reproduction_body(rep: Reproduction, fig: _Figures) -> str:
    """One paper's tables, figures, headline metrics, notes and choices (the body of its own page)."""
    out = [f'<p class="muted">key <code>{_e(rep.key)}</code> · profile <b>{_e(rep.profile)}</b></p>']
    # the verdicts first (a table with a verdict column), then the figures, then the other tables
    first = [t for t in rep.tables if any("verdict" in str(c).lower() for c in t.columns)]
    rest = [t for t in rep.tables if t not in first]
    out += [_paper_table(t) for t in first]
    out += [fig(f.svg, f.title, f.caption) for f in rep.figures]
    out += [_paper_table(t) for t in rest]
    if rep.metrics:
        rows = [[f"<code>{_e(k)}</code>", _e(fmt_sig(v))] for k, v in rep.metrics.items()]
        out.append("<h3>Headline metrics</h3>" + _table(["metric", "value"], rows))
    for title, items in (("Notes", rep.notes), ("Choices where the paper is open", rep.choices)):
        if items:
            lis = "".join(f"<li>{_e(x)}</li>" for x in items)
            out.append(f'<h3>{title}</h3><ul class="notes">{lis}</ul>')
    return "".join(out)


def render_paper_page(rep: Reproduction, stored: str = "") -> str:
    """``reports/pages/paper-<key>.html``: one paper's reproduction, self-contained, linked from the index.

    ``stored``: the file name of a stored (committed) result, shown in the title with its profile so the
    index tells it apart from the pipeline's own run.
    """
    body = reproduction_body(rep, _Figures())
    title = f"Paper reproduction: {rep.paper}"
    if stored:
        title += f" ({rep.profile} profile, stored result {stored})"
    return page(title, body, back="../index.html")


def _pages(data: ReportData) -> str:
    """Links to every extra page (paper reproductions, monitoring), and the papers with no result."""
    out = ['<section id="pages"><h2>Pages</h2>']
    if data.pages:
        items = "".join(f'<li><a href="{_e(href)}">{_e(title)}</a></li>' for href, title in data.pages)
        out.append(f'<ul class="pages">{items}</ul>')
    else:
        out.append('<p class="muted">No extra pages (paper reproductions, monitoring) were written.</p>')
    if data.missing_reproductions:
        keys = ", ".join(data.missing_reproductions)
        out.append(f'<p class="fail">No result file for: {_e(keys)}.</p>')
    out.append("</section>")
    return "".join(out)


def _overlay(card: dict[str, Any], data: ReportData, fig: _Figures) -> str:
    """The answer's figure: uncalibrated and chosen bins on one reliability diagram (the grid comes later)."""
    name, method = str(card.get("name")), str(card.get("method"))
    rel = data.reliability.get(name) or {}
    before = rel.get("uncalibrated")
    if not before:
        return ""
    keep = card_verdict(card) == "keep"
    # a per-segment calibrator scored by select's pass (aggregate path) has no evaluate record: its bins
    # are on the card
    chosen = None if keep else rel.get(method) or card.get("chosen_reliability")
    svg = figures.reliability_overlay(before, chosen, method)
    rate = figures.base_rate(before)
    axes = "logit axes, base rate " if figures.use_logit({"u": before}) else "linear axes, base rate "
    what = "the scores as they are (kept)" if keep or not chosen else f"grey: uncalibrated, green: {method}"
    cap = (
        f"{what}; observed rate per equal-mass bin of the test split with its Jeffreys interval, "
        f"{axes}{fmt_sig(rate)}; dashed: perfect calibration"
    )
    return fig(svg, f"Before vs chosen, {name}", cap)


def render_html(data: ReportData, title: str = "calibflow report") -> str:
    """The index page as a string: the answers first, then the detail, run metadata last."""
    fig = _Figures()
    nav = " ".join(f'<a href="#{a}">{t}</a>' for a, t in _NAV)  # spaces: the links wrap on a phone
    rev = (data.metadata.get("git_revision") or "")[:10]
    sub = f'<p class="muted">revision {_e(rev or "unknown")}</p><nav>{nav}</nav>'
    overlays = {str(c.get("name")): _overlay(c, data, fig) for c in data.cards}
    methods = sorted({m for rows in data.evaluation.values() for m in rows} - {"uncalibrated"})
    body = (
        render_answers(data.cards, list(data.evaluation), overlays)
        + _pages(data)
        + _calibration(data, fig)
        + _validation(data)
        + render_glossary(methods)
        + _metadata(data)
    )
    return page(title, body, subtitle=sub)
