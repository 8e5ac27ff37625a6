"""Shared helpers of the binning calibrators (histogram, BBQ, scaling-binning).

Bins are right-open, ``[e_{k-1}, e_k)``, found with ``np.searchsorted(edges, v, side="right")``
both at fit and at predict time. Equal-mass edges are *inverted-CDF* weighted quantiles (the
smallest value whose cumulative weight reaches ``q W``): with integer weights they are exactly the
quantiles of the data with rows repeated, which is what makes a weighted fit equal a repeated one.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def equal_mass_edges(v: NDArray[np.float64], n_bins: int, w: NDArray[np.float64]) -> NDArray[np.float64]:
    """Interior edges of ``n_bins`` equal-(weighted-)mass bins: deduplicated, no empty bin.

    Ties can make quantiles coincide (dropped) or put the first edge on the minimum, which
    would leave bin 0 empty; that edge is dropped too (bin 0 merges into bin 1).
    """
    if n_bins <= 1:
        return np.empty(0)
    qs = np.arange(1, n_bins) / n_bins
    if bool(np.all(w == w[0])):
        # Equal weights: numpy's partition-based quantile (no full sort); same result as the weighted rule.
        edges = np.quantile(v, qs, method="inverted_cdf")
    else:
        edges = _weighted_inverted_cdf(v, qs, w)
    edges = np.unique(edges)
    if edges.size and edges[0] <= v.min():
        edges = edges[1:]
    return edges


def _weighted_inverted_cdf(v, qs, w):
    """The first sorted value whose cumulative weight reaches ``q W``, up to a relative 1e-12.

    Counts often put a cumulative weight exactly on ``q W``; rescaled counts (all weights times c)
    land a rounding error either side of it. The tolerance makes both pick the same value, so the
    edges do not depend on the scale of the weights (np.quantile's exact comparison did).
    """
    order = np.argsort(v, kind="stable")
    cw = np.cumsum(w[order])
    at = np.searchsorted(cw, qs * cw[-1] * (1.0 - 1e-12), side="left")
    return v[order][np.minimum(at, v.size - 1)]


def bin_stats(
    idx: NDArray[np.intp], y: NDArray[np.float64], w: NDArray[np.float64], n_bins: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per-bin weighted positives ``sum w y`` and weight ``sum w`` (one ``bincount`` each)."""
    return (
        np.bincount(idx, weights=w * y, minlength=n_bins),
        np.bincount(idx, weights=w, minlength=n_bins),
    )


def fill_empty(values: NDArray[np.float64], filled: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Give empty bins the value interpolated (by bin index) between their filled neighbours.

    Keeps an empty bin from reversing the order of the filled bins around it; the ends take the
    nearest filled bin's value (``np.interp`` holds them constant).
    """
    if filled.all():
        return values
    pos = np.flatnonzero(filled)
    return np.interp(np.arange(values.size), pos, values[pos])
