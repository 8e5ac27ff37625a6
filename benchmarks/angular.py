"""Benchmark: the whole angular-calibration procedure at the paper's size (n=1000, d=2000).

Times ``make("angular", ...).fit_linear(...)`` (Newton fit, eq. 11, sign, theta, quadrature set-up)
plus ``predict`` on 20000 test logits, against two references measured in the same run:

- the target: 10 s on 2 cores;
- the peer: the reference implementation of ``shared/notes/angle-estimator.md`` Sec. 8 (primal d x d
  Newton with a dense Hessian, eq. 11 with d x d Cholesky, 64-node Gauss-Hermite), copied below.

Run: ``python -m benchmarks.angular [--repeats 3] [--threads 1]``. Data generation is not timed.
Default is one BLAS thread: on the shared 2-core machine, OpenBLAS with 2 threads is 10-20x slower for
Cholesky factorisations than with one (its threads spin while other processes hold the cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def _reference(X, y, Xh, yh, Xt, Sigma, lam, link):
    """The note's 48-line reference (Sec. 8), verbatim in substance."""
    import numpy as np
    from scipy.linalg import cho_factor, cho_solve, solve_triangular
    from scipy.special import expit

    n, d = X.shape
    w = np.zeros(d)
    for _ in range(60):
        p = expit(X @ w)
        grad = X.T @ (p - y) / n + lam / d * w
        if np.abs(grad).max() < 1e-13:
            break
        hess = X.T @ ((p * (1 - p))[:, None] * X) / n + lam / d * np.eye(d)
        w -= cho_solve(cho_factor(hess), grad)
    u = X @ w
    p = expit(u)
    psi, Dg = y - p, p * (1 - p)
    L = np.linalg.cholesky(X.T @ (Dg[:, None] * X) + n * lam / d * np.eye(d))
    lev = (solve_triangular(L, X.T, lower=True) ** 2).sum(0)
    V, df = Dg.sum() - (Dg**2 * lev).sum(), (Dg * lev).sum()
    v, gam, r2 = V / n, df / V, psi @ psi / n
    res = u - gam * psi
    z = solve_triangular(np.linalg.cholesky(Sigma), X.T @ psi, lower=True)
    num = (v * (res @ res) / n + psi @ u / n - gam * r2) ** 2
    den = (z @ z) / n**2 + 2 * v * (psi @ u) / n + v**2 * (res @ res) / n - d / n * r2
    a2 = num / den
    sgn = np.sign(np.sum((Xh @ w) * yh))
    nw = np.sqrt(w @ Sigma @ w)
    c = float(np.clip(sgn * np.sqrt(max(a2, 0.0)) / nw, -1, 1))
    t, wt = np.polynomial.hermite_e.hermegauss(64)
    s = Xt @ w / nw
    return link(c * s[:, None] + np.sqrt(1 - c * c) * t[None, :]) @ (wt / np.sqrt(2 * np.pi)), a2


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--d", type=int, default=2000)
    args = ap.parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)  # before numpy loads BLAS
    import numpy as np
    from scipy.linalg import cholesky, toeplitz
    from scipy.special import expit

    from calibflow.calibrators import make

    n, d, lam = args.n, args.d, 0.5
    rng = np.random.default_rng(0)
    Sigma = toeplitz(0.5 ** np.arange(d)) / d
    L = cholesky(Sigma, lower=True)
    ws = rng.standard_normal(d)
    ws /= np.linalg.norm(L.T @ ws)

    def link(t):
        return expit(3 * t + 1)

    def draw(m):
        X = rng.standard_normal((m, d)) @ L.T
        return X, (rng.random(m) < link(X @ ws)).astype(float)

    X, y = draw(n)
    Xh, yh = draw(100)
    Xt, _ = draw(20000)

    def ours():
        cal = make("angular", lam=lam, link="logistic", link_scale=3.0, link_shift=1.0)
        cal.fit_linear(X, y, Xh, yh, Sigma)
        return cal.predict(Xt @ cal.w_), cal.inner_product_sq_

    times: dict[str, list[float]] = {"calibflow angular": [], "note reference (peer)": []}
    results = {}
    for _ in range(args.repeats):
        for name, fn in (
            ("calibflow angular", ours),
            ("note reference (peer)", lambda: _reference(X, y, Xh, yh, Xt, Sigma, lam, link)),
        ):
            t0 = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - t0)
    (p_ours, a2_ours), (p_ref, a2_ref) = results["calibflow angular"], results["note reference (peer)"]
    target = 10.0
    print(
        f"angular calibration, n={n}, d={d}, {args.threads} BLAS threads, {args.repeats} repeats "
        f"(median / min seconds)"
    )
    print(f"{'implementation':<26}{'median s':>10}{'min s':>10}{'target s':>10}{'ratio to target':>17}")
    ref_med = statistics.median(times["note reference (peer)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<26}{med:>10.2f}{min(ts):>10.2f}{target:>10.1f}{med / target:>17.2f}")
    print(f"speed-up over the peer: {ref_med / statistics.median(times['calibflow angular']):.2f}x")
    print(
        f"agreement: |a2 ours - a2 peer| = {abs(a2_ours - a2_ref):.2e}, max |p ours - p peer| = "
        f"{np.max(np.abs(p_ours - p_ref)):.2e} (peer uses 64 GH nodes)"
    )


if __name__ == "__main__":
    main()
