"""VAD's own cost beyond training the replicas: one pass over the validation set (target: < 1 s
for 1e7 rows).

    PYTHONPATH=. python -m benchmarks.vad [--rows 10000000] [--replicas 2] [--repeats 5]

Times ``estimate_lambda`` (validation, logit, means, the S x S covariance, lambda), ``VADCalibrator.fit``
and ``predict`` on ``rows`` probabilities, and, as the peer, a direct numpy transcription of
Algorithm 1 lines 5-7 (per-row deviations around the replica mean, no covariance trick). Reports the
median and best of ``repeats`` runs and the ratio to the 1 s target.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.special import expit, logit

from calibflow.calibrators import make
from calibflow.calibrators.vad import estimate_lambda

TARGET_S = 1.0


def naive_lambda(R: np.ndarray) -> float:
    """Algorithm 1 lines 5-7 as printed (exchangeable replicas), written row by row in numpy."""
    L = logit(np.clip(R, 1e-12, 1 - 1e-12))
    D = L - L.mean(axis=1, keepdims=True)
    sigma_f2 = np.mean(np.sum((D - D.mean(axis=0)) ** 2, axis=0) / (R.shape[0] - 1))
    return 1.0 - sigma_f2 / D[0].var()


def _time(fn, repeats: int) -> tuple[float, float]:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)), float(np.min(ts))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    z = rng.normal(-1.0, 1.0, args.rows)
    R = expit(z + rng.normal(0.0, 0.3, (args.replicas, args.rows)))
    cal = make("vad", scheme="seeds").fit(R)
    assert abs(naive_lambda(R) - estimate_lambda(R, scheme="seeds")[0]) < 1e-9  # same quantity
    rows = [
        ("estimate_lambda (ours)", _time(lambda: estimate_lambda(R, scheme="seeds"), args.repeats)),
        ("VADCalibrator.fit (ours)", _time(lambda: make("vad", scheme="seeds").fit(R), args.repeats)),
        ("VADCalibrator.predict (ours)", _time(lambda: cal.predict(R[0]), args.repeats)),
        ("naive numpy Algorithm 1 (peer)", _time(lambda: naive_lambda(R), args.repeats)),
    ]
    print(
        f"VAD cost beyond the replicas: {args.rows:,} rows x {args.replicas} replicas, {args.repeats} repeats"
    )
    print(f"{'what':34s} {'median s':>9s} {'best s':>8s} {'target s':>9s} {'median/target':>14s}")
    for name, (med, best) in rows:
        print(f"{name:34s} {med:9.3f} {best:8.3f} {TARGET_S:9.1f} {med / TARGET_S:14.2f}")
    ours, peer = rows[0][1][0], rows[3][1][0]
    print(f"estimate_lambda / naive peer: {ours / peer:.2f}")


if __name__ == "__main__":
    main()
