"""partial_pooling fitted from the streaming pass's tables (``calibflow.aggregate.segment_fit``) against the
same method fitted on the rows, on a generated 1e5-row table written to Parquet and read by the real pass.

Stated tolerances:
- one segment column (the tables are then the exact marginal the model needs): predictions within 0.005 on
  the logit and test log loss within 1e-5 of the row fit (the only difference is the coarse cells);
- three columns (marginal tables, combined with the logistic-normal attenuation correction): log loss
  within 2e-4 of the row fit, and every segment's (>= 200 test positives) ``sum p`` within 3% of the row
  fit's;
- column pairs from a joint table (a second DuckDB pass): a real country x device bias is added (log loss
  within 2e-4 of the row fit's), none is added when there is none;
- 1e5 distinct values of one column: the fit runs from a table whose size the pass bounds, and the saved
  JSON predicts the same probabilities.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy.special import expit, logit

from calibflow import metrics as M
from calibflow.aggregate.segment_fit import add_pairs, pair_table, partial_pooling_from_tables
from calibflow.aggregate.tables import SEG_KEYS_MAX, TableRows, aggregate_files
from calibflow.calibrators import from_json, make
from calibflow.segments import NULL_LEVEL

N = 100_000
VALUES = {"country": 40, "device": 5, "campaign": 200}


def _draw(n: int, seed: int, values: dict[str, int]) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    effects = np.random.default_rng(99)
    z = rng.normal(-2.0, 1.5, n)
    eta = 0.8 * z + 0.1
    cols = {}
    for name, k in values.items():
        code = rng.integers(0, k, n)
        eta = eta + effects.normal(0, 0.4, k)[code]
        cols[name] = np.char.add(name[:2], code.astype(str)).astype(object)
    first = next(iter(values))
    cols[first][rng.random(n) < 0.01] = None  # a null is its own level
    y = (rng.random(n) < expit(eta)).astype(np.int64)
    return pd.DataFrame({"margin": z, "y": y, **cols}), cols


def _fits(tmp_path, values: dict[str, int]):
    frame, cols = _draw(N, 1, values)
    path = tmp_path / "fit.parquet"
    frame.to_parquet(path, row_group_size=20_000)
    z, y = frame["margin"].to_numpy(), frame["y"].to_numpy()
    row = make("partial_pooling", input="logit", intersections=False).fit(z, y, segments=cols)
    tabs = aggregate_files(str(path), TableRows("margin", "y", "logit", list(values)))
    tab = from_json(partial_pooling_from_tables(tabs.fine, tabs.segments, "logit").to_json())
    test, test_cols = _draw(50_000, 2, values)
    zt, yt = test["margin"].to_numpy(), test["y"].to_numpy()
    glob = make("platt", input="logit").fit(z, y).predict(zt)  # the global map: what the segments must beat
    return row.predict(zt, segments=test_cols), tab.predict(zt, segments=test_cols), yt, test_cols, tab, glob


def test_one_column_table_fit_matches_the_row_fit(tmp_path):
    p_row, p_tab, y, _, tab, _ = _fits(tmp_path, {"country": 40})
    assert np.abs(logit(p_row) - logit(p_tab)).max() < 5e-3
    assert abs(M.log_loss(y, p_tab) - M.log_loss(y, p_row)) < 1e-5
    assert NULL_LEVEL in tab.vocab_[0]  # the null rows were fitted as their own level


def test_three_columns_from_marginal_tables_are_close_to_the_row_fit(tmp_path):
    p_row, p_tab, y, cols, tab, glob = _fits(tmp_path, VALUES)
    platt = M.log_loss(y, glob)
    assert M.log_loss(y, p_tab) - M.log_loss(y, p_row) < 2e-4
    assert M.log_loss(y, p_tab) < platt - 5e-3  # the segments' effects are found, not lost to the tables
    checked = 0
    for name, v in cols.items():
        frame = pd.DataFrame({"v": v, "y": y, "p": p_tab, "r": p_row}).groupby("v")[["y", "p", "r"]].sum()
        big = frame[frame["y"] >= 200]
        checked += len(big)
        assert (np.abs(big["p"] / big["r"] - 1) < 0.03).all(), name
    assert checked >= 40  # country's and device's values (campaign's 200 have ~50 positives each)
    assert tab.segment_names_ == list(VALUES)
    assert tab.pair_tests_ and not tab.pair_tests_[0]["included"]  # no pair from marginal tables


@pytest.mark.slow  # 1e5 segment values: make test, not test-fast
@pytest.mark.parametrize("n_values", [100_000])
def test_many_values_fit_from_a_bounded_table(tmp_path, n_values):
    rng = np.random.default_rng(5)
    n = 300_000
    code = rng.integers(0, n_values, n)
    z = rng.normal(-1.0, 1.0, n)
    y = (rng.random(n) < expit(z + rng.normal(0, 0.5, n_values)[code])).astype(np.int64)
    frame = pd.DataFrame({"margin": z, "y": y, "campaign": code.astype(np.int64)})
    frame.to_parquet(tmp_path / "m.parquet")
    tabs = aggregate_files(str(tmp_path / "m.parquet"), TableRows("margin", "y", "logit", ("campaign",)))
    assert len(tabs.segments["campaign"]) <= SEG_KEYS_MAX
    cal = partial_pooling_from_tables(tabs.fine, tabs.segments, "logit")
    assert len(cal.vocab_[0]) == len(np.unique(code))
    p = cal.predict(z, segments={"campaign": code})
    again = from_json(cal.to_json()).predict(z, segments={"campaign": code})
    np.testing.assert_array_equal(p, again)
    # about 3 rows per campaign: the offsets are shrunk hard, yet the fit beats the global map
    glob = make("platt", input="logit").fit(z, y).predict(z)
    assert M.log_loss(y, p) < M.log_loss(y, glob)


def _pair_data(tmp_path, inter_sd: float, seed: int):
    rng = np.random.default_rng(seed)
    n = N
    c, d = rng.integers(0, 10, n), rng.integers(0, 3, n)
    inter = np.random.default_rng(7).normal(0, inter_sd, (10, 3))
    z = rng.normal(-1.5, 1.2, n)
    eta = 0.9 * z + np.linspace(-0.5, 0.5, 10)[c] + np.array([-0.2, 0.0, 0.3])[d] + inter[c, d]
    y = (rng.random(n) < expit(eta)).astype(np.int64)
    segs = {"country": np.char.add("c", c.astype(str)).astype(object),
            "device": np.char.add("d", d.astype(str)).astype(object)}
    path = tmp_path / f"pairs{seed}.parquet"
    pd.DataFrame({"margin": z, "y": y, **segs}).to_parquet(path)
    tabs = aggregate_files(str(path), TableRows("margin", "y", "logit", list(segs)))
    cal = partial_pooling_from_tables(tabs.fine, tabs.segments, "logit")
    main_only = from_json(cal.to_json())
    pair = {("country", "device"): pair_table("read_parquet($p)", {"p": str(path)}, "margin", "y",
                                              "country", "device")}
    add_pairs(cal, pair)
    return z, y, segs, cal, main_only


def test_pairs_from_joint_tables_found_only_when_present(tmp_path):
    """A country x device bias (sd 0.5 on the logit) is found on the joint table and brings the table fit
    to the row fit's log loss (within 2e-4, on the fitting rows); without the bias the pair is not added."""
    z, y, segs, cal, main_only = _pair_data(tmp_path, 0.5, 3)
    (test,) = cal.pair_tests_
    assert test["included"] and test["p_value"] < 1e-6
    again = from_json(cal.to_json())
    p_pairs, p_main = again.predict(z, segments=segs), main_only.predict(z, segments=segs)
    row = make("partial_pooling", input="logit").fit(z, y, segments=segs).predict(z, segments=segs)
    assert M.log_loss(y, p_pairs) < M.log_loss(y, p_main) - 5e-3
    assert abs(M.log_loss(y, p_pairs) - M.log_loss(y, row)) < 2e-4
    _, _, _, null_cal, _ = _pair_data(tmp_path, 0.0, 4)
    (null_test,) = null_cal.pair_tests_
    assert not null_test["included"] and null_test["p_value"] > 0.01
