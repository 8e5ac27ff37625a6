"""The identity calibrator: the scores, read as probabilities, unchanged.

It is what the select stage writes when its answer is "keep your scores" (calibflow.selection): a real
calibrator file, so ``calibflow apply``, the monitor and ``calibflow export`` treat that answer exactly like
any fitted map, instead of a special case that each of them would have to know about.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from calibflow.calibrators.base import DEFAULT_INPUT, BaseCalibrator, register


@register("identity")
class IdentityCalibrator(BaseCalibrator):
    """``p = score as a probability``: a probability as it is, a logit through the sigmoid.

    Nothing is fitted (``fit`` only checks its inputs); no parameters, monotone. With ``input="score"`` a
    raw score is read as a logit, as every calibrator that ``expects`` probabilities reads one.
    """
    familiarity = 0
    glossary = (
        "Your scores unchanged: the answer \u201ckeep your scores\u201d.",
        "\u2013",
    )

    expects = "probability"

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        pass

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        return s
