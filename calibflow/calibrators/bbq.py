"""Bayesian Binning into Quantiles (Naeini, Cooper & Hauskrecht, AAAI 2015)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import gammaln

from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, Bound, StateChecks, register


@register("bbq")
class BBQCalibrator(BaseCalibrator):
    """BBQ: Bayesian model averaging over equal-frequency histogram binnings (Naeini et al. 2015).

    Following Sec. 3 of the paper:

    - Models: one equal-frequency binning per bin count ``B`` in
      ``[floor(N^(1/3) / C), ceil(C N^(1/3))]`` (capped at ``N / 5``), ``C = 10`` as in the paper's
      experiments; ``N`` is the total weight (the sample size when unweighted).
    - Score of a model (eq. 2, BDeu marginal likelihood, uniform model prior):
      ``prod_b G(N'/B) / G(N_b + N'/B) * G(m_b + a_b) / G(a_b) * G(n_b + b_b) / G(b_b)`` (G: Gamma)
      with ``a_b = (N'/B) p_b``, ``b_b = (N'/B)(1 - p_b)``, ``N' = 2`` (the paper's value), ``m_b``/``n_b``
      the (weighted) positives/negatives of bin ``b`` and ``p_b`` the midpoint of the bin's interval.
    - Prediction (eq. 1): the score-weighted average of the models' posterior-mean bin rates
      ``(m_b + a_b) / (N_b + N'/B)``.

    Choices where the paper is open: the outer bins' intervals run to 0 and 1 (their ``p_b`` is the
    midpoint of ``[0, e_1]`` / ``[e_{B-1}, 1]``); equal-frequency edges are inverted-CDF weighted
    quantiles, ties deduplicated (a model can end up with fewer than ``B`` bins; ``B`` in the prior
    is then the realised bin count). The average of step functions is itself a step function: we
    fold the models into one (its value changes only at the union of the models' edges) by summing
    each model's weighted jumps, so prediction costs one ``searchsorted`` whatever the model count.
    Bin rates are not forced to increase: ``monotone = False``.

    Weights are counts (a row of weight ``w`` is ``w`` rows), so the fit depends on the total weight
    on purpose: BBQ is Bayesian, and more data sharpens the scores of finer binnings (weights of
    ``1/n`` describe *one* observation and give one bin). Only the model grid is bounded whatever
    the total: see ``model_grid``.
    """
    out_of_defaults = (
        "higher held-out log loss than probcal's BBQ in 14 of 18 runs (issue 36; benchmarks/bbq_peer.py)"
    )
    scale_default = True
    familiarity = 10
    glossary = (
        "A Bayesian average of many histogram binnings.",
        "Naeini, Cooper & Hauskrecht, AAAI 2015",
    )
    _bounds = {
        "C": Bound("float", gt=0, le=1e6),
        "n_prime": Bound("float", gt=0, le=1e6),
    }

    expects = "probability"
    monotone = False
    _state_fields = ("edges_", "values_", "bins_grid_", "model_weights_")
    _state_checks = StateChecks(sorted=("edges_",), probabilities=("values_",),
                                lengths=(("values_", "edges_", 1),))
    _state_spec = {
        "edges_": ("f", 1),
        "values_": ("f", 1),
        "bins_grid_": ("i", 1),
        "model_weights_": ("f", 1),
    }

    def __init__(self, C: float = 10.0, n_prime: float = 2.0, input: str = DEFAULT_INPUT) -> None:
        self.C = C
        self.n_prime = n_prime
        self.input = input

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        if not (np.isfinite(self.C) and self.C >= 1):
            raise ValueError(f"C must be a finite number >= 1, got {self.C!r}")
        if not (np.isfinite(self.n_prime) and self.n_prime > 0):
            raise ValueError(f"n_prime must be a finite number > 0, got {self.n_prime!r}")
        order = np.argsort(s, kind="stable")
        ss = s[order]
        cw = np.cumsum(w[order])
        cwy = np.cumsum((w * y)[order])
        grid = model_grid(cw[-1], int(np.unique(s[w > 0]).size), float(self.C))
        models = [self._model(ss, cw, cwy, int(b)) for b in grid]
        log_score = np.array([m[2] for m in models])
        if not np.isfinite(log_score).all():
            raise ValueError(
                f"bbq: total weight {cw[-1]:.3g} overflows the marginal likelihood; weights are counts, "
                "so rescale them to the number of observations they stand for"
            )
        weights = np.exp(log_score - log_score.max())
        weights /= weights.sum()
        self.bins_grid_, self.model_weights_ = grid, weights
        # Models with posterior weight below 1e-16 of the total change no prediction by more than that
        # (rates lie in [0, 1]); leaving them out of the fold keeps it cheap when counts are huge and
        # the posterior sits on a few models.
        keep = weights >= 1e-16
        kept = [(m[0], m[1]) for m, k in zip(models, keep, strict=True) if k]
        self.edges_, self.values_ = _fold_models(kept, weights[keep] / weights[keep].sum())

    def _model(self, ss, cw, cwy, n_bins: int):
        """Edges, posterior-mean rates and log BDeu score of the ``n_bins`` equal-frequency model."""
        total = cw[-1]
        if n_bins > 1:
            # Inverted-CDF quantiles on the sorted data: the first value whose cumulative weight
            # reaches q W (the same edges as ``equal_mass_edges``, without re-sorting per model).
            at = np.searchsorted(cw, total * np.arange(1, n_bins) / n_bins, side="left")
            edges = np.unique(ss[np.minimum(at, ss.size - 1)])
            edges = edges[edges > ss[0]]  # an edge on the minimum would leave bin 0 empty
        else:
            edges = np.empty(0)
        cut = np.searchsorted(ss, edges, side="left")  # rows strictly below each edge
        cum_w = np.r_[0.0, cw[cut - 1], total]
        cum_y = np.r_[0.0, cwy[cut - 1], cwy[-1]]
        nb, mb = np.diff(cum_w), np.diff(cum_y)
        k = edges.size + 1
        bounds = np.r_[0.0, edges, 1.0]
        prior = (bounds[:-1] + bounds[1:]) / 2.0
        ess = self.n_prime / k
        a, b = ess * prior, ess * (1.0 - prior)
        log_score = float(
            np.sum(
                gammaln(ess)
                - gammaln(nb + ess)
                + gammaln(mb + a)
                - gammaln(a)
                + gammaln(nb - mb + b)
                - gammaln(b)
            )
        )
        return edges, (mb + a) / (nb + ess), log_score

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return self.values_[np.searchsorted(self.edges_, s, side="right")]


MAX_MODELS = 1000
MAX_TOTAL_BINS = 10_000_000


def model_grid(total: float, n_distinct: int, C: float) -> NDArray[np.int64]:
    """Bin counts ``B`` of the models: the paper's ``[N^(1/3)/C, C N^(1/3)]``, capped at ``N/5``.

    Bounded two ways, neither of which changes a fit of up to 1e6 unit-weight rows with distinct
    scores: ``B`` never exceeds the number of distinct scores with positive weight (more
    equal-frequency bins cannot be formed: such models only realise fewer bins), and past
    ``MAX_MODELS`` models (or when the models would hold more than ``MAX_TOTAL_BINS`` bins in all,
    then at least 100 models) the grid keeps that many geometrically spaced values (the uniform
    model prior then sits on that subset).
    So 400 rows of weight 1e9 (N = 4e11) fit one model of 400 bins (not about 66,000 models).
    """
    root = total ** (1.0 / 3.0)
    hi = int(min(np.ceil(total / 5.0), np.ceil(C * root), max(n_distinct, 1)))
    hi = max(hi, 1)
    lo = min(max(1, int(np.floor(root / C))), hi)
    # Each model costs O(B): past MAX_TOTAL_BINS in all, fewer models (never under 100).
    n_models = min(MAX_MODELS, max(100, MAX_TOTAL_BINS // hi))
    if hi - lo + 1 <= n_models:
        return np.arange(lo, hi + 1, dtype=np.int64)
    return np.unique(np.round(np.geomspace(lo, hi, n_models)).astype(np.int64))


def _fold_models(models, weights) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """One step function equal to ``sum_m weights[m] * step_m`` (right-open bins, as predicted)."""
    base = sum(wt * rates[0] for wt, (_, rates) in zip(weights, models, strict=True))
    all_edges = np.concatenate([e for e, _ in models])
    jumps = np.concatenate([wt * np.diff(r) for wt, (_, r) in zip(weights, models, strict=True)])
    order = np.argsort(all_edges, kind="stable")
    all_edges, cum = all_edges[order], base + np.cumsum(jumps[order])
    # Keep one breakpoint per distinct edge: the value after all of its jumps.
    last = np.r_[all_edges[1:] != all_edges[:-1], True] if all_edges.size else np.empty(0, bool)
    return all_edges[last], np.r_[base, cum[last]]
