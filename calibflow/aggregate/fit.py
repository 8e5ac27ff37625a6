"""Fit any score+label calibrator from the bucket table.

Calibrators take frequency weights (a row of weight w stands for w rows), so the aggregate fit is the
ordinary fit on two rows per bucket: the positives at their weighted-mean score and the negatives at
theirs, weighted by their counts. The mean is taken in the scale the method works on (the logit for
``expects="logit"``, the probability otherwise), which makes the first-order bucketing error vanish
for smooth methods: what remains is the within-bucket curvature, O(dz^2).

Methods that need more than a score and a label cannot be fitted from this table: ``vad`` (replica
predictions of the base model), ``calem`` (two sets: treated and control outcomes), ``angular`` (the
feature vectors), ``mist`` (per-sample features). They need rows (or, for calem, one table per
treatment arm, which a segment column on the treatment gives).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from calibflow.aggregate.replicates import in_group_order
from calibflow.calibrators import BaseCalibrator, make, needs_rows


def __getattr__(name: str):
    if name == "NEEDS_ROWS":  # each class's own ``needs_rows`` fact
        return needs_rows()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def representatives(table: pd.DataFrame, scale: str, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(score in the caller's ``kind``, label, weight): one row per (bucket, label), segments summed.

    ``scale`` is where the mean is taken: "logit" or "probability".
    """
    exact = f"score_{kind}"
    col = "sum_z" if scale == "logit" else "sum_q"
    # a fine table is one row per (bucket, label) in that order already (no segments): the group-by would
    # give back the same rows (~0.1 s a method on a 1e5-row source's table)
    one_per_group = in_group_order(table) and not any(str(c).startswith("seg_") for c in table.columns)
    if exact in table.columns:  # a distinct-score table built in the caller's kind: the rows' own scores
        if one_per_group:
            g = table[["bucket", "label", "n", exact]].rename(columns={exact: "s"})
        else:
            by = table.groupby(["bucket", "label"], sort=True)
            g = by.agg(n=("n", "sum"), s=(exact, "first")).reset_index()
        g = g[g["n"] > 0]
        return g["s"].to_numpy(np.float64), g["label"].to_numpy(np.float64), g["n"].to_numpy(np.float64)
    if one_per_group:
        g = table[["bucket", "label", "n", col]]
    else:
        g = table.groupby(["bucket", "label"], sort=True)[["n", col]].sum().reset_index()
    g = g[g["n"] > 0]
    mean = g[col].to_numpy() / g["n"].to_numpy()
    if scale == "logit":
        s = expit(mean) if kind == "probability" else mean
    else:
        s = mean if kind == "probability" else logit(np.clip(mean, 1e-300, 1.0))
    return s, g["label"].to_numpy(np.float64), g["n"].to_numpy(np.float64)


def fit_from_table(
    table: pd.DataFrame, method: str, kind: str = "probability", **params: Any
) -> BaseCalibrator:
    """The calibrator ``method`` fitted on the aggregate rows of ``table`` (scores of ``kind``)."""
    rows = needs_rows()
    if method in rows:
        raise ValueError(f"{method} cannot be fitted from score buckets: it needs {rows[method]}")
    cal = make(method, input=kind, **params)
    scale = (
        "logit"
        if cal.expects == "logit" or (cal.expects == "any" and kind != "probability")
        else "probability"
    )
    s, y, w = representatives(table, scale, kind)
    return cal.fit(s, y, sample_weight=w)
