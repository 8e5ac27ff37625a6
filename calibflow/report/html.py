"""``reports/index.html``: one self-contained page (inline CSS and SVG, no scripts, no network)."""

from __future__ import annotations

import html
from typing import Any

import yaml

from calibflow.report import figures
from calibflow.report._format import fmt_interval, fmt_num
from calibflow.report.data import METRICS, ReportData, best_methods, method_order
from calibflow.results import Reproduction

_CSS = " ".join(
    [
        "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 40px}",
        "h1{margin:18px 0 4px} h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:36px}",
        "h3{margin-top:26px} table{border-collapse:collapse;margin:8px 0 14px;font-size:13px}",
        "th,td{border:1px solid #d6d6d6;padding:3px 7px;text-align:right;vertical-align:top}",
        "th{background:#f2f2f4} td.l,th.l{text-align:left} td.best{background:#e3f4e1;font-weight:600}",
        "small,.muted{color:#666} .ok{color:#17752c;font-weight:600} .fail{color:#b3261e;font-weight:600}",
        "figure{margin:10px 0 18px} figcaption{color:#555;font-size:12px;margin-top:4px}",
        ".svg svg{max-width:100%;height:auto} nav a{margin-right:14px} code{font-size:12px}",
        "pre{background:#f6f6f8;padding:8px;overflow:auto;font-size:12px} details{margin:6px 0}",
        "ul.notes li{margin:3px 0}",
    ]
)


_NAV = (("run", "Run"), ("validation", "Validation"), ("calibration", "Calibrators"), ("papers", "Papers"))


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


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
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class _Figures:
    """Numbers the page's figures and scopes each SVG's ids so they cannot collide."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, svg: str, title: str, caption: str = "") -> str:
        self.n += 1
        body = figures.scope_svg(svg, f"f{self.n}-")
        text = _e(title) + (". " + _e(caption) if caption else "")
        cap = f"<figcaption><b>Figure {self.n}.</b> {text}</figcaption>"
        return f'<figure data-figure="{self.n}"><div class="svg">{body}</div>{cap}</figure>'


def _metadata(data: ReportData) -> str:
    md = data.metadata
    rev = md.get("git_revision") or "unknown"
    dirty = " (uncommitted changes)" if md.get("git_dirty") else ""
    rows = [
        ["git revision", f"<code>{_e(rev)}</code>{_e(dirty)}"],
        ["generated", _e(md.get("generated", "–"))],
        ["python", _e(md.get("python", "–"))],
        ["seed", _e(data.params.get("seed", "–"))],
    ]
    out = ['<section id="run"><h2>Run</h2>', _table(["", ""], rows)]
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
            + [_e(f"{counts.get(k, 0):,} ({fmt_num(rates.get(k), 3)})") for k in ("train", "calib", "test")]
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


def _metric_table(rows: dict[str, dict[str, Any]]) -> str:
    methods = method_order(list(rows))
    best = {spec.key: best_methods(rows, spec) for spec in METRICS}
    body, cls = [], []
    for m in methods:
        r = rows[m]
        ci = r.get("ci") or {}
        cells = [f"<code>{_e(m)}</code>"]
        for spec in METRICS:
            iv = fmt_interval(ci.get(spec.key))
            mark = " ★" if m in best[spec.key] else ""
            cells.append(f"{fmt_num(r.get(spec.key))}{mark}" + (f"<br><small>{iv}</small>" if iv else ""))
        body.append(cells)
        cls.append([""] + ["best" if m in best[s.key] else "" for s in METRICS])
    head = ["method"] + [_e(s.label) for s in METRICS]
    return _table(head, body, cls=cls)


def _calibration(data: ReportData, fig: _Figures) -> str:
    out = ['<section id="calibration"><h2>Calibrators on real data</h2>']
    if not data.evaluation:
        out.append('<p class="muted">No evaluation results found.</p></section>')
        return "".join(out)
    out.append(
        "<p>Each calibrator is fitted on the calibration split of the base XGBoost model's margins and "
        "scored on the test split. ★ and green mark the best value per metric (lowest; calibration ratio "
        "closest to 0; AUC highest). Brackets: percentile bootstrap intervals over test rows (level in each "
        "metrics file, 95% by default).</p>"
    )
    for ds, rows in data.evaluation.items():
        any_row = next(iter(rows.values()))
        n = any_row.get("n_test")
        out.append(f'<h3 id="ds-{_e(ds)}">{_e(ds)}</h3>')
        out.append(
            f'<p class="muted">test rows: {_e(n if n is not None else "?")}, positive rate '
            f"{fmt_num(any_row.get('positive_rate'), 3)}</p>"
        )
        out.append(_metric_table(rows))
        rel = data.reliability.get(ds) or {}
        if rel:
            order = {m: rel[m] for m in method_order(list(rel))}
            ece = {m: rows[m]["ece"] for m in order if m in rows and isinstance(rows[m].get("ece"), float)}
            out.append(
                fig(
                    figures.reliability_grid(order, ece),
                    f"Reliability diagrams, {ds}",
                    "Observed positive rate against mean prediction per equal-width bin of the test split",
                )
            )
        hist = data.histograms.get(ds) or {}
        if hist:
            order = {m: hist[m] for m in method_order(list(hist))}
            out.append(
                fig(
                    figures.histogram_grid(order),
                    f"Predicted probabilities, {ds}",
                    "Test-split densities by class; the first panel is the base model itself",
                )
            )
    out.append("</section>")
    return "".join(out)


def _reproduction(rep: Reproduction, fig: _Figures) -> str:
    out = [f'<section id="paper-{_e(rep.key)}"><h3>{_e(rep.paper)}</h3>']
    out.append(
        f'<p class="muted">key <code>{_e(rep.key)}</code> · profile <b>{_e(rep.profile)}</b> · '
        f"{rep.elapsed_s:.1f} s</p>"
    )
    for t in rep.tables:
        rows = [[_e(fmt_num(c)) for c in row] for row in t.rows]
        # Numbers right-aligned, text (labels, "mean ± s.e." strings) left-aligned.
        cls = [
            ["" if isinstance(c, int | float) and not isinstance(c, bool) else "l" for c in row]
            for row in t.rows
        ]
        out.append(f"<h4>{_e(t.title)}</h4>")
        out.append(_table([_e(c) for c in t.columns], rows, cls=cls))
        if t.caption:
            out.append(f'<p class="muted">{_e(t.caption)}</p>')
    for f in rep.figures:
        out.append(fig(f.svg, f.title, f.caption))
    if rep.metrics:
        rows = [[f"<code>{_e(k)}</code>", _e(fmt_num(v))] for k, v in rep.metrics.items()]
        out.append("<h4>Headline metrics</h4>" + _table(["metric", "value"], rows))
    for title, items in (("Notes", rep.notes), ("Choices where the paper is open", rep.choices)):
        if items:
            lis = "".join(f"<li>{_e(x)}</li>" for x in items)
            out.append(f'<h4>{title}</h4><ul class="notes">{lis}</ul>')
    out.append("</section>")
    return "".join(out)


def _papers(data: ReportData, fig: _Figures) -> str:
    out = ['<section id="papers"><h2>Paper reproductions</h2>']
    if not data.reproductions and not data.missing_reproductions:
        out.append('<p class="muted">No reproductions were run.</p>')
    out.append("<p>Our numbers beside each paper's, as each experiment reports them.</p>")
    out += [_reproduction(r, fig) for r in data.reproductions]
    if data.missing_reproductions:
        keys = ", ".join(data.missing_reproductions)
        out.append(f'<p class="fail">No result file for: {_e(keys)}.</p>')
    out.append("</section>")
    return "".join(out)


def render_html(data: ReportData, title: str = "calibflow report") -> str:
    """The full page as a string (UTF-8, self-contained)."""
    fig = _Figures()
    calib = _calibration(data, fig)
    papers = _papers(data, fig)
    nav = "".join(f'<a href="#{a}">{t}</a>' for a, t in _NAV)
    rev = (data.metadata.get("git_revision") or "")[:10]
    head = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>'
    )
    top = f'<body><h1>{_e(title)}</h1><p class="muted">revision {_e(rev or "unknown")}</p><nav>{nav}</nav>'
    return head + top + _metadata(data) + _validation(data) + calib + papers + "</body></html>\n"
