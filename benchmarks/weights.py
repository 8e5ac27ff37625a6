"""Fit time under extreme count weights, against the same fit with unit weights.

    python -m benchmarks weights [--rows 400] [--scale 1e9] [--repeat 3]

BBQ's model grid grew with the total weight: 400 rows of weight 1e9 took 139 s and 2 GB (1e10 never
finished). It is now bounded by the number of distinct scores (and ``MAX_MODELS``), so the weighted
fit should cost about what the unit-weight fit of the same rows costs. The shared logistic fitter
normalises weights, so platt at weights 1e-10 should cost what it costs at weight 1. Printed: the
time of each weighted fit, its peer (unit weights, same rows, same run) and the ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from calibflow import calibrators as C


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400)
    ap.add_argument("--scale", type=float, default=1e9)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    p = rng.random(args.rows)
    y = (rng.random(args.rows) < p).astype(float)
    ones = np.ones(args.rows)
    cases = [("bbq", args.scale), ("platt", 1e-10), ("beta", 1e-10), ("spline", 1e-10)]
    print(f"{'method':<8} {'weight':>8} {'weighted s':>11} {'unit s':>9} {'ratio':>6} models")
    for name, w in cases:

        def fit(weights, name=name):
            return C.make(name, input="probability").fit(p, y, sample_weight=weights)

        t_w = _best(lambda: fit(ones * w), args.repeat)  # noqa: B023 (called within the iteration)
        t_1 = _best(lambda: fit(ones), args.repeat)  # noqa: B023
        grid = getattr(fit(ones * w), "bins_grid_", None)
        models = "" if grid is None else f"{grid.size} (unit weights: {fit(ones).bins_grid_.size})"
        print(f"{name:<8} {w:>8.0e} {t_w:>11.4f} {t_1:>9.4f} {t_w / t_1:>6.2f} {models}")


if __name__ == "__main__":
    main()
