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
import math
from typing import Any

from calibflow import plots
from calibflow.monitoring import ALL, MonitorConfig, MonitorState, incidents
from calibflow.report._format import fmt_num
from calibflow.report.chrome import CSS as _CSS
from calibflow.report.figures import scope_svg
from calibflow.report.html import _table
from calibflow.report.svg import sanitize_svg

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 900, 230, 56, 16, 24, 34
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_EXTRA_CSS = (
    ".banner{background:#fdecea;border:1px solid #b3261e;color:#7a1b14;padding:8px 12px;margin:12px 0;"
    "border-radius:4px} .banner.ok{background:#e7f5e9;border-color:#17752c;color:#124d20}"
    " svg text{font:11px system-ui,sans-serif}"
)


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


class _Axes:
    """Maps window index and value to SVG coordinates."""

    def __init__(self, n: int, lo: float, hi: float) -> None:
        if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
            lo, hi = (lo - 0.5, lo + 0.5) if math.isfinite(lo) else (0.0, 1.0)
        pad = 0.06 * (hi - lo)
        self.n, self.lo, self.hi = max(n, 1), lo - pad, hi + pad

    def x(self, i: float) -> float:
        return PAD_L + (W - PAD_L - PAD_R) * (i + 0.5) / self.n

    def y(self, v: float) -> float:
        return PAD_T + (H - PAD_T - PAD_B) * (1 - (v - self.lo) / (self.hi - self.lo))


def _svg(parts: list[str]) -> str:
    head = f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}">'
    return head + "".join(parts) + "</svg>"


def _frame(ax: _Axes, labels: list[str], ylabel: str) -> list[str]:
    out = [
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" height="{H - PAD_T - PAD_B}" '
        'fill="none" stroke="#bbb"/>'
    ]
    for k in range(5):
        v = ax.lo + (ax.hi - ax.lo) * k / 4
        y = ax.y(v)
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{PAD_L - 4}" y="{y + 4:.1f}" text-anchor="end">{fmt_num(v, 3)}</text>')
    step = max(1, len(labels) // 10)
    for i in range(0, len(labels), step):
        out.append(
            f'<text x="{ax.x(i):.1f}" y="{H - PAD_B + 14}" text-anchor="middle">{_e(labels[i][:10])}</text>'
        )
    out.append(f'<text x="{PAD_L}" y="{PAD_T - 8}" fill="#444">{_e(ylabel)}</text>')
    return out


def _poly(points: list[tuple[float, float]], color: str, width: float = 1.6, dash: str = "") -> str:
    if not points:
        return ""
    d = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    da = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="{width}"{da}/>'


def _markers(ax: _Axes, windows: list[str], promos: dict[str, int], skipped: list[int]) -> list[str]:
    out = []
    for w, v in promos.items():
        if w in windows:
            x = ax.x(windows.index(w))
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#17752c" '
                f'stroke-dasharray="5,3"><title>promoted v{v} after {_e(w)}</title></line>'
            )
    for i in skipped:
        x = ax.x(i)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{H - PAD_B - 6}" y2="{H - PAD_B}" stroke="#999"/>')
    return out


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
    # several matplotlib figures share the page: scope their ids (clip paths) per segment and metric
    seg = next(r["segment"] for r in rows if r)
    scope = hashlib.sha1(f"{seg}/{metric}".encode()).hexdigest()[:8]
    svg = scope_svg(sanitize_svg(svg), f"m{scope}-")
    # SVG 2's plain href (every current browser): the page then names no URL but the SVG namespace
    return svg.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "").replace("xlink:href=", "href=")


def _gate_svg(state: MonitorState, windows: list[str], promos: dict[str, int]) -> str:
    gates = [g for g in state.gates if g.get("challengers")]
    if not gates:
        return ""
    methods = sorted({m for g in gates for m in g["challengers"]})
    vals = [g["champion"] for g in gates] + [
        c["value"] for g in gates for c in g["challengers"].values() if "value" in c
    ]
    ax = _Axes(len(windows), min(vals), max(vals))
    out = _frame(ax, windows, gates[0]["metric"])
    idx = {w: i for i, w in enumerate(windows)}
    out.append(_poly([(ax.x(idx[g["window"]]), ax.y(g["champion"])) for g in gates], "#000", 2.0))
    legend = [("champion", "#000")]
    for k, m in enumerate(methods):
        col = _COLORS[(k + 1) % len(_COLORS)]
        pts = [
            (ax.x(idx[g["window"]]), ax.y(g["challengers"][m]["value"]))
            for g in gates
            if "value" in g["challengers"].get(m, {})
        ]
        out.append(_poly(pts, col, 1.2, "4,2"))
        legend.append((m, col))
    out += _markers(ax, windows, promos, [])
    for k, (name, col) in enumerate(legend):
        x = PAD_L + 10 + 110 * k
        out.append(
            f'<rect x="{x}" y="{H - 12}" width="10" height="3" fill="{col}"/>'
            f'<text x="{x + 14}" y="{H - 8}">{_e(name)}</text>'
        )
    return _svg(out)


def _banner(state: MonitorState, cfg: MonitorConfig) -> str:
    if not state.processed:
        return '<div class="banner ok">No window scored yet.</div>'
    newest = state.processed[-1]
    open_ = [i for i in incidents(state, cfg) if i["closed"] is None]
    if not open_:
        return f'<div class="banner ok">No open incident after the newest window ({_e(newest[:10])}).</div>'
    items = "".join(
        f"<li>{_e(i['segment'])}: {_e(i['metric'])} out of band since {_e(i['opened'][:10])} "
        f"({i['windows']} window(s) out; worst {fmt_num(i['worst'])})</li>"
        for i in open_
    )
    return f'<div class="banner"><b>Calibration drift: open on {_e(newest[:10])}</b><ul>{items}</ul></div>'


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
    segs = list(dict.fromkeys(r["segment"] for r in state.history))
    parts = [f"<h1>{_e(title or 'Calibration over time: ' + state.source)}</h1>", _banner(state, cfg)]
    parts.append(
        f"<p class='muted'>{len(windows)} window(s) scored; champion v{state.champion} "
        f"({_e(state.versions[state.champion - 1]['method'])}); {len(state.versions) - 1} promotion(s); "
        f"{len(state.alerts)} alert(s). Ratio = sum p / sum y (1 is perfect) with its bootstrap interval; "
        "dashed red: the alert band; dashed green: a promotion; grey tick: window skipped.</p>"
    )
    seg_alerts = {(a["window"], a["metric"]) for a in state.alerts}
    for seg in segs:
        by_w = {r["window"]: r for r in state.history if r["segment"] == seg and not r.get("skipped")}
        rows = [by_w.get(w) for w in windows]
        sa = {
            (w, m)
            for (w, m) in seg_alerts
            if any(a["segment"] == seg and a["window"] == w and a["metric"] == m for a in state.alerts)
        }
        parts.append(f"<h2>Segment {_e(seg)}</h2>")
        for metric, label in (("calibration_ratio", "calibration ratio"), ("ece", "ECE")):
            parts.append(
                f'<figure class="svg">{_series_svg(rows, windows, metric, promos, sa, label)}</figure>'
            )
        if seg == ALL:
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
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_e(state.source)} "
        f"monitoring</title><style>{_CSS} {_EXTRA_CSS}</style></head><body>{body}</body></html>\n"
    )


def _versions_table(state: MonitorState) -> str:
    rows = []
    for v in state.versions:
        j = v.get("judged") or {}
        ci = j.get("delta_ci")
        rows.append(
            [
                _e(v["version"]),
                _e(v["method"]),
                _e(v.get("fitted_on") or v.get("origin") or "–"),
                _e(v.get("judged_on") or "–"),
                _e(f"{fmt_num(j['delta'], 5)} [{fmt_num(ci[0], 5)}, {fmt_num(ci[1], 5)}]") if ci else "–",
                "yes" if v["version"] == state.champion else "",
            ]
        )
    return _table(
        ["version", "method", "fitted on", "judged on", "gain (champion - it)", "in office"], rows, 4
    )


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
