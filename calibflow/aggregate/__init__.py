"""Fit and evaluate from sufficient statistics: one streaming pass builds a bucket table.

One builder: ``tables.aggregate_files`` / ``aggregate_tables`` (threads on one machine, or tasks on a Dask
cluster) and ``source_stream`` (a user source) build the tables: rows per (score bucket, label), and per
segment value, holding summed frequency weights, the weighted sums of the logit and the probability, the
exact per-row log loss and squared probability, and Poisson-bootstrap replicate weights (``table`` holds
the row expressions and the GROUP BY they share; the first builder is the tests' control,
tests/helpers/table_reference.py). ``fit.fit_from_table`` fits any score+label calibrator on it;
``metrics.metrics_from_table`` computes every metric (and its interval) from it. Every builder takes its
arguments as two values (``options``): ``TableRows`` (what the rows are) and ``PassOptions`` (how the pass
runs).

Issue 25: ``tables.aggregate_files`` / ``aggregate_tables`` build, in one pass on every core (or a Dask
cluster), the fine global table and one coarse (value x cell) table per segment column;
``segments.segment_metrics`` computes every value's metrics at once; ``run.fit_files`` is ``calibflow fit``
and ``run.tables_for`` what the pipeline's aggregate stages call.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    """The package's names, imported on first use: a stage that needs one submodule (``switch``,
    ``source_stream``) does not pay for the calibrators, numba's kernels and the fits. The import statements
    stay in this file so the stages' code dependencies (calibflow.flows.stage_deps, static) still see them."""
    if name in ("fit_from_table", "representatives"):
        from calibflow.aggregate import fit as module
    elif name == "metrics_from_table":
        from calibflow.aggregate import metrics as module
    elif name == "segment_metrics":
        from calibflow.aggregate import segments as module
    elif name in ("BucketGrid", "add_replicates", "aggregate_sql"):
        from calibflow.aggregate import table as module
    elif name in ("Tables", "aggregate_files", "aggregate_tables"):
        from calibflow.aggregate import tables as module
    elif name in ("PassOptions", "TableRows"):
        from calibflow.aggregate import options as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(module, name)


__all__ = [
    "BucketGrid",
    "PassOptions",
    "TableRows",
    "Tables",
    "add_replicates",
    "aggregate_files",
    "aggregate_sql",
    "aggregate_tables",
    "fit_from_table",
    "metrics_from_table",
    "representatives",
    "segment_metrics",
]
