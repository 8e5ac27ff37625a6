"""The label rule written once (calibflow.source_rules): its SQL form (DuckDB), its array form (pandas) and
its value form (init's checks) agree on the same values, NULLs and odd types included.

Before issue 35 the rule had a copy per reader; the SQL copy compared a boolean ``positive: true`` as the text
'True' with DuckDB's 'true' and read every label of a boolean column as 0 (the pandas copy read them right):
``test_boolean_positive_reads_the_true_rows`` fails on that code.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

from calibflow.source_rules import label_array, label_sql, label_value

COLUMNS = {
    "bool": pd.Series([True, False, None, True], dtype=object),
    "int": pd.Series([0, 1, 2, None], dtype="Int64"),
    "float": pd.Series([0.0, 1.0, 0.5, np.nan]),
    "text01": pd.Series(["0", "1", "yes", None], dtype=object),
    "text": pd.Series(["click", "none", "Click", None], dtype=object),
}
POSITIVES = [None, 1, 1.0, "1", "click", True, False, "true"]


def _sql(series: pd.Series, positive) -> tuple[np.ndarray, np.ndarray]:
    frame = pd.DataFrame({"lab": series})
    if series.name == "bool" or (series.dtype == object and series.dropna().map(type).eq(bool).all()):
        frame["lab"] = series.astype("boolean")
    con = duckdb.connect()
    con.register("t", frame)
    dtype = con.execute("SELECT column_type FROM (DESCRIBE SELECT * FROM t) WHERE column_name = 'lab'")
    dtype = dtype.fetchone()
    ok, y = label_sql("lab", str(dtype[0]), positive)
    rows = con.execute(f"SELECT {ok}, {y} FROM t").fetchall()
    con.close()
    return np.array([bool(r[0]) for r in rows]), np.array([int(r[1]) for r in rows])


@pytest.mark.parametrize("positive", POSITIVES, ids=[repr(p) for p in POSITIVES])
@pytest.mark.parametrize("name", list(COLUMNS))
def test_sql_array_and_value_forms_agree(name, positive):
    series = COLUMNS[name]
    if name == "bool":
        series = series.astype("boolean")
    ok_sql, y_sql = _sql(series.rename(name), positive)
    ok_arr, y_arr = label_array(series, positive)
    np.testing.assert_array_equal(ok_arr, ok_sql, err_msg=f"usable: {name}, positive={positive!r}")
    np.testing.assert_array_equal(y_arr * ok_arr, y_sql * ok_sql, err_msg=f"0/1: {name}, {positive!r}")
    for i, v in enumerate(series.tolist()):
        if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)):
            continue  # a null is its own case (init counts nulls before reading values)
        ok, y = label_value(v, positive)
        assert ok == ok_arr[i] and (not ok or y == y_arr[i]), (name, positive, v)


def test_boolean_positive_reads_the_true_rows():
    series = pd.Series([True, False, True, None], dtype="boolean")
    ok, y = _sql(series.rename("bool"), True)
    assert ok.tolist() == [True, True, True, False] and y.tolist() == [1, 0, 1, 0]
    assert label_array(series, True)[1].tolist() == [1, 0, 1, 0]
    assert label_value(True, True) == (True, 1) and label_value("True", True) == (True, 1)


def test_without_positive_only_booleans_and_0_1_are_labels():
    ok, y = label_array(pd.Series(["0", "1", "2", "yes", None], dtype=object), None)
    assert ok.tolist() == [True, True, False, False, False] and y.tolist() == [0, 1, 0, 0, 0]


def test_score_and_weight_checks_agree_between_sql_and_arrays():
    from calibflow import source_rules as R

    values = [0.0, 1.0, 0.5, -1.0, 1.5, np.nan, np.inf, -np.inf, None]
    con = duckdb.connect()
    con.register("t", pd.DataFrame({"v": pd.Series(values, dtype=object).astype("Float64")}))
    arr = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(np.float64)
    for sql, fn in ((R.score_finite_sql, R.score_finite_array), (R.score_in_01_sql, R.score_in_01_array),
                    (R.weight_ok_sql, R.weight_ok_array)):
        got = [bool(r[0]) for r in con.execute(f"SELECT {sql('v')} FROM t").fetchall()]
        assert got == fn(arr).tolist(), sql.__name__
    con.close()
    assert R.weight_ok_array(arr).tolist() == [True, True, True, False, True, False, False, False, False]


@pytest.mark.parametrize("positive", POSITIVES, ids=[repr(p) for p in POSITIVES])
@pytest.mark.parametrize("name", list(COLUMNS))
def test_the_monitors_pending_form_is_the_same_rule(name, positive):
    """The monitor reads labels through the rule too (its row and streamed paths had their own copies, and
    the streamed one read ``positive: true`` as every label 0): NULL stays "not known yet" (NaN), a value
    that is no label is -1 (its file is refused), and SQL and arrays agree."""
    from calibflow.source_rules import pending_label_array, pending_label_sql

    series = COLUMNS[name].astype("boolean") if name == "bool" else COLUMNS[name]
    frame = pd.DataFrame({"lab": series})
    con = duckdb.connect()
    con.register("t", frame)
    dtype = con.execute("SELECT column_type FROM (DESCRIBE SELECT * FROM t) WHERE column_name = 'lab'")
    sql = pending_label_sql("lab", str(dtype.fetchone()[0]), positive)
    rows = con.execute(f"SELECT {sql} FROM t").fetchall()
    got_sql = np.array([np.nan if r[0] is None else r[0] for r in rows])
    got_arr = pending_label_array(series, positive)
    np.testing.assert_array_equal(got_arr, got_sql)
    ok, y = label_array(series, positive)
    nulls = ~series.notna().to_numpy()
    assert np.isnan(got_arr[nulls]).all()
    np.testing.assert_array_equal(got_arr[~nulls], np.where(ok, y, -1)[~nulls].astype(float))
