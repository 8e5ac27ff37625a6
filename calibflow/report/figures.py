"""The report's figures as inline SVG: reliability diagrams and score histograms, one panel per method."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from calibflow import plots
from calibflow.metrics import Reliability

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


def _reliability(records: list[dict[str, Any]]) -> Reliability:
    count = np.array([float(r["count"]) for r in records])
    mean_pred = np.array([float(r["mean_pred"]) for r in records])
    observed = np.array([float(r["observed"]) for r in records])
    return Reliability(count, mean_pred, observed)


def reliability_grid(curves: dict[str, list[dict[str, Any]]], ece: dict[str, float] | None = None) -> str:
    """Small multiples: one reliability diagram per method (bins with no test point are skipped)."""
    methods = list(curves)
    fig, axes = plots.small_multiples(len(methods), ncols=4, size=2.1)
    for ax, m in zip(axes, methods, strict=True):
        plots.reliability_axes(ax, _reliability(curves[m]), color="C0")
        title = m if not ece or m not in ece else f"{m} (ECE {ece[m]:.4f})"
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
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
    axes[0].legend(fontsize=6, frameon=False)
    fig.tight_layout()
    return plots.to_svg(fig)
