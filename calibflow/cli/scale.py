"""``calibflow fit``: calibrators fitted and evaluated from one streaming pass over Parquet files of any size.

The same code path as the pipeline's aggregate stages (``calibflow.aggregate.run.fit_files``): the
calibration files and (optionally) the test files are each reduced to bucket tables by one pass
(``calibflow.aggregate``; docs/benchmarks/scale.md), every method is fitted from the calibration tables,
and every metric with Poisson-bootstrap intervals is computed on the test tables, overall and per segment
value. Output: ``<out>/<method>.json`` (what ``calibflow apply`` reads), ``<out>/fit.json`` (the metrics)
and ``segments.parquet``, written atomically; a failed run leaves the previous ones in place.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from calibflow.errors import guarded, input_errors


def __getattr__(name: str):
    if name == "DEFAULT_METHODS":  # the classes marked ``scale_default``, comma-separated
        from calibflow.calibrators import scale_default_methods

        return ",".join(scale_default_methods())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _check_out(out: Path, methods: list[str]) -> None:
    """One line for an ``--out`` that is a file; a killed earlier fit's temporary files are removed."""
    from calibflow.io import remove_stale_temps

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for <method>.json and fit.json")
    from calibflow.flows import check_writable

    # read-only, full: one line before the pass; ``out`` itself is created only by a fit that succeeds
    nearest = next((p for p in (out, *out.absolute().parents) if p.is_dir()), Path("."))
    check_writable(nearest, ".", dvc=False)
    for name in (*methods, "fit"):
        remove_stale_temps(out / f"{name}.json")


def _summary(record: dict[str, Any], weight: str | None = None) -> str:
    """The lines a person reads: rows as a count or a weight sum with its unit, a ratio with no positives
    to divide by as ``n/a`` and why."""
    from calibflow.report._format import fmt_ratio, fmt_rows

    if "test" not in record:
        return f"fitted {', '.join(record['methods'] or [])} on {fmt_rows(record['calib']['rows'], weight)}"
    lines = [f"test: {fmt_rows(record['test']['rows'], weight)}; log loss [95% CI], calibration ratio, ECE"]
    rows = {"uncalibrated": record["uncalibrated"], **record["methods"]}
    for name, r in rows.items():
        lo, hi = r["ci"]["log_loss"]
        ratio = fmt_ratio(r["calibration_ratio"], r.get("positives"), "no positives in the test rows")
        lines.append(f"  {name:<14} {r['log_loss']:.5f} [{lo:.5f}, {hi:.5f}]  {ratio}  {r['ece']:.5f}")
    return "\n".join(lines)


def _emit_sql(calib: str | None, score: str | None, label: str | None, score_kind: str, segments: list[str],
              weight: str | None, dialect: str, cells: int) -> str:
    from calibflow.aggregate.sql_pass import pass_sql

    if not (score and label):
        raise ValueError("--emit-sql needs --score and --label (and --calib: the table the query reads)")
    kind = "logit" if score_kind in ("logit", "score") else score_kind
    return pass_sql(score, label, kind, segments, weight, cells=cells, dialect=dialect, table=calib)


def fit(  # noqa: PLR0913
    calib: str = typer.Option(None, "--calib", help="Parquet file, folder or glob: the calibration rows "
                              "(engine spark: or a Spark table's name; --emit-sql: the table to read)."),
    test: str = typer.Option(None, "--test", help="Parquet file, folder or glob to evaluate on (optional)."),
    score: str = typer.Option(None, "--score", help="The column holding your model's score."),
    label: str = typer.Option(None, "--label", help="The 0/1 outcome column."),
    out: Path = typer.Option(None, "--out", help="Folder for <method>.json and fit.json."),
    methods: str = typer.Option(
        None, "--methods", help="Comma-separated calibrators (default: those marked scale_default)."
    ),
    score_kind: str = typer.Option("probability", "--score-kind", help="probability | logit"),
    segment: list[str] = typer.Option(None, "--segment", help="Segment column (repeatable)."),
    weight: str = typer.Option(None, "--weight", help="Frequency-weight column for the fit."),
    replicates: int = typer.Option(32, "--replicates", min=0, help="Poisson-bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Seed of the replicates."),
    engine: str = typer.Option(
        "duckdb", "--engine", help="duckdb (this machine) | dask (a Dask cluster) | spark (a Spark session)."
    ),
    dask_address: str = typer.Option(
        None, "--dask-address", help="Dask scheduler (tcp://host:8786); default: a local cluster."
    ),
    spark_master: str = typer.Option(
        None, "--spark-master", help="Spark master (spark://host:7077, yarn); default: local[2]."
    ),
    emit_sql: bool = typer.Option(
        False, "--emit-sql", help="Print the pass as one SQL query for a warehouse, and stop."
    ),
    dialect: str = typer.Option("duckdb", "--dialect", help="bigquery | snowflake | trino | spark | duckdb"),
    cells: int = typer.Option(256, "--cells", min=2, help="--emit-sql: coarse cells per segment value."),
    from_table: str = typer.Option(
        None, "--from-table", help="Fit from the --emit-sql query's result saved as Parquet (not rows)."
    ),
    test_table: str = typer.Option(
        None, "--test-table", help="Evaluate on the --emit-sql query's result over the test rows."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Fit and evaluate calibrators from one streaming pass over Parquet files (1e8+ rows, bounded memory)."""
    from calibflow.calibrators import available, scale_default_methods

    methods = methods if methods is not None else ",".join(scale_default_methods())
    names = [m.strip() for m in methods.split(",") if m.strip()]
    if emit_sql:
        typer.echo(guarded(lambda: _emit_sql(calib, score, label, score_kind, list(segment or ()), weight,
                                             dialect, cells), input_errors(), debug))
        return

    def run() -> dict[str, Any]:
        from calibflow.aggregate.run import fit_files

        unknown = [m for m in names if m not in available()]
        if unknown:
            raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(available())}")
        if score_kind not in ("probability", "logit", "score"):
            raise ValueError(f"--score-kind {score_kind!r} is not one of probability|logit")
        if out is None:
            raise ValueError("--out is missing: give a folder for <method>.json and fit.json")
        if from_table:
            if calib or test:
                raise ValueError("--from-table fits from a query's result: leave out --calib and --test "
                                 "(--test-table evaluates on the test rows' result)")
        elif test_table:
            raise ValueError("--test-table goes with --from-table (the query's result over the calibration "
                             "rows); with rows, give --test")
        elif not (calib and score and label):
            raise ValueError("give --calib, --score and --label (or --from-table with a query's result)")
        _check_out(out, names)
        if from_table:
            return fit_files(from_table, test_table, score or "", label or "", out, names, score_kind,
                             replicates=replicates, seed=seed, from_results=True)
        return fit_files(calib, test, score, label, out, names, score_kind, tuple(segment or ()), weight,
                         replicates, seed, engine=engine, dask_address=dask_address,
                         spark_master=spark_master)

    record = guarded(run, input_errors(), debug)
    typer.echo(_summary(record, weight))
    typer.echo(f"wrote {len(names)} calibrators and fit.json -> {out}", err=sys.stderr.isatty())


def register(app: typer.Typer) -> None:
    app.command(name="fit")(fit)
