"""Figures as inline SVG strings (matplotlib, Agg backend), so reports are self-contained."""

from __future__ import annotations

import html
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

# matplotlib.rcParams is pyplot's: set here, before any figure, whoever imports pyplot first.
matplotlib.rcParams.update({"svg.hashsalt": "calibflow", "font.size": 8, "figure.dpi": 100})


def __getattr__(name: str) -> Any:
    """``plots.plt``: pyplot, imported on first use. The monitoring page draws its window figures
    without it (``_WindowChart``), and a monitor run paid pyplot's import (0.4-0.9 s) for nothing."""
    if name == "plt":
        import matplotlib.pyplot as plt

        return plt
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plt():
    import matplotlib.pyplot as plt

    return plt


def legends_outside(fig) -> bool:
    """Move every axes legend into one figure legend under the panels, so no legend covers a line.

    Entries are merged by label in the order the axes show them (small multiples repeat the same methods).
    An axes legend placed outside its axes already (``bbox_to_anchor``) is left alone. True when a figure
    legend was added (it lies below the canvas: the saved figure must be cropped to its artists).
    """
    handles, labels = [], []
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None or leg.get_bbox_to_anchor().bounds != ax.bbox.bounds:
            continue
        for h, t in zip(leg.legend_handles, leg.get_texts(), strict=False):
            if t.get_text() not in labels:
                handles.append(h)
                labels.append(t.get_text())
        leg.remove()
    if labels:
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(len(labels), 4),
                   fontsize=7, frameon=False)
    return bool(labels)


#: Tick-mark markers by tick direction (rcParams ``xtick.direction``), as matplotlib's Tick draws them:
#: TICKDOWN (3) / TICKUP (2) on the x axis, TICKLEFT (0) / TICKRIGHT (1) on the y axis.
_TICK_MARKERS = {"x": {"out": 3, "in": 2, "inout": "|"}, "y": {"out": 0, "in": 1, "inout": "_"}}


def minor_ticks_as_marks(ax) -> None:
    """Draw each axis's minor ticks as one line of tick marks instead of one Tick artist per position.

    A logit axis has about 25 minor ticks. matplotlib builds each as a Tick (two tick lines, two labels, a
    grid line) and lays every one out again in each draw: two thirds of a 13-panel reliability grid's
    time. The marks are the same (positions inside the view, size, width, colour and direction from
    rcParams), one artist per axis. Call it after the limits are set: the marks do not follow later changes.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    for name, axis, transform in (("x", ax.xaxis, ax.get_xaxis_transform()),
                                  ("y", ax.yaxis, ax.get_yaxis_transform())):
        lo, hi = sorted(axis.get_view_interval())
        locs = [float(v) for v in axis.get_minorticklocs() if lo <= v <= hi]
        axis.set_minor_locator(NullLocator())
        if not locs:
            continue
        rc = matplotlib.rcParams
        edge = [0.0] * len(locs)
        xy = (locs, edge) if name == "x" else (edge, locs)
        ax.add_artist(Line2D(
            *xy, transform=transform, linestyle="none", clip_on=False, zorder=2.01,
            marker=_TICK_MARKERS[name][rc[f"{name}tick.direction"]], markersize=rc[f"{name}tick.minor.size"],
            markeredgewidth=rc[f"{name}tick.minor.width"], color=rc[f"{name}tick.color"],
        ))


def to_svg(fig, crop: bool = True) -> str:
    """Render and close ``fig``; the SVG is deterministic (fixed hash salt, no date metadata). Legends
    are moved under the panels first (``legends_outside``).

    ``crop``: the canvas is cropped to the artists (``bbox_inches="tight"``, which draws the figure twice).
    A figure laid out already (``tight_layout``) with no legend moved under it passes False: drawn once.
    """
    moved = legends_outside(fig)
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if not (crop or moved) and isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # tight_layout leaves a placeholder engine behind, and savefig draws once more for any engine
        fig.set_layout_engine(None)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight" if crop or moved else None, metadata={"Date": None})
    _plt().close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def reliability_axes(ax, rel, label: str | None = None, color=None) -> None:
    """Draw one reliability curve (a ``calibflow.metrics.Reliability``) with the diagonal."""
    ok = rel.count > 0
    ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls="--")
    ax.plot(rel.mean_pred[ok], rel.observed[ok], marker="o", ms=2.5, lw=1, label=label, color=color)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean prediction")
    ax.set_ylabel("observed rate")


def small_multiples(n: int, ncols: int = 4, size: float = 2.0):
    """A figure of ``n`` square panels, ``ncols`` a row, and its ``n`` axes (no axes for the empty cells of
    the last row: each costs as much to build as a drawn one)."""
    nrows = int(np.ceil(n / ncols))
    ncols = min(n, ncols)
    fig = _plt().figure(figsize=(size * ncols, size * nrows))
    grid = fig.add_gridspec(nrows, ncols)
    axes = np.empty(n, dtype=object)
    for i in range(n):
        axes[i] = fig.add_subplot(grid[i // ncols, i % ncols])
    return fig, axes


def window_series(
    labels: list[str],
    values: list[float | None],
    ylabel: str,
    *,
    interval: list[tuple[float, float] | None] | None = None,
    band: list[tuple[float | None, float | None] | None] | None = None,
    reference: float | None = None,
    alerts: list[bool] | None = None,
    marks: dict[int, str] | None = None,
) -> str:
    """One metric per time window as an SVG (the monitoring page), or "" when no value is finite.

    ``values[i]`` is window ``labels[i]``'s value, None for a skipped window (a grey tick on the axis);
    ``interval`` draws a light vertical bar per window, ``band`` the alert band's two bounds (dashed red),
    ``reference`` a grey horizontal line, ``alerts`` a larger red dot on the windows out of band, and
    ``marks`` a dashed green vertical with its label at a window index (a promotion). Text stays text
    so the page can be searched and read at any zoom.

    Written as SVG directly (``_WindowChart``), not through matplotlib: the page draws 7 of these per
    source every morning, and matplotlib's layout took 0.06 s each (0.4 s of a source's morning).
    """
    n = len(labels)
    y = _finite_or_nan(values)
    if not np.isfinite(y).any():
        return ""
    chart = _WindowChart(labels)
    lo = hi = None
    if interval:
        lo = _finite_or_nan([(r[0] if r else None) for r in interval])
        hi = _finite_or_nan([(r[1] if r else None) for r in interval])
    bounds = [_finite_or_nan([(r[side] if r else None) for r in band]) for side in (0, 1)] if band else []
    chart.fit_y([y, *([lo, hi] if lo is not None else []), *bounds,
                 np.array([reference if reference is not None else np.nan])])
    if reference is not None:
        chart.hline(reference, "#8c8c8c", 1.1)
    if lo is not None and hi is not None:
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            chart.bars(np.flatnonzero(ok), lo[ok], hi[ok], "#9ecae1", 3.5, "interval")
    for side, b in enumerate(bounds):
        chart.line(b, "#d62728", 1.25, "4,4", label="alert band" if side == 0 else None)
    ok = np.isfinite(y)
    chart.line(np.where(ok, y, np.nan), "#1f77b4", 2.0, label=ylabel, dots=3.0, bridge=True)
    red = ok & np.asarray(alerts or [False] * n, bool)
    if red.any():
        chart.dots(np.flatnonzero(red), y[red], "#d62728", 5.0, "alert")
    chart.marks(marks)
    skipped = [i for i, v in enumerate(values) if v is None]
    if skipped:
        chart.ticks(skipped, "#999999", "skipped")
    return chart.svg(ylabel)


def window_lines(
    labels: list[str],
    lines: dict[str, list[float | None]],
    ylabel: str,
    *,
    first_solid: bool = True,
    marks: dict[int, str] | None = None,
) -> str:
    """Several series per time window on one axis (the monitoring page's champion against its
    challengers), or "" when no value is finite. The first series is drawn solid and black, the others
    dashed; ``marks`` as in ``window_series``. A None value leaves out that window (the line joins the
    windows on either side)."""
    ys = {name: _finite_or_nan(v) for name, v in lines.items()}
    if not any(np.isfinite(y).any() for y in ys.values()):
        return ""
    chart = _WindowChart(labels)
    chart.fit_y(list(ys.values()))
    for k, (name, y) in enumerate(ys.items()):
        if k == 0 and first_solid:
            chart.line(y, "black", 2.5, label=name, dots=2.0, bridge=True)
        else:
            chart.line(y, _TAB10[k % 10], 1.5, "5,2.5", label=name, bridge=True)
    chart.marks(marks)
    return chart.svg(ylabel)


#: matplotlib's default colour cycle (C0..C9), the colours the challengers had.
_TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
          "#17becf")


class _WindowChart:
    """A fixed-layout SVG chart of values per time window: the plot area, y ticks from matplotlib's
    ``MaxNLocator`` (what the axes chose), at most 8 date labels, a legend to the right sized to its
    labels. Coordinates in px, one decimal; the output depends only on the inputs (deterministic)."""

    W, H, LEFT, TOP, BOTTOM = 820.0, 250.0, 86.0, 10.0, 222.0
    FONT = "font:11px system-ui,sans-serif"

    def __init__(self, labels: list[str]) -> None:
        self.labels = [str(s)[:10] for s in labels]
        self.n = len(labels)
        self.parts: list[str] = []
        self.legend: list[str] = []  # one <g> per entry, in drawing order (matplotlib's legend order)
        self.legend_names: list[str] = []
        self.lo, self.hi = 0.0, 1.0

    def x(self, i: float) -> float:
        return self.LEFT + (i + 0.5) / max(self.n, 1) * (self.W - self.LEFT)

    def y(self, v: float) -> float:
        return self.BOTTOM - (v - self.lo) / (self.hi - self.lo) * (self.BOTTOM - self.TOP)

    def fit_y(self, arrays: list[np.ndarray]) -> None:
        """The y range: every finite value with a 5% margin each side (matplotlib's default)."""
        vals = np.concatenate([np.asarray(a, float).ravel() for a in arrays])
        vals = vals[np.isfinite(vals)]
        lo, hi = float(vals.min()), float(vals.max())
        if hi - lo <= 1e-12 * max(abs(lo), abs(hi), 1e-300):
            lo, hi = (lo - 0.05 * abs(lo), hi + 0.05 * abs(hi)) if lo else (-0.05, 0.05)
        pad = 0.05 * (hi - lo)
        self.lo, self.hi = lo - pad, hi + pad

    def _entry(self, label: str | None, sample: str) -> None:
        if label is not None:
            self.legend_names.append(label)
            self.legend.append(sample)

    def hline(self, v: float, color: str, width: float) -> None:
        self.parts.append(f'<line x1="{self.LEFT}" x2="{self.W}" y1="{self.y(v):.1f}" y2="{self.y(v):.1f}" '
                          f'stroke="{color}" stroke-width="{width}"/>')

    def bars(self, idx: np.ndarray, lo: np.ndarray, hi: np.ndarray, color: str, width: float,
             label: str) -> None:
        d = "".join(f"M{self.x(i):.1f} {self.y(a):.1f}V{self.y(b):.1f}" for i, a, b in zip(idx, lo, hi,
                                                                                          strict=True))
        self.parts.append(f'<path d="{d}" stroke="{color}" stroke-width="{width}" fill="none"/>')
        self._entry(label, f'<path d="M0 0H22" stroke="{color}" stroke-width="{width}"/>')

    def line(self, y: np.ndarray, color: str, width: float, dash: str | None = None, *,
             label: str | None = None, dots: float = 0.0, bridge: bool = False) -> None:
        """A polyline through the finite values; a gap at a NaN, or joined over it with ``bridge``."""
        ok = np.isfinite(y)
        runs = [np.flatnonzero(ok)] if bridge else np.split(np.arange(self.n), np.flatnonzero(~ok))
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        for run in runs:
            run = run[ok[run]]
            if run.size > 1:
                pts = " ".join(f"{self.x(i):.1f},{self.y(y[i]):.1f}" for i in run)
                self.parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" '
                                  f'stroke-width="{width}"{dash_attr} stroke-linejoin="round"/>')
        if dots:
            self.dots(np.flatnonzero(ok), y[ok], color, dots, None)
        sample = f'<path d="M0 0H22" stroke="{color}" stroke-width="{width}"{dash_attr}/>'
        if dots:
            sample += f'<circle cx="11" cy="0" r="{dots}" fill="{color}"/>'
        self._entry(label, sample)

    def dots(self, idx: np.ndarray, y: np.ndarray, color: str, r: float, label: str | None) -> None:
        self.parts.extend(f'<circle cx="{self.x(i):.1f}" cy="{self.y(v):.1f}" r="{r}" fill="{color}"/>'
                          for i, v in zip(idx, y, strict=True))
        self._entry(label, f'<circle cx="11" cy="0" r="{r}" fill="{color}"/>')

    def ticks(self, idx: list[int], color: str, label: str) -> None:
        """Short vertical ticks on the x axis (skipped windows)."""
        d = "".join(f"M{self.x(i):.1f} {self.BOTTOM - 6}V{self.BOTTOM + 6}" for i in idx)
        self.parts.append(f'<path d="{d}" stroke="{color}" stroke-width="1.5"/>')
        self._entry(label, f'<path d="M11 -6V6" stroke="{color}" stroke-width="1.5"/>')

    def marks(self, marks: dict[int, str] | None) -> None:
        """A dashed green vertical at each window index, its label written down along it."""
        for i, text in sorted((marks or {}).items()):
            x = self.x(i)
            self.parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.TOP}" y2="{self.BOTTOM}" '
                              f'stroke="#17752c" stroke-width="1.5" stroke-dasharray="7,4"/>')
            self.parts.append(f'<text transform="translate({x + 13:.1f},{self.TOP + 4}) rotate(-90)" '
                              f'style="font:10px system-ui,sans-serif" fill="#17752c" '
                              f'text-anchor="end">{_esc(text)}</text>')

    def _axes(self, ylabel: str) -> list[str]:
        from matplotlib.ticker import MaxNLocator

        locator = MaxNLocator(nbins=7, steps=[1, 2, 2.5, 5, 10])
        ticks = [t for t in locator.tick_values(self.lo, self.hi) if self.lo <= t <= self.hi]
        fmt = _tick_format(ticks)
        out = [f'<rect x="{self.LEFT}" y="{self.TOP}" width="{self.W - self.LEFT}" '
               f'height="{self.BOTTOM - self.TOP}" fill="white" stroke="none"/>']
        for t in ticks:
            yy = f"{self.y(t):.1f}"
            out.append(f'<line x1="{self.LEFT}" x2="{self.W}" y1="{yy}" y2="{yy}" stroke="#ededed"/>')
            out.append(f'<line x1="{self.LEFT - 4}" x2="{self.LEFT}" y1="{yy}" y2="{yy}" stroke="black"/>')
            out.append(f'<text x="{self.LEFT - 6}" y="{yy}" text-anchor="end" dominant-baseline="middle" '
                       f'style="{self.FONT}">{fmt(t)}</text>')
        step = max(1, -(-self.n // 8))
        for i in range(0, self.n, step):
            x = f"{self.x(i):.1f}"
            out.append(f'<line x1="{x}" x2="{x}" y1="{self.BOTTOM}" y2="{self.BOTTOM + 4}" stroke="black"/>')
            out.append(f'<text x="{x}" y="{self.BOTTOM + 17}" text-anchor="middle" '
                       f'style="{self.FONT}">{_esc(self.labels[i])}</text>')
        mid = (self.TOP + self.BOTTOM) / 2
        out.append(f'<text transform="translate(14,{mid:.1f}) rotate(-90)" text-anchor="middle" '
                   f'dominant-baseline="hanging" style="{self.FONT}">{_esc(ylabel)}</text>')
        return out

    def svg(self, ylabel: str) -> str:
        frame = (f'<rect x="{self.LEFT}" y="{self.TOP}" width="{self.W - self.LEFT}" '
                 f'height="{self.BOTTOM - self.TOP}" fill="none" stroke="black"/>')
        legend, width = [], self.W + 16
        for k, (name, sample) in enumerate(zip(self.legend_names, self.legend, strict=True)):
            y = self.TOP + 8 + 18 * k
            legend.append(f'<g transform="translate({self.W + 14},{y})">{sample}</g>'
                          f'<text x="{self.W + 44}" y="{y}" dominant-baseline="middle" '
                          f'style="{self.FONT}">{_esc(name)}</text>')
            width = max(width, self.W + 50 + 6.5 * len(name))
        height = max(self.H, self.TOP + 18 * len(legend) + 8)
        body = "".join([*self._axes(ylabel), *self.parts, frame, *legend])
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
                f'viewBox="0 0 {width:.0f} {height:.0f}" version="1.1">{body}</svg>')


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def _tick_format(ticks: list[float]):
    """The fewest decimals that tell the ticks apart and show them exactly (0.5, 1.25, 0.0025)."""
    for d in range(0, 12):
        if all(abs(round(t, d) - t) <= 1e-9 * max(abs(t), 1e-300) or abs(round(t, d) - t) < 1e-15
               for t in ticks):
            return lambda t, d=d: f"{t:.{d}f}".replace("-", "\u2212")
    return lambda t: f"{t:g}"


def _finite_or_nan(values) -> np.ndarray:
    """Floats with None, NaN and infinities as NaN (a gap in the line; autoscaling ignores them)."""
    out = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    out[~np.isfinite(out)] = np.nan
    return out


def segment_reliability_svg(panels: list[dict], ncols: int = 4) -> str:
    """Small multiples: one reliability diagram per segment (``calibflow.segments.segment_reliability``'s
    records), the bins' Jeffreys intervals as error bars, the title naming the segment and its ratio."""
    fig, axes = small_multiples(len(panels), ncols=ncols, size=2.2)
    for ax, seg in zip(axes, panels, strict=True):
        b = seg["bins"]
        x = np.array([r["mean_pred"] for r in b])
        obs = np.array([r["observed"] for r in b])
        err = np.array([[o - r["low"] for o, r in zip(obs, b, strict=True)],
                        [r["high"] - o for o, r in zip(obs, b, strict=True)]])
        hi = float(min(1.0, max(np.r_[x, [r["high"] for r in b], 0.05].max() * 1.1, 0.05)))
        ax.plot([0, hi], [0, hi], color="0.7", lw=0.8, ls="--")
        ax.errorbar(x, obs, yerr=np.clip(err, 0, None), fmt="o-", ms=2.5, lw=1, capsize=1.5,
                    color="C3" if seg.get("flagged") else "C0")
        ax.set_xlim(0, hi)
        ax.set_ylim(0, hi)
        ratio = seg.get("ratio")
        title = f"{seg['column']} = {seg['value']}"
        if ratio is not None:
            title += f"\nΣp/Σy {ratio:.2f}" + (" (flagged)" if seg.get("flagged") else "")
        ax.set_title(title, fontsize=7)
        ax.set_xlabel("mean prediction")
        ax.set_ylabel("observed rate")
    fig.tight_layout()
    return to_svg(fig, crop=False)
