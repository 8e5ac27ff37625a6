"""``calibflow export``: a calibrator as a lookup table, a SQL expression or an ONNX model (calibflow.export).

For serving stacks without Python: a feature store or warehouse (the SQL runs in DuckDB, BigQuery and Spark
SQL), a C++/Java/C# service (ONNX, or the JSON table: knots and a four-line interpolation). The output is
written atomically; the calibrator file is only read.
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from calibflow.errors import guarded, input_errors

#: The extension each format is written with; another format's extension is refused.
EXTENSIONS = {"table": ".json", "sql": ".sql", "onnx": ".onnx"}


def export_command(
    calibrator: Path = typer.Option(..., "--calibrator", help="calibrator.json (not card.json)."),
    fmt: str = typer.Option(..., "--format", help="table | sql | onnx"),
    output: Path = typer.Option(..., "--output", help="Where to write it (.json, .sql or .onnx)."),
    column: str = typer.Option("score", "--column", help="The score column (SQL) or input name (ONNX)."),
    tol: float = typer.Option(1e-7, "--tol", min=1e-12, max=1e-3, help="Knot placement tolerance."),
    score_kind: str = typer.Option(
        None, "--score-kind", help="Your score: probability | logit | score (default: the card beside it)."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Export a fitted calibrator for serving without Python: lookup table, SQL expression or ONNX."""
    from calibflow import export
    from calibflow.io import write_bytes, write_text

    def run() -> export.Table:
        if fmt not in EXTENSIONS:
            raise ValueError(f"--format {fmt!r}: use one of {', '.join(EXTENSIONS)}")
        other = {ext: f for f, ext in EXTENSIONS.items() if f != fmt}
        if output.suffix.lower() in other:
            raise ValueError(
                f"--output {output.name}: a {other[output.suffix.lower()]} extension for --format {fmt}; "
                f"use {EXTENSIONS[fmt]}"
            )
        if output.resolve() == calibrator.resolve():
            raise ValueError("--output is the calibrator file itself; write the export elsewhere")
        text = calibrator.read_text(encoding="utf-8")
        data, table = export.export(text, fmt, column, tol, score_kind or card_score_kind(calibrator))
        if isinstance(data, bytes):
            write_bytes(output, data)
        else:
            write_text(output, data)
        return table

    table = guarded(run, input_errors(), debug)
    typer.echo(
        f"wrote {fmt} of {table.method} -> {output}: {table.x.size} knots, input {table.input_text}, "
        f"max error against predict {table.max_error:.1e}",
        err=sys.stderr.isatty(),
    )


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
