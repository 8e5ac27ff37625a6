"""Fit and evaluate from sufficient statistics: one streaming pass builds a bucket table.

``table.aggregate_duckdb`` (one machine) and ``dask_engine.aggregate_dask`` (a Dask cluster) build the
same table: one row per (segments..., score bucket, label) holding summed frequency weights, the
weighted sums of the logit and the probability, the exact per-row log loss and squared probability,
and Poisson-bootstrap replicate weights. ``fit.fit_from_table`` fits any score+label calibrator on it;
``metrics.metrics_from_table`` computes every metric (and its interval) from it.

Issue 25: ``tables.aggregate_files`` / ``aggregate_tables`` build, in one pass on every core (or a Dask
cluster), the fine global table and one coarse (value x cell) table per segment column;
``segments.segment_metrics`` computes every value's metrics at once; ``run.fit_files`` is ``calibflow fit``
and ``run.tables_for`` what the pipeline's aggregate stages call.
"""

from calibflow.aggregate.fit import fit_from_table, representatives
from calibflow.aggregate.metrics import metrics_from_table
from calibflow.aggregate.segments import segment_metrics
from calibflow.aggregate.table import (
    BucketGrid,
    add_replicates,
    aggregate_duckdb,
    aggregate_query,
    aggregate_sql,
)
from calibflow.aggregate.tables import Tables, aggregate_files, aggregate_tables

__all__ = [
    "BucketGrid",
    "Tables",
    "add_replicates",
    "aggregate_files",
    "aggregate_duckdb",
    "aggregate_query",
    "aggregate_sql",
    "aggregate_tables",
    "fit_from_table",
    "metrics_from_table",
    "representatives",
    "segment_metrics",
]
