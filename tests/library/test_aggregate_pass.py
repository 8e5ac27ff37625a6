"""The two-table pass's raw-column kernel (logarithms in numba, string segments by DuckDB ``hash()``)
against DuckDB's GROUP BY reference, which computes every expression in SQL: equal keys and counts, sums
to 1e-12 relative; the hashed codes against Arrow's ``index_in`` on the values; invalid rows refused."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calibflow.aggregate import aggregate_duckdb
from calibflow.aggregate import tables as T

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
    tabs = T.aggregate_files(path, "score", "y", kind=kind, segments=["country", "seg7"], weight="w",
                             threads=2)
    ref = aggregate_duckdb(path, "score", "y", kind=kind, weight="w", engine="sql")
    _assert_same(tabs.fine, ref, ["bucket", "label"])


def test_segment_totals_equal_the_sql_group_by(source):
    """Each value's coarse cells summed (per label) are the reference's fine groups of that value summed:
    the string column through its hash, NULL a value of its own."""
    path, kind = source
    tabs = T.aggregate_files(path, "score", "y", kind=kind, segments=["country"], weight="w", threads=2)
    ref = aggregate_duckdb(path, "score", "y", kind=kind, segments=["country"], weight="w", engine="sql")
    cols = ["n", *SUMS]
    got = tabs.segments["country"].groupby(["seg_0", "label"], dropna=False)[cols].sum().reset_index()
    want = ref.groupby(["seg_0", "label"], dropna=False)[cols].sum().reset_index()
    assert got["seg_0"].isna().any()
    _assert_same(got, want, ["seg_0", "label"])


def test_hashed_codes_equal_the_values_lookup(source, monkeypatch):
    """Forcing the fallback (a hash collision among the levels: codes from Arrow's ``index_in``) gives the
    same tables as the hashed codes."""
    path, kind = source
    kw = {"kind": kind, "segments": ["country"], "weight": "w", "threads": 1}
    hashed = T.aggregate_files(path, "score", "y", **kw)
    real = T.levels_and_hashes

    def colliding(con, part, segments):
        levels, hashes = real(con, part, segments)
        return levels, [np.zeros_like(h) for h in hashes]

    monkeypatch.setattr(T, "levels_and_hashes", colliding)
    spec = T._Spec("score", "y", kind, ("country",), None, T.DEFAULT_GRID, *[None] * 3,
                   hashes=[np.zeros(3, np.uint64)])
    spec.levels = [pa.array(["a", "b", "c"])]
    assert spec.coder(0)[0] == "values"
    by_values = T.aggregate_files(path, "score", "y", **kw)
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
        T.aggregate_files(str(path), "score", "label", segments=["country"], threads=1)


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
        T.aggregate_files(str(path), "score", "label", segments=["a", "b"], threads=2)
    st = T.aggregate_files(str(path), "score", "label", segments=["a"], threads=2).segments["a"]
    assert np.array_equal(st.groupby("seg_0")["n"].sum().to_numpy(), np.bincount(a))
