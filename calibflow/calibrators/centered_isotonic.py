"""Centered isotonic regression (CIR): isotonic regression without ties.

Oron & Flournoy, "Centered Isotonic Regression: Point and Interval Estimation for Dose-Response Studies"
(Statistics in Biopharmaceutical Research, 2017), Sec. 2.2. Isotonic regression (PAV) returns a step
function whose flat blocks give tied probabilities to different scores: ties that change AUC and NDCG and
throw away the score's ranking inside each block (scikit-learn issue #16321 and its many duplicates). CIR
keeps PAV's block means but places each at its block's weighted score centroid and interpolates linearly
between consecutive centroids. Block means are strictly increasing, so the map is strictly increasing on the
range of the calibration scores: two different scores there never tie, and the ranking (hence AUC) of the
raw scores is kept exactly.

The first and last blocks are anchored at the smallest and largest calibration score rather than at their
centroids (a lowest block with mean 0, common at low base rates, would otherwise leave a flat stretch of
zeros); beyond the calibration range the map is flat, as any calibrator must be where it has seen no data.
With a single block (a constant fit) the map is constant.
"""

from __future__ import annotations

import numpy as np

from calibflow.calibrators.base import register
from calibflow.calibrators.isotonic import IsotonicCalibrator, pav, pool_ties


@register("centered_isotonic")
class CenteredIsotonicCalibrator(IsotonicCalibrator):
    """Strictly increasing piecewise-linear map through the PAV block centroids (CIR).

    Isotonic regression's state (``x_``, ``y_``) and prediction (linear interpolation, flat outside);
    only the points differ: block centroids instead of block ends.
    """
    default_candidate = True
    familiarity = 8
    glossary = (
        "Isotonic, with each step's value placed at its centre and joined by lines: no ties.",
        "Oron & Flournoy, Stat. Biopharm. Res. 2017",
    )

    def _fit(self, s, y, w) -> None:
        uniq, ws, wy = pool_ties(s, y, w)
        means, starts = pav(wy / ws, ws)
        # Weighted score centroid of each block: where CIR puts the block's mean.
        centroids = np.add.reduceat(ws * uniq, starts) / np.add.reduceat(ws, starts)
        # The end blocks are anchored at the data's extremes instead of their centroids, so the map also
        # rises across the end blocks (a first block with mean 0 would otherwise stay flat at 0 there).
        x = np.r_[uniq[0], centroids[1:-1], uniq[-1]] if centroids.size >= 2 else centroids
        self.x_, self.y_ = x, means
