"""The "calibration over time" page of one source: ``reports/pages/monitoring-<source>.html``.

Self-contained and offline (inline CSS and SVG, no script, no font or CDN). Per segment: the
champion's calibration ratio per window with its bootstrap interval and alert band, its ECE with the
band's ceiling; overall: the selection metric of the champion beside every challenger's on each gated
window. Promotions are dashed green verticals, alerts red dots, skipped windows grey ticks; a red banner on
top lists the open incidents (green only when none is open), and a table lists every incident.
"""

from __future__ import annotations

import hashlib
import html
from typing import Any

from calibflow import plots
from calibflow.monitor import ALL, MonitorConfig, MonitorState, incidents
from calibflow.report._format import fmt_num
from calibflow.report.chrome import CSS as _CSS
from calibflow.report.figures import scope_svg
from calibflow.report.html import _table
from calibflow.report.svg import sanitize_svg

_EXTRA_CSS = (
    ".banner{background:#fdecea;border:1px solid #b3261e;color:#7a1b14;padding:8px 12px;margin:12px 0;"
    "border-radius:4px} .banner.ok{background:#e7f5e9;border-color:#17752c;color:#124d20}"
    " svg text{font:11px system-ui,sans-serif}"
)


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _series_svg(
    rows: list[dict | None],
    windows: list[str],
    metric: str,
    promos: dict[str, int],
    alerts: set[tuple[str, str]],
    title: str,
) -> str:
    """One metric per window with its interval (ratio), band, alert dots and promotions
    (``calibflow.plots.window_series``, the plotting module of the rest of the report)."""
    ratio = metric == "calibration_ratio"
    band_key = "band_ratio" if ratio else "band_ece"
    svg = plots.window_series(
        windows,
        [r[metric] if r else None for r in rows],
        title,
        interval=[(r.get("ratio_low"), r.get("ratio_high")) if r else None for r in rows] if ratio else None,
        band=[tuple(r[band_key]) if r and r.get(band_key) else None for r in rows],
        reference=1.0 if ratio else None,
        alerts=[bool(r) and (r["window"], metric) in alerts for r in rows],
        marks={windows.index(w): f"promoted v{v}" for w, v in promos.items() if w in windows},
    )
    if not svg:
        return ""
    seg = next(r["segment"] for r in rows if r)
    return _page_svg(svg, f"{seg}/{metric}")


def _page_svg(svg: str, key: str) -> str:
    """A matplotlib SVG made fit for the page: several share it, so their ids (clip paths) are scoped
    per figure; SVG 2's plain href (every current browser), so the page names no URL but the SVG
    namespace."""
    scope = hashlib.sha1(key.encode()).hexdigest()[:8]
    svg = scope_svg(sanitize_svg(svg), f"m{scope}-")
    return svg.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace("xlink:href=", "href=")


def _gate_svg(state: MonitorState, windows: list[str], promos: dict[str, int]) -> str:
    """The selection metric of the champion beside every challenger's on each gated window."""
    gates = [g for g in state.gates if g.get("challengers")]
    if not gates:
        return ""
    methods = sorted({m for g in gates for m in g["challengers"]})
    by_window = {g["window"]: g for g in gates}
    champion = [by_window[w]["champion"] if w in by_window else None for w in windows]
    lines = {"champion": champion} | {
        m: [by_window[w]["challengers"].get(m, {}).get("value") if w in by_window else None for w in windows]
        for m in methods
    }
    marks = {windows.index(w): f"promoted v{v}" for w, v in promos.items() if w in windows}
    svg = plots.window_lines(windows, lines, gates[0]["metric"], marks=marks)
    return _page_svg(svg, "gate") if svg else ""


def _banner(state: MonitorState, cfg: MonitorConfig) -> str:
    open_ = [i for i in incidents(state, cfg) if i["closed"] is None]
    if not state.processed and not open_:
        return '<div class="banner ok">No window scored yet.</div>'
    newest = state.processed[-1] if state.processed else "none scored"
    if not open_:
        return f'<div class="banner ok">No open incident after the newest window ({_e(newest[:10])}).</div>'
    items = "".join(f"<li>{incident_sentence(state, i)}</li>" for i in open_)
    return f'<div class="banner"><b>Calibration drift: open on {_e(newest[:10])}</b><ul>{items}</ul></div>'


def incident_sentence(state: MonitorState, inc: dict[str, Any]) -> str:
    """What an open incident means and what to do, in a sentence (HTML-escaped)."""
    seg, metric, since = _e(inc["segment"]), inc["metric"], _e(inc["opened"][:10])
    if metric == "labels_overdue":
        return (f"{seg}: window {since} still waits for {int(inc['worst'])} label(s) past "
                "monitor.label_deadline; check the label feed (the window is scored once they arrive)")
    if metric == "delivery_missing":
        return (f"{seg}: no file delivered for window {since} past monitor.delivery_deadline; "
                "check the export job")
    recent = [r for r in state.history if r["segment"] == inc["segment"] and not r.get("skipped")
              and r["window"] >= inc["opened"]]
    if metric == "calibration_ratio" and recent:
        vals = [r["calibration_ratio"] for r in recent]
        mean = sum(vals) / len(vals)
        way = "low" if mean < 1 else "high"
        return (f"{seg}: served {abs(mean - 1):.0%} {way} on average (sum p / sum y {mean:.3f}, "
                f"{len(vals)} window(s) since {since}; worst {fmt_num(inc['worst'])}). The gate replaces the "
                "champion once a challenger is better for sure; to act now, run `calibflow monitor rollback` "
                "or refit")
    if metric == "calibration_slope" and recent:
        b = recent[-1].get("calibration_slope")
        how = "over-confident" if (b or 1) < 1 else "under-confident"
        return (f"{seg}: scores {how} since {since} (calibration slope {fmt_num(b)}, 1 is right); "
                "the gate's challengers refit it")
    return (f"{seg}: {_e(metric)} out of band since {since} ({inc['windows']} window(s) out; "
            f"worst {fmt_num(inc['worst'])})")


def _pending_table(state: MonitorState) -> str:
    waits = [(k, w) for k, w in sorted(state.waits.items()) if not w.get("resolved")]
    if not waits:
        return "<p>None: every delivered window whose labels are due is scored.</p>"
    what = {"due": "labels not due yet", "labels": "labels not all in",
            "blocked": "waits for an earlier window", "delivery": "no file delivered"}
    rows = [
        [
            _e(k[:10]),
            _e(what.get(w["kind"], w["kind"])),
            _e(w.get("why", "")),
            _e(str(w.get("since", ""))[:16]),
            _e(str(w.get("deadline") or "–")[:16]),
            "INCIDENT" if w.get("overdue_at") else "",
        ]
        for k, w in waits
    ]
    return _table(["window", "state", "detail", "since", "deadline", ""], rows, 2)


def _incidents_table(state: MonitorState, cfg: MonitorConfig) -> str:
    found = incidents(state, cfg)
    if not found:
        return "<p>None.</p>"
    rows = [
        [
            _e(i["segment"]),
            _e(i["metric"]),
            _e(i["opened"][:10]),
            _e((i["closed"] or "open")[:10]),
            _e(i["windows"]),
            fmt_num(i["worst"]),
        ]
        for i in found
    ]
    return _table(["segment", "metric", "opened", "closed", "windows out", "worst"], rows, 2)


def render_page(state: MonitorState, title: str | None = None, cfg: MonitorConfig | None = None) -> str:
    """The page's HTML (module doc); ``cfg`` decides when incidents close (default: the defaults)."""
    cfg = cfg or MonitorConfig()
    windows = list(state.processed)
    promos = {
        v["promoted_after"]: v["version"]
        for v in state.versions[1:]
        if v.get("promoted_after") and not v.get("withdrawn")
    }
    segs, thin = _segments_worst_first(state)
    parts = [f"<h1>{_e(title or 'Calibration over time: ' + state.source)}</h1>", _banner(state, cfg)]
    parts.append("<h2>Pending windows</h2>" + _pending_table(state))
    parts.append("<h2>Segments, worst first</h2>" + _worst_table(state, segs, thin))
    parts.append(
        f"<p class='muted'>{len(windows)} window(s) scored; champion v{state.champion} "
        f"({_e(state.versions[state.champion - 1]['method'])}); {len(state.versions) - 1} promotion(s); "
        f"{len(state.alerts)} alert(s). Ratio = sum p / sum y (1 is perfect) with its bootstrap interval; "
        "dashed red: the alert band; dashed green: a promotion; grey tick: window skipped.</p>"
    )
    drawn = _drawn(state, cfg, segs)
    if len(drawn) < len(segs):
        parts.append(
            f"<p class='muted'>Figures for {len(drawn)} of {len(segs)} watched segments: overall, every "
            f"segment with an incident, and the {FIGURE_WORST} worst; the others are in the table above.</p>"
        )
    parts.append(_picker(state, windows, promos, drawn))
    parts.append("<h3>Champion and challengers on each held-out window</h3>")
    parts.append(f'<figure class="svg">{_gate_svg(state, windows, promos)}</figure>')
    parts.append("<h2>Promotions</h2>" + _versions_table(state))
    parts.append("<h2>Incidents</h2>" + _incidents_table(state, cfg))
    parts.append("<h2>Alerts (every out-of-band window)</h2>" + _alerts_table(state))
    if state.notes:
        parts.append(
            "<h2>Notes</h2><ul class='notes'>" + "".join(f"<li>{_e(n)}</li>" for n in state.notes) + "</ul>"
        )
    body = "".join(parts)
    css = f"{_CSS} {_EXTRA_CSS} {_picker_css(len(drawn))}"
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(state.source)} "
        f"monitoring</title><style>{css}</style></head><body>{body}</body></html>\n"
    )


#: The page's metrics over time, one figure each, with the segment picked above them.
_OVER_TIME = (("calibration_ratio", "Calibration ratio (sum p / sum y)"), ("ece", "ECE"))


def _picker(state: MonitorState, windows: list[str], promos: dict[str, int], drawn: list[str]) -> str:
    """One figure per metric; the segment shown is picked with radio buttons (CSS only: the page has no
    script), ``all`` first, then the segments with an incident and the worst."""
    alerts = {(a["segment"], a["window"], a["metric"]) for a in state.alerts}
    buttons, figures = [], {m: [] for m, _ in _OVER_TIME}
    for i, seg in enumerate(drawn):
        checked = " checked" if i == 0 else ""
        buttons.append(
            f'<input type="radio" name="seg" id="seg{i}"{checked}><label for="seg{i}">{_e(seg)}</label>'
        )
        by_w = {r["window"]: r for r in state.history if r["segment"] == seg and not r.get("skipped")}
        rows = [by_w.get(w) for w in windows]
        sa = {(w, m) for (s, w, m) in alerts if s == seg}
        for metric, label in _OVER_TIME:
            svg = _series_svg(rows, windows, metric, promos, sa, f"{label}: {seg}")
            figures[metric].append(f'<div class="s s{i}">{svg}</div>')
    out = ["<h2>Over time</h2><div class='segpick'><p class='muted'>Segment:</p>", *buttons]
    for metric, label in _OVER_TIME:
        out.append(f"<h3>{_e(label)}</h3><figure class='svg'>{''.join(figures[metric])}</figure>")
    return "".join(out) + "</div>"


def _picker_css(n: int) -> str:
    """Only the picked segment's figures show; the picked button is filled."""
    shown = ",".join(f"#seg{i}:checked~figure .s{i}" for i in range(n))
    return (
        ".segpick input{position:absolute;opacity:0;width:1px;height:1px}"
        " .segpick label{display:inline-block;border:1px solid #9aa4b2;border-radius:12px;padding:2px 10px;"
        "margin:2px 4px 2px 0;cursor:pointer;font-size:13px}"
        " .segpick input:checked+label{background:#1a4d8f;border-color:#1a4d8f;color:#fff}"
        " .segpick input:focus-visible+label{outline:2px solid #1a4d8f;outline-offset:2px}"
        " .segpick .s{display:none}" + (f" {shown}{{display:block}}" if n else "")
    )


#: Segments drawn besides ``all`` and those with an incident: the worst this many by the table's order.
FIGURE_WORST = 5


def _drawn(state: MonitorState, cfg: MonitorConfig, segs: list[str]) -> list[str]:
    """The segments that get figures (in ``segs``' order): a page of 34 segments drew 69 figures."""
    with_incident = {i["segment"] for i in incidents(state, cfg)}
    others = [s for s in segs if s != ALL and s not in with_incident][:FIGURE_WORST]
    keep = {ALL, *with_incident, *others}
    return [s for s in segs if s in keep]


def _segments_worst_first(state: MonitorState) -> tuple[list[str], dict[str, str]]:
    """Watched segments by how far off their newest scored window is (``all`` first), and the segments
    never scored because of too few positives, with the reason."""
    newest: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    for r in state.history:
        if r.get("skipped"):
            skipped[r["segment"]] = r["skipped"]
        else:
            newest[r["segment"]] = r
    thin = {s: why for s, why in skipped.items() if s not in newest}
    order = sorted(newest, key=lambda s: (s != ALL, -abs(newest[s]["calibration_ratio"] - 1)))
    return order, thin


def _worst_table(state: MonitorState, segs: list[str], thin: dict[str, str]) -> str:
    newest = {r["segment"]: r for r in state.history if not r.get("skipped")}
    rows = [
        [
            _e(s),
            _e(newest[s]["window"][:10]),
            fmt_num(newest[s]["calibration_ratio"]),
            _e(f"[{fmt_num(newest[s].get('ratio_low'))}, {fmt_num(newest[s].get('ratio_high'))}]"),
            fmt_num(newest[s]["ece"]),
            fmt_num(newest[s].get("calibration_slope")),
            _e(newest[s]["positives"]),
            "yes" if newest[s].get("out") else "",
        ]
        for s in segs
    ]
    rows += [
        [_e(s), "–", "–", "–", "–", "–", "–", _e(f"not watched: {why}")] for s, why in sorted(thin.items())
    ]
    return _table(
        ["segment", "newest window", "ratio", "interval", "ECE", "slope", "positives", "out"], rows, 2
    )


def _versions_table(state: MonitorState) -> str:
    reasons = {g.get("new_version"): g.get("reason", "") for g in state.gates if g.get("new_version")}
    rows = []
    for v in state.versions:
        j = v.get("judged") or {}
        ci = j.get("delta_ci")
        rows.append(
            [
                _e(v["version"]),
                _e(v["method"]),
                _e(_span(v.get("fitted_on")) or v.get("origin") or "–"),
                _e(_span(v.get("judged_on")) or "–"),
                _e(f"{fmt_num(j['delta'], 5)} [{fmt_num(ci[0], 5)}, {fmt_num(ci[1], 5)}]") if ci else "–",
                _e(v.get("withdrawn") or reasons.get(v["version"], "")),
                "yes" if v["version"] == state.champion else "",
            ]
        )
    return _table(
        ["version", "method", "fitted on", "judged on", "gain (champion - it)", "why", "in office"], rows, 4
    )


def _span(value: Any) -> str:
    """A version's [start, end] timestamps as "2026-10-01 to 2026-10-14 23:56": to the minute (row
    timestamps carry nanoseconds), the time left out at midnight."""
    if not value:
        return ""
    if isinstance(value, list | tuple) and len(value) == 2:
        ends = [str(x).replace("T", " ")[:16].removesuffix(" 00:00") for x in value]
        return f"{ends[0]} to {ends[1]}"
    return str(value)


def _alerts_table(state: MonitorState) -> str:
    if not state.alerts:
        return "<p>None.</p>"
    rows = [
        [
            _e(a["window"][:10]),
            _e(a["segment"]),
            _e(a["metric"]),
            fmt_num(a["value"]),
            _e(f"[{fmt_num(a['band'][0])}, {fmt_num(a['band'][1])}]"),
            _e(a["version"]),
        ]
        for a in state.alerts
    ]
    return _table(["window", "segment", "metric", "value", "band", "version"], rows, 3)
