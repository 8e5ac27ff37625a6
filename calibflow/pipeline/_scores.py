"""A score source's predictions: the user's own scores, carried from prepare's splits (no model to train).

Shared by ``train`` (the full pipeline: score sources beside trained ones) and ``prepare --predictions`` (the
score shape of a user project, calibflow.pipeline.dag: no train stage at all), so both write the same files:
``data/predictions/<name>.parquet`` (or, for a streamed source, the marker naming prepare's tables) and the
source's record in ``metrics/train.json``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from calibflow import metrics
from calibflow.io import write_json
from calibflow.pipeline import _sources, _streaming
from calibflow.pipeline._common import Layout, Params, StageError, atomic_dir, require
from calibflow.sources import SourceSpec

log = logging.getLogger("calibflow.pipeline")


def test_record(preds: pd.DataFrame) -> dict[str, float]:
    """``metrics/train.json``'s record of one source or dataset: AUC and log loss on the test split."""
    test = preds[preds["split"] == "test"]
    y, p = test["y"].to_numpy(float), test["prob"].to_numpy(float)
    return {"test_auc": metrics.auc(y, p), "test_log_loss": metrics.log_loss(y, p)}


def write_one(lay: Layout, pdir: Path, name: str, spec: SourceSpec) -> dict[str, Any]:
    """Write one score source's predictions into ``pdir``; its ``metrics/train.json`` record."""
    if _streaming.prepared_streaming(lay, name):  # tables only: no rows file
        rec = _streaming.skip_train(pdir, lay, name)
        log.info("no model for %s: %s", name, rec["skipped"])
        return rec
    path = require(lay.prepared / f"{name}.parquet", "prepared data", "the prepare stage")
    preds = _sources.score_predictions(pd.read_parquet(path), spec)
    preds.to_parquet(pdir / f"{name}.parquet", index=False)
    return test_record(preds)


def write_all(params: Params, root: str | Path) -> dict[str, Any]:
    """The score shape's predictions: every source's, swapped in at once, and ``metrics/train.json``."""
    lay = Layout(Path(root))
    specs = _sources.specs(params, root)
    trained = [n for n in _sources.names(params) if n not in specs or specs[n].kind != "score"]
    if trained:
        raise StageError(
            f"{', '.join(trained)} need(s) a trained model, but this project's dvc.yaml has no train stage "
            "(it was written for score sources only): run `calibflow run` again, which writes the full "
            "pipeline, or restore dvc.yaml with its train stage"
        )
    summary: dict[str, Any] = {}
    with atomic_dir(lay.predictions) as pdir:
        for name, spec in specs.items():
            summary[name] = write_one(lay, pdir, name, spec)
    write_json(lay.metrics / "train.json", summary)
    return summary
