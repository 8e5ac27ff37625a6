"""The segmented challenge's pass (``aggregate.segment_compare``) on a seeded sample against all test rows.

    python -m benchmarks.segment_compare_sample --rows 10000000 --compare-rows 500000

Data (written under /tmp, deleted afterwards): ``--rows`` rows, margin ~ N(-1.5, 1), labels from
sigmoid(margin), scores miscalibrated by a 1.2 slope, a 200-value ``country``, a 50/50 random split. The
global Platt map and ``partial_pooling`` are fitted on the first 200,000 rows. The full pass and the
sampled pass (``scale.compare_rows`` = ``--compare-rows``) alternate ``--repeats`` times in one process
after a warm-up (numba, page cache), so their ratio compares like with like on a loaded machine. Prints the
CPU (all threads of this process) and wall seconds of each, their ratio and both paired intervals.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from calibflow import selection
from calibflow.aggregate import segment_compare as sc
from calibflow.calibrators import make


def _write(path: Path, n: int) -> tuple[object, object, int]:
    rng = np.random.default_rng(0)
    z = rng.normal(-1.5, 1.0, n)
    country = rng.integers(0, 200, n).astype(str).astype(object)
    y = (rng.random(n) < expit(z)).astype(np.int64)
    prob = expit(1.2 * z)
    split = np.where(rng.random(n) < 0.5, "calib", "test")
    pd.DataFrame({"y": y, "margin": logit(prob), "prob": prob, "s:country": country,
                  "split": split}).to_parquet(path, index=False)
    fit = slice(0, 200_000)
    glob = make("platt", input="logit").fit(logit(prob[fit]), y[fit])
    seg = make("partial_pooling", input="logit").fit(logit(prob[fit]), y[fit],
                                                     segments={"country": country[fit]})
    return glob, seg, int((split == "test").sum())


def _timed(path: Path, glob, seg, sample: sc.RowSample | None) -> tuple[sc.Comparison, float, float]:
    rows = sc.file_test_rows(str(path), "y", "margin", "prob", {"country": "s:country"}, "split = $split",
                             {"split": "test"}, sample)
    c0, t0 = time.process_time(), time.perf_counter()
    res = sc.compare(rows, glob, {"partial_pooling": seg}, ["country"], threads=2)
    return res, time.process_time() - c0, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e7)
    ap.add_argument("--compare-rows", type=int, default=500_000)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="segcmp_"))
    try:
        path = tmp / "rows.parquet"
        glob, seg, n_test = _write(path, int(a.rows))
        sample = sc.row_sample(a.compare_rows, n_test, 0)
        _timed(path, glob, seg, None)  # warm-up
        for _ in range(a.repeats):
            full, cf, wf = _timed(path, glob, seg, None)
            part, cs, ws = _timed(path, glob, seg, sample)
            print(f"full: {full.n} rows, CPU {cf:.2f} s, wall {wf:.2f} s | sample: {part.n} rows, "
                  f"CPU {cs:.2f} s, wall {ws:.2f} s | sample/full CPU {cs / cf:.3f}, wall {ws / wf:.3f}")
        for what, r in (("full", full), ("sample", part)):
            p = selection.paired_from_moments(*r.vs_global["partial_pooling"].astuple(), 0.95)
            print(f"{what}: partial_pooling - platt {p.delta:+.3e}, 95% CI [{p.low:+.3e}, {p.high:+.3e}]")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
