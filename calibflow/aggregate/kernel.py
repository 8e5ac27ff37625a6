"""The pass's sums, compiled: every row's bucket, and its (w, w z, w q, w ll, w q^2) added into a flat
accumulator indexed by its key ``(segment code * n_buckets + bucket) * 2 + label``.

Why not DuckDB's GROUP BY: on the 2-core development machine its hash aggregate over ~250k groups costs
~200-350 ns a row (each aggregate is a scattered update of a hash-table entry), 9-10x a plain read of
the same columns. The keys here are small dense integers, so a flat array indexed by the key does the
same sums in a few ns a row. DuckDB still does all the per-row work (reading, projection, filters, the
segment codes, and each row's logit, probability and log loss, in vectorised SQL shared with the
GROUP BY reference: ``table._row_sql``); only the bucket and the summing happen here.
"""

from __future__ import annotations

import math

import numba
import numpy as np

SUMS = ("n", "sum_z", "sum_q", "sum_ll", "sum_q2")


@numba.njit(nogil=True, cache=True)
def accumulate(code, label, w, z, q, ll, z_max, n_buckets, acc, bad):
    """Add one batch into ``acc`` (keys x 5) at ``key = (code * n_buckets + bucket) * 2 + label``, the
    bucket the logit cell of ``z`` (as ``table._bucket_sql``, operation for operation). A label of -1
    (outside {0, 1}) or -2 (an invalid score) is counted in ``bad[0]`` / ``bad[1]`` and not added.

    One thread, without the GIL: the caller sums batch i while DuckDB produces batch i + 1 (a parallel
    loop over a ~1e5-row batch cost more in thread wake-ups than it saved, measured).
    """
    per_z = n_buckets / (2.0 * z_max)
    for i in range(code.size):
        y = label[i]
        if y < 0:
            bad[-1 - y] += 1
            continue
        b = int(math.floor((min(max(z[i], -z_max), z_max) + z_max) * per_z))
        k = (code[i] * n_buckets + min(max(b, 0), n_buckets - 1)) * 2 + y
        wi = w[i]
        qi = q[i]
        acc[k, 0] += wi
        acc[k, 1] += wi * z[i]
        acc[k, 2] += wi * qi
        acc[k, 3] += wi * ll[i]
        acc[k, 4] += wi * qi * qi


def new_accumulator(keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Zeroed sums (keys x 5) and invalid-row counts (2)."""
    return np.zeros((keys, len(SUMS))), np.zeros(2, np.int64)
