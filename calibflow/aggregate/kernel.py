"""The pass's sums, compiled: every row's (w, w z, w q, w ll, w q^2) added into a flat accumulator
indexed by its key ``(segment code * n_buckets + bucket) * 2 + label``.

Why not DuckDB's GROUP BY: on the 2-core development machine its hash aggregate over ~250k groups costs
~200-350 ns a row (each aggregate is a scattered update of a hash-table entry), 9-10x a plain read of
the same columns. The keys here are small dense integers, so a flat array indexed by the key does the
same sums in a few ns a row. DuckDB still does all the per-row work (reading, projection, filters, the
segment codes, and each row's bucket, logit, probability and log loss, in vectorised SQL shared with
the GROUP BY reference: ``table._row_sql``); only the summing happens here.
"""

from __future__ import annotations

import numba
import numpy as np

SUMS = ("n", "sum_z", "sum_q", "sum_ll", "sum_q2")


@numba.njit(parallel=True, cache=True)
def accumulate(key, w, z, q, ll, acc, bad):
    """Add one batch into ``acc`` (threads x keys x 5). Negative keys mark invalid rows: ``bad[t, 0]``
    counts key -1 (a label outside {0, 1}), ``bad[t, 1]`` key -2 (an invalid score); they are not added.
    """
    n = key.size
    threads = acc.shape[0]
    step = (n + threads - 1) // threads
    for t in numba.prange(threads):
        for i in range(t * step, min(n, (t + 1) * step)):
            k = key[i]
            if k < 0:
                bad[t, -1 - k] += 1
                continue
            wi = w[i]
            qi = q[i]
            acc[t, k, 0] += wi
            acc[t, k, 1] += wi * z[i]
            acc[t, k, 2] += wi * qi
            acc[t, k, 3] += wi * ll[i]
            acc[t, k, 4] += wi * qi * qi


def new_accumulator(keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Zeroed per-thread sums (threads x keys x 5) and invalid-row counts (threads x 2)."""
    threads = numba.get_num_threads()
    return np.zeros((threads, keys, len(SUMS))), np.zeros((threads, 2), np.int64)
