"""``calibflow export``: a calibrator as SQL, a lookup table, an ONNX model or its segment parameters.

For serving stacks without Python: a feature store or warehouse (``--format sql``: apply's numbers exactly,
in DuckDB, PostgreSQL, SQLite, Spark SQL or BigQuery via ``--dialect``; docs/serving.md), a C++/Java/C#
service (ONNX, or the JSON table: knots and a four-line interpolation). ``--format`` decides the content
and the output's extension must be that format's. The output is written atomically; the calibrator file is
only read, bounded and validated first (calibflow.calibrator_file).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from calibflow.errors import guarded, input_errors

#: The extension each format is written with; another format's extension is refused.
EXTENSIONS = {"table": ".json", "sql": ".sql", "onnx": ".onnx", "params": ".csv"}


def export_command(
    calibrator: Path = typer.Option(..., "--calibrator", help="calibrator.json (not card.json)."),
    fmt: str = typer.Option(..., "--format", help="sql | table | onnx | params (segment parameters, CSV)"),
    output: Path = typer.Option(..., "--output", help="Where to write it (.sql, .json, .onnx or .csv)."),
    column: str = typer.Option("score", "--column", help="The score column (SQL) or input name (ONNX)."),
    dialect: str = typer.Option(
        "duckdb", "--dialect", help="SQL dialect: duckdb | postgres | sqlite | spark | bigquery."
    ),
    table: str = typer.Option(
        None, "--table", help="SQL: the table to read; gives a query adding --output-column (knot and "
        "segmented maps are always a query, over 'scores' by default)."
    ),
    output_column: str = typer.Option("calibrated", "--output-column", help="SQL: the column added."),
    tol: float = typer.Option(1e-7, "--tol", min=1e-12, max=1e-3, help="Knot placement tolerance."),
    score_kind: str = typer.Option(
        None, "--score-kind", help="Your score: probability | logit | score (default: the card beside it)."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Export a fitted calibrator for serving without Python: lookup table, SQL expression or ONNX."""
    from calibflow import export
    from calibflow.io import write_bytes, write_text

    table_name = table

    def run():
        from calibflow.calibrator_file import read

        if fmt not in EXTENSIONS:
            raise ValueError(f"--format {fmt!r}: use one of {', '.join(EXTENSIONS)}")
        if output.suffix.lower() != EXTENSIONS[fmt]:
            other = {ext: f for f, ext in EXTENSIONS.items() if f != fmt}.get(output.suffix.lower())
            what = f"a {other} extension" if other else f"extension {output.suffix or '(none)'!r}"
            raise ValueError(
                f"--output {output.name}: {what} for --format {fmt}; use {EXTENSIONS[fmt]} "
                "(--format decides the content)"
            )
        if output.exists() and output.resolve() == calibrator.resolve():
            raise ValueError("--output is the calibrator file itself; write the export elsewhere")
        if not calibrator.is_file():
            raise FileNotFoundError(f"--calibrator {calibrator}: no such file")
        text = read(calibrator)
        data, table = export.export(text, fmt, column, tol, score_kind or card_score_kind(calibrator),
                                    dialect=dialect, table=table_name, output_column=output_column)
        if isinstance(data, bytes):
            write_bytes(output, data)
        else:
            write_text(output, data)
        return table

    built = guarded(run, input_errors(), debug)
    if isinstance(built, export.Table):
        what = (
            f"{built.x.size} knots, input {built.input_text}, "
            f"max error against predict {built.max_error:.1e}"
        )
        if built.max_error > tol:
            what += f" (above --tol {tol:g}: --format sql is exact)"
    elif fmt == "sql":
        what = f"{dialect}, input {built.input_text}; same numbers as `calibflow apply`"
    else:
        what = "one row per segment level"
    typer.echo(f"wrote {fmt} of {built.method if fmt != 'params' else built.name} -> {output}: {what}",
               err=sys.stderr.isatty())


def card_score_kind(calibrator: Path) -> str | None:
    """The user's score kind from the select stage's ``card.json`` beside the calibrator
    (``input.score_kind``): a pipeline calibrator takes the model's logit while the user's column may hold a
    probability, and a map fed the wrong one would serve wrong probabilities without a word."""
    import json

    card = calibrator.with_name("card.json")
    if calibrator.name != "calibrator.json" or not card.is_file():
        return None
    try:
        kind = (json.loads(card.read_text(encoding="utf-8")).get("input") or {}).get("score_kind")
    except (ValueError, AttributeError):
        return None
    return kind if kind in ("probability", "logit", "score") else None


def register(app: typer.Typer) -> None:
    app.command(name="export")(export_command)
