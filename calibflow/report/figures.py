"""The report's figures as inline SVG: reliability diagrams and score histograms, one panel per method."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
from matplotlib.ticker import NullFormatter

from calibflow import plots

_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(href="#|url\(#)([^")]+)')
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


def scope_svg(svg: str, prefix: str) -> str:
    """Prefix every ``id`` and ``#ref`` in ``svg`` so many inline figures can share one page.

    matplotlib names clip paths, markers and glyphs by content hash; two figures on one page could
    otherwise resolve ``url(#id)`` to each other's definitions. The RDF metadata block is dropped (it
    names external vocabularies the page does not need).
    """
    svg = _METADATA.sub("", svg)
    svg = _ID.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    return _REF.sub(lambda m: f"{m.group(1)}{prefix}{m.group(2)}", svg)


def _column(records: list[dict[str, Any]], key: str, default: float = np.nan) -> np.ndarray:
    return np.array([float(r.get(key, default)) for r in records], dtype=float)


def zoom_limit(curves: dict[str, list[dict[str, Any]]]) -> float:
    """One upper axis limit for every panel: the data's largest mean prediction or interval bound, padded.

    Both axes share it, so the diagonal stays at 45 degrees; hillstrom (predictions below 0.3) and ads
    data at a 2% base rate fill the panel instead of a corner. Snapped up to a round value. Bins of less
    than a tenth of the median bin's rows (a step map's sliver of ties) do not set it: their wide interval
    would stretch every panel back to 0-1; they are clipped to the edge instead.
    """
    top = 0.0
    for recs in curves.values():
        count = _column(recs, "count", 0.0)
        big = count >= 0.1 * np.median(count) if count.size else count.astype(bool)
        for key in ("mean_pred", "observed", "high"):
            vals = _column(recs, key)[big]
            vals = vals[np.isfinite(vals)]
            if vals.size:
                top = max(top, float(vals.max()))
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0):
        lim = step * np.ceil(top * 1.08 / step)
        if lim / step <= 6:
            return float(min(lim, 1.0)) or 1.0
    return 1.0


def _count_label(count: np.ndarray) -> str:
    """``n/bin 160`` for equal-mass bins, ``n/bin 40-320`` when ties make them unequal."""
    if not count.size:
        return "no data"
    lo, hi = int(count.min()), int(count.max())
    return f"n/bin {lo:,}" if hi <= lo * 1.1 else f"n/bin {lo:,}–{hi:,}"


#: Below this base rate the reliability axes are on the logit scale: at a 2-5% rate the bins would otherwise
#: crowd into the bottom-left tenth of a linear plot.
LOGIT_BELOW = 0.10
_TICKS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99)


def base_rate(records: list[dict[str, Any]]) -> float:
    """The positive rate behind a reliability curve (observed rate weighted by bin size)."""
    count, obs = _column(records, "count", 0.0), _column(records, "observed", 0.0)
    ok = np.isfinite(obs) & (count > 0)
    return float(count[ok] @ obs[ok] / count[ok].sum()) if ok.any() else float("nan")


def use_logit(curves: dict[str, list[dict[str, Any]]]) -> bool:
    rates = [base_rate(r) for r in curves.values()]
    rates = [r for r in rates if np.isfinite(r)]
    return bool(rates) and float(np.median(rates)) < LOGIT_BELOW


def logit_limits(curves: dict[str, list[dict[str, Any]]]) -> tuple[float, float]:
    """Logit-axis limits around every bin's mean prediction and observed rate (zero rates left out)."""
    vals = []
    for recs in curves.values():
        for key in ("mean_pred", "observed"):
            v = _column(recs, key)
            vals.append(v[np.isfinite(v) & (v > 0) & (v < 1)])
    v = np.concatenate(vals) if vals else np.array([])
    if not v.size:
        return 0.001, 0.5
    lo, hi = float(v.min()), float(v.max())
    zl, zh = np.log(lo / (1 - lo)), np.log(hi / (1 - hi))
    pad = 0.08 * max(zh - zl, 1.0)
    return float(1 / (1 + np.exp(-(zl - pad)))), float(1 / (1 + np.exp(-(zh + pad))))


def _axes(ax, lim: float | tuple[float, float]) -> tuple[float, float]:
    """Linear axes [0, lim], or logit axes between the two limits; both square, diagonal dashed."""
    if isinstance(lim, tuple):
        lo, hi = lim
        ax.set_xscale("logit")
        ax.set_yscale("logit")
        ticks = [t for t in _TICKS if lo <= t <= hi]
        while len(ticks) > 5:  # small panels: every other tick, so the labels never overlap
            ticks = ticks[::2]
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_ticks(ticks)
            axis.set_ticklabels([f"{t:g}" for t in ticks])
            axis.set_minor_formatter(NullFormatter())
    else:
        lo, hi = 0.0, lim
    ax.plot([lo, hi], [lo, hi], color="0.65", lw=0.8, ls="--")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_aspect("equal" if not isinstance(lim, tuple) else "auto")
    if isinstance(lim, tuple):
        plots.minor_ticks_as_marks(ax)
    return lo, hi


def reliability_panel(
    ax,
    records: list[dict[str, Any]],
    lim: float | tuple[float, float],
    title: str,
    color: str = "C0",
    label: str | None = None,
    band: bool = True,
) -> None:
    """Observed rate against mean prediction per bin, with the bin's interval and its size in the panel.

    ``lim``: a float for linear axes [0, lim]; a (low, high) pair for logit axes (rates of 0 are drawn at the
    bottom edge, where the logit has no place for them)."""
    x, obs = _column(records, "mean_pred"), _column(records, "observed")
    count = _column(records, "count", 0.0)
    lo, hi = _column(records, "low"), _column(records, "high")
    a, b = _axes(ax, lim)
    x, obs, lo, hi = (np.clip(v, a, b) for v in (x, obs, lo, hi))  # every bin stays on the plot
    blo, bhi = _column(records, "band_low"), _column(records, "band_high")
    if band and x.size and np.isfinite(blo).all() and np.isfinite(bhi).all():
        if isinstance(lim, tuple):
            blo, bhi = np.clip(blo, a, b), np.clip(bhi, a, b)
        ax.fill_between(x, blo, bhi, color="0.55", alpha=0.25, lw=0, step=None)
    if np.isfinite(lo).all() and np.isfinite(hi).all() and x.size:
        err = np.vstack([np.clip(obs - lo, 0, None), np.clip(hi - obs, 0, None)])
        ax.errorbar(x, obs, yerr=err, fmt="none", ecolor=color, elinewidth=0.7, alpha=0.55)
    ax.plot(x, obs, marker="o", ms=2.5, lw=1, color=color, label=label)
    if label is None:
        ax.text(0.04, 0.95, _count_label(count), transform=ax.transAxes, fontsize=6, va="top", color="0.3")
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("mean prediction" + (" (logit axis)" if isinstance(lim, tuple) else ""), fontsize=7)
    ax.set_ylabel("observed rate", fontsize=7)
    ax.tick_params(labelsize=6)


def panel_limits(curves: dict[str, list[dict[str, Any]]]) -> float | tuple[float, float]:
    """The limits all panels share: logit axes below a ``LOGIT_BELOW`` base rate, else zoomed linear."""
    return logit_limits(curves) if use_logit(curves) else zoom_limit(curves)


#: Grids drawn in this process, by their inputs: the report page and plots/report/ show the same figure, and
#: a grid of 15 methods costs seconds of matplotlib layout (it was drawn twice per report).
_GRIDS: dict[str, str] = {}


def reliability_grid(
    curves: dict[str, list[dict[str, Any]]], ece: dict[str, float] | None = None, ncols: int = 4
) -> str:
    """Small multiples: one reliability diagram per method, axes zoomed to the data, shared by all panels."""
    key = json.dumps([curves, ece, ncols], sort_keys=True, default=repr)
    if key not in _GRIDS:
        _GRIDS[key] = _reliability_grid(curves, ece, ncols)
    return _GRIDS[key]


def _reliability_grid(
    curves: dict[str, list[dict[str, Any]]], ece: dict[str, float] | None, ncols: int
) -> str:
    from calibflow.report._format import fmt_sig

    methods = list(curves)
    lim = panel_limits(curves)
    fig, axes = plots.small_multiples(len(methods), ncols=ncols, size=2.1)
    for ax, m in zip(axes, methods, strict=True):
        title = m if not ece or m not in ece else f"{m} (ECE {fmt_sig(ece[m])})"
        reliability_panel(ax, curves[m], lim, title)
    fig.tight_layout()
    return plots.to_svg(fig, crop=False)


def reliability_overlay(before: list[dict[str, Any]], chosen: list[dict[str, Any]] | None, name: str) -> str:
    """The answer's figure: the uncalibrated bins and the chosen calibrator's on one diagram (logit axes
    below a 10% base rate), the legend under the axes so it covers no line."""
    curves = {"before": before, **({"chosen": chosen} if chosen else {})}
    lim = panel_limits(curves)
    fig, ax = plots.plt.subplots(figsize=(3.4, 3.6))
    reliability_panel(ax, before, lim, "", color="C7", label="uncalibrated", band=chosen is None)
    if chosen:
        reliability_panel(ax, chosen, lim, "", color="C2", label=name, band=False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7, frameon=False)
    return plots.to_svg(fig)


def histogram_grid(hists: dict[str, list[dict[str, Any]]]) -> str:
    """Small multiples: predicted probability on the test split by class, one panel per method.

    Densities (each class normalised to 1) so the rare positive class stays visible.
    """
    methods = list(hists)
    fig, axes = plots.small_multiples(len(methods), ncols=4, size=2.1)
    for ax, m in zip(axes, methods, strict=True):
        recs = hists[m]
        edges = np.array([r["bin_low"] for r in recs] + [recs[-1]["bin_high"]], dtype=float)
        for col, color, label in (("negatives", "C7", "y = 0"), ("positives", "C3", "y = 1")):
            c = np.array([r[col] for r in recs], dtype=float)
            dens = c / (c.sum() * np.diff(edges)) if c.sum() > 0 else c
            neg = col == "negatives"
            ax.stairs(dens, edges, color=color, label=label, fill=neg, alpha=0.5 if neg else 1.0)
        ax.set_xlim(0, 1)
        ax.set_title(m, fontsize=8)
        ax.set_xlabel("predicted probability")
        ax.set_yticks([])
    # the classes' legend under the panels, in a strip kept free for it: the figure is laid out once and
    # drawn once (a legend moved below the canvas would need a second, cropping draw)
    strip = 0.3 / fig.get_figheight()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=len(labels), fontsize=7,
               frameon=False)
    fig.tight_layout(rect=(0.0, strip, 1.0, 1.0))
    return plots.to_svg(fig, crop=False)
