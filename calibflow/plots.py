"""Figures as inline SVG strings (matplotlib, Agg backend), so reports are self-contained."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

plt.rcParams.update({"svg.hashsalt": "calibflow", "font.size": 8, "figure.dpi": 100})


def legends_outside(fig) -> None:
    """Move every axes legend into one figure legend under the panels, so no legend covers a line.

    Entries are merged by label in the order the axes show them (small multiples repeat the same methods).
    An axes legend placed outside its axes already (``bbox_to_anchor``) is left alone.
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


def to_svg(fig) -> str:
    """Render and close ``fig``; the SVG is deterministic (fixed hash salt, no date metadata). Legends
    are moved under the panels first (``legends_outside``)."""
    legends_outside(fig)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
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
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(
        nrows, min(n, ncols), figsize=(size * min(n, ncols), size * nrows), squeeze=False
    )
    for ax in axes.ravel()[n:]:
        ax.set_visible(False)
    return fig, axes.ravel()[:n]
