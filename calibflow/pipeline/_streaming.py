"""The stages' path for every score source, of any size (issue 25; issue 35: the only path).

No stage loads the rows, and only prepare reads them: validate@raw runs Great Expectations on the one-scan
profile DuckDB computes (``calibflow.aggregate.source_stream.raw_profile``); prepare makes ONE pass over the
source with the split as part of the key (``source_stream.split_tables``: the same seeded hash split or
time windows as the row path's streaming split) and stores the calib and test splits' tables under
``data/prepared/<name>.tables/<split>/`` (the fine global table, the coarse per-segment tables; small
Parquet files, no copy of the rows); train is skipped for the source (a score source has no model) and
leaves a marker ``<name>.skipped.json`` in ``data/predictions``; validate@prepared checks the per-split
counts against the stored tables; calibrate, evaluate, select and validate@calibrated read the stored
tables (``_aggregate``), drawing the Poisson replicates from them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd

from calibflow.aggregate import source_stream
from calibflow.aggregate.switch import ScaleConfig, parse_scale
from calibflow.aggregate.tables import TABLES_META, Tables, load_tables, save_tables
from calibflow.pipeline._common import Layout, ParamsLike, StageError, as_params
from calibflow.sources import SourceSpec

#: ``splits.json``'s ``rows_path`` for a source prepared by DuckDB.
STREAMING = "streaming"
MARKER = ".skipped.json"


def scale_config(params: ParamsLike) -> ScaleConfig:
    """``params.scale`` parsed by the core (``ScaleConfig`` holds its defaults)."""
    try:
        return parse_scale(as_params(params).scale)
    except ValueError as exc:
        raise StageError(f"params: {exc}") from None


#: The folder under data/prepared holding a streamed source's tables: ``<name>.tables/<split>/``.
TABLES = ".tables"


def tables_dir(prepared: Path, name: str) -> Path:
    return prepared / f"{name}{TABLES}"


def _digest(t: pd.DataFrame) -> str:
    """sha256 of a table's content (a changed split or seed changes its sums)."""
    return hashlib.sha256(pd.util.hash_pandas_object(t, index=False).to_numpy().tobytes()).hexdigest()[:16]


def prepare_record(
    spec: SourceSpec, seed: int, out: Path, input_kind: str, cfg: ScaleConfig
) -> dict[str, Any]:
    """ONE pass over ``spec`` (``source_stream.split_tables``): the calib and test splits' tables written
    under ``out/<name>.tables/`` (small Parquet files; no copy of the rows); prepare's record for
    splits.json. The tables are on ``calibrate.input``'s column (``input_kind``)."""
    try:
        tables, got = source_stream.split_tables(
            spec, seed, input_kind, cfg.engine, cfg.address, cfg.threads or None, grid=cfg.grid,
            cells=cfg.cells, distinct_max=cfg.distinct_max,
        )
    except ValueError as exc:
        raise StageError(f"source {spec.name!r}: {exc}") from None
    for k, t in tables.items():
        save_tables(t, tables_dir(out, spec.name) / k, {"split": k, "input": input_kind})
    split = dict(got["split"])
    time_range = split.pop("time_range", None)
    where = split["kind"]
    if where == "time":
        where = f"time split: calib {split['calib'][0]} to {split['calib'][1]}, test to {split['test'][1]}"
    return {
        "target": f"{spec.label} ({where})",
        "kind": "source",
        "source_kind": spec.kind,
        "rows_path": STREAMING,
        "tables": tables_dir(out, spec.name).name,
        "input": input_kind,
        "n_features": 0,
        "time_range": time_range,
        "rows_sha256": None,  # the rows are not stored: a digest of each split's table instead
        **{k: got[k] for k in ("n_rows", "n_rows_source", "counts", "positives", "positive_rate")},
        "tables_sha256": {k: _digest(t.fine) for k, t in tables.items()},
        "split": split,
    }


def stored_tables(lay: Layout, name: str, split: str, input_kind: str) -> Tables:
    """Prepare's stored tables of one split; a one-line error when they were built for another
    ``calibrate.input`` (prepare reads it: DVC reruns prepare when it changes)."""
    folder = tables_dir(lay.prepared, name) / split
    if not (folder / TABLES_META).is_file():
        raise StageError(f"{name}: no {split!r} tables under {folder}; run the prepare stage")
    tabs, meta = load_tables(folder)
    if meta.get("input") != input_kind:
        raise StageError(f"{name}: prepare built the tables for calibrate.input {meta.get('input')!r}, not "
                         f"{input_kind!r}; run the prepare stage again")
    return tabs


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
        "rows": f"{lay.prepared.name}/{tables_dir(lay.prepared, name).name}",
        "prepared": rec,
    }
    marker(pdir, name).write_text(json.dumps(note, indent=2, sort_keys=True) + "\n")
    return {"skipped": note["skipped"], "rows": note["rows"]}


def rows_file(lay: Layout, name: str) -> Path:
    """The file holding ``name``'s rows in the predictions layout: train's predictions, or (train skipped)
    the folder of prepare's split tables the marker names (its parent is data/prepared)."""
    preds = lay.predictions / f"{name}.parquet"
    if not preds.exists() and marker(lay.predictions, name).exists():
        return tables_dir(lay.prepared, name)
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
    """validate@prepared's frame: one row per split (rows, positives, negatives) as prepare's pass counted
    them, and a check that the stored calib and test tables hold exactly those rows (unweighted: the
    test table; the calib table's ``n`` is the weighted sum when a weight is declared)."""
    rec = json.loads((lay.prepared / "splits.json").read_text())["datasets"][name]
    test = stored_tables(lay, name, "test", rec["input"]).fine
    n_test = int(round(float(test["n"].sum())))
    if n_test != int(rec["counts"]["test"]):
        want = rec["counts"]["test"]
        raise StageError(f"{name}: the stored test table holds {n_test} rows, the split {want}; run the"
                         " prepare stage again")
    return pd.DataFrame(
        [
            {"split": s, "rows": n, "positives": rec["positives"][s], "negatives": n - rec["positives"][s]}
            for s, n in rec["counts"].items()
        ]
    )
