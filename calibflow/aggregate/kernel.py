"""The pass's sums, compiled: every row's bucket, and its (w, w z, w q, w ll, w q^2) added into a flat
accumulator indexed by its key ``(segment code * n_buckets + bucket) * 2 + label``.

Why not DuckDB's GROUP BY alone: its hash aggregate over ~300k groups updates a scattered hash-table
entry per aggregate per row; at 1e8 rows it took 14.7 s against this pass's 8.1 s (docs/benchmarks/
scale.md). The keys here are small dense integers, so a flat array indexed by the key does the same
sums at ~18 ns a row. DuckDB still does all the per-row work (reading, projection, filters, the
segment codes, the logarithms each row needs, in vectorised SQL); the cheap per-row arithmetic (the
logit from the logarithms, the log loss, the bucket, validation) and the summing happen here. The
GROUP BY reference (``table._row_sql``) computes the same expressions in SQL. The two-table pass
(``tables.run_parts``) takes even the logarithms out of SQL: DuckDB gives the raw label and score and the
segment columns' hashes, and :func:`row_logs` and :func:`hashed_codes` do the rest here.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from calibflow.aggregate.grid import SUMS  # noqa: E402,F401 (the accumulator's columns)


@numba.njit(nogil=True, cache=True, inline="always")
def _clipped_log_loss(q: float, y: float) -> float:
    qc = min(max(q, 1e-15), 1.0 - 1e-15)
    return -math.log(qc) if y == 1.0 else -math.log(1.0 - qc)


@numba.njit(nogil=True, cache=True, inline="always")
def _add(table, k, wi, wz, wq, wll, wq2):  # noqa: PLR0913
    """A row's five weighted sums into ``table[k]`` (count, z, q, log loss, q^2): both accumulators' step."""
    table[k, 0] += wi
    table[k, 1] += wz
    table[k, 2] += wq
    table[k, 3] += wll
    table[k, 4] += wq2


@numba.njit(nogil=True, cache=True, inline="always")
def _row(yi, si, ai, bi, logit_kind, z_max, per_z, n_buckets):  # noqa: PLR0913
    """One row's validation, logit, exact log loss and fine bucket, shared by both kernels.

    Returns (why, z, log loss, bucket): ``why`` is -1 for a valid row, else the index of ``bad`` to count
    it under (0: a label outside {0, 1}; 1: a NaN, infinite or out-of-[0, 1] score).
    """
    if yi != 0.0 and yi != 1.0:
        return 0, 0.0, 0.0, 0
    if logit_kind:
        if not math.isfinite(si):
            return 1, 0.0, 0.0, 0
        z = si
        ll = -ai if yi == 1.0 else -bi
    else:
        if not (0.0 <= si <= 1.0):  # NaN fails too
            return 1, 0.0, 0.0, 0
        z = ai - bi
        inside = 1e-12 <= si <= 1.0 - 1e-12  # neither clip acts: the logit's logs are the loss's
        ll = (-ai if yi == 1.0 else -bi) if inside else _clipped_log_loss(si, yi)
    bk = min(max(int(math.floor((min(max(z, -z_max), z_max) + z_max) * per_z)), 0), n_buckets - 1)
    return -1, z, ll, bk


@numba.njit(nogil=True, cache=True)
def accumulate(code, y, w, s, q, a, b, logit_kind, z_max, n_buckets, acc, bad):  # noqa: PLR0913
    """Add one batch into ``acc`` (keys x 5) at ``key = (code * n_buckets + bucket) * 2 + y``.

    Per row, from DuckDB: the segment code, label ``y`` and score ``s`` as doubles, the weight ``w`` (an
    empty array: unit weights), the probability ``q`` and two logarithms. Probability scores: ``a, b =
    ln(pc), ln(1 - pc)`` with ``pc`` clipped to [1e-12, 1 - 1e-12], so ``z = a - b`` and, where neither
    clip acts, the log loss is ``-a`` or ``-b``. Logit scores: ``z = s``, ``a, b = ln(qc), ln(1 - qc)``
    with the log-loss clip 1e-15. These are ``table._row_sql``'s expressions, operation for operation
    (the tests compare the two engines). Rows with a label outside {0, 1} (``bad[0]``) or a missing,
    non-finite or (probabilities) out-of-[0, 1] score (``bad[1]``) are counted and not added.

    One thread, without the GIL: the caller sums batch i while DuckDB produces batch i + 1 (a parallel
    loop over a ~1e5-row batch cost more in thread wake-ups than it saved, measured).
    """
    per_z = n_buckets / (2.0 * z_max)
    unit = w.size == 0
    for i in range(code.size):
        yi = y[i]
        why, z, ll, bk = _row(yi, s[i], a[i], b[i], logit_kind, z_max, per_z, n_buckets)
        if why >= 0:
            bad[why] += 1
            continue
        qi = q[i]
        k = (code[i] * n_buckets + bk) * 2 + int(yi)
        wi = 1.0 if unit else w[i]
        acc[k, 0] += wi
        acc[k, 1] += wi * z
        acc[k, 2] += wi * qi
        acc[k, 3] += wi * ll
        acc[k, 4] += wi * qi * qi


def new_accumulator(keys: int) -> tuple[np.ndarray, np.ndarray]:
    """Zeroed sums (keys x 5) and invalid-row counts (2)."""
    return np.zeros((keys, len(SUMS))), np.zeros(2, np.int64)


@numba.njit(nogil=True, cache=True)
def accumulate_tables(  # noqa: PLR0913
    codes, base, cells, y, w, s, q, a, b, logit_kind, z_max, n_buckets, lut, fine, seg, bad
):
    """One batch into the two tables of :mod:`calibflow.aggregate.tables`: the fine global grid
    ``fine[bucket * 2 + y]`` and, per segment column ``c``, the coarse table
    ``seg[base[c] + (codes[c, i] * cells[c] + lut[c, bucket]) * 2 + y]`` (``lut[c]``: fine bucket ->
    coarse cell of column ``c``, which has ``cells[c]`` cells per value). The per-row arithmetic and
    validation are :func:`accumulate`'s, line for line.

    Why two tables: a (segment x fine bucket) flat array is segments x 65,536 x 2 keys (36 MB of sums
    at 7 values, 1.7 GB at 200), so every row's add was a cache miss and the key space soon overflowed
    into DuckDB's GROUP BY; the fine grid has no segment (5 MB, cache-resident) and each segment gets
    only a few hundred cells.
    """
    per_z = n_buckets / (2.0 * z_max)
    unit = w.size == 0
    n_cols = codes.shape[0]
    for i in range(y.size):
        yi = y[i]
        why, z, ll, bk = _row(yi, s[i], a[i], b[i], logit_kind, z_max, per_z, n_buckets)
        if why >= 0:
            bad[why] += 1
            continue
        qi = q[i]
        wi = 1.0 if unit else w[i]
        li = int(yi)
        k = bk * 2 + li
        wz, wq, wll, wq2 = wi * z, wi * qi, wi * ll, wi * qi * qi
        _add(fine, k, wi, wz, wq, wll, wq2)
        for c in range(n_cols):
            ks = base[c] + (codes[c, i] * cells[c] + lut[c, bk]) * 2 + li
            _add(seg, ks, wi, wz, wq, wll, wq2)


@numba.njit(nogil=True, cache=True)
def accumulate_split_tables(  # noqa: PLR0913
    sp, n_tab, codes, base, cells, y, w, s, q, a, b, logit_kind, z_max, n_buckets, lut, fine, seg, bad
):
    """:func:`accumulate_tables` with the split as the outer key: row ``i`` of split code ``sp[i]`` goes
    into the tables of that split (``fine[(sp * n_buckets + bucket) * 2 + y]``, ``seg[sp * base[-1] +
    ...]``) when ``sp[i] < n_tab``; every split code >= 0 counts its rows and positives in
    ``bad[2 + 2 * sp]`` and ``bad[3 + 2 * sp]`` (unweighted: prepare's split counts), code -1 (a row after
    the test window) is skipped. So prepare makes one pass for all splits instead of one per split.
    """
    per_z = n_buckets / (2.0 * z_max)
    unit = w.size == 0
    n_cols = codes.shape[0]
    seg_keys = base[n_cols]
    for i in range(y.size):
        si_ = sp[i]
        if si_ < 0:
            continue
        yi = y[i]
        why, z, ll, bk = _row(yi, s[i], a[i], b[i], logit_kind, z_max, per_z, n_buckets)
        if why >= 0:
            bad[why] += 1
            continue
        li = int(yi)
        bad[2 + 2 * si_] += 1
        bad[3 + 2 * si_] += li
        if si_ >= n_tab:
            continue
        qi = q[i]
        wi = 1.0 if unit else w[i]
        k = (si_ * n_buckets + bk) * 2 + li
        wz, wq, wll, wq2 = wi * z, wi * qi, wi * ll, wi * qi * qi
        _add(fine, k, wi, wz, wq, wll, wq2)
        for c in range(n_cols):
            ks = si_ * seg_keys + base[c] + (codes[c, i] * cells[c] + lut[c, bk]) * 2 + li
            _add(seg, ks, wi, wz, wq, wll, wq2)


#: The clips of ``table._row_sql``: a probability score's before its logit, a logit score's sigmoid before
#: the log loss (``calibflow.metrics.log_loss``).
P_CLIP, Q_CLIP = 1e-12, 1e-15


def row_logs(s: np.ndarray, logit_kind: bool, q: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """Each row's probability ``q`` and the two logarithms ``table._row_sql`` computes in SQL: ``a, b =
    ln(pc), ln(1 - pc)`` with ``pc`` clipped to [1e-12, 1 - 1e-12] for probabilities (``q`` is then ``s``
    itself, not written), the sigmoid clipped to [1e-15, 1 - 1e-15] for logits. An invalid score gives
    NaN or a clipped value here and is rejected by :func:`accumulate_tables`'s validation.

    The logarithms are NumPy's vectorised ``log`` (SIMD: ~1 ns a value against libm's ~5 ns in a scalar
    loop, the pass's largest per-row cost after the scattered adds). It is not libm's, which DuckDB (the
    reference) calls: the two differ by one ulp in a fraction of a percent of the values (0.35% measured,
    AVX-512), so ``z = a - b`` by at most ``ulp(a) + ulp(b)`` and the log loss by one ulp, far inside the
    1e-12 relative agreement the tests require of every sum; a row moves to the neighbouring fine bucket
    only when its logit lies within that distance of the bucket's edge (tested). Everything that is not
    relatively exact to an ulp stays libm's, in numba: the sigmoid of a logit score (``1 - q`` near 1 would
    turn an ulp of ``q`` into a large error of ``ln(1 - q)``). Which SIMD path NumPy takes depends on the
    CPU, not on the data or the threads, so a machine always computes the same table.
    """
    if logit_kind:
        _sigmoid_clip(s, q, b)
    else:
        np.clip(s, P_CLIP, 1.0 - P_CLIP, out=b)
    np.log(b, out=a)
    np.subtract(1.0, b, out=b)
    np.log(b, out=b)


@numba.njit(nogil=True, cache=True)
def _sigmoid_clip(s, q, pc):
    """``q = 1 / (1 + exp(-s))`` (libm's ``exp``, as DuckDB's) and ``pc = q`` clipped to the log loss's
    [1e-15, 1 - 1e-15]."""
    for i in range(s.size):
        qi = 1.0 / (1.0 + math.exp(-s[i]))
        q[i] = qi
        pc[i] = min(max(qi, Q_CLIP), 1.0 - Q_CLIP)


@numba.njit(nogil=True, cache=True)
def dense_codes(v, lo, lookup, out) -> bool:
    """``out[i] = lookup[v[i] - lo]`` (an integer segment column's codes, one pass); False if a value is
    not a level's (the source changed between the levels' read and this one)."""
    for i in range(v.size):
        j = np.int64(v[i]) - lo
        if j < 0 or j >= lookup.size or lookup[j] < 0:
            return False
        out[i] = lookup[j]
    return True


def hash_slots(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An open-addressing table (linear probing, power-of-two size, at most half full) from each level's
    64-bit hash to its code: ``(keys, codes)``, ``codes == -1`` marking an empty slot."""
    size = 1 << max(int(2 * max(hashes.size, 1) - 1).bit_length(), 4)
    keys, codes = np.zeros(size, np.uint64), np.full(size, -1, np.int64)
    _fill_slots(hashes.astype(np.uint64), keys, codes)
    return keys, codes


@numba.njit(cache=True)
def _fill_slots(hashes, keys, codes):
    mask = keys.size - 1
    for c in range(hashes.size):
        j = int(hashes[c] & mask)
        while codes[j] >= 0:
            j = (j + 1) & mask
        keys[j] = hashes[c]
        codes[j] = c


@numba.njit(nogil=True, cache=True)
def hashed_codes(h, keys, codes, out) -> bool:
    """``out[i]`` = the code of the level whose hash is ``h[i]``; False if a hash is not a level's (the
    source changed between the levels' read and this one)."""
    mask = keys.size - 1
    for i in range(h.size):
        j = int(h[i] & mask)
        while True:
            c = codes[j]
            if c < 0:
                return False
            if keys[j] == h[i]:
                out[i] = c
                break
            j = (j + 1) & mask
    return True


@numba.njit(nogil=True, cache=True)
def compact_rows(acc, keys):
    """Move rows ``keys`` (increasing) of ``acc`` to its front, in place: ``acc[j] = acc[keys[j]]``."""
    for j in range(keys.size):
        k = keys[j]
        if k != j:
            for c in range(acc.shape[1]):
                acc[j, c] = acc[k, c]
