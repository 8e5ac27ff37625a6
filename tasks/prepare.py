"""Stage ``prepare``: each dataset as a numeric design matrix with a seeded train/calib/test split.

``python -m tasks.prepare``. For every dataset in ``params['datasets']``: ``calibflow.datasets.binary_task``
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

from calibflow import datasets
from calibflow.io import write_json
from calibflow.splits import digest, split_indices
from tasks._common import (
    FEATURE_PREFIX,
    SPLITS,
    Layout,
    StageError,
    atomic_dir,
    base_parser,
    cli,
    dataset_names,
    dataset_target,
    load_params,
    section,
    seed,
)

log = logging.getLogger("tasks.prepare")


def _fractions(params: dict[str, Any]) -> dict[str, float]:
    """``prepare.fractions``, naming exactly ``SPLITS`` (their values are checked by ``split_indices``)."""
    fr = {k: float(v) for k, v in (section(params, "prepare").get("fractions") or {}).items()}
    if set(fr) != set(SPLITS):
        raise StageError(f"params: prepare.fractions must name exactly {SPLITS}, got {sorted(fr)}")
    return fr


def subsample(y: np.ndarray, max_rows: int, rng_seed: int) -> np.ndarray:
    """Sorted row indices of a label-stratified subsample of ``max_rows`` rows (all rows if fewer)."""
    n = y.size
    if not max_rows or max_rows >= n:
        return np.arange(n)
    keep = max_rows / n
    parts = split_indices(n, {"keep": keep, "rest": 1.0 - keep}, seed=rng_seed, stratify=y)
    return np.sort(parts["keep"])


def prepare_one(
    name: str, params: dict[str, Any], data_dir: Path, fractions: dict[str, float]
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The prepared frame of one dataset (split by ``fractions``) and its split record."""
    ds = section(params, "datasets")
    prep = section(params, "prepare")
    target = dataset_target(params, name)
    task = datasets.binary_task(name, target=target, data_dir=data_dir)
    rows = subsample(task.y, int(ds.get("max_rows") or 0), seed(params))
    y = task.y[rows].astype(np.int64)
    strat = y if prep.get("stratify", True) else None
    parts = split_indices(rows.size, fractions, seed=seed(params), stratify=strat)
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


def run(params: dict[str, Any], root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Prepare every dataset; swap ``data/prepared`` in only when all succeeded."""
    lay = Layout(Path(root))
    prep = section(params, "prepare")
    fractions = _fractions(params)
    record: dict[str, Any] = {
        "seed": seed(params),
        "fractions": fractions,
        "stratify": bool(prep.get("stratify", True)),
        "max_rows": int(section(params, "datasets").get("max_rows") or 0),
        "datasets": {},
    }
    with atomic_dir(lay.prepared) as tmp:
        for name in dataset_names(params):
            frame, rec = prepare_one(name, params, lay.raw, fractions)
            frame.to_parquet(tmp / f"{name}.parquet", index=False)
            record["datasets"][name] = rec
            log.info(
                "prepared %s: %s rows, %s features, %s", name, rec["n_rows"], rec["n_features"], rec["counts"]
            )
        write_json(tmp / "splits.json", record)
    return record


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    raise SystemExit(main())
