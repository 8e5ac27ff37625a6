"""The stages' streaming path for a score source above ``scale.row_threshold`` rows (issue 25).

No stage loads the rows: validate@raw runs Great Expectations on the one-scan profile DuckDB computes
(``calibflow.aggregate.source_stream.raw_profile``); prepare writes the split with one DuckDB ``COPY``,
already in the predictions layout (``row``, ``split``, ``y``, ``margin``, ``prob``, carried columns); train
is skipped for the source (a score source has no model) and leaves a marker ``<name>.skipped.json`` in
``data/predictions`` saying where the rows are; validate@prepared checks the per-split counts; calibrate,
evaluate and select read the prepared file through bucket tables (``_aggregate``), and validate@calibrated
checks each calibrator on the test split's table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from calibflow.aggregate import source_stream
from calibflow.pipeline._common import Layout, StageError
from calibflow.sources import SourceSpec

#: ``splits.json``'s ``rows_path`` for a source prepared by DuckDB.
STREAMING = "streaming"
MARKER = ".skipped.json"


def streams(spec: SourceSpec, threshold: int) -> bool:
    """A score source with more rows than ``threshold``: every stage streams it."""
    if spec.kind != "score":
        return False
    try:
        return source_stream.source_rows(spec) > threshold
    except (FileNotFoundError, ValueError) as exc:
        raise StageError(str(exc)) from None


def prepare_record(spec: SourceSpec, seed: int, out: Path, threads: int | None = None) -> dict[str, Any]:
    """Write the split file of ``spec`` to ``out`` with DuckDB; prepare's record for splits.json."""
    try:
        got = source_stream.write_split(spec, seed, out, threads)
    except ValueError as exc:
        raise StageError(f"source {spec.name!r}: {exc}") from None
    split = got["split"]
    where = split["kind"]
    if where == "time":
        where = f"time split: calib {split['calib'][0]} to {split['calib'][1]}, test to {split['test'][1]}"
    return {
        "target": f"{spec.label} ({where})",
        "kind": "source",
        "source_kind": spec.kind,
        "rows_path": STREAMING,
        "n_features": 0,
        "time_range": None,
        "rows_sha256": None,  # an order-free digest instead: no sort of 1e8 row numbers
        **{k: got[k] for k in ("n_rows", "n_rows_source", "counts", "positives", "positive_rate")},
        "rows_digest": got["rows_digest"],
        "split": split,
    }


def prepared_streaming(lay: Layout, name: str) -> bool:
    """Whether prepare wrote ``name`` on the streaming path (its record in splits.json says so)."""
    f = lay.prepared / "splits.json"
    if not f.is_file():
        return False
    rec = (json.loads(f.read_text()).get("datasets") or {}).get(name) or {}
    return rec.get("rows_path") == STREAMING


def split_counts(lay: Layout, name: str) -> dict[str, int]:
    """The rows per split prepare recorded for ``name``."""
    rec = json.loads((lay.prepared / "splits.json").read_text())["datasets"][name]
    return {k: int(v) for k, v in rec["counts"].items()}


def marker(lay_dir: Path, name: str) -> Path:
    return lay_dir / f"{name}{MARKER}"


def skip_train(pdir: Path, lay: Layout, name: str) -> dict[str, Any]:
    """Train's record for a streamed score source: no model, no copy of the rows; the marker names the
    prepared file (its split record goes into the marker, so a new split changes train's output and DVC
    reruns the stages after it)."""
    rec = json.loads((lay.prepared / "splits.json").read_text())["datasets"][name]
    note = {
        "skipped": "score source on the streaming path: no base model to train",
        "rows": f"{lay.prepared.name}/{name}.parquet",
        "prepared": rec,
    }
    marker(pdir, name).write_text(json.dumps(note, indent=2, sort_keys=True) + "\n")
    return {"skipped": note["skipped"], "rows": note["rows"]}


def rows_file(lay: Layout, name: str) -> Path:
    """The file holding ``name``'s rows in the predictions layout: train's predictions, or (train skipped)
    the prepared file the marker names."""
    preds = lay.predictions / f"{name}.parquet"
    if not preds.exists() and marker(lay.predictions, name).exists():
        return lay.prepared / f"{name}.parquet"
    return preds


def raw_frame(spec: SourceSpec) -> tuple[pd.DataFrame, dict[str, Any]]:
    """validate@raw's one-row frame (rows, positives, negatives, and per check its offending count) and
    the profile it came from."""
    try:
        prof = source_stream.raw_profile(spec)
    except (FileNotFoundError, ValueError) as exc:
        raise StageError(str(exc)) from None
    n, pos = prof["rows"], prof["positives"]
    row = {"rows": n, "positives": pos, "negatives": n - pos}
    row.update({k: c["bad"] for k, c in prof["checks"].items()})
    return pd.DataFrame([row]), prof


def split_frame(lay: Layout, name: str) -> pd.DataFrame:
    """validate@prepared's frame: one row per split (rows, positives, negatives) from the prepared file."""
    prof = source_stream.split_profile(lay.prepared / f"{name}.parquet")
    return pd.DataFrame(
        [
            {"split": s, "rows": n, "positives": prof["positives"][s], "negatives": n - prof["positives"][s]}
            for s, n in prof["counts"].items()
        ]
    )
