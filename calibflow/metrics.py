"""Calibration and ranking metrics used by every report.

All binned metrics are one pass: bin indices, then ``np.bincount`` for counts, sums of predictions
and sums of labels. ``sample_weight`` is accepted wherever a paper needs weighted estimates (the
inverse-propensity evaluation of Kweon et al., CalEM's weighted likelihood).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from calibflow._validation import as_1d_float, check_labels, check_n_bins, check_probabilities, check_weights
from calibflow.binning import bin_of, linear_edges

STRATEGIES = ("uniform", "quantile")
# The one clip of every log loss in calibflow (per row or averaged, rows or aggregate tables): a probability
# of exactly 0 or 1 costs -log(1e-15) ~ 34.5 nats instead of infinity (scikit-learn's long-standing default).
LOG_LOSS_CLIP = 1e-15
_EPS = LOG_LOSS_CLIP


def clip_probability(p: ArrayLike) -> NDArray[np.float64]:
    """``p`` clipped to [LOG_LOSS_CLIP, 1 - LOG_LOSS_CLIP]: what a log loss or a logit of it can take."""
    return np.clip(np.asarray(p, dtype=np.float64), LOG_LOSS_CLIP, 1.0 - LOG_LOSS_CLIP)


def logit(p: ArrayLike) -> NDArray[np.float64]:
    """The logit of a probability, clipped first (a probability of exactly 0 or 1 has an infinite logit)."""
    from scipy.special import logit as _logit

    return _logit(clip_probability(p))


def expit(z: ArrayLike) -> NDArray[np.float64]:
    """The probability of a logit (scipy's sigmoid: no overflow warning for large negative ``z``)."""
    from scipy.special import expit as _expit

    return _expit(np.asarray(z, dtype=np.float64))


def _prep(y, p, sample_weight=None, both_classes=False):
    pp = check_probabilities(p)
    yy = check_labels(y, n=pp.size, both_classes=both_classes)
    w = check_weights(sample_weight, pp.size)
    # Weights are counts; every metric is a weighted mean, invariant to their scale. Dividing by the
    # largest keeps w @ x finite for weights near 1e308 (which summed to inf and gave NaN or 0.0).
    return yy, pp, w / w.max()


def bin_index(p: NDArray[np.float64], n_bins: int, strategy: str = "uniform") -> NDArray[np.intp]:
    """Bin of each prediction: equal-width on [0, 1] or equal-mass (quantiles of ``p``)."""
    n_bins = check_n_bins(n_bins)
    if strategy == "uniform":
        return np.minimum((p * n_bins).astype(np.intp), n_bins - 1)
    if strategy == "quantile":
        return bin_of(linear_edges(p, n_bins), p)
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


@dataclass
class Reliability:
    """Per-bin weight, mean prediction and observed positive rate (NaN where a bin is empty)."""

    count: NDArray[np.float64]
    mean_pred: NDArray[np.float64]
    observed: NDArray[np.float64]

    def to_dict(self) -> dict[str, list[float]]:
        return {k: np.asarray(v).tolist() for k, v in asdict(self).items()}


def reliability(
    y: ArrayLike, p: ArrayLike, n_bins: int = 15, strategy: str = "uniform", sample_weight=None
) -> Reliability:
    yy, pp, w = _prep(y, p, sample_weight)
    idx = bin_index(pp, n_bins, strategy)
    cnt = np.bincount(idx, weights=w, minlength=n_bins)
    sp = np.bincount(idx, weights=w * pp, minlength=n_bins)
    sy = np.bincount(idx, weights=w * yy, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return Reliability(cnt, sp / cnt, sy / cnt)


def _gaps(y, p, n_bins, strategy, sample_weight):
    yy, pp, w = _prep(y, p, sample_weight)
    idx = bin_index(pp, n_bins, strategy)
    cnt = np.bincount(idx, weights=w, minlength=n_bins)
    gap = np.bincount(idx, weights=w * (yy - pp), minlength=n_bins)
    return cnt, gap


def ece(y: ArrayLike, p: ArrayLike, n_bins: int = 15, strategy: str = "uniform", sample_weight=None) -> float:
    """Expected calibration error: sum_m (|B_m|/n) |mean(y) - mean(p)| over bins (Naeini et al. 2015)."""
    cnt, gap = _gaps(y, p, n_bins, strategy, sample_weight)
    return float(np.abs(gap).sum() / cnt.sum())


def mce(y: ArrayLike, p: ArrayLike, n_bins: int = 15, strategy: str = "uniform", sample_weight=None) -> float:
    """Maximum calibration error: the largest |mean(y) - mean(p)| over non-empty bins."""
    cnt, gap = _gaps(y, p, n_bins, strategy, sample_weight)
    nz = cnt > 0
    return float(np.max(np.abs(gap[nz]) / cnt[nz]))


def brier(y: ArrayLike, p: ArrayLike, sample_weight=None) -> float:
    yy, pp, w = _prep(y, p, sample_weight)
    return float(w @ (pp - yy) ** 2 / w.sum())


def row_log_loss(y: ArrayLike, p: ArrayLike) -> NDArray[np.float64]:
    """Each row's negative log-likelihood, ``p`` clipped to [LOG_LOSS_CLIP, 1 - LOG_LOSS_CLIP]."""
    yy, pp = np.asarray(y, dtype=np.float64), np.asarray(p, dtype=np.float64)
    pc = clip_probability(pp)
    return -(yy * np.log(pc) + (1.0 - yy) * np.log1p(-pc))


def log_loss(y: ArrayLike, p: ArrayLike, sample_weight=None, eps: float = _EPS) -> float:
    """Mean negative log-likelihood, predictions clipped to [eps, 1 - eps]."""
    yy, pp, w = _prep(y, p, sample_weight)
    pc = np.clip(pp, eps, 1 - eps)
    return float(-(w @ (yy * np.log(pc) + (1 - yy) * np.log1p(-pc))) / w.sum())


def ks_error(y: ArrayLike, p: ArrayLike, sample_weight=None) -> float:
    """Kolmogorov-Smirnov calibration error of Gupta et al. (2020), the CalEM paper's KS.

    Sort by prediction; the cumulative (weighted) means of ``y`` and of ``p`` are two curves over the
    sorted rank; KS is their largest vertical distance. Binning-free.
    """
    yy, pp, w = _prep(y, p, sample_weight)
    order = np.argsort(pp, kind="mergesort")
    ww = w[order] / w.sum()
    diff = np.cumsum(ww * (yy[order] - pp[order]))
    return float(np.max(np.abs(np.r_[0.0, diff])))


def calibration_ratio(y: ArrayLike, p: ArrayLike, sample_weight=None) -> float:
    """``sum p / sum y``: 1 is perfect (the ads convention); Fan et al.'s calibration error E (VAD paper,
    eq. 1) is this minus 1 (:func:`calibration_error_e`)."""
    yy, pp, w = _prep(y, p, sample_weight)
    sy = w @ yy
    if sy <= 0:
        raise ValueError("calibration_ratio is undefined without positive labels")
    return float(w @ pp / sy)


def calibration_error_e(y: ArrayLike, p: ArrayLike, sample_weight=None) -> float:
    """``sum p / sum y - 1``: the calibration error E of Fan et al. (VAD paper), eq. (1)."""
    return calibration_ratio(y, p, sample_weight) - 1.0


def auc(y: ArrayLike, score: ArrayLike, sample_weight=None) -> float:
    """ROC AUC of any score (rank-based, ties counted half)."""
    from sklearn.metrics import roc_auc_score

    s = as_1d_float(score, "score")
    yy = check_labels(y, n=s.size)
    w = check_weights(sample_weight, s.size)  # counts: negative ones are refused
    for label, what in ((1.0, "positive"), (0.0, "negative")):
        if not (w[yy == label] > 0).any():
            raise ValueError(
                f"auc is undefined: every {what} row has weight 0; give some {what} rows weight > 0"
            )
    return float(roc_auc_score(yy, s, sample_weight=w / w.max()))


def recall_at_precision(y: ArrayLike, score: ArrayLike, precision: float) -> tuple[float, float]:
    """Largest recall of any score threshold whose precision is >= ``precision``.

    Returns ``(recall, threshold)``; ``(0.0, inf)`` when no threshold reaches the bound. Thresholds
    are taken between distinct scores, so tied items are always decided together.
    """
    if not 0.0 < precision <= 1.0:
        raise ValueError(f"precision bound must be in (0, 1], got {precision}")
    s = as_1d_float(score, "score")
    yy = check_labels(y, n=s.size)
    order = np.argsort(-s, kind="mergesort")
    ss, ys = s[order], yy[order]
    last = np.r_[ss[1:] != ss[:-1], True]  # end of each group of tied scores
    tp = np.cumsum(ys)[last]
    pp = np.flatnonzero(last) + 1.0
    ok = tp / pp >= precision
    if not ok.any():
        return 0.0, float("inf")
    best = int(np.argmax(np.where(ok, tp, -1)))
    return float(tp[best] / yy.sum()), float(ss[last][best])


def top_alpha_mask(rank_score: NDArray[np.float64], alpha: float) -> NDArray[np.bool_]:
    """Boolean mask of the top ``ceil(alpha n)`` items by ``rank_score`` (the selected set)."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    n = rank_score.size
    k = int(np.ceil(alpha * n))
    mask = np.zeros(n, bool)
    mask[np.argsort(-rank_score, kind="mergesort")[:k]] = True
    return mask


def selection_metrics(
    y: ArrayLike, p: ArrayLike, rank_score: ArrayLike | None = None, alpha: float = 0.1, n_bins: int = 10
) -> dict[str, float]:
    """Calibration on the selected set: the top-alpha items by ``rank_score`` (Fan et al., eq. 1-2).

    ``rank_score`` defaults to ``p`` itself. Returns E (calibration ratio), ECE and MCE with
    ``n_bins`` equal-width bins, Brier and log loss, all on the selected items only.
    """
    pp = check_probabilities(p)
    yy = check_labels(y, n=pp.size, both_classes=False)
    rs = pp if rank_score is None else as_1d_float(rank_score, "rank_score")
    if rs.size != pp.size:
        raise ValueError(f"length mismatch: rank_score has {rs.size} values, p has {pp.size}")
    m = top_alpha_mask(rs, alpha)
    ys, ps = yy[m], pp[m]
    out = {"alpha": float(alpha), "n_selected": int(m.sum()), "positives": float(ys.sum())}
    out["E"] = calibration_error_e(ys, ps) if ys.sum() > 0 else float("nan")
    out["ece"] = ece(ys, ps, n_bins=n_bins)
    out["mce"] = mce(ys, ps, n_bins=n_bins)
    out["brier"] = brier(ys, ps)
    out["log_loss"] = log_loss(ys, ps)
    return out


def summary(
    y: ArrayLike, p: ArrayLike, score: ArrayLike | None = None, n_bins: int = 15, sample_weight=None
) -> dict[str, float]:
    """The standard metric row of a report: ECE, MCE, Brier, log loss, KS, calibration ratio, AUC."""
    out = {
        "ece": ece(y, p, n_bins, sample_weight=sample_weight),
        "mce": mce(y, p, n_bins, sample_weight=sample_weight),
        "brier": brier(y, p, sample_weight),
        "log_loss": log_loss(y, p, sample_weight),
        "ks": ks_error(y, p, sample_weight),
        "calibration_ratio": calibration_ratio(y, p, sample_weight),
    }
    out["auc"] = auc(y, p if score is None else score, sample_weight)
    return out
