"""Calibration diagnostics with uncertainty: smooth ECE, binning-free tests, bands, decompositions.

- :func:`smooth_ece`: Blasiok & Nakkiran, "Smooth ECE: Principled Reliability Diagrams via Kernel
  Smoothing" (ICLR 2024): the reflected-Gaussian kernel smoothing of the residuals ``f - y`` and of the
  density of ``f`` (their eq. 3), ``smECE_sigma = int |r_sigma(t)| delta_sigma(t) dt``, at the bandwidth
  ``sigma*`` where ``smECE_sigma* = sigma*`` (their Sec. 5, found by bisection). The grid, the linear
  "smooth rounding" of the points onto it and the bisection follow the authors' package ``relplot``
  step by step, so the two agree to float precision (``tests/library/test_diagnostics.py`` checks 1e-6).
- :func:`cumulative_tests`: Arrieta-Ibarra, Gujral, Tannen, Tygert & Xu, "Metrics of calibration for
  probabilistic predictions" (JMLR 2022): sort by prediction, take the cumulative differences
  ``C_k = sum_{j <= k} w_j (y_j - p_j) / W``; under perfect calibration ``C / sigma`` (with
  ``sigma = sqrt(sum w_j^2 p_j (1 - p_j)) / W``) is asymptotically a standard Brownian motion on [0, 1].
  Kolmogorov-Smirnov uses ``max |C|``, Kuiper the range ``max C - min C``; their p-values come from the
  distributions of the maximum absolute value (Darling & Siegert 1953) and of the range (Feller 1951) of
  Brownian motion, as in MAPIE. The path starts at ``C_0 = 0`` (as Brownian motion does) and tied
  predictions are pooled into one step. Spiegelhalter's z-test (1986) is reported beside them, two-sided.
- :func:`consistency_bands`: Broecker & Smith (2007) consistency bars: per bin, the interval the observed
  positive rate would fall in if the predictions were calibrated (labels drawn as Bernoulli(p)).
- :func:`decomposition`: the CORP decomposition of Dimitriadis, Gneiting & Jordan (PNAS 2021) for the
  Brier score and the log loss: ``score = MCB - DSC + UNC``, where the recalibrated forecast is the
  isotonic (PAV) fit of ``y`` on ``p``. ``MCB`` (miscalibration) is the part of the loss that a perfect
  monotone recalibration would remove; ``DSC`` (discrimination) what the ranking earns over the base rate.

Weights are frequency weights throughout (a row of weight ``w`` counts as ``w`` rows), so an aggregated
table (one row per score value with summed weights) gives the same numbers as the rows it stands for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import signal, stats
from sklearn.isotonic import isotonic_regression

from calibflow._validation import check_labels, check_n_bins, check_probabilities, check_weights
from calibflow.metrics import bin_index, row_log_loss

_DENSITY_EPS = 1e-4  # relplot adds this to the smoothed density before dividing (kernels.py)


def _prep(y: ArrayLike, p: ArrayLike, sample_weight: ArrayLike | None):
    pp = check_probabilities(p)
    yy = check_labels(y, n=pp.size, both_classes=False)
    w = check_weights(sample_weight, pp.size)
    total = w.sum()
    if not np.isfinite(total):
        raise ValueError("sample_weight sums to a non-finite value; rescale the weights")
    return yy, pp, w


# ---- smooth ECE -------------------------------------------------------------------------------------------
def _grid_weights(f: NDArray[np.float64], n_grid: int) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
    """Lower grid index and the share of the upper one for each point (grid of ``n_grid`` on [0, 1])."""
    pos = f * (n_grid - 1)
    lo = np.clip(pos.astype(np.intp), 0, n_grid - 2)
    return lo, pos - lo


def _round_to_grid(lo, frac, v: NDArray[np.float64], n_grid: int) -> NDArray[np.float64]:
    """Spread each value ``v_i`` linearly onto the two grid points around its prediction."""
    return np.bincount(lo, (1 - frac) * v, n_grid) + np.bincount(lo + 1, frac * v, n_grid)


def _reflected_smooth(values: NDArray[np.float64], sigma: float) -> NDArray[np.float64]:
    """Convolve grid values with a Gaussian of width ``sigma``, reflecting the data at 0 and 1."""
    n = values.size
    t = np.linspace(0.0, 1.0, n)
    kernel = np.exp(-((t - 0.5) ** 2) / (2 * sigma**2)) / (np.sqrt(2 * np.pi) * sigma)
    extended = np.concatenate([values[::-1][:-1], values, values[::-1][1:]])
    full = signal.fftconvolve(extended, kernel, mode="valid")
    return full[n // 2 : n // 2 + n]


def _interpolate(t: NDArray[np.float64], grid_values: NDArray[np.float64]) -> NDArray[np.float64]:
    n = grid_values.size
    idx = np.clip((t * (n - 1)).astype(np.intp), 0, n - 2)
    frac = (t - idx / (n - 1)) * (n - 1)
    return grid_values[idx] * (1 - frac) + grid_values[idx + 1] * frac


def smooth_ece_at(y: ArrayLike, p: ArrayLike, sigma: float, sample_weight: ArrayLike | None = None) -> float:
    """Smooth ECE at a fixed kernel bandwidth ``sigma`` (eq. 3 of Blasiok & Nakkiran)."""
    yy, pp, w = _prep(y, p, sample_weight)
    return _smooth_ece(yy, pp, w, float(sigma))


def _smooth_ece(y, p, w, sigma: float) -> float:
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    n_grid = max(2000, round(20 / sigma)) // 2 + 1
    t = np.linspace(0.0, 1.0, max(round(10 / sigma), 200))
    lo, frac = _grid_weights(p, n_grid)
    resid = _interpolate(t, _reflected_smooth(_round_to_grid(lo, frac, w * (p - y), n_grid), sigma))
    dens = _interpolate(t, _reflected_smooth(_round_to_grid(lo, frac, w, n_grid), sigma)) + _DENSITY_EPS
    return float(np.sum(np.abs(resid / dens) * dens) / np.sum(dens))


def smooth_ece(
    y: ArrayLike, p: ArrayLike, sample_weight: ArrayLike | None = None, return_bandwidth: bool = False
) -> float | tuple[float, float]:
    """Smooth ECE at its automatic bandwidth: the fixed point ``smECE_sigma = sigma`` (Sec. 5).

    Bisection on [0, 1] with 10 halvings, stopping at ``sigma < 0.001`` as ``relplot.smECE`` does.
    """
    yy, pp, w = _prep(y, p, sample_weight)

    def above(sigma: float) -> bool:
        return sigma < 0.001 or sigma < _smooth_ece(yy, pp, w, sigma)

    hi, lo = 1.0, 0.0
    if not above(hi):
        for _ in range(10):
            mid = (hi + lo) / 2
            if above(mid):
                lo = mid
            else:
                hi = mid
    value = _smooth_ece(yy, pp, w, hi)
    return (value, hi) if return_bandwidth else value


# ---- binning-free tests on cumulative differences --------------------------------------------------------
@dataclass(frozen=True)
class CalibrationTests:
    """Statistics (scaled by the Brownian length scale) and asymptotic p-values; small p = miscalibrated."""

    ks: float
    ks_pvalue: float
    kuiper: float
    kuiper_pvalue: float
    spiegelhalter: float
    spiegelhalter_pvalue: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _series_terms(x: float) -> int:
    """Terms for the theta series below: term k decays like exp(-c k^2 / x^2), so a fixed count truncates
    them for large x (60 terms gave P = 1 - 6e-7 and a non-monotone CDF at x = 91); ~4x terms suffice."""
    return max(60, int(4 * x) + 20)


def brownian_max_abs_cdf(x: float) -> float:
    """P(sup_{t <= 1} |B_t| <= x) for standard Brownian motion (Darling & Siegert 1953)."""
    if x <= 0:
        return 0.0
    n = _series_terms(x)
    k = np.arange(0, n) + 0.5
    terms = (-1.0) ** np.arange(n) / k * np.exp(-(k**2) * np.pi**2 / (2 * x**2))
    return float(np.clip(2 / np.pi * terms.sum(), 0.0, 1.0))


def brownian_range_cdf(x: float) -> float:
    """P(max B - min B <= x) over [0, 1] for standard Brownian motion (Feller 1951)."""
    if x <= 0:
        return 0.0
    k = np.arange(0, _series_terms(x)) + 0.5
    terms = (8 / x**2 + 2 / (k**2 * np.pi**2)) * np.exp(-2 * k**2 * np.pi**2 / x**2)
    return float(np.clip(terms.sum(), 0.0, 1.0))


def cumulative_tests(y: ArrayLike, p: ArrayLike, sample_weight: ArrayLike | None = None) -> CalibrationTests:
    """Kolmogorov-Smirnov, Kuiper and Spiegelhalter calibration tests (no bins)."""
    yy, pp, w = _prep(y, p, sample_weight)
    order = np.argsort(pp, kind="stable")
    ps = pp[order]
    total = w.sum()
    # Tied predictions have no order of their own: pool each tie group into one step, so the path (and
    # the statistics) do not depend on how ties happen to be sorted. MAPIE jitters ties at random instead.
    first = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    cum = np.cumsum(np.add.reduceat(w[order] * (yy[order] - ps), first)) / total
    sigma = np.sqrt(np.sum(w**2 * pp * (1 - pp))) / total
    if sigma <= 0:
        raise ValueError("every prediction is 0 or 1: the calibration tests need predictions inside (0, 1)")
    path = np.r_[0.0, cum]
    ks = float(np.max(np.abs(path)) / sigma)
    kuiper = float((path.max() - path.min()) / sigma)
    # Spiegelhalter (1986): z of the Brier score's deviation from its expectation under calibration.
    num = np.sum(w * (yy - pp) * (1 - 2 * pp))
    den = np.sqrt(np.sum(w**2 * (1 - 2 * pp) ** 2 * pp * (1 - pp)))
    z = float(num / den) if den > 0 else 0.0
    return CalibrationTests(
        ks=ks,
        ks_pvalue=1.0 - brownian_max_abs_cdf(ks),
        kuiper=kuiper,
        kuiper_pvalue=1.0 - brownian_range_cdf(kuiper),
        spiegelhalter=z,
        spiegelhalter_pvalue=float(2 * stats.norm.sf(abs(z))),
    )


# ---- reliability diagram with consistency bands ----------------------------------------------------------
@dataclass(frozen=True)
class ReliabilityBands:
    """Per bin: weight, mean prediction, observed rate and the consistency band of the observed rate."""

    count: NDArray[np.float64]
    mean_pred: NDArray[np.float64]
    observed: NDArray[np.float64]
    band_low: NDArray[np.float64]
    band_high: NDArray[np.float64]

    def to_dict(self) -> dict[str, list[float]]:
        return {k: np.asarray(v).tolist() for k, v in asdict(self).items()}


def consistency_bands(
    y: ArrayLike,
    p: ArrayLike,
    n_bins: int = 10,
    strategy: str = "quantile",
    level: float = 0.95,
    n_draws: int = 1000,
    seed: int = 0,
    sample_weight: ArrayLike | None = None,
) -> ReliabilityBands:
    """Reliability diagram whose bands show where a *calibrated* model's observed rates would fall.

    Under the null, each label is Bernoulli(p_i); the band is the ``level`` interval of the bin's weighted
    positive rate over ``n_draws`` seeded redraws of the labels (Broecker & Smith's consistency resampling;
    the predictions are kept, not resampled, since the diagram conditions on them). Bins whose observed rate
    leaves the band are evidence of miscalibration there. Memory is bounded: the draws run in chunks.
    """
    yy, pp, w = _prep(y, p, sample_weight)
    n_bins = check_n_bins(n_bins)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    idx = bin_index(pp, n_bins, strategy)
    cnt = np.bincount(idx, weights=w, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.bincount(idx, weights=w * pp, minlength=n_bins) / cnt
        observed = np.bincount(idx, weights=w * yy, minlength=n_bins) / cnt
    rng = np.random.default_rng(seed)
    rates = np.empty((n_draws, n_bins))
    chunk = max(1, 2_000_000 // pp.size)
    for start in range(0, n_draws, chunk):
        k = min(chunk, n_draws - start)
        draws = rng.random((k, pp.size)) < pp
        sums = np.stack([np.bincount(idx, weights=w * d, minlength=n_bins) for d in draws])
        with np.errstate(invalid="ignore", divide="ignore"):
            rates[start : start + k] = sums / cnt
    alpha = (1 - level) / 2
    # Empty bins have no band (NaN), and are left out of the quantile so numpy does not warn about them.
    low, high = np.full(n_bins, np.nan), np.full(n_bins, np.nan)
    full = cnt > 0
    if full.any():
        low[full], high[full] = np.quantile(rates[:, full], [alpha, 1 - alpha], axis=0)
    return ReliabilityBands(cnt, mean_pred, observed, low, high)


# ---- CORP decomposition ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decomposition:
    """``score = miscalibration - discrimination + uncertainty`` (CORP; all in the score's units)."""

    score: float
    miscalibration: float
    discrimination: float
    uncertainty: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _brier(y, p, w) -> float:
    return float(w @ (p - y) ** 2 / w.sum())


def _log_loss(y, p, w) -> float:
    return float(w @ row_log_loss(y, p) / w.sum())


def recalibrated(y: ArrayLike, p: ArrayLike, sample_weight: ArrayLike | None = None) -> NDArray[np.float64]:
    """The PAV (isotonic) recalibration of ``p`` on the same rows; ties in ``p`` share one value."""
    yy, pp, w = _prep(y, p, sample_weight)
    order = np.argsort(pp, kind="stable")
    ps, ys, ws = pp[order], yy[order], w[order]
    first = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
    wsum = np.add.reduceat(ws, first)
    ymean = np.add.reduceat(ws * ys, first) / np.where(wsum > 0, wsum, 1.0)
    fitted = isotonic_regression(ymean, sample_weight=np.where(wsum > 0, wsum, 1e-300))
    out = np.empty_like(pp)
    out[order] = np.repeat(fitted, np.diff(np.r_[first, ps.size]))
    return out


def decomposition(
    y: ArrayLike, p: ArrayLike, score: str = "brier", sample_weight: ArrayLike | None = None
) -> Decomposition:
    """CORP decomposition of the Brier score or the log loss (Dimitriadis, Gneiting & Jordan 2021, eq. 4)."""
    fn = {"brier": _brier, "log_loss": _log_loss}.get(score)
    if fn is None:
        raise ValueError(f"score must be 'brier' or 'log_loss', got {score!r}")
    yy, pp, w = _prep(y, p, sample_weight)
    total = fn(yy, pp, w)
    recal = fn(yy, recalibrated(yy, pp, w), w)
    base = fn(yy, np.full_like(pp, float(w @ yy / w.sum())), w)
    return Decomposition(
        score=total, miscalibration=total - recal, discrimination=base - recal, uncertainty=base
    )


def summary(y: ArrayLike, p: ArrayLike, sample_weight: ArrayLike | None = None) -> dict[str, float]:
    """The diagnostics a report row shows: smooth ECE, test p-values and both decompositions' MCB/DSC."""
    sm, bw = smooth_ece(y, p, sample_weight, return_bandwidth=True)
    tests = cumulative_tests(y, p, sample_weight)
    out = {"smooth_ece": sm, "smooth_ece_bandwidth": bw}
    out.update({k: v for k, v in tests.to_dict().items()})
    for kind in ("brier", "log_loss"):
        d = decomposition(y, p, kind, sample_weight)
        out[f"{kind}_miscalibration"] = d.miscalibration
        out[f"{kind}_discrimination"] = d.discrimination
    return out


__all__ = [
    "CalibrationTests",
    "Decomposition",
    "ReliabilityBands",
    "brownian_max_abs_cdf",
    "brownian_range_cdf",
    "consistency_bands",
    "cumulative_tests",
    "decomposition",
    "recalibrated",
    "smooth_ece",
    "smooth_ece_at",
    "summary",
]


def ranking_note(
    y: ArrayLike,
    p_model: ArrayLike,
    p_chosen: ArrayLike,
    calib_rate: float,
    margin: float,
    method: str,
    level: float = 0.95,
) -> dict | None:
    """Whether the model barely ranks, in words: what a card says first (issue 36).

    Two checks on the test rows: the model's AUC within noise of 0.5 (``|AUC - 0.5| <= z sd0``, ``sd0``
    the Mann-Whitney statistic's sd under no ranking, ``sqrt((n1 + n0 + 1) / (12 n1 n0))``), and a
    constant at the calibration split's base rate within ``margin`` (absolute log loss) of the chosen
    map. None when neither holds; else ``auc``, ``auc_noise`` (``z sd0``), ``log_loss_constant``,
    ``log_loss_chosen``, ``barely_ranks``, ``constant_close`` and ``statement``.
    """
    from sklearn.metrics import roc_auc_score

    yy = np.asarray(y, dtype=np.float64)
    n1, n0 = float(yy.sum()), float(yy.size - yy.sum())
    if n1 == 0 or n0 == 0:
        return None
    auc = float(roc_auc_score(yy, np.asarray(p_model, dtype=np.float64)))
    rate = float(np.clip(calib_rate, 1e-15, 1 - 1e-15))
    ll_const = float(row_log_loss(yy, np.full(yy.size, rate)).mean())
    ll_chosen = float(row_log_loss(yy, np.asarray(p_chosen, dtype=np.float64)).mean())
    return ranking_note_from(auc, n1, n0, ll_const, ll_chosen, rate, margin, method, level)


def ranking_note_from(
    auc: float, n1: float, n0: float, ll_const: float | None, ll_chosen: float, rate: float, margin: float,
    method: str, level: float = 0.95,
) -> dict | None:
    """:func:`ranking_note` from its numbers (what a table gives: the aggregate path); ``ll_const`` None
    skips the constant's check."""
    if n1 <= 0 or n0 <= 0 or not np.isfinite(auc):
        return None
    noise = float(stats.norm.ppf(0.5 + level / 2.0) * np.sqrt((n1 + n0 + 1.0) / (12.0 * n1 * n0)))
    barely = abs(auc - 0.5) <= noise
    close = ll_const is not None and ll_const - ll_chosen <= margin
    if not (barely or close):
        return None
    parts = []
    if barely:
        parts.append(f"The model barely ranks: its test AUC {auc:.3f} is within noise of 0.5 "
                     f"(+/- {noise:.3f} at {level:.0%}, {int(n1):,} positives).")
    else:
        parts.append(f"The model ranks little: test AUC {auc:.3f}.")
    if close:
        parts.append(f"A constant at the calibration base rate ({rate:.4g}) has test log loss "
                     f"{ll_const:.5f} against {ll_chosen:.5f} for {method}, within the margin "
                     f"({margin:.2g}): the probabilities say little more than the base rate.")
    return {"auc": float(auc), "auc_noise": noise, "log_loss_constant": ll_const,
            "log_loss_chosen": ll_chosen, "barely_ranks": bool(barely), "constant_close": bool(close),
            "statement": " ".join(parts)}
