"""Shared helpers of the binning calibrators (histogram, BBQ, scaling-binning).

Bins are right-open, ``[e_{k-1}, e_k)``, found with ``np.searchsorted(edges, v, side="right")``
both at fit and at predict time. Equal-mass edges: ``calibflow.binning.equal_mass_edges``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


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
