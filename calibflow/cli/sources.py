"""``calibflow init`` (declare a file of yours as a source) and ``calibflow apply`` (use a chosen calibrator).

``init`` inspects the file with DuckDB (columns, types, rows, label balance, time range), appends the source
to params.yaml (the one command that edits it, on the user's explicit request; refuses to replace a source
of the same name; the rest of the file, comments included, is kept byte for byte) and prints the next
command. ``apply`` runs ``calibflow.apply.apply_file``: any CSV/Parquet file (or folder, or glob) streamed
through a saved calibrator in Arrow batches, every input column kept, ``calibrated`` added, the output
written atomically. Both print one line on a user error (``--debug`` or ``CALIBFLOW_DEBUG=1``
for the traceback).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml

from calibflow.errors import guarded, input_errors

if TYPE_CHECKING:  # imported where used: `calibflow run` registers these commands without DuckDB's import
    from calibflow import sources as src

# ----------------------------------------------------------------------------------------------- init


def inspect(spec: src.SourceSpec) -> dict[str, Any]:
    """Columns and types, rows, label balance, time and score range of a declared source (checked)."""
    from calibflow import source_checks

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
    from calibflow import sources as src
    from calibflow.io import MAX_PARAMS_BYTES, read_bounded, write_text

    spec = src.parse_source(name, decl)
    text = read_bounded(params_path, MAX_PARAMS_BYTES, "a params file") if params_path.is_file() else ""
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
    test_last: str = typer.Option(
        None, "--test-last", help="Time split: test on the last N days (default 7d; e.g. 2d, 12h)."
    ),
    calib_last: str = typer.Option(
        None, "--calib-last", help="Time split: calibrate on the N days before the test (default 14d)."
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
        from calibflow import source_checks
        from calibflow import sources as src

        base = params_file.resolve().parent
        folder, pattern = src.split_glob(data)  # DVC depends on a glob's folder; the readers on the glob
        decl: dict[str, Any] = {"path": _relpath(folder, base), "label": label}
        if pattern is not None and not src.is_url(data):
            decl["glob"] = pattern
        else:
            decl["path"] = _relpath(data, base)
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
        if test_last is not None or calib_last is not None:
            if time is None:
                raise ValueError("--test-last and --calib-last split by time: pass --time COLUMN too")
            decl["split"] = {k: v for k, v in (("test_last", test_last), ("calib_last", calib_last)) if v}
        nm = source_name(name, data)
        _say_when_large(data)
        # Everything the run would refuse later is refused now, before params.yaml is touched.
        info = source_checks.inspect_source(src.parse_source(nm, decl).at(base), score_kind, time_format)
        if score is not None:
            decl["score_kind"] = info["score_kind"]
        if "time_format" in info:
            decl["time_format"] = info["time_format"]
        if "time_range" in info:
            check_split_fits(nm, decl, info)
        if monitor and (score is None or time is None):
            raise ValueError("--monitor needs a score source with a time column: pass --score and --time")
        created = _new_project(params_file, benchmark)
        spec, info = init_source(params_file, nm, decl, info)
        if created is not None:
            typer.echo(f"new calibflow project in {created.folder}: {', '.join(created.ran + created.wrote)}")
        if params_file.name == "params.yaml" and (base / "dvc.yaml").is_file():
            from calibflow.flows import project

            shape = project.sync_dvc_yaml(base)
            if shape and created is None:
                typer.echo(f"rewrote {shape}")
        if created is not None:  # after dvc.yaml has its shape: that is what the first commit holds
            _first_commit(created, spec)
        if monitor:  # the daily monitor (docs/monitoring.md)
            from calibflow.cli.monitor import add_monitor_source

            add_monitor_source(params_file, nm)
        _print_summary(spec, info, params_file)

    guarded(go, input_errors(), debug)


#: Above this many bytes `init` says it is reading (one DuckDB pass; ~1 GB a few seconds a core).
LARGE_BYTES = 256 << 20


def _say_when_large(data: str) -> None:
    """One progress line on stderr before a long inspection (stdout keeps the summary)."""
    from calibflow import sources as src

    if src.is_url(data):
        return
    with contextlib.suppress(OSError, ValueError):
        found = src.files(data)
        size = sum(os.path.getsize(f) for f in found)
        if size > LARGE_BYTES:
            typer.echo(f"reading {len(found):,} file(s), {size / 2**30:.1f} GiB, with DuckDB ...", err=True)


def check_split_fits(name: str, decl: dict[str, Any], info: dict[str, Any]) -> None:
    """Refuse (one line, touching nothing) a time split the data's time range cannot hold; propose one."""
    from calibflow import timesplit

    lo, hi = info["time_range"]
    try:
        lo, hi = pd_timestamp(lo), pd_timestamp(hi)
    except ValueError:  # a range DuckDB printed in a form pandas does not read: the run checks it
        return
    cfg = {k: v for k, v in (decl.get("split") or {}).items() if k != "kind"}
    needs_train = "features" in decl
    problem = timesplit.split_problem(lo, hi, cfg, needs_train)
    if problem is None:
        return
    days = (hi.floor("1D") - lo.floor("1D")).days + 1
    head = (
        f"source {name!r}: the time split ({timesplit.describe_split(cfg)}) does not fit the data's "
        f"{days} day(s), {lo} to {hi}: {problem}"
    )
    fit = timesplit.propose_split(lo, hi, needs_train)
    if fit is None:
        raise ValueError(f"{head}. Too few days for a time split: leave out --time for a random split")
    raise ValueError(
        f"{head}.\nfix: add --test-last {fit['test_last']} --calib-last {fit['calib_last']} to this command"
    )


def pd_timestamp(text: Any):
    """A time-range end as a pandas Timestamp (``ValueError`` when it is not one)."""
    import pandas as pd

    try:
        ts = pd.Timestamp(text)
    except (TypeError, ValueError):
        raise ValueError(text) from None
    if pd.isna(ts):
        raise ValueError(text)
    return ts


def _first_commit(created: Any, spec: src.SourceSpec) -> None:
    """Commit the new project's own files (never the user's data) so `dvc exp show` lists runs at once."""
    from calibflow.flows import project

    msg = project.first_commit(created.folder, spec.path)
    typer.echo(msg)


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
        # a score source's calibrator names its score column; a features source's input is the margin
        + ("" if spec.score else "--score MARGIN ") + "--output scored.parquet"
    )


# ---------------------------------------------------------------------------------------------- apply


def apply(
    calibrator: Path = typer.Option(..., "--calibrator", help="models/<name>/calibrator.json"),
    input_path: str = typer.Option(..., "--input", help="CSV/Parquet file, folder or glob to calibrate."),
    score: str = typer.Option(
        None, "--score", help="The column holding your model's score (default: the one the calibrator names)."
    ),
    output: Path = typer.Option(..., "--output", help="Output .parquet or .csv (written atomically)."),
    score_kind: str = typer.Option(
        None, "--score-kind", help="Only for calibrators that do not record it: probability | logit | score."
    ),
    batch_rows: int = typer.Option(1_000_000, "--batch-rows", min=1, help="Rows per streamed batch."),
    column: str = typer.Option("calibrated", "--column", help="Name of the added column."),
    on_null: str = typer.Option("fail", "--on-null", help="fail (default) | pass: null scores stay null."),
    engine: str = typer.Option(
        "duckdb", "--engine", help="duckdb (this machine) | spark (Parquet in, a Parquet folder out)."
    ),
    spark_master: str = typer.Option(None, "--spark-master", help="Spark master; default: local[2]."),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks."),
) -> None:
    """Add a `calibrated` column to a file of scores with a saved calibrator (streamed, bounded memory)."""
    from calibflow.apply import apply_file

    unseen: dict[str, int] = {}
    if engine != "duckdb":
        from calibflow.aggregate.spark_engine import apply_spark

        def on_spark() -> int:
            if engine != "spark":
                raise ValueError(f"--engine {engine!r} is not one of duckdb|spark")
            return apply_spark(calibrator, input_path, score, output, score_kind, column, on_null,
                               spark_master)

        n = guarded(on_spark, input_errors(), debug)
        typer.echo(f"calibrated {n:,} rows -> {output}", err=sys.stderr.isatty())
        return
    n = guarded(
        lambda: apply_file(
            calibrator, input_path, score, output, score_kind, batch_rows, column,
            unseen=unseen, on_null=on_null,
        ),
        input_errors(),
        debug,
    )
    typer.echo(f"calibrated {n:,} rows -> {output}", err=sys.stderr.isatty())
    for col, k in unseen.items():
        if k:
            typer.echo(f"{k:,} rows have a {col} value unseen in fitting: that column adds nothing to them "
                       "(global map when every segment is unseen)", err=True)


def register(app: typer.Typer) -> None:
    """Add ``init`` and ``apply`` to the ``calibflow`` app (one call in calibflow/cli/main.py)."""
    app.command(name="init")(init)
    app.command(name="apply")(apply)
