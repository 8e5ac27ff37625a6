"""Fit and evaluate from one streaming pass: the code path ``calibflow fit`` and the pipeline's aggregate
stages share.

:func:`tables_for` builds the pass's tables (``tables.aggregate_tables``) on the engine the caller names:
``duckdb`` (this machine, one worker thread per core), ``dask`` (a ``LocalCluster``, or the scheduler at
``dask_address``) or ``spark`` (a local session, the master at ``spark_master``, or the active session;
a Spark catalog table by its name: ``spark_engine``); :func:`fit_files` is ``calibflow fit``: every
method fitted on the calibration tables, every metric with intervals on the test tables, overall (fine
grid) and per segment value (coarse tables).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from calibflow.aggregate.options import DEFAULT_PASS, PassOptions, TableRows, table_args
from calibflow.aggregate.tables import Part, Tables, aggregate_files, aggregate_split_tables

ENGINES = ("duckdb", "dask", "spark")
#: Per segment column, this many values (the largest) go to fit.json; all of them to segments.parquet.
TOP_SEGMENTS = 50


@contextlib.contextmanager
def dask_client(address: str | None = None) -> Iterator[Any]:
    """A ``distributed.Client`` on the scheduler at ``address``, or on a fresh local cluster (two worker
    processes, one thread each) closed on exit."""
    from distributed import Client, LocalCluster

    if address:
        with Client(address) as client:
            yield client
        return
    with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(
        cluster
    ) as client:
        yield client


def check_engine(engine: str, dask_address: str | None, spark_master: str | None = None) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if dask_address and engine != "dask":
        raise ValueError("a Dask scheduler address needs engine dask (--engine dask / scale.engine: dask)")
    if spark_master and engine != "spark":
        raise ValueError("a Spark master needs engine spark (--engine spark / scale.engine: spark)")


@contextlib.contextmanager
def engine_client(engine: str, address: str | None = None) -> Iterator[Any]:
    """None (DuckDB), a Dask client, or a ``spark_engine.SparkClient`` on the master ``address``."""
    if engine == "dask":
        with dask_client(address) as c:
            yield c
    elif engine == "spark":
        from calibflow.aggregate.spark_engine import spark_client

        with spark_client(address) as c:
            yield c
    else:
        yield None


def tables_for(
    paths: str | Sequence[str],
    score: str,
    label: str,
    engine: str = "duckdb",
    dask_address: str | None = None,
    client: Any = None,
    **options: Any,
) -> Tables:
    """The pass's tables of Parquet ``paths`` on ``engine``; ``options``: the fields of
    ``options.TableRows`` (kind, segments, weight) and ``options.PassOptions`` (grid, replicates, seed,
    cells, ece_bins, threads, distinct_max), and ``tables.aggregate_files``' ``where``/``where_params``.
    ``dask_address``: the engine's address (a Dask scheduler; with engine spark, the Spark master). With
    engine spark, ``paths`` may name a Spark catalog table (``spark_engine.spark_table_tables``)."""
    check_engine(engine, None if engine == "spark" else dask_address)
    rows, how, rest = table_args(score, label, options)
    if engine == "duckdb":
        return aggregate_files(paths, rows, how, **rest)
    how = dataclasses.replace(how, threads=None)  # the cluster's workers, not this machine's threads
    if engine == "spark":
        from calibflow.aggregate import spark_engine

        if isinstance(paths, str) and spark_engine.is_table_name(paths):
            with spark_engine.spark_session(dask_address) as spark:
                return spark_engine.spark_table_tables(spark, paths, rows, how)
    if client is not None:
        return aggregate_files(paths, rows, how, client=client, **rest)
    with engine_client(engine, dask_address) as c:
        return aggregate_files(paths, rows, how, client=c, **rest)


def split_tables_for(  # noqa: PLR0913
    parts: Sequence[Part],
    rows: TableRows,
    splits: Sequence[str],
    n_tab: int,
    how: PassOptions = DEFAULT_PASS,
    engine: str = "duckdb",
    dask_address: str | None = None,
    distinct_of: tuple[Part, str] | None = None,
) -> tuple[dict[str, Tables], dict[str, dict[str, int]]]:
    """:func:`tables_for` of every split in one pass (``tables.aggregate_split_tables``): the pipeline's
    prepare on a streamed source, on the same engines."""
    check_engine(engine, None if engine == "spark" else dask_address)
    if engine == "duckdb":
        return aggregate_split_tables(parts, rows, splits, n_tab, how, distinct_of=distinct_of)
    how = dataclasses.replace(how, threads=None)
    with engine_client(engine, dask_address) as c:
        return aggregate_split_tables(parts, rows, splits, n_tab, how, client=c, distinct_of=distinct_of)


def _check_source(paths: str, columns: list[str], score: str, label: str, weight: str | None) -> None:
    """One line naming a missing column (and the closest existing one) of the Parquet ``paths``, then the
    types of score and label and the weights as the library checks them (``sources.check_table_inputs``):
    a string label is named before DuckDB would fail to cast it."""

    from calibflow.aggregate.table import _check_columns, expand
    from calibflow.sources import check_table_inputs, connect, register_stores

    params = {"f": expand(paths)}
    con = register_stores(connect(), params)
    try:
        _check_columns(con, "read_parquet($f)", params, columns)
        check_table_inputs(con, "read_parquet($f)", params, score, label, weight)
    finally:
        con.close()


def _brief(res: dict) -> dict[str, Any]:
    keep = ("log_loss", "brier", "calibration_ratio", "ece", "auc", "auc_tie_bound", "n", "positives", "ci")
    return {k: v for k, v in res["overall"].items() if k in keep}


def _segment_rows(tabs: Tables, method: str, cal: Any, kind: str, replicates: int, seed: int) -> pd.DataFrame:
    from calibflow.aggregate.segments import segment_metrics

    frames = []
    tables = tabs.calibrated_segments(cal, kind) if cal is not None else tabs.segments
    for col, t in tables.items():
        m = segment_metrics(t, replicates=replicates, seed=seed)
        frames.append(m.assign(column=col, method=method, value=m["value"].astype(str)))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _top(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """The ``TOP_SEGMENTS`` largest values of each column, as JSON records."""
    if rows.empty:
        return []
    keep = ["column", "value", "n", "positives", "calibration_ratio", "calibration_ratio_low",
            "calibration_ratio_high", "log_loss", "ece", "auc"]
    top = rows.sort_values(["column", "n"], ascending=[True, False], kind="stable").groupby("column").head(
        TOP_SEGMENTS
    )
    return [{k: r[k] for k in keep if k in r} for r in top.to_dict("records")]


def _is_table(source: str | None) -> bool:
    from calibflow.aggregate.spark_engine import is_table_name

    return bool(source) and is_table_name(str(source))


def fit_files(  # noqa: PLR0913
    calib: str,
    test: str | None,
    score: str,
    label: str,
    out: Path,
    methods: list[str],
    score_kind: str = "probability",
    segments: tuple[str, ...] = (),
    weight: str | None = None,
    replicates: int = 32,
    seed: int = 0,
    distinct_max: int = 1 << 20,
    engine: str = "duckdb",
    dask_address: str | None = None,
    spark_master: str | None = None,
    from_results: bool = False,
) -> dict[str, Any]:
    """Fit ``methods`` on the ``calib`` files and evaluate them on the ``test`` files; write ``out``:
    ``<method>.json``, ``fit.json`` (metrics, the largest segments) and ``segments.parquet`` (every
    segment value's metrics per method), each atomically. ``from_results``: ``calib`` and ``test`` are
    Parquet results of the pass's query run in a warehouse (``calibflow fit --emit-sql``), not rows:
    score, label and kind are the query's own (its ``spec``)."""
    check_engine(engine, dask_address, spark_master)
    address = spark_master if engine == "spark" else dask_address
    kind = "logit" if score_kind in ("logit", "score") else score_kind
    t0 = time.perf_counter()
    if from_results:
        from calibflow.aggregate.sql_pass import read_result

        ctab, spec = read_result(calib)
        kind, score = spec["kind"], spec["score"]
        score_kind = kind  # the query's own scale (a "score" column was emitted as a logit)
        ttab = None
        if test:
            ttab, tspec = read_result(test, replicates, seed)
            if (tspec["kind"], tspec["score"]) != (kind, score):
                raise ValueError(f"{test}: built on {tspec['score']!r} ({tspec['kind']}), the calibration "
                                 f"table on {score!r} ({kind}); emit both queries with the same options")
        return _fit_write(ctab, (lambda: ttab) if test else None, calib, test, "sql", score, kind,
                          score_kind, out, methods, replicates, seed, t0)
    # The calibration pass reads no segment column: a misspelt one is still named before any work.
    if not (engine == "spark" and _is_table(calib)):
        _check_source(calib, [score, label, *segments, *([weight] if weight else [])], score, label, weight)
    if test and not (engine == "spark" and _is_table(test)):
        _check_source(test, [score, label, *segments], score, label, None)
    opts = {"kind": kind, "distinct_max": distinct_max}
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(engine_client(engine, address))
        # The fits read the fine table only: the calibration pass builds no segment tables.
        ctab = tables_for(calib, score, label, engine, client=client, weight=weight, **opts)

        def test_tables() -> Tables:
            return tables_for(test, score, label, engine, client=client, replicates=replicates, seed=seed,
                              segments=segments, **opts)

        return _fit_write(ctab, test_tables if test else None, calib, test, engine, score, kind, score_kind,
                          out, methods, replicates, seed, t0)


def _fit_write(  # noqa: PLR0913
    ctab: Tables, test_tables: Any, calib: str, test: str | None, engine: str, score: str, kind: str,
    score_kind: str, out: Path, methods: list[str], replicates: int, seed: int, t0: float,
) -> dict[str, Any]:
    """:func:`fit_files` from its tables: the fits, the metrics, the files."""
    from calibflow.aggregate import fit_from_table, metrics_from_table
    from calibflow.aggregate.metrics import calibrated_table
    from calibflow.io import atomic_path, write_json
    from calibflow.sources import record_score_kind

    # the user's scale goes into every file, so that `calibflow apply` converts as the fit did
    fits = {m: record_score_kind(fit_from_table(ctab.fine, m, kind), score_kind, score) for m in methods}
    record: dict[str, Any] = {
        "path": "aggregate",
        "engine": engine,
        "calib": {"source": calib, "rows": float(ctab.fine["n"].sum()), "table_rows": len(ctab.fine)},
        "score_kind": kind,
        "methods": {},
    }
    del ctab  # fitted: a distinct-score calibration table (~1e6 groups) need not outlive the fits
    seg_rows = pd.DataFrame()
    if test_tables is not None:
        ttab = test_tables()
        record["test"] = {
            "source": test,
            "rows": float(ttab.fine["n"].sum()),
            "table_rows": len(ttab.fine),
            "segment_table_rows": {c: len(t) for c, t in ttab.segments.items()},
        }
        record["uncalibrated"] = _brief(metrics_from_table(ttab.fine))
        rows = [_segment_rows(ttab, "uncalibrated", None, kind, replicates, seed)]
        record["uncalibrated"]["segments"] = _top(rows[0])
        for m, cal in fits.items():
            record["methods"][m] = _brief(metrics_from_table(calibrated_table(ttab.fine, cal, kind)))
            rows.append(_segment_rows(ttab, m, cal, kind, replicates, seed))
            record["methods"][m]["segments"] = _top(rows[-1])
        seg_rows = pd.concat(rows, ignore_index=True)
    else:
        record["methods"] = {m: {} for m in fits}
    record["seconds"] = round(time.perf_counter() - t0, 2)
    out.mkdir(parents=True, exist_ok=True)
    for m, cal in fits.items():
        with atomic_path(out / f"{m}.json") as tmp:
            tmp.write_text(cal.to_json())
    if not seg_rows.empty:
        with atomic_path(out / "segments.parquet") as tmp:
            seg_rows.to_parquet(tmp, index=False)
        record["segments_file"] = "segments.parquet"
    write_json(out / "fit.json", record)
    return record
