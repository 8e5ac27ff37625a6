"""The table builder's two argument values (``calibflow.aggregate.options``): checked when made, one pair
builds the pass and the tests' reference alike, and what a builder cannot honour is refused by name."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.table_reference import aggregate_duckdb

from calibflow.aggregate import tables as T
from calibflow.aggregate.grid import BucketGrid
from calibflow.aggregate.options import DEFAULT_PASS, PassOptions, TableRows, table_args
from calibflow.aggregate.run import tables_for


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"kind": "margin"}, r"^score_kind must be one of \('probability', 'logit', 'score'\), got 'margin'"),
        ({"segments": "country"}, r"^segments must be a list of column names, got 'country'$"),
        ({"segments": ["country", "country"]}, r"name a column twice: \['country', 'country'\]"),
        ({"segments": ["country", 3]}, r"^the segment column must be a non-empty column name, got 3$"),
        ({"weight": ""}, r"^the weight column must be a non-empty column name"),
        ({"transform": "calibrated"}, r"^transform must be a function of the scores"),
    ],
)
def test_rows_refuse_a_bad_value_in_one_line(kw, message):
    with pytest.raises(ValueError, match=message):
        TableRows("score", "label", **kw)
    with pytest.raises(ValueError, match=r"^the score column must be a non-empty"):
        TableRows("", "label")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"cells": 0}, r"^cells must be an integer >= 1, got 0$"),
        ({"ece_bins": 2.5}, r"^ece_bins must be an integer >= 1, got 2.5$"),
        ({"threads": 0}, r"^threads must be an integer >= 1, got 0$"),
        ({"distinct_max": -1}, r"^distinct_max must be an integer >= 0, got -1$"),
        ({"replicates": True}, r"^replicates must be an integer >= 0, got True$"),
        ({"seed": -3}, r"^seed must be an integer >= 0, got -3$"),
        ({"grid": 65_536}, r"^grid must be a BucketGrid, got 65536$"),
    ],
)
def test_pass_options_refuse_a_bad_value_in_one_line(kw, message):
    with pytest.raises(ValueError, match=message):
        PassOptions(**kw)


def test_values_are_frozen_normalised_and_hashable():
    rows = TableRows("score", "label", segments=["country", "seg7"])
    assert rows.segments == ("country", "seg7") and rows.columns == ["score", "label", "country", "seg7"]
    assert rows == TableRows("score", "label", segments=("country", "seg7")) and hash(rows) == hash(
        TableRows("score", "label", segments=("country", "seg7")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        rows.kind = "logit"  # type: ignore[misc]
    how = PassOptions(threads=np.int64(2), seed=np.uint32(7))
    assert type(how.threads) is int and type(how.seed) is int and how.threads == 2 and how.seed == 7
    assert PassOptions() == DEFAULT_PASS and DEFAULT_PASS.cells == T.CELLS and DEFAULT_PASS.threads is None
    w = TableRows("s", "y", weight="w")
    assert w.columns == ["s", "y", "w"]


def test_table_args_splits_flat_options_and_keeps_the_rest():
    rows, how, rest = table_args("margin", "y", {"kind": "logit", "segments": ["c"], "weight": "w",
                                                 "grid": BucketGrid(1024), "replicates": 4, "seed": 1,
                                                 "cells": 64, "threads": 2, "distinct_max": 10,
                                                 "where": "split = $split", "where_params": {"split": "t"}})
    assert rows == TableRows("margin", "y", "logit", ("c",), "w")
    assert how == PassOptions(BucketGrid(1024), 64, 15, 2, 10, 4, 1)
    assert rest == {"where": "split = $split", "where_params": {"split": "t"}}
    with pytest.raises(ValueError, match="^cells must be"):
        table_args("s", "y", {"cells": -1})


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    rng = np.random.default_rng(4)
    n = 30_000
    path = tmp_path_factory.mktemp("opts") / "s.parquet"
    country = np.array(["de", "fr", None, "us"], dtype=object)[rng.integers(0, 4, n)]
    pq.write_table(pa.table({"score": rng.random(n), "label": (rng.random(n) < 0.2).astype(np.int8),
                             "country": country, "w": rng.integers(1, 4, n)}), path, row_group_size=4_000)
    return str(path)


def test_one_pair_builds_the_pass_the_reference_and_tables_for_alike(source):
    """The same two values to the pass, to the first builder (the control) and through ``tables_for``'s
    flat options: one fine table (keys and counts equal, sums 1e-12, replicate draws equal)."""
    rows = TableRows("score", "label", segments=("country",), weight="w")
    how = PassOptions(replicates=3, seed=5, threads=2)
    tabs = T.aggregate_files(source, rows, how)
    ref = aggregate_duckdb(source, dataclasses.replace(rows, segments=()), how, engine="sql")
    flat = tables_for(source, "score", "label", segments=["country"], weight="w", replicates=3, seed=5,
                      threads=2)
    for got in (tabs.fine, flat.fine):
        assert (got[["bucket", "label"]].to_numpy() == ref[["bucket", "label"]].to_numpy()).all()
        assert (got[["n", "b0", "b2"]].to_numpy() == ref[["n", "b0", "b2"]].to_numpy()).all()
        for c in ("sum_z", "sum_q", "sum_ll", "sum_q2"):
            np.testing.assert_allclose(got[c], ref[c], rtol=1e-12, atol=1e-300)
    assert flat.segments["country"].equals(tabs.segments["country"])


def test_what_a_builder_cannot_honour_is_refused(source):
    parts = T.file_parts(source, 1)
    with pytest.raises(ValueError, match="draws no replicates"):
        T.aggregate_split_tables(parts, TableRows("score", "label"), ["calib"], 1, PassOptions(replicates=2))
    with pytest.raises(ValueError, match="without a transform"):
        T.aggregate_split_tables(parts, TableRows("score", "label", transform=np.sqrt), ["calib"], 1)
    with pytest.raises(ValueError, match="no transform"):
        aggregate_duckdb(source, TableRows("score", "label", transform=np.sqrt))
    with pytest.raises(ValueError, match="'nope'"):
        T.aggregate_files(source, TableRows("score", "label", segments=("nope",)), PassOptions(threads=1))
