"""Streaming apply: a saved calibrator over a CSV/Parquet file (or folder, or glob) of any size.

DuckDB reads the input in Arrow batches, so memory stays bounded by one batch whatever the size; every
input column is kept and ``calibrated`` added; the output is written atomically (``calibflow.io``), so a
failed run leaves the last good file in place. The score column and its scale come from the calibrator
file (or the card beside it); a segmented calibrator also reads the segment columns it was fitted on.
``calibflow apply`` is a thin shell over ``apply_file``; every message here is one line for that shell.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from calibflow import sources as src
from calibflow.io import atomic_path, remove_stale_temps

#: How the input is named in errors about its columns or its format (the sources' own wording).
_INPUT = "source 'input': "

#: Keys a model card or ``fit.json`` has and a calibrator never has.
_NOT_A_CALIBRATOR = {"reason": "the card", "candidates": "the card", "metrics": "the card",
                     "uncalibrated": "fit's summary", "calib": "fit's summary"}

_FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".csv.gz": "csv.gz"}


# ----------------------------------------------------------------------------------- the calibrator


def _card_input(calibrator: Path) -> dict[str, Any]:
    """The ``input`` record of the card beside ``calibrator`` (written by the same select run), or {}."""
    card = calibrator.with_name("card.json")
    if card.is_file():
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            record = json.loads(card.read_text()).get("input")
            return record if isinstance(record, dict) else {}
    return {}


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
    from calibflow import calibrator_file

    # untrusted: the size checked before reading, the nesting bounded, the fitted state validated after
    text = calibrator_file.read(calibrator)
    payload = calibrator_file.parse(text, str(calibrator))
    try:
        calibrator_file.check_numbers(payload)
    except calibrator_file.CalibratorFileError as exc:
        raise ValueError(f"{calibrator}: {exc}") from None
    keys = payload if isinstance(payload, dict) else {}
    what = next((v for k, v in _NOT_A_CALIBRATOR.items() if k in keys), None)
    if what == "the card":
        raise ValueError(f"{calibrator}: this is the card; use calibrator.json (beside it)")
    if what:
        raise ValueError(f"{calibrator} is {what}; use one of the <method>.json files beside it")
    try:
        cal = calibrator_file.check(from_json(text))
    except calibrator_file.CalibratorFileError as exc:
        raise ValueError(f"{calibrator}: {exc}") from None
    kind = _card_input(calibrator).get("score_kind")
    if getattr(cal, "score_kind_", None) is None and kind in src.SCORE_KINDS:
        src.record_score_kind(cal, kind)
    return cal


def score_column(cal: Any, calibrator: Path, score: str | None = None) -> str:
    """The input column holding the scores: ``score`` when given, else the one the calibrator file
    records, else the one its card names; with none of them, one line asking for ``--score``."""
    if score is not None:
        return score
    recorded = getattr(cal, "score_column_", None)
    if recorded:
        return str(recorded)
    named = _card_input(calibrator).get("score")
    # a features source's card names the trained model's margin, which is no column of the user's file
    if isinstance(named, str) and not named.startswith("margin of "):
        return named
    raise ValueError(
        f"{calibrator} does not name its score column; pass --score with the column holding your "
        "model's score"
    )


def segment_columns(cal: Any) -> list[str]:
    """The segment columns a segmented calibrator was fitted on ([] for a global one)."""
    return [str(c) for c in getattr(cal, "segment_names_", [])] if "segments" in cal.needs else []


# ------------------------------------------------------------------------------------------ output


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


# ----------------------------------------------------------------------------------------- batches


def _check_batch(x: np.ndarray, kind: str, score: str, offset: int) -> None:
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


def _refuse_nulls(input_path: str, score: str, x: np.ndarray, offset: int, column: str) -> None:
    """Null or NaN scores (``on_null="fail"``): one line with their count in the whole input (a second
    connection counts them: the first one is busy streaming)."""
    missing = np.isnan(x)
    if not missing.any():
        return
    q = src.quote_ident(score)
    con = src.connect()
    try:
        rel = _relation(input_path, con)
        count = rel.aggregate(f"count(*) FILTER (WHERE {q} IS NULL OR isnan(CAST({q} AS DOUBLE)))").fetchall()
    finally:
        con.close()
    raise ValueError(
        f"column {score!r}: {int(count[0][0]):,} null or NaN score(s), the first at row "
        f"{offset + int(np.flatnonzero(missing)[0])}; drop them, or pass --on-null pass to leave "
        f"{column!r} empty on those rows"
    )


def _calibrate_batch(cal: Any, x: np.ndarray, kind: str, segs: dict[str, Any] | None = None) -> Any:
    """The ``calibrated`` column of one batch: null where the score is null or NaN (``on_null="pass"``).

    ``segs``: a segmented calibrator's segment columns for the same rows (None for a global one)."""
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


# ------------------------------------------------------------------------------------------- apply


def _relation(input_path: str, con: Any) -> Any:
    try:
        return src.relation_for_path(input_path, con)
    except (ValueError, FileNotFoundError) as exc:
        raise type(exc)(f"{_INPUT}{exc}") from None


def _check_input(rel: Any, input_path: str, score: str, seg_cols: list[str], column: str) -> None:
    """One line for an input the calibrator cannot read: a missing or non-numeric score, a missing
    segment column, or an output column the input already has."""
    src.require_columns(rel.columns, [score], _INPUT, f" in {input_path}")
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


def apply_file(
    calibrator: Path,
    input_path: str,
    score: str | None,
    output: Path,
    score_kind: str | None = None,
    batch_rows: int = 1_000_000,
    column: str = "calibrated",
    unseen: dict[str, int] | None = None,
    on_null: str = "fail",
) -> int:
    """Stream ``input_path`` through the calibrator; write every column plus ``column``; return the rows.

    ``score`` None reads the column the calibrator records (or its card names). The score's scale is the
    calibrator's own (``score_kind`` only for files that record none, and refused when it conflicts).
    Null or NaN scores fail the run with their count (``on_null="fail"``) or get a null ``column``
    (``"pass"``). A segmented calibrator (``needs`` segments) also reads the segment columns it was
    fitted on; ``unseen``, when given, receives per column the rows whose value was never seen in
    fitting (the global map serves them).
    """
    if on_null not in ("fail", "pass"):
        raise ValueError(f"--on-null {on_null!r} is not one of fail|pass")
    check_output(output)
    fmt = output_format(output)
    cal = load_calibrator(calibrator)
    kind = src.score_kind_of(cal, score_kind)
    score = score_column(cal, calibrator, score)
    seg_cols = segment_columns(cal)
    con = src.connect()
    try:
        rel = _relation(input_path, con)
        _check_input(rel, input_path, score, seg_cols, column)
        reader = rel.to_arrow_reader(int(batch_rows))
        remove_stale_temps(output)  # what a killed earlier apply left beside the output
        with atomic_path(output) as tmp:
            return _write(reader, tmp, fmt, cal, kind, score, seg_cols, column, unseen, on_null, input_path)
    finally:
        con.close()


def _write(  # noqa: PLR0913
    reader: Any,
    tmp: Path,
    fmt: str,
    cal: Any,
    kind: str,
    score: str,
    seg_cols: list[str],
    column: str,
    unseen: dict[str, int] | None,
    on_null: str,
    input_path: str,
) -> int:
    """Read, calibrate and write batch by batch into ``tmp``; the rows written."""
    import pyarrow as pa

    n = 0
    writer = None
    try:
        for batch in reader:
            x = batch.column(score).to_numpy(zero_copy_only=False).astype(np.float64)
            if on_null == "fail":
                _refuse_nulls(input_path, score, x, n, column)
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
    return n
