"""Which calibrator to deploy, or none: the rule behind every card's verdict.

The question a team asks is not "which method has the lowest test log loss" (one always does, often by a
sliver nobody could measure) but "is calibrating worth shipping, and with what". The rule:

1. **Paired comparison, deterministic.** For each candidate, the change in mean log loss against the
   uncalibrated scores on the same test rows, with a normal (CLT) interval on the per-row differences
   ``d_i = ll_i(candidate) - ll_i(uncalibrated)``: ``mean(d) +- z * sd(d) / sqrt(n)``. The rows are
   independent, ``d`` has a finite variance (probabilities are clipped to [1e-15, 1 - 1e-15]) and n is in
   the thousands, so the CLT interval matches the paired percentile bootstrap (tests/library/test_selection.py
   checks it) while depending on no resample count or seed: the verdict cannot flip between
   ``n_bootstrap`` 100 and 1000.
2. **Practical-equivalence margin.** ``margin = margin_fraction * log loss of the uncalibrated scores``,
   default 0.1% (``DEFAULT_MARGIN_FRACTION``). Why 0.1%: in click-through and conversion modelling a 0.1%
   relative log-loss change is the smallest one practitioners report as meaningful (the CTR literature,
   e.g. Wang et al. 2017 "Deep & Cross Network", calls 0.001-level log-loss gains significant at
   ~0.44 log loss, i.e. ~0.2%); smaller changes are below what a model refresh moves by itself. A
   candidate *clears* the margin when its whole interval lies below ``-margin``.
3. **Keep your scores** when no candidate clears the margin: the identity calibrator is written.
4. **Simplest of the near-best.** Among the candidates that clear the margin, those whose log loss is within
   ``margin`` of the lowest are practically equivalent; the simplest wins: fewer fitted numbers first
   (``parameter_count``), then the more familiar method (``FAMILIARITY``), then the name.

Everything here is pure numpy/scipy: the select stage, the aggregate path and the benchmarks share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from calibflow.intervals import moments_interval, normal_mean_interval
from calibflow.metrics import row_log_loss

IDENTITY = "identity"
KEEP, CALIBRATE = "keep", "calibrate"
DEFAULT_MARGIN_FRACTION = 0.001


def __getattr__(name: str):
    # FAMILIARITY: the tie-break after the parameter count, the methods a reviewer knows first (textbook
    # order): each calibrator class's own ``familiarity`` fact
    if name == "FAMILIARITY":
        from calibflow.calibrators import familiarity

        return familiarity()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: State fields that are bookkeeping (ranges, flags), not fitted numbers.
_BOOKKEEPING = {"s_min_", "s_max_", "regularised_", "solver_", "lo_", "hi_", "x_", "scores_", "edges_"}

RULE_TEXT = (
    "keep your scores unless a monotone calibrator lowers test log loss by more than the margin "
    "({margin_pct} of the uncalibrated log loss) with its whole {level} paired interval (normal, on per-row "
    "differences); among those within the margin of the best, the fewest parameters, then the most "
    "familiar method"
)


@dataclass(frozen=True)
class Paired:
    """Change of the mean log loss (candidate minus reference) with its interval; negative is better."""

    delta: float
    low: float
    high: float
    se: float
    n: int

    def ci(self) -> list[float]:
        return [self.low, self.high]


def paired_log_loss(
    y: ArrayLike,
    p_ref: ArrayLike,
    p_new: ArrayLike,
    level: float = 0.95,
    sample_weight: ArrayLike | None = None,
) -> Paired:
    """CLT interval of the mean per-row log-loss difference ``new - ref`` (weights are row counts)."""
    d = row_log_loss(y, p_new) - row_log_loss(y, p_ref)
    w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    mean, low, high, se, n = normal_mean_interval(d, level, w)
    return Paired(mean, low, high, se, int(round(n)))


def paired_from_moments(n: float, mean: float, m2: float, level: float = 0.95) -> Paired:
    """:func:`paired_log_loss` from the per-row differences' count, mean and sum of squared deviations
    (a streaming pass over rows that are never held: ``calibflow.aggregate.segment_compare``)."""
    mean, low, high, se, n = moments_interval(n, mean, m2, level)
    return Paired(mean, low, high, se, int(round(n)))


def parameter_count(payload: Mapping[str, Any]) -> int:
    """Fitted numbers in a calibrator payload (``to_json``): 0 identity, 2 Platt, one per isotonic knot."""
    state = payload.get("state") or {}
    total = 0
    for key, value in state.items():
        if key in _BOOKKEEPING:
            continue
        total += _numbers(value)
    return total


def _numbers(value: Any) -> int:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return 0
    if isinstance(value, int | float):
        return 1
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return int(np.asarray(value["__ndarray__"], dtype=object).size)
        return sum(_numbers(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_numbers(v) for v in value)
    return 0


def preference_key(method: str, n_params: int) -> tuple[int, int, str]:
    """Sort key of the preference order: fewer parameters, then familiarity, then the name."""
    from calibflow.calibrators import familiarity

    order = familiarity()
    rank = order.index(method) if method in order else len(order)
    return (n_params, rank, method)


@dataclass
class Decision:
    """The verdict and what it rests on (``asdict`` goes into the card)."""

    verdict: str  # KEEP or CALIBRATE
    method: str  # the calibrator written: IDENTITY when the verdict is KEEP
    margin: float
    margin_fraction: float
    log_loss_uncalibrated: float
    best: str | None  # lowest test log loss among the candidates
    runner_up: str | None
    runner_up_reason: str
    cleared: list[str] = field(default_factory=list)
    equivalent: list[str] = field(default_factory=list)
    comparisons: dict[str, dict[str, float]] = field(default_factory=dict)
    n_params: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(
    log_loss_uncalibrated: float,
    comparisons: Mapping[str, Paired],
    n_params: Mapping[str, int],
    margin_fraction: float = DEFAULT_MARGIN_FRACTION,
) -> Decision:
    """Apply the rule (module docstring) to each candidate's paired comparison against the uncalibrated."""
    margin = margin_fraction * log_loss_uncalibrated
    ll = {m: log_loss_uncalibrated + c.delta for m, c in comparisons.items()}
    ranked = sorted(comparisons, key=lambda m: (ll[m], m))
    best = ranked[0] if ranked else None
    cleared = [m for m in ranked if comparisons[m].high < -margin]
    common = {
        "margin": margin,
        "margin_fraction": margin_fraction,
        "log_loss_uncalibrated": log_loss_uncalibrated,
        "best": best,
        "cleared": cleared,
        "comparisons": {m: asdict(c) for m, c in comparisons.items()},
        "n_params": dict(n_params),
    }
    if not cleared:
        why = "lowest test log loss, but its improvement does not clear the margin" if best else ""
        return Decision(KEEP, IDENTITY, runner_up=best, runner_up_reason=why, **common)
    top = min(ll[m] for m in cleared)
    equivalent = sorted(
        (m for m in cleared if ll[m] <= top + margin), key=lambda m: preference_key(m, n_params.get(m, 0))
    )
    chosen = equivalent[0]
    if len(equivalent) > 1:
        runner, why = equivalent[1], "within the margin of the best, but not simpler"
    else:
        others = [m for m in ranked if m != chosen]
        runner = others[0] if others else None
        why = (
            "clears the margin, but its log loss is more than the margin above the chosen"
            if runner in cleared
            else "does not clear the margin"
        )
    return Decision(
        CALIBRATE, chosen, runner_up=runner, runner_up_reason=why if runner else "", equivalent=equivalent,
        **common,
    )


def rule_text(margin_fraction: float, level: float) -> str:
    return RULE_TEXT.format(margin_pct=f"{100 * margin_fraction:g}%", level=f"{100 * level:g}%")
