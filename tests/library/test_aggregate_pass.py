"""The two-table pass's raw-column kernel (logarithms in numba, string segments by DuckDB ``hash()``)
against DuckDB's GROUP BY reference, which computes every expression in SQL: equal keys and counts, sums
to 1e-12 relative; the hashed codes against Arrow's ``index_in`` on the values; invalid rows refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.table_reference import aggregate_duckdb

from calibflow.aggregate import tables as T
from calibflow.aggregate.tables import PassOptions, TableRows

SUMS = ("sum_z", "sum_q", "sum_ll", "sum_q2")


def _assert_same(a: pd.DataFrame, b: pd.DataFrame, keys: list[str]) -> None:
    a, b = a.reset_index(drop=True), b.reset_index(drop=True)
    assert len(a) == len(b) > 0
    pd.testing.assert_frame_equal(a[keys], b[keys], check_dtype=False)
    assert (a["n"].to_numpy() == b["n"].to_numpy()).all()
    for c in SUMS:
        np.testing.assert_allclose(a[c].to_numpy(), b[c].to_numpy(), rtol=1e-12, atol=1e-300)


@pytest.fixture(scope="module", params=["probability", "logit"])
def source(request, tmp_path_factory):
    """Scores with rows at the clips (0, 1, 1e-13, +-40 logits), a string segment with NULLs, weights."""
    rng = np.random.default_rng(7)
    n = 60_000
    z = rng.normal(-1, 2.5, n)
    z[:40] = np.repeat([-40.0, 40.0, -29.0, 0.0], 10)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.int8)
    score = z if request.param == "logit" else 1 / (1 + np.exp(-z))
    if request.param == "probability":
        score[40:50] = [0.0, 1.0, 1e-13, 1 - 1e-13, 0.5, 0.0, 1.0, 1e-13, 1 - 1e-13, 0.5]
    country = np.array(["de", "fr", None, "us", "é"], dtype=object)[rng.integers(0, 5, n)]
    path = tmp_path_factory.mktemp("pass") / "s.parquet"
    pq.write_table(pa.table({"score": score, "y": y, "country": country, "w": rng.integers(1, 4, n),
                             "seg7": rng.integers(0, 7, n).astype(np.int16)}), path, row_group_size=7_000)
    return str(path), request.param


def test_fine_table_equals_the_sql_group_by(source):
    path, kind = source
    rows = TableRows("score", "y", kind, ("country", "seg7"), "w")
    tabs = T.aggregate_files(path, rows, PassOptions(threads=2))
    ref = aggregate_duckdb(path, TableRows("score", "y", kind, weight="w"), engine="sql")
    _assert_same(tabs.fine, ref, ["bucket", "label"])


def test_segment_totals_equal_the_sql_group_by(source):
    """Each value's coarse cells summed (per label) are the reference's fine groups of that value summed:
    the string column through its hash, NULL a value of its own."""
    path, kind = source
    rows = TableRows("score", "y", kind, ("country",), "w")  # one value builds both sides
    tabs = T.aggregate_files(path, rows, PassOptions(threads=2))
    ref = aggregate_duckdb(path, rows, engine="sql")
    cols = ["n", *SUMS]
    got = tabs.segments["country"].groupby(["seg_0", "label"], dropna=False)[cols].sum().reset_index()
    want = ref.groupby(["seg_0", "label"], dropna=False)[cols].sum().reset_index()
    assert got["seg_0"].isna().any()
    _assert_same(got, want, ["seg_0", "label"])


def test_hashed_codes_equal_the_values_lookup(source, monkeypatch):
    """Forcing the fallback (a hash collision among the levels: codes from Arrow's ``index_in``) gives the
    same tables as the hashed codes."""
    path, kind = source
    args = (TableRows("score", "y", kind, ("country",), "w"), PassOptions(threads=1))
    hashed = T.aggregate_files(path, *args)
    real = T.levels_and_hashes

    def colliding(con, part, segments):
        levels, hashes = real(con, part, segments)
        return levels, [np.zeros_like(h) for h in hashes]

    monkeypatch.setattr(T, "levels_and_hashes", colliding)
    spec = T._Spec("score", "y", kind, ("country",), None, T.DEFAULT_GRID, *[None] * 3,
                   hashes=[np.zeros(3, np.uint64)])
    spec.levels = [pa.array(["a", "b", "c"])]
    assert spec.coder(0)[0] == "values"
    by_values = T.aggregate_files(path, *args)
    _assert_same(hashed.fine, by_values.fine, ["bucket", "label"])
    _assert_same(hashed.segments["country"], by_values.segments["country"], ["seg_0", "bucket", "label"])


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [("label", 2, "outside"), ("score", np.nan, "not probabilities"), ("score", -0.5, "not probabilities")],
)
def test_invalid_rows_are_refused_with_their_count(tmp_path, column, value, message):
    t = {"score": np.linspace(0.01, 0.99, 100), "label": np.tile([0, 1], 50).astype(np.float64),
         "country": np.array(["a", "b"] * 50, dtype=object)}
    t[column][[3, 7]] = value
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table(t), path)
    with pytest.raises(ValueError, match=f"^2 rows .*{message}"):
        T.aggregate_files(str(path), TableRows("score", "label", segments=("country",)),
                          PassOptions(threads=1))


def test_columns_over_the_memory_cap_are_refused_in_one_line(tmp_path, monkeypatch):
    """Each column under SEG_VALUES_MAX, together over SEG_KEYS_MAX at MIN_CELLS cells: refused, not
    allocated past the cap; the same columns one at a time fit and give every value its exact count."""
    monkeypatch.setattr(T, "SEG_KEYS_MAX", 4 * 2 * 300)
    monkeypatch.setattr(T, "MIN_CELLS", 4)
    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 200, 5000), rng.integers(0, 200, 5000)
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"score": rng.random(5000), "label": (rng.random(5000) < 0.3).astype(np.int8),
                             "a": a, "b": b}), path)
    with pytest.raises(ValueError, match=r"^segment columns 'a', 'b' have 400 values together, over the"):
        T.aggregate_files(str(path), TableRows("score", "label", segments=("a", "b")), PassOptions(threads=2))
    st = T.aggregate_files(str(path), TableRows("score", "label", segments=("a",)),
                           PassOptions(threads=2)).segments["a"]
    assert np.array_equal(st.groupby("seg_0")["n"].sum().to_numpy(), np.bincount(a))


def _libm_logs(s: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """``ln(pc)``, ``ln(1 - pc)`` through Python's ``math.log`` (the C library's, as DuckDB calls it)."""
    import math

    pc = np.clip(s, clip, 1 - clip)
    return np.array([math.log(v) for v in pc]), np.array([math.log(1 - v) for v in pc])


def _probabilities(n: int) -> np.ndarray:
    rng = np.random.default_rng(3)
    z = rng.normal(0, 6, n)
    s = 1 / (1 + np.exp(-z))
    s[:8] = [0.0, 1.0, 1e-13, 1 - 1e-13, 0.5, 1e-12, 1 - 1e-12, np.nextafter(0.5, 1)]
    return s


def test_simd_logs_are_within_an_ulp_of_libm_and_do_not_depend_on_the_batch():
    """The kernel's NumPy logarithms against libm's: at most one ulp apart (the tolerance the pass's
    docstring argues), and bit for bit the same value for a row wherever it falls in a batch (offset,
    length), so the table does not depend on the batch size or the threads."""
    from calibflow.aggregate import kernel

    s = _probabilities(200_003)
    q, a, b = np.empty((3, s.size))
    kernel.row_logs(s, False, q, a, b)
    ra, rb = _libm_logs(s, kernel.P_CLIP)
    for got, want in ((a, ra), (b, rb)):
        assert (np.abs(got - want) <= np.spacing(np.abs(want))).all()
    assert np.mean(a != ra) < 0.02
    q2, a2, b2 = np.empty((3, s.size - 5))
    kernel.row_logs(s[5:], False, q2, a2, b2)
    assert np.array_equal(a2, a[5:]) and np.array_equal(b2, b[5:])


def test_logit_scores_keep_libm_sigmoid():
    """A logit score's probability is libm's sigmoid bit for bit (an ulp of ``q`` near 1 would be a large
    error of ``ln(1 - q)``); its logarithms within an ulp of libm's."""
    import math

    from calibflow.aggregate import kernel

    z = np.r_[np.random.default_rng(4).normal(0, 8, 50_000), [-40.0, 40.0, 0.0, 36.0, -36.0]]
    q, a, b = np.empty((3, z.size))
    kernel.row_logs(z, True, q, a, b)
    want = np.array([1.0 / (1.0 + math.exp(-v)) for v in z])
    assert np.array_equal(q, want)
    ra, rb = _libm_logs(want, kernel.Q_CLIP)
    for got, ref in ((a, ra), (b, rb)):
        assert (np.abs(got - ref) <= np.spacing(np.abs(ref))).all()


def test_a_logit_next_to_a_bucket_edge_moves_at_most_to_the_next_bucket():
    """Scores whose logit lies on the fine grid's edges (and 1-4 ulps either side): the SIMD logit's bucket
    is libm's, or the neighbouring one only where libm's logit is within ``ulp(a) + ulp(b)`` of the edge
    between them (plus the bucket formula's own rounding of ``z + z_max``). So a row never lands further than
    the next bucket, and only a row whose logit is on an edge to ~1e-14 can."""
    from calibflow.aggregate import kernel

    grid = T.DEFAULT_GRID
    width = 2 * grid.z_max / grid.n_buckets
    edges = -grid.z_max + width * np.arange(8_192, grid.n_buckets - 8_192, 7)  # logits -12 .. 12
    base = 1 / (1 + np.exp(-edges))
    s = np.concatenate([base, *(np.nextafter(base, t) for t in (0.0, 1.0)),
                        *(base + k * np.spacing(base) for k in (-4, -2, 2, 4))])
    q, a, b = np.empty((3, s.size))
    kernel.row_logs(s, False, q, a, b)
    ra, rb = _libm_logs(s, kernel.P_CLIP)
    per_z = grid.n_buckets / (2 * grid.z_max)

    def bucket(z: np.ndarray) -> np.ndarray:
        return np.clip(np.floor((np.clip(z, -grid.z_max, grid.z_max) + grid.z_max) * per_z), 0,
                       grid.n_buckets - 1).astype(np.int64)

    dz = np.spacing(np.abs(ra)) + np.spacing(np.abs(rb))  # the logit's bound: an ulp of each log
    assert (np.abs((a - b) - (ra - rb)) <= dz).all()
    got, want = bucket(a - b), bucket(ra - rb)
    moved = got != want
    assert (np.abs(got - want) <= 1).all() and moved.sum() < 0.01 * s.size
    # within the logit's bound of the edge, plus the rounding of ``z + z_max`` in the bucket's formula
    edge = -grid.z_max + np.maximum(got, want) * width
    slack = dz + 2 * np.spacing(grid.z_max + np.abs(edge))
    assert (np.abs((ra - rb) - edge)[moved] <= slack[moved]).all()


@pytest.mark.parametrize("dtype", ["int8", "int64", "float64", "bool", "str"])
def test_every_label_type_gives_the_same_table(tmp_path, dtype):
    """A numeric label is projected as it is (``label_is_raw``), others cast in SQL: one table either way,
    the SQL reference's."""
    rng = np.random.default_rng(5)
    s = rng.random(20_000)
    y = (rng.random(20_000) < s).astype(np.int8)
    path = tmp_path / "l.parquet"
    label = y.astype(dtype) if dtype != "str" else y.astype(str).astype(object)
    pq.write_table(pa.table({"score": s, "label": label, "seg7": rng.integers(0, 7, 20_000)}), path)
    tabs = T.aggregate_files(str(path), TableRows("score", "label", segments=("seg7",)),
                             PassOptions(threads=1))
    ref = aggregate_duckdb(str(path), TableRows("score", "label"), engine="sql")
    _assert_same(tabs.fine, ref, ["bucket", "label"])


def test_an_integer_label_with_nulls_or_a_two_is_refused(tmp_path):
    """An int8 label read as it is: a NULL (NaN after Arrow's conversion) and a 2 are both counted as
    outside {0, 1}, as the cast to a double counted them."""
    y = pa.array([0, 1, None, 2] * 25, pa.int8())
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"score": np.linspace(0.01, 0.99, 100), "label": y}), path)
    with pytest.raises(ValueError, match=r"^50 rows have a 'label' outside \{0, 1\}"):
        T.aggregate_files(str(path), TableRows("score", "label"), PassOptions(threads=1))


def test_an_integer_segment_value_outside_the_levels_is_refused():
    """The dense codes of an integer column: a value the levels' read did not see (the source changed
    between the two reads) is refused in one line, not given another value's code."""
    spec = T._Spec("s", "y", "probability", ("seg7",), None, T.DEFAULT_GRID, [pa.array([0, 1, 2, 4])],
                   None, None)
    ok = pa.record_batch({"g0": pa.array([4, 0, 2], pa.int16())})
    assert T._codes(ok, spec)[0].tolist() == [3, 0, 2]
    for bad in ([0, 3], [5], [-1]):  # a hole in the span, past its end, before its start
        with pytest.raises(ValueError, match="'seg7' changed while it was read"):
            T._codes(pa.record_batch({"g0": pa.array(bad, pa.int16())}), spec)
