"""Fit time of Gaussian / Gamma calibration (naive and UERM) against peers measured in the same run.

Peers: our Platt (same shared fitter, 2 parameters, no constraints) and scikit-learn's
``LogisticRegression`` on the Gaussian features ``[s^2, s]`` (unconstrained, naive loss only; the closest
off-the-shelf equivalent, no monotonicity and no negative weights). Data: MNAR-style synthetic scores with
known propensities at the Coat calibration-set size (8,700 pairs) and at 100,000 pairs.

    python -m benchmarks.ranking [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.special import expit

from calibflow import calibrators as C
from calibflow.calibrators.ranking import fit_uerm


def _data(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, 1.5, n)
    r = (rng.random(n) < expit(1.2 * s - 2.5)).astype(float)
    w = rng.uniform(0.1, 1.0, n)
    return s, r * (rng.random(n) < w), w


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    from sklearn.linear_model import LogisticRegression

    print(f"{'n':>8} {'method':<22} {'ours [ms]':>10} {'peer':<26} {'peer [ms]':>10} {'ratio':>7}")
    for n in (8_700, 100_000):
        s, y, w = _data(n)
        sk = _best(
            lambda s=s, y=y: LogisticRegression(C=1e6, max_iter=1000).fit(np.column_stack([s * s, s]), y),
            args.repeats,
        )
        platt_naive = _best(lambda s=s, y=y: C.make("platt").fit(s, y), args.repeats)
        platt_uerm = _best(lambda s=s, y=y, w=w: fit_uerm(C.make("platt"), s, y, w), args.repeats)
        rows = []
        for name in ("gaussian", "gamma"):
            naive = _best(lambda name=name, s=s, y=y: C.make(name).fit(s, y), args.repeats)
            uerm = _best(
                lambda name=name, s=s, y=y, w=w: C.make(name, loss="uerm").fit(s, y, propensity=w),
                args.repeats,
            )
            rows += [
                (f"{name} naive", naive, "sklearn LogReg [s^2, s]", sk),
                (f"{name} naive", naive, "platt naive (ours)", platt_naive),
                (f"{name} uerm", uerm, "platt uerm (ours)", platt_uerm),
            ]
        for label, ours, peer, tp in rows:
            print(f"{n:>8} {label:<22} {1e3 * ours:>10.1f} {peer:<26} {1e3 * tp:>10.1f} {ours / tp:>7.2f}")


if __name__ == "__main__":
    main()
