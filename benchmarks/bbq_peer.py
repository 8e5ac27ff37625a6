"""calibflow's ``bbq`` against probcal's ``BBQCalibrator`` (its defaults) on held-out log loss (issue 36).

Per run: a base model (XGBoost, 100 trees, depth 4) on half of a real table, both BBQs fitted on a quarter,
log loss on the last quarter; and generated scores (miscalibrated ``sigmoid(1.6 z - 0.4)`` of a true
logit) at 1e3, 1e4 and 1e5 calibration rows. Prints each run's two log losses, their difference, and how
many runs ours loses: the evidence for keeping ``bbq`` in the default candidates or not.

    python -m benchmarks.bbq_peer [--seeds 3]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from calibflow import metrics as M
from calibflow.calibrators import make

TABLES = ("adult", "bank_marketing", "hillstrom")
SIZES = (1_000, 10_000, 100_000)


def _pair(p_cal: np.ndarray, y_cal: np.ndarray, p_te: np.ndarray, y_te: np.ndarray) -> tuple[float, float]:
    from probcal import BBQCalibrator

    ours = make("bbq", input="probability").fit(p_cal, y_cal).predict(p_te)
    ref = BBQCalibrator().fit(p_cal, y_cal).predict_proba(p_te)
    return M.log_loss(y_te, ours), M.log_loss(y_te, ref)


def table_runs(seeds: int) -> list[tuple[str, float, float]]:
    from xgboost import XGBClassifier

    from calibflow.datasets import binary_task

    out = []
    for name in TABLES:
        task = binary_task(name)
        for seed in range(seeds):
            idx = np.random.default_rng(seed).permutation(task.y.size)
            n = idx.size
            tr, ca, te = idx[: n // 2], idx[n // 2 : 3 * n // 4], idx[3 * n // 4 :]
            model = XGBClassifier(n_estimators=100, max_depth=4, n_jobs=1, random_state=seed)
            model.fit(task.X[tr], task.y[tr])
            p = model.predict_proba(task.X)[:, 1]
            y = task.y.astype(np.float64)
            out.append((f"{name} seed {seed}", *_pair(p[ca], y[ca], p[te], y[te])))
    return out


def generated_runs(seeds: int) -> list[tuple[str, float, float]]:
    out = []
    for n in SIZES:
        for seed in range(seeds):
            rng = np.random.default_rng([seed, n])
            z = rng.normal(-1.5, 1.5, 2 * n)
            y = (rng.random(2 * n) < 1 / (1 + np.exp(-z))).astype(np.float64)
            p = 1 / (1 + np.exp(-(1.6 * z - 0.4)))
            out.append((f"generated {n:,} seed {seed}", *_pair(p[:n], y[:n], p[n:], y[n:])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args(argv)
    runs = table_runs(a.seeds) + generated_runs(a.seeds)
    print("| run | calibflow bbq | probcal BBQ | ours - probcal |\n|---|---|---|---|")
    for name, ours, ref in runs:
        print(f"| {name} | {ours:.5f} | {ref:.5f} | {ours - ref:+.2e} |")
    worse = sum(o > r + 1e-4 for _, o, r in runs)
    print(f"\nours worse by more than 1e-4 in {worse} of {len(runs)} runs; "
          f"largest gap {max(o - r for _, o, r in runs):+.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
