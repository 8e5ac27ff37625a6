"""Quadratic scaling: ``p = sigma(a z^2 + b z + c)`` on the model's logit ``z``, kept monotone.

The smooth parametric family that CalArena (Berta et al. 2025, about 2,000 experiments on 104 TabRepo
binary datasets) finds among the best on average for gradient-boosted trees, beside temperature, Platt and
Beta. Unconstrained, a quadratic on the logit can turn back down and reverse the ranking; here it is the
Gaussian calibrator's function family (two Gaussian class-conditional densities of the logit with free
variances, Kweon et al. 2022, eq. 10) with the same monotonicity constraints (``2 a z + b > 0`` at both
ends of the fitting range, App. C) and linear continuation of the logit beyond them. The fit, the
constraints and the JSON state are :class:`calibflow.calibrators.ranking.GaussianCalibrator`'s; this
class only fixes the input to the logit scale and the name the registry and reports use.
"""

from __future__ import annotations

from calibflow.calibrators.base import DEFAULT_INPUT, register
from calibflow.calibrators.ranking import GaussianCalibrator


@register("quadratic")
class QuadraticCalibrator(GaussianCalibrator):
    """Monotone quadratic scaling on the logit (naive log loss; no ranking-specific options needed)."""
    default_candidate = True
    familiarity = 11
    glossary = (
        "p = \u03c3(a z\u00b2 + b z + c) of the logit z, kept monotone.",
        "CalArena (Berta et al. 2025); the Gaussian family of Kweon et al. 2022",
    )

    def __init__(self, input: str = DEFAULT_INPUT, ridge: float = 1e-2) -> None:
        super().__init__(input=input, ridge=ridge)
