"""Generated user tables with known ground truth, for the source tests.

Each row has a true probability ``p_true = sigmoid(a + b x1 - c x2 + segment shift)``, a label drawn from it,
a day (``date``), a ``country`` segment, a weight, and two model outputs: ``p_model`` (a miscalibrated
probability, ``sigmoid(1.8 logit(p_true) + 0.7)``, overconfident and too high, so a calibrator has
something to fix) and ``logit_model`` (its logit). Features ``x1``, ``x2`` and ``x3`` (noise) let a
features source train a base model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from scipy.special import expit, logit

START = pd.Timestamp("2026-09-01")


def scores_frame(n: int = 6000, days: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x1, x2, x3 = rng.normal(size=(3, n))
    country = rng.choice(np.array(["FR", "DE", "US"]), size=n, p=[0.3, 0.3, 0.4])
    shift = np.select([country == "FR", country == "DE"], [0.3, -0.3], 0.0)
    p_true = expit(-1.5 + 1.2 * x1 - 0.8 * x2 + shift)
    y = (rng.random(n) < p_true).astype(np.int64)
    p_model = expit(1.8 * logit(p_true) + 0.7)
    day = START + pd.to_timedelta(np.sort(rng.integers(0, days, size=n)), unit="D")
    return pd.DataFrame(
        {
            "date": day.date,
            "country": country,
            "x1": x1,
            "x2": x2,
            "x3": x3,
            "weight": rng.uniform(0.5, 2.0, size=n),
            "p_model": p_model,
            "logit_model": logit(p_model),
            "clicked": y,
        }
    )


def write(frame: pd.DataFrame, kind: str, where: Path) -> Path:
    """``frame`` as ``csv`` (one file), ``parquet`` (one file) or ``folder`` (one Parquet file per day)."""
    where.mkdir(parents=True, exist_ok=True)
    if kind == "csv":
        path = where / "scores.csv"
        frame.to_csv(path, index=False)
        return path
    if kind == "parquet":
        path = where / "scores.parquet"
        frame.to_parquet(path, index=False)
        return path
    if kind == "folder":
        folder = where / "daily"
        folder.mkdir(exist_ok=True)
        for day, part in frame.groupby("date", sort=True):
            part.to_parquet(folder / f"{day}.parquet", index=False)
        return folder
    raise ValueError(kind)
