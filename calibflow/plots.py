"""Figures as inline SVG strings (matplotlib, Agg backend), so reports are self-contained."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

# matplotlib.rcParams is pyplot's: set here, before any figure, whoever imports pyplot first.
matplotlib.rcParams.update({"svg.hashsalt": "calibflow", "font.size": 8, "figure.dpi": 100})


def __getattr__(name: str) -> Any:
    """``plots.plt``: pyplot, imported on first use (0.4-0.9 s), by a figure that is drawn, not by a
    module that imports this one."""
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
    (``svg.fonttype: none``) so the page can be searched and read at any zoom.
    """
    n = len(labels)
    y = _finite_or_nan(values)
    if not np.isfinite(y).any():
        return ""
    x = np.arange(n)
    fig, ax = _plt().subplots(figsize=(9.0, 2.4))
    if reference is not None:
        ax.axhline(reference, color="0.55", lw=0.8)
    _window_interval(ax, x, interval)
    if band:
        for side in (0, 1):
            b = _finite_or_nan([(r[side] if r else None) for r in band])
            ax.plot(x, b, color="#d62728", lw=0.9, ls=(0, (3, 3)), label="alert band" if side == 0 else None)
    ok = np.isfinite(y)
    ax.plot(x[ok], y[ok], color="#1f77b4", lw=1.4, marker="o", ms=3, label=ylabel)
    red = ok & np.asarray(alerts or [False] * n, bool)
    if red.any():
        ax.plot(x[red], y[red], ls="none", marker="o", ms=7, color="#d62728", label="alert")
    _window_marks(ax, marks)
    skipped = x[[v is None for v in values]] if n else x
    ax.plot(skipped, np.zeros(skipped.size), ls="none", marker="|", ms=8, color="0.6",
            transform=ax.get_xaxis_transform(), label="skipped" if skipped.size else None)
    return _finish_windows(fig, ax, labels, ylabel)


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
    dashed; ``marks`` as in ``window_series``. A None value leaves a gap."""
    n = len(labels)
    ys = {name: _finite_or_nan(v) for name, v in lines.items()}
    if not any(np.isfinite(y).any() for y in ys.values()):
        return ""
    x = np.arange(n)
    fig, ax = _plt().subplots(figsize=(9.0, 2.4))
    for k, (name, y) in enumerate(ys.items()):
        ok = np.isfinite(y)
        if k == 0 and first_solid:
            ax.plot(x[ok], y[ok], color="black", lw=1.8, marker="o", ms=2.5, label=name)
        else:
            ax.plot(x[ok], y[ok], color=f"C{k % 10}", lw=1.1, ls=(0, (4, 2)), label=name)
    _window_marks(ax, marks)
    return _finish_windows(fig, ax, labels, ylabel)


def _window_marks(ax, marks: dict[int, str] | None) -> None:
    """A dashed green vertical with its label at each window index (a promotion)."""
    for i, text in (marks or {}).items():
        ax.axvline(i, color="#17752c", lw=1.1, ls=(0, (5, 3)))
        ax.annotate(text, (i, 1.0), xycoords=("data", "axes fraction"), xytext=(2, -3), rotation=90,
                    textcoords="offset points", color="#17752c", fontsize=7, va="top")


def _finish_windows(fig, ax, labels: list[str], ylabel: str) -> str:
    """Date ticks (at most 8: they stay legible), the y label, a light grid, the legend outside; as SVG
    with text kept as text."""
    n = len(labels)
    x = np.arange(n)
    step = max(1, -(-n // 8))
    ax.set_xticks(x[::step], [str(s)[:10] for s in labels[::step]], fontsize=7)
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", color="0.93")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        return to_svg(fig)


def _finite_or_nan(values) -> np.ndarray:
    """Floats with None, NaN and infinities as NaN (a gap in the line; autoscaling ignores them)."""
    out = np.array([np.nan if v is None else float(v) for v in values], dtype=float)
    out[~np.isfinite(out)] = np.nan
    return out


def _window_interval(ax, x: np.ndarray, interval) -> None:
    if not interval:
        return
    lo = _finite_or_nan([(r[0] if r else None) for r in interval])
    hi = _finite_or_nan([(r[1] if r else None) for r in interval])
    ok = np.isfinite(lo) & np.isfinite(hi)
    if ok.any():
        ax.vlines(x[ok], lo[ok], hi[ok], color="#9ecae1", lw=2.5, label="interval")


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
