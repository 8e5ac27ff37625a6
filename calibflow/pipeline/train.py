"""Stage ``train``: one XGBoost base model per dataset, and its predictions on every row.

``python -m calibflow.pipeline.train``. Fits ``calibflow.models.train_classifier`` on the train split with the
``model`` section of ``params.yaml`` and the global seed; saves the model as XGBoost JSON
(``data/models/<name>.json``) and the raw margin (logit) and probability of every row
(``data/predictions/<name>.parquet``: ``row``, ``split``, ``y``, ``margin``, ``prob``, and ``treatment``
where present). ``metrics/train.json`` holds the base models' test AUC and log loss.

Replicas (``replicas: {n, scheme}`` in params.yaml, default none): S extra models trained on the same
train split by ``calibflow.models.train_replicas`` (``seeds``: different seeds with row/column
subsampling; ``bootstrap``: bootstrap resamples), saved as ``data/models/<name>.replica<r>.json``,
with their margins as ``margin_replica<r>`` columns of the predictions, for replica-based
uncertainty (``calibflow.uncertainty.replica_logit_std``) and VAD (``calibflow.calibrators.vad``).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit

from calibflow import models
from calibflow.io import write_json
from calibflow.pipeline import _scores, _sources
from calibflow.pipeline._common import (
    Layout,
    ParamsLike,
    StageError,
    as_params,
    atomic_dir,
    base_parser,
    cli,
    feature_columns,
    load_params,
    require,
)
from calibflow.pipeline._sources import carried_columns

log = logging.getLogger("calibflow.pipeline.train")


def train_one(
    frame: pd.DataFrame,
    model_params: dict[str, Any],
    rng_seed: int,
    model_path: Path,
    n_replicas: int = 0,
    replica_scheme: str = "seeds",
) -> pd.DataFrame:
    """Train on the ``train`` rows of a prepared frame; save the model(s); return predictions for all rows."""
    feats = feature_columns(frame)
    if not feats:
        raise StageError("prepared frame has no feature columns (f:*)")
    X = frame[feats].to_numpy(dtype=np.float64)
    y = frame["y"].to_numpy(dtype=np.int64)
    tr = (frame["split"] == "train").to_numpy()
    model = models.train_classifier(X[tr], y[tr], dict(model_params), seed=rng_seed)
    models.save_model(model, model_path)
    keep = [c for c in ("row", "split", "y") if c in frame.columns] + carried_columns(frame)
    out = frame[keep].copy()
    out["margin"] = np.asarray(models.predict_margin(model, X), dtype=np.float64)
    out["prob"] = expit(out["margin"].to_numpy())
    if n_replicas > 0:
        # Seeded apart from the served model, so replica 1 is never a copy of it.
        reps = models.train_replicas(
            X[tr], y[tr], dict(model_params), n_replicas, scheme=replica_scheme, seed=rng_seed + 1
        )
        for r, rep in enumerate(reps, start=1):
            models.save_model(rep, model_path.with_name(f"{model_path.stem}.replica{r}.json"))
            out[f"margin_replica{r}"] = np.asarray(models.predict_margin(rep, X), dtype=np.float64)
    return out


def run(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Train every dataset's base model; outputs are swapped in only when all succeeded."""
    params = as_params(params)
    lay = Layout(Path(root))
    model_params = dict(params.model)  # the fields as written (no re-serialising: 1 stays 1, not 1.0)
    specs = _sources.specs(params, root)
    summary: dict[str, Any] = {}
    with atomic_dir(lay.models) as mdir, atomic_dir(lay.predictions) as pdir:
        for name in _sources.names(params):
            t0 = time.perf_counter()
            if name in specs and specs[name].kind == "score":  # the user's model: no base model to train
                summary[name] = _scores.write_one(lay, pdir, name, specs[name])
                continue
            path = require(lay.prepared / f"{name}.parquet", "prepared data", "the prepare stage")
            preds = train_one(
                pd.read_parquet(path),
                model_params,
                int(params.seed),
                mdir / f"{name}.json",
                int(params.replicas.n or 0),
                str(params.replicas.scheme),
            )
            preds.to_parquet(pdir / f"{name}.parquet", index=False)
            summary[name] = _scores.test_record(preds)
            log.info("trained %s in %.1f s: %s", name, time.perf_counter() - t0, summary[name])
    write_json(lay.metrics / "train.json", summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
