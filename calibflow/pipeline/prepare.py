"""Stage ``prepare``: each dataset as a numeric design matrix with a seeded train/calib/test split.

``python -m calibflow.pipeline.prepare``. For every dataset in ``params['datasets']``:
``calibflow.datasets.binary_task``
(one-hot design, 0/1 label), an optional stratified subsample to ``datasets.max_rows`` (quick
configurations), then ``calibflow.splits.split_indices`` with ``prepare.fractions`` and the global seed,
stratified on the label. Writes ``data/prepared/<name>.parquet`` (columns ``row``, ``split``, ``y``,
``treatment`` where the dataset has arms, and the features as ``f:<name>``) and records the split in
``data/prepared/splits.json`` (sizes, positive rates and a sha256 of each split's row indices, so a
changed split is visible in a diff).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibflow import datasets, timesplit
from calibflow import sources as src
from calibflow.datasets._loaders import _design
from calibflow.io import write_json
from calibflow.pipeline import _scores, _sources, _streaming
from calibflow.pipeline._common import (
    FEATURE_PREFIX,
    SPLITS,
    Layout,
    Params,
    ParamsLike,
    StageError,
    as_params,
    atomic_dir,
    base_parser,
    cli,
    load_params,
)
from calibflow.pipeline.dag import SCORE_PREDICTIONS
from calibflow.segments import as_levels
from calibflow.sources import SourceSpec
from calibflow.splits import digest, split_indices

log = logging.getLogger("calibflow.pipeline.prepare")
#: numba, imported late by the compiled passes: the run's stage host imports it once for every stage.
HOST_PRELOAD = ("numba",)


def _fractions(params: Params) -> dict[str, float]:
    """``prepare.fractions`` by split name (their values are checked by ``split_indices``)."""
    return {k: float(getattr(params.prepare.fractions, k)) for k in SPLITS}


def subsample(y: np.ndarray, max_rows: int, rng_seed: int) -> np.ndarray:
    """Sorted row indices of a label-stratified subsample of ``max_rows`` rows (all rows if fewer)."""
    n = y.size
    if not max_rows or max_rows >= n:
        return np.arange(n)
    keep = max_rows / n
    parts = split_indices(n, {"keep": keep, "rest": 1.0 - keep}, seed=rng_seed, stratify=y)
    return np.sort(parts["keep"])


def prepare_one(
    name: str, params: Params, data_dir: Path, fractions: dict[str, float]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The prepared frame of one dataset (split by ``fractions``) and its split record."""
    target = (params.datasets.targets or {}).get(name)
    task = datasets.binary_task(name, target=target, data_dir=data_dir)
    rows = subsample(task.y, int(params.datasets.max_rows or 0), int(params.seed))
    y = task.y[rows].astype(np.int64)
    strat = y if params.prepare.stratify else None
    parts = split_indices(rows.size, fractions, seed=int(params.seed), stratify=strat)
    split = np.empty(rows.size, dtype=object)
    for k, idx in parts.items():
        split[idx] = k
    meta = {"row": rows.astype(np.int64), "split": split.astype(str), "y": y}
    if task.treatment is not None:
        meta["treatment"] = np.asarray(task.treatment)[rows].astype(str)
    feats = pd.DataFrame(task.X[rows], columns=[f"{FEATURE_PREFIX}{c}" for c in task.feature_names])
    frame = pd.concat([pd.DataFrame(meta), feats], axis=1)
    record = {
        "target": target,
        "n_rows": int(rows.size),
        "n_rows_source": int(task.y.size),
        "n_features": len(task.feature_names),
        "counts": {k: int(v.size) for k, v in parts.items()},
        "positive_rate": {k: float(y[v].mean()) for k, v in parts.items()},
        "rows_sha256": {k: digest(np.sort(rows[v])) for k, v in parts.items()},
        "split": parts.summary,
    }
    return frame, record


def _source_split(
    spec: SourceSpec, frame: pd.DataFrame, y: np.ndarray, rng_seed: int
) -> tuple[np.ndarray, dict[str, Any]]:
    """Each row's split (``""``: after the test window) and the split's record for the report."""
    cfg = {k: v for k, v in spec.split.items() if k != "kind"}
    if spec.split.get("kind") == "time":
        t = timesplit.to_datetime(frame["time"], spec.time_format)
        try:
            w = timesplit.time_windows(t.min(), t.max(), cfg)
        except ValueError as exc:
            raise StageError(f"source {spec.name!r}: {exc}") from None
        return timesplit.assign_splits(t, w), {"kind": "time", **w.as_dict()}
    default = src.SCORE_FRACTIONS if spec.kind == "score" else src.FEATURES_FRACTIONS
    fractions = {k: float(v) for k, v in (cfg.get("fractions") or default).items()}
    strat = y if cfg.get("stratify", src.RANDOM_STRATIFY) else None
    parts = split_indices(y.size, fractions, seed=rng_seed, stratify=strat)
    split = np.full(y.size, "", dtype=object)
    for k, idx in parts.items():
        split[idx] = k
    return split.astype(str), {"kind": "random", "fractions": fractions}


def prepare_source(spec: SourceSpec, rng_seed: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A source read by DuckDB (declared columns only) as a prepared frame, split past -> future or at random.

    Columns: ``row`` (the row's position in the source), ``split``, ``y``, then ``score`` (a score source) or
    the one-hot design ``f:*`` (a features source), and the carried ``weight``, ``time``, ``treatment`` and
    ``s:<segment>`` columns. Rows after the test window (explicit ``test_end``) are left out.
    """
    rel_cols = src.relation(spec).columns
    src.check_columns(spec, rel_cols, spec.role_columns())
    feats = src.feature_columns(spec, rel_cols)
    src.check_columns(spec, rel_cols, feats)
    raw = src.scan(spec, list(dict.fromkeys(spec.role_columns() + feats))).to_pandas()
    y = _sources.labels01(raw[spec.label], spec.positive)
    roles = {"score": spec.score, "weight": spec.weight, "time": spec.time, "treatment": spec.treatment}
    meta = {"row": np.arange(len(raw), dtype=np.int64), "y": y}
    meta.update({k: raw[c].to_numpy() for k, c in roles.items() if c is not None})
    # one reading of segment values (nulls their own level) shared with the calibrators and `apply`
    meta.update({f"{_sources.SEGMENT_PREFIX}{c}": as_levels(raw[c]) for c in spec.segments})
    frame = pd.DataFrame(meta)
    if "score" in frame:
        frame["score"] = frame["score"].astype(np.float64)
    split, split_rec = _source_split(spec, frame, y, rng_seed)
    frame.insert(1, "split", split)
    if feats:
        X, names = _design(raw[feats])
        frame = pd.concat([frame, pd.DataFrame(X, columns=[f"{FEATURE_PREFIX}{c}" for c in names])], axis=1)
    frame = frame[frame["split"] != ""].reset_index(drop=True)
    parts = {k: np.flatnonzero(frame["split"].to_numpy() == k) for k in SPLITS}
    yk = frame["y"].to_numpy()
    where = split_rec.get("kind", "random")
    if where == "time":
        cal, tst = split_rec["calib"], split_rec["test"]
        where = f"time split: calib {cal[0]} to {cal[1]}, test to {tst[1]}"
    record: dict[str, Any] = {
        "target": f"{spec.label} ({where})",  # shown in the report's split table
        "kind": "source",
        "source_kind": spec.kind,
        "n_rows": int(len(frame)),
        "n_rows_source": int(len(raw)),
        "n_features": len([c for c in frame.columns if c.startswith(FEATURE_PREFIX)]),
        "counts": {k: int(v.size) for k, v in parts.items()},
        "positives": {k: int(yk[v].sum()) for k, v in parts.items()},
        "positive_rate": {k: float(yk[v].mean()) if v.size else None for k, v in parts.items()},
        "rows_sha256": {k: digest(frame["row"].to_numpy()[v]) for k, v in parts.items()},
        "split": split_rec,
        "time_range": None,
    }
    if spec.time is not None:
        t = timesplit.to_datetime(frame["time"], spec.time_format)
        record["time_range"] = [t.min().isoformat(), t.max().isoformat()]
    return frame, record


def run(params: ParamsLike, root: str | os.PathLike[str] = ".", predictions: bool = False) -> dict[str, Any]:
    """Prepare every dataset and source; swap ``data/prepared`` in only when all succeeded.

    ``predictions``: the score shape of a user project (no train stage, calibflow.pipeline.dag): also write
    the sources' score predictions and ``metrics/train.json``, as train would.
    """
    params = as_params(params)
    lay = Layout(Path(root))
    fractions = _fractions(params)
    record: dict[str, Any] = {
        "seed": int(params.seed),
        "fractions": fractions,
        "stratify": bool(params.prepare.stratify),
        "max_rows": int(params.datasets.max_rows or 0),
        "datasets": {},
    }
    with atomic_dir(lay.prepared) as tmp:
        specs = _sources.specs(params, root)
        for name in [n for n in _sources.names(params) if n not in specs]:
            frame, rec = prepare_one(name, params, lay.raw, fractions)
            frame.to_parquet(tmp / f"{name}.parquet", index=False)
            record["datasets"][name] = rec
            log.info(
                "prepared %s: %s rows, %s features, %s", name, rec["n_rows"], rec["n_features"], rec["counts"]
            )
        scale = _streaming.scale_config(params)
        for name, spec in specs.items():
            if spec.kind == "score":  # of any size: one DuckDB pass to tables, no rows reach pandas
                input_kind = str(params.calibrate.input)
                rec = _streaming.prepare_record(spec, int(params.seed), tmp, input_kind, scale)
                record["datasets"][name] = rec
                log.info("prepared source %s in one pass: %s rows, %s", name, rec["n_rows"], rec["counts"])
                continue
            # a features source: a model is trained on its rows (train), then its predictions file is
            # read by the same table path as a score source's
            frame, rec = prepare_source(spec, int(params.seed))
            frame.to_parquet(tmp / f"{name}.parquet", index=False)
            record["datasets"][name] = rec
            log.info("prepared source %s: %s rows, %s", name, rec["n_rows"], rec["counts"])
        write_json(tmp / "splits.json", record)
    if predictions:
        _scores.write_all(params, root)
    return record


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        SCORE_PREDICTIONS, action="store_true", help="also write the score predictions (no train stage)"
    )
    args = parser.parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root, predictions=args.predictions))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
