"""Histogram binning (Zadrozny & Elkan 2001): the calibrated value of a bin is its positive rate."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from calibflow._validation import check_n_bins
from calibflow.binning import equal_mass_edges
from calibflow.calibrators._binning import bin_stats, fill_empty
from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, Bound, StateChecks, register
from calibflow.metrics import STRATEGIES


@register("histogram")
class HistogramCalibrator(BaseCalibrator):
    """Histogram binning of Zadrozny & Elkan (ICML 2001, Sec. 2): piecewise-constant map.

    The probability axis is cut into ``n_bins`` bins, either equal-width on [0, 1]
    (``strategy="uniform"``) or equal-mass (``strategy="quantile"``: inverted-CDF weighted
    quantiles of the fit scores, so each bin carries about the same weight). The calibrated value
    of a bin is its weighted positive rate ``sum w y / sum w``: no prior, as in the paper. An empty
    equal-width bin takes the value interpolated between its filled neighbours. Bins are not
    forced to increase, so the map is not monotone in general (``monotone = False``).
    """
    default_candidate = True
    scale_default = True
    familiarity = 5
    glossary = (
        "Equal-mass bins, each mapped to its observed rate.",
        "Zadrozny & Elkan, ICML 2001",
    )
    _bounds = {
        "n_bins": Bound("int", ge=1, le=1_000_000, bytes_each=96),
        "strategy": Bound("choice", choices=STRATEGIES),
    }

    expects = "probability"
    monotone = False
    _state_fields = ("edges_", "bin_value_", "bin_weight_")
    _state_checks = StateChecks(sorted=("edges_",), probabilities=("bin_value_",),
                                lengths=(("bin_value_", "edges_", 1),))
    _state_spec = {"edges_": ("f", 1), "bin_value_": ("f", 1), "bin_weight_": ("f", 1)}

    def __init__(self, n_bins: int = 10, strategy: str = "uniform", input: str = DEFAULT_INPUT) -> None:
        self.n_bins = n_bins
        self.strategy = strategy
        self.input = input

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        n_bins = check_n_bins(self.n_bins)
        if self.strategy == "uniform":
            edges = np.linspace(0.0, 1.0, n_bins + 1)[1:-1]
        elif self.strategy == "quantile":
            edges = equal_mass_edges(s, n_bins, w)
        else:
            raise ValueError(f"strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        k = edges.size + 1
        pos, tot = bin_stats(np.searchsorted(edges, s, side="right"), y, w, k)
        filled = tot > 0
        value = np.zeros(k)
        value[filled] = pos[filled] / tot[filled]
        self.edges_, self.bin_value_, self.bin_weight_ = edges, fill_empty(value, filled), tot

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.bin_value_[np.searchsorted(self.edges_, s, side="right")]
