"""Validation at the boundary: every public ``fit``/``predict``/metric goes through these.

Errors are ``ValueError`` with a message that names the problem and, where useful, the count and
position of the offending values, so a pipeline log says what to fix.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: What a user's score column holds (``score_kind``): the one list, for sources and calibrators alike (here,
#: away from the calibrators package, so reading a source does not import scikit-learn).
SCORE_KINDS = ("probability", "logit", "score")

INPUT_KINDS = ("probability", "logit", "score")


def _real_array(x: ArrayLike, name: str) -> NDArray[np.float64]:
    """``x`` as float64, refusing what ``np.asarray(x, float)`` would silently coerce.

    Strings such as ``"0"``/``"1"`` parse as numbers and complex values lose their imaginary part
    under a float cast; both are almost always a bug upstream (a CSV column read as text, an FFT
    result), so they are rejected with the fix instead of guessed at.
    """
    raw = x if isinstance(x, np.ndarray) else np.asarray(x)
    kind = raw.dtype.kind
    if kind in "USV":
        raise ValueError(
            f"{name} holds strings (e.g. {raw.ravel()[:1].tolist()}), not numbers; convert the column "
            "to numbers first (e.g. pd.to_numeric or .astype(float))"
        )
    if kind == "c":
        raise ValueError(
            f"{name} holds complex numbers (Complex data not supported); pass real values "
            "(e.g. .real if the imaginary part is 0)"
        )
    if kind == "O":
        bad = [v for v in raw.ravel()[:100_000] if not isinstance(v, numbers.Real)]
        if bad:
            raise ValueError(
                f"{name} holds non-numeric values (e.g. {bad[0]!r} of type {type(bad[0]).__name__}); "
                "convert the column to numbers first"
            )
    if kind not in "biufO":
        raise ValueError(f"{name} must hold real numbers, got dtype {raw.dtype}")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must hold real numbers: {exc}") from None


def as_1d_float(x: ArrayLike, name: str) -> NDArray[np.float64]:
    """Return ``x`` as a 1-D float64 array; raise if it is empty, not 1-D, NaN or infinite."""
    arr = _real_array(x, name)
    if arr.ndim != 1:
        arr = arr.reshape(-1) if arr.ndim == 2 and 1 in arr.shape else arr
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    bad = ~np.isfinite(arr)
    if bad.any():
        kind = "NaN" if np.isnan(arr[bad]).any() else "infinite"
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} has {int(bad.sum())} {kind} value(s) (first at index {first})")
    return arr


#: ``input="auto"`` (the default of every fit(scores, y) calibrator): decided once, at ``fit``, from the
#: scores: every finite one in [0, 1] -> "probability" (what a classifier's predict_proba gives, and what
#: every peer takes), else "score". The fitted calibrator keeps it (``input_``, and in its JSON).
AUTO = "auto"


def resolve_input(scores: NDArray[np.float64], input: str) -> str:
    """The input kind a calibrator fits with: ``input`` as given, or read from the scores for "auto"."""
    if input != AUTO:
        return input
    finite = scores[np.isfinite(scores)]
    return "probability" if finite.size and finite.min() >= 0.0 and finite.max() <= 1.0 else "score"


def check_scores(scores: ArrayLike, input: str = "score", name: str = "scores") -> NDArray[np.float64]:
    """Validate scores of the declared kind: probabilities must lie in [0, 1] ("auto": either)."""
    if input not in (*INPUT_KINDS, AUTO):
        raise ValueError(f"input must be one of {INPUT_KINDS} or 'auto', got {input!r}")
    arr = as_1d_float(scores, name)
    if input == "probability" and (arr.min() < 0.0 or arr.max() > 1.0):
        raise ValueError(
            f"{name} declared as probabilities but range is [{arr.min():.4g}, {arr.max():.4g}]; "
            "pass input='logit' or input='score' for unbounded scores"
        )
    return arr


def check_labels(
    y: ArrayLike, n: int | None = None, name: str = "y", both_classes: bool = True
) -> NDArray[np.float64]:
    """Validate binary labels in {0, 1} (booleans accepted) and, optionally, that both classes occur."""
    if y is None:
        raise ValueError(f"this calibrator requires y to be passed, but the target {name} is None")
    arr = as_1d_float(y, name)
    if n is not None and arr.size != n:
        raise ValueError(f"length mismatch: {name} has {arr.size} values, scores have {n}")
    bad = (arr != 0.0) & (arr != 1.0)
    if bad.any():
        vals = np.unique(arr[bad])[:5]
        raise ValueError(
            f"{name} must be in {{0, 1}}; found {int(bad.sum())} other value(s), e.g. {vals.tolist()}"
        )
    if both_classes and (arr.min() == arr.max()):
        raise ValueError(f"{name} has a single class ({int(arr[0])}); calibration needs both 0 and 1")
    return arr


def check_weights(
    sample_weight: ArrayLike | None, n: int, name: str = "sample_weight", allow_negative: bool = False
) -> NDArray[np.float64]:
    """Return weights of length ``n`` (ones when None); reject negative ones unless allowed.

    A weight is a frequency weight: a row of weight ``w`` stands for ``w`` identical rows (branch
    issue-17 fits from aggregated buckets whose weights are summed counts). Their sum must be finite
    (1e308 x 2 overflows and every weighted mean after it would be NaN).
    """
    if sample_weight is None:
        return np.ones(n)
    w = as_1d_float(sample_weight, name)
    if w.size != n:
        raise ValueError(f"length mismatch: {name} has {w.size} values, scores have {n}")
    if not allow_negative and (w < 0).any():
        raise ValueError(f"{name} has {int((w < 0).sum())} negative value(s); this method needs weights >= 0")
    with np.errstate(over="ignore"):  # an overflowing total is reported just below
        total = float(np.sum(np.abs(w)))
    if not np.isfinite(total):
        raise ValueError(
            f"{name} sums to infinity (largest {np.abs(w).max():.3g}); weights are counts: rescale them "
            "(divide by their maximum) so their total is a finite number"
        )
    if w.sum() <= 0 and not allow_negative:
        raise ValueError(
            f"{name} sums to {w.sum():g} (all weights zero); at least one positive weight is needed"
        )
    return w


def check_weighted_classes(
    y: NDArray[np.float64], w: NDArray[np.float64], name: str = "sample_weight"
) -> None:
    """Refuse weights that leave one class with zero total weight: the fit would see one class only.

    ``check_labels`` sees both classes in ``y``, but a class whose every row has weight 0 is absent from
    the weighted data; fitting it anyway gives probabilities of 1e-11 or 1 - 1e-11 with no warning.
    """
    for cls in (1.0, 0.0):
        mask = y == cls
        if mask.any() and not (w[mask] > 0).any():
            what = "positive (y = 1)" if cls == 1.0 else "negative (y = 0)"
            raise ValueError(
                f"{name} is 0 on every {what} row, so the weighted data has one class only; "
                "calibration needs positive weight on both 0 and 1"
            )


def check_probabilities(p: ArrayLike, n: int | None = None, name: str = "p") -> NDArray[np.float64]:
    """Validate predicted probabilities in [0, 1]."""
    arr = check_scores(p, input="probability", name=name)
    if n is not None and arr.size != n:
        raise ValueError(f"length mismatch: {name} has {arr.size} values, labels have {n}")
    return arr


def check_n_bins(n_bins: object, name: str = "n_bins") -> int:
    """A positive integer number of bins (booleans refused)."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"{name} must be a positive integer, got {n_bins!r}")
    return int(n_bins)
