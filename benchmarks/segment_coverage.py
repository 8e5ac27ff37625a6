"""Coverage of the per-segment ``sum p / sum y`` interval (issue 36), on data right by construction.

Per cell (base rate x rows in the segment) the probabilities ``p`` are fixed, spread around the base rate
(20 quantiles of a Beta with that mean and concentration 20, so rows differ as a model's scores do),
and the labels are drawn from them ``reps`` times: ``sum y`` is a sum of binomials over the distinct
probabilities, exact and cheap even at 1e6 rows. The interval (``calibflow.intervals.ratio_interval``,
what the row path, the table path and the streamed pass all call) should cover the true ratio 1.
A second block reweights the rows (weights 1..5, effective counts) and a third checks the evidence rule
of the flags: the false-alarm rate among the segments tested (``positives >= MIN_POSITIVES``).

    python -m benchmarks.segment_coverage [--reps 4000] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from scipy import stats

from calibflow.intervals import ratio_interval
from calibflow.segments import MIN_POSITIVES

RATES = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5)
SIZES = (1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
LEVEL = 0.95


def cell_probs(rate: float, size: int, k: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """``k`` distinct probabilities with mean ``rate`` and how many rows hold each (``size`` in all)."""
    q = stats.beta.ppf((np.arange(k) + 0.5) / k, rate * 20, (1 - rate) * 20)
    q = np.clip(q * rate / q.mean(), 1e-9, 1 - 1e-9)
    counts = np.bincount(np.arange(size) * k // size, minlength=k).astype(np.int64)  # spread evenly
    return q, counts


def cell(rate: float, size: int, reps: int, rng: np.random.Generator, weighted: bool = False) -> dict:
    q, counts = cell_probs(rate, size)
    w = np.ones_like(q)
    if weighted:  # each distinct probability's rows carry one weight 1..5
        w = 1.0 + np.arange(q.size) % 5
    y = rng.binomial(counts[None, :], q[None, :], size=(reps, q.size))
    pos = (y * w).sum(axis=1)
    e_sum = float((counts * w * q).sum())
    var = float((counts * w * w * q * (1 - q)).sum())
    lo, hi = ratio_interval(pos, e_sum, var, LEVEL)
    raw_pos = y.sum(axis=1)
    tested = raw_pos >= MIN_POSITIVES
    flag = (lo > 1.0) | (hi < 1.0)
    return {
        "rate": rate, "rows": size, "expected": float((counts * q).sum()),
        "coverage": float(np.mean((lo <= 1.0) & (hi >= 1.0))),
        "zero_width": int(np.sum(hi <= lo)),
        "tested": float(tested.mean()),
        "false_alarm_tested": float(flag[tested].mean()) if tested.any() else float("nan"),
        "flag_rate": float((flag & tested).mean()),
        "median_width": float(np.median(np.log(hi[np.isfinite(hi)] / lo[np.isfinite(hi)])))
        if np.isfinite(hi).any() else float("inf"),
    }


def study(reps: int, seed: int, weighted: bool = False) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [cell(r, n, reps, rng, weighted) for r in RATES for n in SIZES]


def table(rows: list[dict]) -> str:
    head = "| base rate | " + " | ".join(f"{n:,} rows" for n in SIZES) + " |"
    out = [head, "|" + "---|" * (len(SIZES) + 1)]
    for r in RATES:
        cells = [c for c in rows if c["rate"] == r]
        out.append(f"| {r:.1%} | " + " | ".join(
            f"{c['coverage']:.3f} ({c['expected']:,.3g})" for c in cells) + " |")
    return "\n".join(out)


def verdict(rows: list[dict]) -> list[str]:
    """The issue's targets: >= 93% where >= 5 positives are expected, no cell under 90%, no zero width."""
    bad = [c for c in rows if c["coverage"] < 0.90 or (c["expected"] >= 5 and c["coverage"] < 0.93)]
    zero = sum(c["zero_width"] for c in rows)
    lines = [f"cells: {len(rows)}; min coverage {min(c['coverage'] for c in rows):.3f}; "
             f"min where >= 5 expected {min(c['coverage'] for c in rows if c['expected'] >= 5):.3f}; "
             f"zero-width intervals {zero}"]
    lines += [f"FAIL {c['rate']:.1%} x {c['rows']:,}: coverage {c['coverage']:.3f}" for c in bad]
    return lines


def null_flags(seeds: int, n_seg: int = 300, rate: float = 0.005) -> dict:
    """The issue's null table, ``seeds`` times: 300 shops with Zipf sizes 1e5..10 rows, scores right per
    shop (each shop's offset is in its score), base rate 0.5%; Platt fitted on a second draw, then
    ``segment_check``. Flags and the stated chance count summed over the seeds, and per seed whether the
    flags fall inside the binomial 95% band of that seed's chance count."""
    from calibflow.calibrators import make
    from calibflow.segments import chance_flags, segment_check, tested_intervals

    def frame(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        sizes = np.round(1e5 * np.arange(1, n_seg + 1) ** (-np.log(1e4) / np.log(n_seg))).astype(int)
        shop = np.repeat(np.array([f"shop_{i}" for i in range(n_seg)], dtype=object), sizes)
        offset = np.repeat(rng.normal(0, 0.5, n_seg), sizes)
        z = np.log(rate / (1 - rate)) + offset + rng.normal(0, 0.8, shop.size)
        p = 1 / (1 + np.exp(-z))
        return p, (rng.random(shop.size) < p).astype(float), shop

    flags = stated = tested = inside = 0
    for s in range(seeds):
        pc, yc, _ = frame(1000 + s)
        p, y, shop = frame(s)
        q = make("platt", input="probability").fit(pc, yc).predict(p)
        rows = segment_check(y, p, q, {"shop": shop}, top=20)
        f, t = sum(r["flagged"] for r in rows), tested_intervals(rows)
        lo, hi = stats.binom.interval(0.95, t, 0.05)
        flags, stated, tested = flags + f, stated + chance_flags(rows, 0.95), tested + t
        inside += int(lo <= f <= hi)
    return {"seeds": seeds, "flags": flags, "stated": stated, "tested": tested, "inside_band": inside}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--null-seeds", type=int, default=20)
    a = ap.parse_args(argv)
    ok = True
    for weighted in (False, True):
        rows = study(a.reps, a.seed, weighted)
        print(f"\n{'weighted (1..5) rows' if weighted else 'unit rows'}: coverage of 95% intervals "
              f"(expected positives), {a.reps} draws per cell")
        print(table(rows))
        lines = verdict(rows)
        print("\n".join(lines))
        ok &= len(lines) == 1 and rows and all(c["zero_width"] == 0 for c in rows)
        if not weighted:
            print(f"\nflags per segment (tested: positives >= {MIN_POSITIVES}), the false-alarm rate, target"
                  " <= 5%; in brackets the share tested and the rate among the tested:")
            for r in RATES:
                cells = [c for c in rows if c["rate"] == r]
                print(f"| {r:.1%} | " + " | ".join(
                    f"{c['flag_rate']:.3f} ({c['tested']:.2f}, {c['false_alarm_tested']:.2f})" for c in cells)
                    + " |")
    if a.null_seeds:
        r = null_flags(a.null_seeds)
        lo, hi = stats.binom.interval(0.95, r["tested"], 0.05)
        print(f"\nnull table (300 shops, Zipf 1e5..10 rows, 0.5%), {r['seeds']} seeds: {r['flags']} flags "
              f"against {r['stated']:.1f} stated by chance ({r['tested']} tests; band of the total "
              f"[{lo:.0f}, {hi:.0f}]); inside each seed's band {r['inside_band']} of {r['seeds']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
