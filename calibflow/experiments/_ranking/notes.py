"""Prose of the reproduction: the choices where the paper is open, and notes computed from the run."""

from __future__ import annotations

import numpy as np

from calibflow import calibrators as C
from calibflow.calibrators.ranking import popularity_propensity
from calibflow.experiments._ranking.data import Ratings
from calibflow.experiments._ranking.protocol import METHODS, _rated

CHOICES = [
    "Calibration set (split: released, default): the authors' released protocol (data/yahooR3.ipynb cell 6, "
    "Utils/utils.py caldset): per user with > 4 positives the last 10% of positives (item order) held out, "
    "plus num_neg negatives per positive sampled uniformly from the user's non-positive items. "
    "split: stratified keeps our earlier reading (10% of all pairs, stratified by Y).",
    "num_neg = 57 on Coat is this project's choice: the release hard-codes 57 in its Yahoo!R3 pipeline "
    "(the only data set it ships code for) and gives no value for Coat; the num_neg sweep shows how much "
    "the Coat ECEs depend on it.",
    "held_out: last (default) keeps the release's fixed split (same held-out positives for every seed); "
    "held_out: random draws them per seed, with XGBoost row/column subsampling, so that a seed meta-run "
    "varies the split and the ranker too, not only the sampled negatives.",
    "UERM weights (uerm_weights): released = 1/omega on positives and 1 on negatives "
    "(Utils/cal_method.py lines 59-63, default); eq17 = eq. (17) as printed, Y/w and 1 - Y/w.",
    "Base rankers are ours: XGBoost rank:pairwise (user + item features, ids, user activity and item "
    "popularity counts of the training part; one query per user) "
    "and BPR-MF in numpy (SGD, one sampled negative per positive). The paper's "
    "BPR/NCF/CML/UBPR/LGCN PyTorch models are not rebuilt.",
    "Popularity propensity omega = (count/max)^0.5 from the training part only (held-out positives "
    "removed; main.py lines 43-44, 52), clipped at 0.1 (cal_method.py line 56). "
    "Coat's shipped learned propensities are clipped at supplied_floor = 0.01 when used (our choice).",
    "Gamma shift: x = s - s_min + 0.01 (s_max - s_min) on the calibration scores, so log is finite at "
    "s_min. Gaussian/Gamma curves continue linearly outside the calibration range to stay monotone on R.",
    "Monotonicity constraints 2as+b >= 1e-6 and a/s+b >= 1e-6 at s_min and s_max, in the solver's "
    "unit-scaled coordinates (the paper's strict > 0).",
    "UERM for Platt and Beta via fit_uerm: each pair enters the two-weight fit once, with the weights "
    "that uerm_weights selects. Beta, BBQ and histogram binning get the sigmoid of the "
    "raw score (their expects=probability); the paper rescales for Beta and BBQ (App. E).",
    "Histogram binning with 15 equal-width bins (App. E, Coat). BBQ is the registered Bayesian binning "
    "(Naeini et al.), not the paper's fixed (10, 20, 50, 100)-bin average.",
    "ECE and MCE with 15 equal-width bins; reliability diagrams with 10 bins (as Fig. 1).",
    "UERM fits that diverge (solver failure or |logit| > 30) are refitted with a ridge of 0.01 on the "
    "unit-scaled coefficients; the paper does not meet the case.",
]


def notes_for(runs, cfg, data) -> list[str]:
    """Notes computed from the run: where and why our numbers differ from the paper's."""
    test_rate = float(np.mean([r["test_r"].mean() for r in runs]))
    y_rate = float((data.train >= 4).mean())
    pop, sup = _ips_rate(data, "popularity"), _ips_rate(data, "supplied")
    notes = (
        []
        if cfg["split"] == "released"
        else [
            f"{data.name}: interactions Y (rating >= 4) cover {y_rate:.4f} of all training pairs, while the "
            f"preference rate on the random test ratings is {test_rate:.4f}. The naive loss calibrates to "
            f"P(Y=1|s), about {test_rate / y_rate:.0f} times too low for the preference probability the test "
            "measures, so every naive fit under-predicts and its ECE is dominated by that level shift.",
        ]
    )
    notes += [
        "ECE >= |mean y - mean p| on the test set, and a naive fit matches its mean prediction to the "
        "calibration set's positive share, so the calibration split sets the ECE level: "
        + _share_note(runs, cfg, test_rate)
        + f" (For reference, mean(Y/w) over all training pairs is {pop:.4f} with popularity propensities"
        + (f" and {sup:.4f} with the dataset's learned P(rated)" if np.isfinite(sup) else "")
        + ".)",
        "The paper's MinMax row is identical in Tables 1, 4 and 5 (ECE = MCE = NLL for all ten columns), "
        "which looks like a typesetting error; we print it as published.",
    ]
    if _rated(cfg):
        naive = [
            r["models"][m]["rated"][(n, "naive")]
            for r in runs
            for m in cfg["base_models"]
            for n in ("platt", "gaussian", "gamma")
        ]
        uerm = [
            r["models"][m]["rated"][(n, "uerm")]
            for r in runs
            for m in cfg["base_models"]
            for n in ("platt", "gaussian", "gamma")
        ]
        notes.append(
            "Sensitivity (rated pairs as the calibration set): naive fits reach ECE "
            f"{min(naive):.3f}-{max(naive):.3f}, the paper's order of magnitude, but UERM with popularity "
            f"propensities then over-shoots to {min(uerm):.3f}-{max(uerm):.3f}. Neither reading of the "
            "protocol reproduces both of the paper's rows; the implicit-feedback reading (main tables) is "
            "the one the text describes."
        )
    fits = [
        c
        for r in runs
        for res in r["models"].values()
        for c in [*res["fitted"].values(), *res["fitted_prop"].values()]
        if hasattr(c, "regularised_")
    ]
    notes.append(
        f"Gaussian/Gamma fits that needed the ridge fallback (unbounded UERM risk): "
        f"{sum(c.regularised_ for c in fits)} of {len(fits)}."
    )
    missing = sorted({n for _, n, _ in METHODS if n not in C.available()})
    if missing:
        notes.append(f"Not registered in this build, left out of the tables: {', '.join(missing)}.")
    return notes


def _protocol(cfg: dict) -> str:
    if cfg["split"] == "released":
        return f"released split, num_neg = {cfg['num_neg']}"
    return f"stratified {cfg['cal_fraction']:.0%} of all pairs"


def _share_note(runs, cfg, test_rate: float) -> str:
    ys = [r["models"][m]["scores"]["ycal"].mean() for r in runs for m in cfg["base_models"]]
    return (
        f"here ({_protocol(cfg)}) the calibration positive share is {float(np.mean(ys)):.4f} against a test "
        f"preference rate of {test_rate:.4f}. The num_neg sweep table shows which ratio reproduces which row."
    )


def _ips_rate(data: Ratings, kind: str, supplied_floor: float = 0.01) -> float:
    """mean(Y / w) over all training pairs: the IPS estimate of the overall preference rate."""
    Y = (data.train >= 4).astype(float)
    if kind == "popularity":
        return float((Y / popularity_propensity(Y)[None, :]).mean())
    if data.propensities is None:
        return float("nan")
    return float((Y / np.maximum(data.propensities, supplied_floor)).mean())
