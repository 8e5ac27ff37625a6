"""Quantile bin edges: every rule calibflow uses to cut values into equal-mass bins, in one place.

Bins are right-open, ``[e_{k-1}, e_k)``, found with ``bin_of`` (``np.searchsorted(edges, v, side="right")``)
wherever edges are used. Three rules, each kept for what its callers need:

- ``linear_edges``: numpy's default ``np.quantile`` (linear interpolation) at ``k / n_bins``: the reliability
  diagram and ECE bins (``metrics.bin_index``). With ``counts`` it gives the same edges from a table whose
  integer counts stand for repeated rows, without expanding them (the aggregate path).
- ``equal_mass_edges``: *inverted-CDF* weighted quantiles (the smallest value whose cumulative weight
  reaches ``q W``), deduplicated and never on the minimum: the binning calibrators (histogram,
  scaling-binning). With integer weights they are the quantiles of the rows repeated, which is what makes a
  weighted fit equal a repeated one.
- ``order_edges``: order statistics ``x_(floor(k n / q))``: equal counts without interpolation (the
  decision policy's uncertainty levels and MIST's).

They differ on purpose (interpolated vs data values, duplicates kept vs dropped); a caller picks one and
its numbers do not move.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def bin_of(edges: NDArray[np.float64], values: NDArray[np.float64]) -> NDArray[np.intp]:
    """The bin of each value: right-open bins, ``len(edges) + 1`` of them."""
    return np.searchsorted(edges, values, side="right").astype(np.intp)


# ---- linear (numpy's default quantile) ------------------------------------------------------------------


def _lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's own linear interpolation in ``np.quantile`` (so an edge on a data value is bit-identical)."""
    out = a + (b - a) * t
    return np.where(t >= 0.5, b - (b - a) * (1 - t), out)


def linear_edges(
    values: NDArray[np.float64], n_bins: int, counts: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """``np.quantile(values, linspace(0, 1, n_bins + 1)[1:-1])`` (linear method; duplicates kept).

    ``counts``: integer weights, each value standing for that many rows; the edges are those of the rows
    expanded (order statistic ``k`` is the value whose cumulative count first exceeds ``k``)."""
    q = np.linspace(0, 1, n_bins + 1)[1:-1]
    if counts is None:
        return np.quantile(values, q)
    order = np.argsort(values, kind="stable")
    ps, cum = values[order], np.cumsum(counts[order])
    total = cum[-1]
    h = (total - 1) * q  # numpy's virtual index of the linear method, term for term
    k = np.floor(h)
    at = np.minimum(np.searchsorted(cum, np.stack([k, np.minimum(k + 1, total - 1)]), side="right"),
                    ps.size - 1)
    return _lerp(ps[at[0]], ps[at[1]], h - k)


# ---- inverted CDF, weighted (the binning calibrators) ----------------------------------------------------


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


def _weighted_inverted_cdf(v: NDArray[np.float64], qs: NDArray[np.float64], w: NDArray[np.float64]):
    """The first sorted value whose cumulative weight reaches ``q W``, up to a relative 1e-12.

    Counts often put a cumulative weight exactly on ``q W``; rescaled counts (all weights times c)
    land a rounding error either side of it. The tolerance makes both pick the same value, so the
    edges do not depend on the scale of the weights (np.quantile's exact comparison did).
    """
    order = np.argsort(v, kind="stable")
    cw = np.cumsum(w[order])
    at = np.searchsorted(cw, qs * cw[-1] * (1.0 - 1e-12), side="left")
    return v[order][np.minimum(at, v.size - 1)]


# ---- order statistics (decision levels) ------------------------------------------------------------------


def order_edges(x: NDArray[np.float64], q: int) -> NDArray[np.float64]:
    """``q - 1`` edges at order statistics, so that ``bin_of`` gives equal counts when there are no ties."""
    if q == 1:
        return np.empty(0)
    xs = np.sort(x)
    idx = (np.arange(1, q) * xs.size) // q
    return xs[np.clip(idx, 0, xs.size - 1)]
