"""Fit a decision method on the hold-out set and score its test selection so it cannot fool itself.

Shared by the real-data and the generative-model parts of ``calibflow.experiments.decision``.

Every method returns a boolean test selection. ``outcome`` measures it four ways:

- raw test recall and test precision (side by side; recall alone rewards slipping below the bound);
- **headline: true positives at equal selection size** against the top-n test rows by score, where n is
  the method's own test selection size: ``gain = TP(method) / TP(top-n by score) - 1``. A 2-D boundary
  can only win here by choosing *better* rows than the score ranking does, never by choosing more;
- recall zeroed where the test precision is below the bound (appendix);
- ST's best test recall at the method's own test precision (ST tuned on the test set, which favours ST;
  appendix).

Methods (``METHODS``): ST, GMT, MIST and VW-DPMT on the shared-score grid (K uncertainty quantiles x L
global score quantiles, so ST is a feasible boundary of the 2-D ones), EW-DPMT on the same grid (with
ST's candidates, never below ST on the hold-out) and on the paper's equi-weight grid, MIST on samples
(isotonic regression per uncertainty level on the hold-out samples, then one global cut, as the paper
ran it) and HR (our interpretation; appendix only).
"""

from __future__ import annotations

import numpy as np

from calibflow import decision as D

LABEL = {
    "st": "ST",
    "gmt": "GMT",
    "mist": "MIST (grid)",
    "mist_samples": "MIST (samples)",
    "ew_dpmt": "EW-DPMT",
    "ew_dpmt_eqw": "EW-DPMT (equi-weight grid)",
    "vw_dpmt": "VW-DPMT",
    "hr": "HR (our interpretation)",
}
METHODS = tuple(LABEL)
RANDOM = "random (control)"  # the uncertainty source that is uniform noise
GRID_KIND = {"ew_dpmt_eqw": "equi_weight", "hr": "equi_weight"}
ALGO = {"ew_dpmt_eqw": "ew_dpmt"}


def select(method: str, hold, test_su, precision: float, k: int, ell: int, cache: dict):
    """Fit ``method`` on ``hold = (s, u, y)``; return (hold TP, hold selected, test selection mask).

    ``cache`` holds the fitted binning and hold-out grid per grid kind for one (hold, test) pair.
    """
    sh, uh, yh = hold
    st_, ut = test_su
    if method == "mist_samples":
        from calibflow.calibrators.mist import MistCalibrator

        cal = MistCalibrator(n_levels=k).fit(sh, yh, uncertainty=uh)
        ph = cal.predict(sh, uncertainty=uh)
        cut = D.sample_threshold(ph, yh, precision)
        sel_h = ph >= cut
        return float(yh[sel_h].sum()), float(sel_h.sum()), cal.predict(st_, uncertainty=ut) >= cut
    kind = GRID_KIND.get(method, "shared_score")
    if kind not in cache:
        b = D.Binning.fit(uh, sh, k, ell, kind)
        cache[kind] = (b, b.grid(uh, sh, yh), b.assign(ut, st_))
    b, grid, test_bins = cache[kind]
    bd = D.ALGORITHMS[ALGO.get(method, method)](*grid, precision)
    return bd.true_positives, bd.predicted_positives, bd.predict(*test_bins)


class TestSet:
    """The test set's score ranking, computed once and shared by every method evaluated on it."""

    def __init__(self, s, y) -> None:
        self.y = np.asarray(y, dtype=np.float64)
        order = np.argsort(-np.asarray(s), kind="mergesort")
        self.cum_tp = np.r_[0.0, np.cumsum(self.y[order])]
        vs = np.asarray(s)[order]
        last = np.r_[vs[1:] != vs[:-1], True]
        self.grp_tp = self.cum_tp[1:][last]  # ST's candidates on the test set (tie groups together)
        self.grp_pp = np.arange(1, vs.size + 1, dtype=np.float64)[last]
        self.pos = float(self.y.sum())

    def st_recall_at(self, precision: float) -> float:
        """Best recall of a score threshold on this test set with test precision >= ``precision``."""
        ok = self.grp_tp >= precision * self.grp_pp - 1e-9
        return float(self.grp_tp[ok].max() / self.pos) if ok.any() else 0.0


def outcome(mask, ts: TestSet, precision: float) -> dict[str, float]:
    """Test recall, precision, equal-size gain vs the score's top-n and the appendix variants."""
    n = int(mask.sum())
    tp = float(ts.y[mask].sum())
    prec = tp / n if n else float("nan")
    top = ts.cum_tp[n]
    rec = tp / ts.pos
    return {
        "recall": rec,
        "precision": prec,
        "n": float(n),
        "gain": tp / top - 1.0 if top > 0 else float("nan"),
        "recall_zeroed": rec if n and prec >= precision else 0.0,
        "st_matched": ts.st_recall_at(prec) if n else 0.0,
    }
