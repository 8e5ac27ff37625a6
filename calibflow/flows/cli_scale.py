"""``calibflow fit``: calibrators fitted and evaluated from one streaming pass over Parquet files of any size.

The pipeline's stages before calibrate (prepare, validate, train) hold a source's rows in memory; a log of
1e8-1e9 rows goes through this command instead: the calibration files and (optionally) the test files are
each reduced to a bucket table by one DuckDB pass (``calibflow.aggregate``; docs/benchmarks/scale.md), every
method is fitted from the calibration table, and every metric with Poisson-bootstrap intervals is computed
on the test table. Output: ``<out>/<method>.json`` (the calibrators, what ``calibflow apply`` reads) and
``<out>/fit.json`` (the metrics), written atomically; a failed run leaves the previous ones in place.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import typer

from calibflow.flows.cli_sources import _guarded

DEFAULT_METHODS = "platt,temperature,beta,spline,isotonic,histogram,bbq"
#: Most segment values fit reports metrics for (each costs a bootstrap of every metric; a column with
#: millions of values, such as an id, is a mistake, not a breakdown).
MAX_SEGMENT_VALUES = 1_000


def fit_files(
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
) -> dict[str, Any]:
    """Fit ``methods`` on the ``calib`` files and evaluate them on the ``test`` files; write ``out``."""
    from calibflow.aggregate import aggregate_duckdb, fit_from_table, metrics_from_table
    from calibflow.aggregate.metrics import calibrated_table
    from calibflow.io import atomic_path, write_json
    from calibflow.sources import record_score_kind

    kind = "logit" if score_kind in ("logit", "score") else score_kind
    t0 = time.perf_counter()
    _check_out(out, methods)
    _check_inputs(calib, score, label, weight, segments)
    if test:
        _check_inputs(test, score, label, None, ())
    opts = {"kind": kind, "segments": segments, "distinct_max": distinct_max}
    ctab = aggregate_duckdb(calib, score, label, weight=weight, **opts)
    # the user's scale goes into every file, so that `calibflow apply` converts as the fit did
    fits = {m: record_score_kind(fit_from_table(ctab, m, kind), score_kind) for m in methods}
    record: dict[str, Any] = {
        "path": "aggregate",
        "calib": {"source": calib, "rows": float(ctab["n"].sum()), "table_rows": len(ctab)},
        "score_kind": kind,
        "methods": {},
    }
    if test:
        ttab = aggregate_duckdb(test, score, label, replicates=replicates, seed=seed, **opts)
        record["test"] = {"source": test, "rows": float(ttab["n"].sum()), "table_rows": len(ttab)}
        record["uncalibrated"] = _brief(metrics_from_table(ttab))
        for m, cal in fits.items():
            record["methods"][m] = _brief(metrics_from_table(calibrated_table(ttab, cal, kind)))
    record["seconds"] = round(time.perf_counter() - t0, 2)
    out.mkdir(parents=True, exist_ok=True)
    for m, cal in fits.items():
        with atomic_path(out / f"{m}.json") as tmp:
            tmp.write_text(cal.to_json())
    write_json(out / "fit.json", record)
    return record


def _check_out(out: Path, methods: list[str]) -> None:
    """One line for an ``--out`` that is a file; a killed earlier fit's temporary files are removed."""
    from calibflow.pipeline._common import remove_stale_temps

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; give a folder for <method>.json and fit.json")
    for name in (*methods, "fit"):
        remove_stale_temps(out / f"{name}.json")


def _check_inputs(paths: str, score: str, label: str, weight: str | None, segments: tuple[str, ...]) -> None:
    """Column types and weights (``check_table_inputs``); segment columns with a bounded number of values."""
    import duckdb

    from calibflow.aggregate.table import expand
    from calibflow.sources import check_table_inputs, quote_ident, require_columns

    con = duckdb.connect()
    source, params = "read_parquet($files)", {"files": expand(paths)}
    try:
        check_table_inputs(con, source, params, score, label, weight)
        if not segments:
            return
        have = [r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {source}", params).fetchall()]
        require_columns(have, segments, where=" in the source")
        key = f"hash({', '.join(quote_ident(c) for c in segments)})"
        (n,) = con.execute(f"SELECT approx_count_distinct({key}) FROM {source}", params).fetchall()[0]
    finally:
        con.close()
    if n > MAX_SEGMENT_VALUES:
        raise ValueError(
            f"--segment {', '.join(segments)} has about {n:,} distinct values; fit reports metrics for at "
            f"most {MAX_SEGMENT_VALUES:,} segments: use a coarser column, or leave --segment out"
        )


def _brief(res: dict) -> dict[str, Any]:
    keep = ("log_loss", "brier", "calibration_ratio", "ece", "auc", "auc_tie_bound", "n", "positives", "ci")
    out = {k: v for k, v in res["overall"].items() if k in keep}
    if res["segments"]:
        out["segments"] = [
            {k: v for k, v in r.items() if k in ("segment", "calibration_ratio", "log_loss", "n", "ci")}
            for r in res["segments"]
        ]
    return out


def _summary(record: dict[str, Any]) -> str:
    if "test" not in record:
        return f"fitted {', '.join(record['methods'] or [])} on {record['calib']['rows']:,.0f} rows"
    lines = [f"test: {record['test']['rows']:,.0f} rows; log loss [95% CI], calibration ratio, ECE"]
    rows = {"uncalibrated": record["uncalibrated"], **record["methods"]}
    for name, r in rows.items():
        lo, hi = r["ci"]["log_loss"]
        ratio, ece = r["calibration_ratio"], r["ece"]
        lines.append(f"  {name:<14} {r['log_loss']:.5f} [{lo:.5f}, {hi:.5f}]  {ratio:.4f}  {ece:.5f}")
    return "\n".join(lines)


def fit(
    calib: str = typer.Option(..., "--calib", help="Parquet file, folder or glob: the calibration rows."),
    test: str = typer.Option(None, "--test", help="Parquet file, folder or glob to evaluate on (optional)."),
    score: str = typer.Option(..., "--score", help="The column holding your model's score."),
    label: str = typer.Option(..., "--label", help="The 0/1 outcome column."),
    out: Path = typer.Option(..., "--out", help="Folder for <method>.json and fit.json."),
    methods: str = typer.Option(DEFAULT_METHODS, "--methods", help="Comma-separated calibrators."),
    score_kind: str = typer.Option("probability", "--score-kind", help="probability | logit"),
    segment: list[str] = typer.Option(None, "--segment", help="Segment column (repeatable)."),
    weight: str = typer.Option(None, "--weight", help="Frequency-weight column for the fit."),
    replicates: int = typer.Option(32, "--replicates", min=0, help="Poisson-bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Seed of the replicates."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Fit and evaluate calibrators from one streaming pass over Parquet files (1e8+ rows, bounded memory)."""
    from calibflow.calibrators import available

    names = [m.strip() for m in methods.split(",") if m.strip()]

    def run() -> dict[str, Any]:
        unknown = [m for m in names if m not in available()]
        if unknown:
            raise ValueError(f"unknown method {unknown[0]!r}; choose from {', '.join(available())}")
        if score_kind not in ("probability", "logit", "score"):
            raise ValueError(f"--score-kind {score_kind!r} is not one of probability|logit")
        return fit_files(calib, test, score, label, out, names, score_kind, tuple(segment or ()), weight,
                         replicates, seed)

    record = _guarded(run, debug)
    typer.echo(_summary(record))
    typer.echo(f"wrote {len(names)} calibrators and fit.json -> {out}", err=sys.stderr.isatty())


def register(app: typer.Typer) -> None:
    app.command(name="fit")(fit)
