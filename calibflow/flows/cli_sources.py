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

from calibflow import source_checks
from calibflow import sources as src


def _fail(exc: Exception, debug: bool) -> None:
    if debug or os.environ.get("CALIBFLOW_DEBUG"):
        raise exc
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def _guarded(fn: Callable[[], Any], debug: bool) -> Any:
    import duckdb

    try:
        return fn()
    except (ValueError, FileNotFoundError, KeyError) as exc:
        _fail(exc, debug)
    # an unwritable folder, a folder where a file goes, a full disk, a corrupt input: one line, not 70
    except (OSError, duckdb.Error) as exc:
        _fail(exc if debug or os.environ.get("CALIBFLOW_DEBUG") else ValueError(_one_line(exc)), debug)


def _one_line(exc: Exception) -> str:
    """``path: reason`` for an OS error, the first line of anything else."""
    if isinstance(exc, OSError) and exc.filename and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# ----------------------------------------------------------------------------------------------- init


def inspect(spec: src.SourceSpec) -> dict[str, Any]:
    """Columns and types, rows, label balance, time and score range of a declared source (checked)."""
    return source_checks.inspect_source(spec, spec.score_kind, spec.time_format)


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
    info: dict[str, Any] | None = None,
) -> tuple[src.SourceSpec, dict[str, Any]]:
    """Check the declaration and the file (unless ``info`` holds that check), then add it atomically."""
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
    info = info or inspect(spec.at(base))
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
    segments: list[str] = typer.Option(
        None, "--segments", help="Segment column(s): comma-separated (country,device) or repeated."
    ),
    weight: str = typer.Option(None, "--weight", help="A row weight column."),
    positive: str = typer.Option(None, "--positive", help="The label value counting as 1 (if not 0/1)."),
    time_format: str = typer.Option(
        None,
        "--time-format",
        help="Format of text dates, e.g. '%d/%m/%Y' (default: detected from all values).",
    ),
    name: str = typer.Option(
        None, "--name", help="The source's name: lowercase letters, digits, _ (default: the file's name)."
    ),
    params_file: Path = typer.Option(Path("params.yaml"), "--params", help="The params file to add it to."),
    monitor: bool = typer.Option(False, "--monitor", help="Also add it to monitor.sources (needs --time)."),
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
            if score_kind is not None:  # else guessed from the finite scores below
                decl["score_kind"] = score_kind
        if features is not None:
            decl["features"] = (
                "all" if features == "all" else [f.strip() for f in features.split(",") if f.strip()]
            )
        for key, val in (("time", time), ("weight", weight)):
            if val is not None:
                decl[key] = val
        if segments:
            decl["segments"] = [c.strip() for s in segments for c in s.split(",") if c.strip()]
        nm = source_name(name, data)
        # Everything the run would refuse later is refused now, before params.yaml is touched.
        info = source_checks.inspect_source(src.parse_source(nm, decl).at(base), score_kind, time_format)
        if score is not None:
            decl["score_kind"] = info["score_kind"]
        if "time_format" in info:
            decl["time_format"] = info["time_format"]
        if monitor and (score is None or time is None):
            raise ValueError("--monitor needs a score source with a time column: pass --score and --time")
        created = _new_project(params_file, benchmark)
        spec, info = init_source(params_file, nm, decl, info)
        if created is not None:
            typer.echo(f"new calibflow project in {created.folder}: {', '.join(created.ran + created.wrote)}")
        if monitor:  # the daily monitor (docs/monitoring.md)
            from calibflow.flows.cli_monitor import add_monitor_source

            add_monitor_source(params_file, nm)
        _print_summary(spec, info, params_file)

    _guarded(go, debug)


#: What the params schema accepts as a source name (params_schema.NAME, and sources: a letter first).
SOURCE_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def source_name(given: str | None, data: str) -> str:
    """``--name`` if the schema accepts it (else a one-line refusal with a fix), or one made from the file."""
    if given is not None:
        if not SOURCE_NAME.match(given):
            fix = normalise_name(given)
            raise ValueError(
                f"--name {given!r} is not a source name (lowercase letters, digits and _, starting with "
                f"a letter): try --name {fix}"
            )
        return given
    stem = Path(data.split("*")[0].rstrip("/")).name.split(".")[0] or "source"
    nm = normalise_name(stem)
    if nm != stem:
        typer.echo(f"source name {nm!r} (from the file name {stem!r}; --name sets another)", err=True)
    return nm


def normalise_name(text: str) -> str:
    """``My-Scores`` -> ``my_scores``; a name not starting with a letter gets ``s_`` in front."""
    nm = re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "source"
    return nm if nm[:1].isalpha() else f"s_{nm}"


def _new_project(params_file: Path, benchmark: bool):
    """A folder without params.yaml becomes a calibflow project (called once the source checked out)."""
    from calibflow.flows import project

    if params_file.exists():
        return None
    base = params_file.resolve().parent
    if params_file.name != "params.yaml":
        raise ValueError(f"{params_file} does not exist; a new project's params file is params.yaml")
    return project.create(base, benchmark=benchmark)


def _coerce(text: str) -> Any:
    with contextlib.suppress(ValueError):
        return int(text)
    return {"true": True, "false": False}.get(text.lower(), text)


def _print_summary(spec: src.SourceSpec, info: dict[str, Any], params_file: Path) -> None:
    cols = ", ".join(f"{c} ({t})" for c, t in info["columns"].items())
    typer.echo(f"source {spec.name!r}: {spec.path}")
    typer.echo(f"  {info['rows']:,} rows; columns: {cols}")
    bal = ", ".join(f"{v}: {n:,}" for v, n in info["labels"].items())
    typer.echo(f"  label {spec.label!r}: {bal}")
    if "time_range" in info:
        fmt = f" (text, read as {info['time_format']})" if info.get("time_format") else ""
        typer.echo(f"  time {spec.time!r}: {info['time_range'][0]} to {info['time_range'][1]}{fmt}")
    if "score_range" in info:
        lo, hi = info["score_range"]
        typer.echo(f"  score {spec.score!r} ({spec.score_kind}): {lo} to {hi}")
    for note in info.get("notes", []):
        typer.echo(f"  note: {note}")
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
    """The score kind recorded on the card beside a calibrator written before calibrators recorded it."""
    card = calibrator.with_name("card.json")
    if card.is_file():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            return json.loads(card.read_text())["input"]["score_kind"]
    return None


#: Keys a model card or ``fit.json`` has and a calibrator never has.
_NOT_A_CALIBRATOR = {"reason": "the card", "candidates": "the card", "metrics": "the card",
                     "uncalibrated": "fit's summary", "calib": "fit's summary"}


def load_calibrator(calibrator: Path) -> Any:
    """The calibrator in ``calibrator``; a card, a folder or a missing file is refused in one line.

    A file written before calibrators recorded their score kind gets the kind from the card beside it
    (written by the same select run); with neither, ``calibrate_scores`` asks for ``--score-kind``.
    """
    from calibflow.calibrators import from_json

    if calibrator.is_dir():
        raise ValueError(f"--calibrator {calibrator} is a folder; give the calibrator.json inside it")
    if not calibrator.is_file():
        raise FileNotFoundError(f"{calibrator}: no such calibrator (run `calibflow run` to produce one)")
    text = calibrator.read_text(encoding="utf-8", errors="replace")
    what = None
    with contextlib.suppress(ValueError):  # not JSON: from_json says so below
        payload = json.loads(text)
        keys = payload if isinstance(payload, dict) else {}
        what = next((v for k, v in _NOT_A_CALIBRATOR.items() if k in keys), None)
    if what == "the card":
        raise ValueError(f"{calibrator}: this is the card; use calibrator.json (beside it)")
    if what:
        raise ValueError(f"{calibrator} is {what}; use one of the <method>.json files beside it")
    cal = from_json(text)
    if getattr(cal, "score_kind_", None) is None and (kind := _card_kind(calibrator)) in src.SCORE_KINDS:
        src.record_score_kind(cal, kind)
    return cal


_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".csv.gz": "csv.gz"}


def output_format(output: Path) -> str:
    """``parquet``, ``csv`` or ``csv.gz`` from the output's name; anything else is refused (no guessing)."""
    name = output.name.lower()
    for ext, fmt in _FORMATS.items():
        if name.endswith(ext):
            return fmt
    raise ValueError(
        f"--output {output}: unknown format {output.suffix or '(no extension)'!r}; "
        "name it .parquet, .csv or .csv.gz"
    )


def check_output(output: Path) -> None:
    """One line for an output path that cannot be a file (a folder, or under a file)."""
    if output.is_dir():
        raise ValueError(f"--output {output} is a folder; give a file name, e.g. {output / 'scored.parquet'}")
    for parent in output.parents:
        if parent.exists():
            if not parent.is_dir():
                raise ValueError(f"--output {output}: {parent} is a file, not a folder")
            break


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator[Path]:
    """A pid-tagged temporary beside ``path``, renamed over it on success; a killed run's is removed
    by the next run (``remove_stale_temps``, as the stages do)."""
    from calibflow.pipeline._common import remove_stale_temps

    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class _CsvFile:
    """A CSV writer that closes the (possibly gzip) stream it writes to; pyarrow's leaves it open."""

    def __init__(self, tmp: Path, schema: Any, gzip: bool) -> None:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        self.sink = pa.CompressedOutputStream(str(tmp), "gzip") if gzip else pa.OSFile(str(tmp), "wb")
        self.writer = pacsv.CSVWriter(self.sink, schema)

    def write_batch(self, batch: Any) -> None:
        self.writer.write_batch(batch)

    def close(self) -> None:
        self.writer.close()
        self.sink.close()


def _open_writer(tmp: Path, fmt: str, schema: Any) -> Any:
    import pyarrow.parquet as pq

    return pq.ParquetWriter(tmp, schema) if fmt == "parquet" else _CsvFile(tmp, schema, fmt == "csv.gz")


def _check_batch(x, kind: str, score: str, offset: int) -> None:
    import numpy as np

    bad = np.isinf(x)
    what = "infinite"
    if not bad.any() and kind == "probability":
        bad = (x < 0) | (x > 1)
        what = "outside [0, 1] (use --score-kind logit or score if these are not probabilities)"
    if bad.any():
        rows = ", ".join(str(offset + int(i)) for i in np.flatnonzero(bad)[:5])
        raise ValueError(
            f"column {score!r}: {int(bad.sum())} score(s) {what} in this batch, e.g. rows {rows}"
        )


def _refuse_nulls(spec: src.SourceSpec, score: str, x: Any, offset: int, column: str) -> None:
    """Null or NaN scores (``--on-null fail``): one line with their count in the whole input (a second
    connection counts them: the first one is busy streaming)."""
    import numpy as np

    missing = np.isnan(x)
    if not missing.any():
        return
    q = src.quote_ident(score)
    con = src.connect()
    try:
        rel = src.relation(spec, con)
        count = rel.aggregate(f"count(*) FILTER (WHERE {q} IS NULL OR isnan(CAST({q} AS DOUBLE)))").fetchall()
    finally:
        con.close()
    raise ValueError(
        f"column {score!r}: {int(count[0][0]):,} null or NaN score(s), the first at row "
        f"{offset + int(np.flatnonzero(missing)[0])}; drop them, or pass --on-null pass to leave "
        f"{column!r} empty on those rows"
    )


def _calibrate_batch(cal: Any, x: Any, kind: str, segs: dict[str, Any] | None = None) -> Any:
    """The ``calibrated`` column of one batch: null where the score is null or NaN (``--on-null pass``).

    ``segs``: a segmented calibrator's segment columns for the same rows (None for a global one)."""
    import numpy as np
    import pyarrow as pa

    missing = np.isnan(x)
    if not missing.any():  # the usual batch: no copy, no mask
        extra = {} if segs is None else {"segments": segs}
        return pa.array(src.calibrate_scores(cal, x, kind, **extra))
    p = np.full(x.shape, np.nan)
    keep = ~missing
    if keep.any():
        extra = {} if segs is None else {"segments": {c: v[keep] for c, v in segs.items()}}
        p[keep] = src.calibrate_scores(cal, x[keep], kind, **extra)
    return pa.array(p, mask=missing)


def apply_file(
    calibrator: Path,
    input_path: str,
    score: str,
    output: Path,
    score_kind: str | None = None,
    batch_rows: int = 1_000_000,
    column: str = "calibrated",
    unseen: dict[str, int] | None = None,
    on_null: str = "fail",
) -> int:
    """Stream ``input_path`` through the calibrator; write every column plus ``column``; return the rows.

    The score's scale is the calibrator's own (``score_kind`` only for files that record none, and
    refused when it conflicts). Null or NaN scores fail the run with their count (``on_null="fail"``) or
    get a null ``column`` (``"pass"``). A segmented calibrator (``needs`` segments) also reads the segment
    columns it was fitted on; ``unseen``, when given, receives per column the rows whose value was never
    seen in fitting (the global map serves them).
    """
    import numpy as np
    import pyarrow as pa

    if on_null not in ("fail", "pass"):
        raise ValueError(f"--on-null {on_null!r} is not one of fail|pass")
    check_output(output)
    fmt = output_format(output)
    cal = load_calibrator(calibrator)
    kind = src.score_kind_of(cal, score_kind)
    spec = src.SourceSpec(name="input", path=input_path, label=score, score=score)
    con = src.connect()
    n = 0
    try:
        rel = src.relation(spec, con)
        seg_cols = [str(c) for c in getattr(cal, "segment_names_", [])] if "segments" in cal.needs else []
        src.check_columns(spec, rel.columns, [score])
        missing = [c for c in seg_cols if c not in rel.columns]
        if missing:
            raise ValueError(
                f"{input_path}: no column {missing[0]!r}; this calibrator is per segment and reads the "
                f"segment column(s) {seg_cols} it was fitted on (add or rename the column)"
            )
        stype = dict(zip(rel.columns, rel.types, strict=True))[score]
        if not src.is_numeric_type(stype):
            raise ValueError(f"column {score!r} is {stype}, not numbers; convert it to a numeric column")
        if column in rel.columns:
            raise ValueError(f"{input_path} already has a column {column!r}; pass --column with another name")
        reader = rel.to_arrow_reader(int(batch_rows))
        with _atomic_file(output) as tmp:
            writer = None
            try:
                for batch in reader:
                    x = batch.column(score).to_numpy(zero_copy_only=False).astype(np.float64)
                    if on_null == "fail":
                        _refuse_nulls(spec, score, x, n, column)
                    _check_batch(x, kind, score, n)
                    segs = None
                    if seg_cols:
                        segs = {c: batch.column(c).to_pandas().to_numpy(dtype=object) for c in seg_cols}
                        for c, k in cal.unseen_counts(segs, len(x)).items() if unseen is not None else ():
                            unseen[c] = unseen.get(c, 0) + k
                    out = pa.RecordBatch.from_arrays(
                        [*batch.columns, _calibrate_batch(cal, x, kind, segs)],
                        [*batch.schema.names, column],
                    )
                    writer = writer or _open_writer(tmp, fmt, out.schema)
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
        None, "--score-kind", help="Only for calibrators that do not record it: probability | logit | score."
    ),
    batch_rows: int = typer.Option(1_000_000, "--batch-rows", min=1, help="Rows per streamed batch."),
    column: str = typer.Option("calibrated", "--column", help="Name of the added column."),
    on_null: str = typer.Option("fail", "--on-null", help="fail (default) | pass: null scores stay null."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Add a `calibrated` column to a file of scores with a saved calibrator (streamed, bounded memory)."""
    unseen: dict[str, int] = {}
    n = _guarded(
        lambda: apply_file(
            calibrator, input_path, score, output, score_kind, batch_rows, column,
            unseen=unseen, on_null=on_null,
        ),
        debug,
    )
    typer.echo(f"calibrated {n:,} rows -> {output}", err=sys.stderr.isatty())
    for col, k in unseen.items():
        if k:
            typer.echo(f"{k:,} rows have a {col} value unseen in fitting: that column adds nothing to them "
                       "(global map when every segment is unseen)", err=True)


def register(app: typer.Typer) -> None:
    """Add ``init`` and ``apply`` to the ``calibflow`` app (one call in calibflow/flows/cli.py)."""
    app.command(name="init")(init)
    app.command(name="apply")(apply)
