"""Page chrome shared by every report page: inline CSS, the HTML skeleton, escaping.

Every page (``reports/index.html``, ``reports/pages/*.html``) is one self-contained file: inline CSS and
SVG, no scripts, nothing fetched. Other renderers (the monitoring pages) call ``page`` so all pages look
alike; they must escape every value with ``e`` and pass figures through ``calibflow.report.svg``.
"""

from __future__ import annotations

import html
import re
from typing import Any

CSS = " ".join(
    [
        "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 40px}",
        "h1{margin:18px 0 4px;font-size:26px}",
        "h2{border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:36px}",
        "h3{margin-top:26px} table{border-collapse:collapse;margin:8px 0 14px;font-size:13px}",
        "th,td{border:1px solid #d6d6d6;padding:3px 7px;text-align:right;vertical-align:top}",
        "th{background:#f2f2f4} td.l,th.l{text-align:left} td.best{background:#e3f4e1;font-weight:600}",
        "small,.muted{color:#666} .ok{color:#17752c;font-weight:600} .fail{color:#b3261e;font-weight:600}",
        "figure{margin:10px 0 18px} figcaption{color:#555;font-size:12px;margin-top:4px}",
        ".svg svg{max-width:100%;height:auto} code{font-size:12px}",
        "nav a{margin-right:14px;white-space:nowrap}",
        "pre{background:#f6f6f8;padding:8px;overflow:auto;font-size:12px} details{margin:6px 0}",
        "ul.notes li{margin:3px 0} .wide{overflow-x:auto;max-width:100%} summary{cursor:pointer}",
        ".answers{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:12px}",
        ".answer{border:1px solid #cfd8cf;border-left:5px solid #2e7d32;border-radius:4px;padding:8px 12px}",
        ".answer.none{border-left-color:#9e9e9e} .answer h3{margin:0 0 4px;font-size:16px}",
        # the card's colour is its verdict: green calibrate, blue keep your scores, amber a named method
        ".answer.keep{border-color:#c9d6ea;border-left-color:#1e5aa8}",
        ".answer.unsure{border-color:#ecdcc0;border-left-color:#e08a00}",
        ".answer .pick{font-size:18px;font-weight:600;margin:2px 0 6px} .answer table{width:100%}",
        ".answer p{margin:4px 0} .gain{color:#17752c} .loss{color:#b3261e}",
        ".answer td small{white-space:nowrap}",
        ".svg{overflow-x:auto} .segment-reliability svg{max-width:100%;height:auto}",
        # A phone: figures keep a readable size and scroll sideways in their box; the page never does.
        "@media (max-width:600px){body{padding:0 8px 30px} h1{font-size:21px} table{font-size:12px}",
        "th,td{padding:2px 4px} .svg svg{max-width:none} .answers{display:block}",
        ".answer{margin-bottom:10px}",
        # ... and a table never scrolls (a clipped column reads as a wrong number): each row becomes a
        # block, each cell a line with its column's name (data-label) on the left
        "table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;width:auto}",
        "table.stack thead{display:none} table.stack tr{border:1px solid #d6d6d6;margin:0 0 6px}",
        "table.stack td{border:0;border-top:1px solid #eee;text-align:right;overflow-wrap:anywhere}",
        # an empty cell has no line to give (its floated label would ride into the next line), and each
        # line clears its label's float
        "table.stack td:empty{display:none} table.stack td::after{content:'';display:block;clear:both}",
        "table.stack td:first-child{text-align:left;font-weight:600;background:#f2f2f4;border-top:0}",
        "table.stack td[data-label]::before{content:attr(data-label);float:left;color:#555;",
        "font-weight:normal;padding-right:10px;text-align:left}}",
        # A wide screen: one answer spans the row, its figure beside its text and table
        ".answers.solo{grid-template-columns:1fr}",
        "@media (min-width:1000px){.answer.solo{display:grid;column-gap:28px;align-items:start;",
        "grid-template-columns:minmax(0,1fr) minmax(0,1fr)} .answer.solo>*{grid-column:1}",
        ".answer.solo>figure{grid-column:2;",
        "grid-row:1 / span 6} .answer.solo>.segments{grid-column:1 / span 2}}",
    ]
)

_TH = re.compile(r"<th[^>]*>(.*?)</th>", re.S)
_TR = re.compile(r"<tr[^>]*>.*?</tr>", re.S)


def _plain(cell: str) -> str:
    """A header cell's text (tags dropped, entities read) for a ``data-label`` attribute."""
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def stacked(table: str) -> str:
    """``table`` (one ``<table>`` calibflow built: a ``<thead>`` row, then ``<tbody>`` rows) made to stack
    on a phone: class ``stack`` and every body cell after the first labelled with its column's header."""
    head, sep, body = table.partition("</thead>")
    labels = [_plain(h) for h in _TH.findall(head)]

    def row(m: re.Match[str]) -> str:
        parts = m.group(0).split("<td")
        out = parts[0]
        for i, part in enumerate(parts[1:]):
            lab = labels[i] if 0 < i < len(labels) else ""
            out += "<td" + (f' data-label="{e(lab)}"' if lab else "") + part
        return out

    return head.replace("<table>", '<table class="stack">', 1) + sep + _TR.sub(row, body)


def e(v: Any) -> str:
    """HTML-escape any value (quotes included), the only way values reach a page."""
    return html.escape(str(v), quote=True)


def page(title: str, body: str, subtitle: str = "", back: str | None = None) -> str:
    """A full page around ``body`` (already-escaped HTML); ``back`` links to the index from a sub-page."""
    head = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>'
    )
    up = f'<p><a href="{e(back)}">← calibflow report</a></p>' if back else ""
    return f"{head}<body>{up}<h1>{e(title)}</h1>{subtitle}{body}</body></html>\n"
