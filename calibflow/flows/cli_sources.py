"""``calibflow init`` (declare a file of yours as a source) and ``calibflow apply`` (use a chosen calibrator).

``init`` inspects the file with DuckDB (columns, types, rows, label balance, time range), appends the source
to params.yaml (the one command that edits it, on the user's explicit request; refuses to replace a source
of the same name; the rest of the file, comments included, is kept byte for byte) and prints the next
command. ``apply`` streams any CSV/Parquet file (or folder, or glob) through a saved calibrator in Arrow
batches, so memory stays bounded whatever the size, keeps every input column, adds ``calibrated`` and
writes the output atomically. Both print one line on a user error (``--debug`` or ``CALIBFLOW_DEBUG=1``
for the traceback).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
import yaml

from calibflow import sources as src


def _fail(exc: Exception, debug: bool) -> None:
    if debug or os.environ.get("CALIBFLOW_DEBUG"):
        raise exc
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def _guarded(fn: Callable[[], Any], debug: bool) -> Any:
    try:
        return fn()
    except (ValueError, FileNotFoundError, KeyError) as exc:
        _fail(exc, debug)


# ----------------------------------------------------------------------------------------------- init


def inspect(spec: src.SourceSpec) -> dict[str, Any]:
    """Columns and types, rows, label balance, time range and score range of a declared source."""
    con = src.connect()
    try:
        rel = src.relation(spec, con)
        src.check_columns(spec, rel.columns, spec.role_columns())
        src.check_columns(spec, rel.columns, src.feature_columns(spec, rel.columns))
        types = dict(zip(rel.columns, [str(t) for t in rel.types], strict=True))
        q = '"' + spec.label.replace('"', '""') + '"'
        balance = rel.aggregate(f"{q} AS label, count(*) AS n", q).order("label").fetchall()
        out: dict[str, Any] = {
            "columns": types,
            "rows": int(sum(n for _, n in balance)),
            "labels": {str(v): int(n) for v, n in balance},
        }
        for role in ("time", "score"):
            col = getattr(spec, role)
            if col is not None:
                c = '"' + col.replace('"', '""') + '"'
                lo, hi = rel.aggregate(f"min({c}), max({c})").fetchall()[0]
                out[f"{role}_range"] = [str(lo), str(hi)]
        return out
    finally:
        con.close()


_SOURCES_LINE = re.compile(r"^sources:[ \t]*(\{[ \t]*\})?[ \t]*(#.*)?$")


def add_source_text(text: str, name: str, decl: dict[str, Any]) -> str:
    """``text`` (a params.yaml) with ``sources.<name>`` added; every other line kept as it was."""
    block = yaml.safe_dump({name: decl}, sort_keys=False, default_flow_style=False)
    block = "".join(f"  {line}\n" for line in block.splitlines())
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = _SOURCES_LINE.match(line.rstrip("\n"))
        if not m:
            continue
        if m.group(1):  # `sources: {}`: open the mapping, keep any comment
            lines[i] = "sources:" + (f"  {m.group(2)}" if m.group(2) else "") + "\n"
        end = i + 1
        while end < len(lines) and (lines[end].startswith((" ", "\t")) or not lines[end].strip()):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():  # keep blank lines after the section
            end -= 1
        return "".join(lines[:end]) + block + "".join(lines[end:])
    sep = "" if not text or text.endswith("\n") else "\n"
    return text + sep + "\n# Your own data (docs/sources.md), added by `calibflow init`.\nsources:\n" + block


def init_source(
    params_path: Path,
    name: str,
    decl: dict[str, Any],
) -> tuple[src.SourceSpec, dict[str, Any]]:
    """Check the declaration and the file, then add it to ``params_path`` atomically."""
    from calibflow.io import write_text

    spec = src.parse_source(name, decl)
    text = params_path.read_text(encoding="utf-8") if params_path.is_file() else ""
    current = yaml.safe_load(text) or {}
    existing = current.get("sources") or {}
    if name in existing:
        raise ValueError(
            f"source {name!r} is already in {params_path}; pick another --name or edit that entry yourself"
        )
    if name in ((current.get("datasets") or {}).get("names") or []):
        raise ValueError(f"{name!r} is a dataset in {params_path}; pick another --name")
    base = params_path.resolve().parent
    info = inspect(spec.at(base))
    new = add_source_text(text, name, decl)
    if (yaml.safe_load(new) or {}).get("sources", {}).get(name) != decl:
        raise ValueError(
            f"could not add the source to {params_path} safely; add it by hand (docs/sources.md)"
        )
    write_text(params_path, new)
    return spec, info


def _relpath(path: str, base: Path) -> str:
    """``path`` relative to the project when it is inside it (portable params), else absolute."""
    p = Path(path).resolve() if not any(ch in path for ch in "*?[") else Path(os.path.abspath(path))
    try:
        return str(p.relative_to(base.resolve()))
    except ValueError:
        return str(p)


def init(
    data: str = typer.Option(..., "--data", help="A CSV/Parquet file, a folder of them, or a glob."),
    label: str = typer.Option(..., "--label", help="The 0/1 (or boolean) outcome column."),
    score: str = typer.Option(None, "--score", help="Your model's output column (calibrated directly)."),
    score_kind: str = typer.Option(
        None, "--score-kind", help="probability | logit | score (default: guessed)."
    ),
    features: str = typer.Option(
        None, "--features", help="`all`, or comma-separated columns: train XGBoost."
    ),
    time: str = typer.Option(
        None, "--time", help="A date/timestamp column: calibrate on the past, test on the future."
    ),
    segments: list[str] = typer.Option(None, "--segments", help="Segment column(s), repeatable."),
    weight: str = typer.Option(None, "--weight", help="A row weight column."),
    positive: str = typer.Option(None, "--positive", help="The label value counting as 1 (if not 0/1)."),
    name: str = typer.Option(None, "--name", help="The source's name (default: the file's name)."),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", help="The params file to add it to."),
    benchmark: bool = typer.Option(
        False, "--benchmark", help="A new project also runs the built-in benchmark datasets."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Declare a file of yours as a calibflow source (a new folder becomes a project); print what's next."""

    def go() -> None:
        base = params_file.resolve().parent
        decl: dict[str, Any] = {"path": _relpath(data, base), "label": label}
        if positive is not None:
            decl["positive"] = _coerce(positive)
        if score is not None:
            decl["score"] = score
            kind = score_kind or _guess_kind(data, score, label)
            decl["score_kind"] = kind
        if features is not None:
            decl["features"] = (
                "all" if features == "all" else [f.strip() for f in features.split(",") if f.strip()]
            )
        for key, val in (("time", time), ("weight", weight)):
            if val is not None:
                decl[key] = val
        if segments:
            decl["segments"] = list(segments)
        nm = name or re.sub(r"[^A-Za-z0-9_]+", "_", Path(data.split("*")[0].rstrip("/")).stem or "source")
        nm = nm if nm[:1].isalpha() else f"s_{nm}"
        created = _new_project(params_file, nm, decl, benchmark)
        spec, info = init_source(params_file, nm, decl)
        if created is not None:
            typer.echo(f"new calibflow project in {created.folder}: {', '.join(created.ran + created.wrote)}")
        _print_summary(spec, info, params_file)

    _guarded(go, debug)


def _new_project(params_file: Path, name: str, decl: dict[str, Any], benchmark: bool):
    """A folder without params.yaml becomes a calibflow project, once the source itself checks out."""
    from calibflow.flows import project

    if params_file.exists():
        return None
    base = params_file.resolve().parent
    if params_file.name != "params.yaml":
        raise ValueError(f"{params_file} does not exist; a new project's params file is params.yaml")
    inspect(src.parse_source(name, decl).at(base))  # a bad source leaves the folder as it was
    return project.create(base, benchmark=benchmark)


def _coerce(text: str) -> Any:
    with contextlib.suppress(ValueError):
        return int(text)
    return {"true": True, "false": False}.get(text.lower(), text)


def _guess_kind(data: str, score: str, label: str) -> str:
    """``probability`` when every score lies in [0, 1], else ``score`` (say ``--score-kind logit`` if so)."""
    spec = src.parse_source("probe", {"path": data, "label": label, "score": score})
    con = src.connect()
    try:
        rel = src.relation(spec, con)
        src.check_columns(spec, rel.columns, [score])
        c = '"' + score.replace('"', '""') + '"'
        lo, hi = rel.aggregate(f"min({c}), max({c})").fetchall()[0]
    finally:
        con.close()
    try:
        return "probability" if lo is not None and float(lo) >= 0 and float(hi) <= 1 else "score"
    except (TypeError, ValueError):
        return "score"


def _print_summary(spec: src.SourceSpec, info: dict[str, Any], params_file: Path) -> None:
    cols = ", ".join(f"{c} ({t})" for c, t in info["columns"].items())
    typer.echo(f"source {spec.name!r}: {spec.path}")
    typer.echo(f"  {info['rows']:,} rows; columns: {cols}")
    bal = ", ".join(f"{v}: {n:,}" for v, n in info["labels"].items())
    typer.echo(f"  label {spec.label!r}: {bal}")
    if "time_range" in info:
        typer.echo(f"  time {spec.time!r}: {info['time_range'][0]} to {info['time_range'][1]}")
    if "score_range" in info:
        lo, hi = info["score_range"]
        typer.echo(f"  score {spec.score!r} ({spec.score_kind}): {lo} to {hi}")
    typer.echo(f"added to {params_file} (split: {spec.split})")
    typer.echo(f"next: calibflow run    (or `make run`; then models/{spec.name}/calibrator.json is yours)")
    if spec.score is None:  # a features source: the calibrator maps the trained model's margin
        typer.echo(f"then: score new rows with data/models/{spec.name}.json (XGBoost JSON, margins), and")
    typer.echo(
        f"then: calibflow apply --calibrator models/{spec.name}/calibrator.json --input NEW.parquet "
        f"--score {spec.score or 'MARGIN'} --output scored.parquet"
    )


# ---------------------------------------------------------------------------------------------- apply


def _card_kind(calibrator: Path) -> str | None:
    card = calibrator.with_name("card.json")
    if card.is_file():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return json.loads(card.read_text())["input"]["score_kind"]
    return None


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _check_batch(x, kind: str, score: str, offset: int) -> None:
    import numpy as np

    bad = ~np.isfinite(x)
    what = "not finite (NaN or inf)"
    if not bad.any() and kind == "probability":
        bad = (x < 0) | (x > 1)
        what = "outside [0, 1] (use --score-kind logit or score if these are not probabilities)"
    if bad.any():
        rows = ", ".join(str(offset + int(i)) for i in np.flatnonzero(bad)[:5])
        raise ValueError(
            f"column {score!r}: {int(bad.sum())} score(s) {what} in this batch, e.g. rows {rows}"
        )


def apply_file(
    calibrator: Path,
    input_path: str,
    score: str,
    output: Path,
    score_kind: str | None = None,
    batch_rows: int = 1_000_000,
    column: str = "calibrated",
) -> int:
    """Stream ``input_path`` through the calibrator; write every column plus ``column``; return the rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from calibflow.calibrators import from_json

    if not calibrator.is_file():
        raise FileNotFoundError(f"{calibrator}: no such calibrator (run `calibflow run` to produce one)")
    cal = from_json(calibrator.read_text())
    kind = score_kind or _card_kind(calibrator) or "logit"
    if kind not in src.SCORE_KINDS:
        raise ValueError(f"--score-kind {kind!r} is not one of {'|'.join(src.SCORE_KINDS)}")
    input_kind = str(getattr(cal, "input", "logit"))
    fmt = "csv" if output.name.lower().endswith((".csv", ".csv.gz")) else "parquet"
    spec = src.SourceSpec(name="input", path=input_path, label=score, score=score)
    con = src.connect()
    n = 0
    try:
        rel = src.relation(spec, con)
        src.check_columns(spec, rel.columns, [score])
        if column in rel.columns:
            raise ValueError(f"{input_path} already has a column {column!r}; pass --column with another name")
        reader = rel.to_arrow_reader(int(batch_rows))
        with _atomic_file(output) as tmp:
            writer = None
            try:
                for batch in reader:
                    x = batch.column(score).to_numpy(zero_copy_only=False).astype(np.float64)
                    _check_batch(x, kind, score, n)
                    p = cal.predict(src.calibrator_input(x, kind, input_kind))
                    out = pa.RecordBatch.from_arrays(
                        [*batch.columns, pa.array(p)], [*batch.schema.names, column]
                    )
                    if writer is None:
                        writer = (
                            pacsv.CSVWriter(tmp, out.schema)
                            if fmt == "csv"
                            else pq.ParquetWriter(tmp, out.schema)
                        )
                    writer.write_batch(out)
                    n += batch.num_rows
                if writer is None:
                    raise ValueError(f"{input_path}: no rows to calibrate")
            finally:
                if writer is not None:
                    writer.close()
    finally:
        con.close()
    return n


def apply(
    calibrator: Path = typer.Option(..., "--calibrator", help="models/<name>/calibrator.json"),
    input_path: str = typer.Option(..., "--input", help="CSV/Parquet file, folder or glob to calibrate."),
    score: str = typer.Option(..., "--score", help="The column holding your model's score."),
    output: Path = typer.Option(..., "--output", help="Output .parquet or .csv (written atomically)."),
    score_kind: str = typer.Option(
        None, "--score-kind", help="probability | logit | score (default: the card's)."
    ),
    batch_rows: int = typer.Option(1_000_000, "--batch-rows", min=1, help="Rows per streamed batch."),
    column: str = typer.Option("calibrated", "--column", help="Name of the added column."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Add a `calibrated` column to a file of scores with a saved calibrator (streamed, bounded memory)."""
    n = _guarded(
        lambda: apply_file(calibrator, input_path, score, output, score_kind, batch_rows, column), debug
    )
    typer.echo(f"calibrated {n:,} rows -> {output}", err=sys.stderr.isatty())


def register(app: typer.Typer) -> None:
    """Add ``init`` and ``apply`` to the ``calibflow`` app (one call in calibflow/flows/cli.py)."""
    app.command(name="init")(init)
    app.command(name="apply")(apply)
