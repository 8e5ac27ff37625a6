"""Our calibrators beside CalArena's published tabular results (bank-marketing and adult, XGBoost).

    python -m benchmarks.calarena [--seeds 5] [--datasets bank_marketing adult]

CalArena (Berta, Holzmueller, Bach & Jordan, arXiv:2605.30188; results CSVs in github.com/probkit/CalArena at
commit a0afa15, ``results/tabrepo-binary/<method>.csv``, rows ``<dataset>,XGBoost``) calibrates TabRepo's
bagged XGBoost (8-fold out-of-fold predictions of the training part as the calibration set: 40,689 rows for
bank-marketing, 43,957 for adult; test fold 4,522 / 4,885 rows; one fold). We cannot reuse TabRepo's
predictions (a 1.7 GB download this machine cannot reach), so ours are the pipeline's own protocol: our
XGBoost (params.yaml's ``model``) on a seeded, stratified 60/20/20 train/calibration/test split, repeated
over ``--seeds`` splits. Absolute log losses therefore differ (different model, split and test set); the
comparable quantity is each method's *relative* change of test log loss against its own uncalibrated model
(CalArena's post-hoc improvement, PHI), and the ranking of the methods. Their Brier is the two-class sum
(twice the binary Brier); it is halved here. ECE: 15 equal-width bins on both sides.
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy.special import expit
from threadpoolctl import threadpool_limits

from calibflow import calibrators as C
from calibflow import datasets, models, splits
from calibflow import metrics as M

# (CalArena name, our name) and CalArena's (log loss, binary Brier, ECE-15) on XGBoost, commit a0afa15.
METHODS = (
    ("Base-model", "uncalibrated"),
    ("Platt-logits", "platt"),
    ("TS", "temperature"),
    ("Beta", "beta"),
    ("Quadratic", "quadratic"),
    ("Spline", "spline"),
    ("Isotonic", "isotonic"),
    ("CIR", "centered_isotonic"),
    ("Venn-Abers", "venn_abers"),
    ("BBQ", "bbq"),
    ("Hist-uniform", "histogram"),
    ("Scaling-Binning", "scaling_binning"),
)
CALARENA = {
    "bank_marketing": {
        "Base-model": (0.19179, 0.06031, 0.0160), "Platt-logits": (0.19141, 0.06010, 0.0156),
        "TS": (0.19175, 0.06026, 0.0162), "Beta": (0.18995, 0.05958, 0.0077),
        "Quadratic": (0.19008, 0.05963, 0.0076), "Spline": (0.19022, 0.05963, 0.0086),
        "Isotonic": (0.19031, 0.05968, 0.0083), "CIR": (0.18983, 0.05952, 0.0083),
        "Venn-Abers": (0.19024, 0.05966, 0.0081), "BBQ": (0.19293, 0.05968, 0.0081),
        "Hist-uniform": (0.20121, 0.06011, 0.0061), "Scaling-Binning": (0.19445, 0.06120, 0.0090),
    },
    "adult": {
        "Base-model": (0.26812, 0.08510, 0.0109), "Platt-logits": (0.26798, 0.08507, 0.0116),
        "TS": (0.26808, 0.08510, 0.0116), "Beta": (0.26798, 0.08507, 0.0117),
        "Quadratic": (0.26799, 0.08507, 0.0121), "Spline": (0.26771, 0.08509, 0.0133),
        "Isotonic": (0.28385, 0.08510, 0.0130), "CIR": (0.28366, 0.08504, 0.0110),
        "Venn-Abers": (0.26749, 0.08506, 0.0130), "BBQ": (0.26894, 0.08507, 0.0099),
        "Hist-uniform": (0.28025, 0.08623, 0.0078), "Scaling-Binning": (0.27726, 0.08732, 0.0064),
    },
}
MODEL = {"n_estimators": 200, "max_depth": 6, "learning_rate": 0.1, "subsample": 0.8,
         "colsample_bytree": 0.8, "min_child_weight": 1, "tree_method": "hist", "n_jobs": 2}


def run_seed(name: str, seed: int) -> dict[str, tuple[float, float, float]]:
    task = datasets.binary_task(name)
    idx = splits.split_indices(len(task.y), {"train": 0.6, "calib": 0.2, "test": 0.2}, seed=seed,
                               stratify=task.y)
    booster = models.train_classifier(task.X[idx["train"]], task.y[idx["train"]], MODEL, seed=seed)
    z_cal, z_test = (models.predict_margin(booster, task.X[idx[k]]) for k in ("calib", "test"))
    y_cal, y_test = task.y[idx["calib"]], task.y[idx["test"]]
    out = {}
    for _, ours in METHODS:
        if ours == "uncalibrated":
            p = expit(z_test)
        else:
            p = C.make(ours, input="logit").fit(z_cal, y_cal).predict(z_test)
        out[ours] = (M.log_loss(y_test, p), M.brier(y_test, p), M.ece(y_test, p))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--datasets", nargs="+", default=["bank_marketing", "adult"])
    args = ap.parse_args(argv)
    with threadpool_limits(limits=1, user_api="blas"):
        for name in args.datasets:
            runs = [run_seed(name, 20261122 + s) for s in range(args.seeds)]
            print(f"\n{name}: ours over {args.seeds} seeded splits (mean, +- s.e.), CalArena one fold")
            print("| method | ours: log loss | ours: change vs uncalibrated | CalArena: log loss | "
                  "CalArena: change | ours: ECE-15 | CalArena: ECE-15 | ours: Brier | CalArena: Brier |")
            print("|---|---|---|---|---|---|---|---|---|")
            base = np.array([r["uncalibrated"][0] for r in runs])
            their_base = CALARENA[name]["Base-model"][0]
            for theirs_name, ours in METHODS:
                ll = np.array([r[ours][0] for r in runs])
                rel = 100 * (ll / base - 1)
                se = rel.std(ddof=1) / np.sqrt(rel.size) if rel.size > 1 else float("nan")
                ece = np.mean([r[ours][2] for r in runs])
                brier = np.mean([r[ours][1] for r in runs])
                t_ll, t_brier, t_ece = CALARENA[name][theirs_name]
                print(f"| {ours} ({theirs_name}) | {ll.mean():.5f} | {rel.mean():+.2f}% +- {se:.2f} | "
                      f"{t_ll:.5f} | {100 * (t_ll / their_base - 1):+.2f}% | {ece:.4f} | {t_ece:.4f} | "
                      f"{brier:.5f} | {t_brier:.5f} |", flush=True)


if __name__ == "__main__":
    main()
