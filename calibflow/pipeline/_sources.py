"""The stages' view of user sources (``sources:`` in params.yaml) beside the built-in datasets.

Every stage that loops over datasets loops over :func:`names` (datasets first, then sources). A source is
turned into the same files a dataset produces: a prepared frame (``data/prepared/<name>.parquet``), then
predictions in train's layout (``row``, ``split``, ``y``, ``margin``, ``prob``), so calibrate, evaluate and
the report run unchanged. Extra per-row columns kept along the way: ``weight``, ``time``, ``treatment`` and
one ``s:<column>`` per declared segment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibflow import sources as src
from calibflow.pipeline._common import ParamsLike, StageError, as_params
from calibflow.sources import SourceSpec

#: Where the fingerprint stage writes ``<name>/fingerprint.json`` (downstream stages depend on the folder).
SOURCES_DIR = "data/sources"
#: Prefix of the segment columns carried from a source through prepared frames and predictions.
SEGMENT_PREFIX = "s:"
#: Per-row columns carried from the prepared frame into the predictions (besides ``s:*``).
CARRIED = ("weight", "time", "treatment")
def specs(params: ParamsLike, root: str | Path = ".") -> dict[str, SourceSpec]:
    """The declared sources, paths resolved against ``root``; a bad declaration is one readable line."""
    p = as_params(params)
    out = src.parse_sources(p.sources)
    taken = set(p.datasets.names or [])
    clash = sorted(set(out) & taken)
    if clash:
        raise StageError(f"sources: {clash} also named in datasets.names; give the source another name")
    return {n: s.at(root) for n, s in out.items()}


def names(params: ParamsLike) -> list[str]:
    """Datasets then sources: every unit a stage loops over."""
    p = as_params(params)
    ds = [str(n) for n in (p.datasets.names or [])]
    sc = list(src.parse_sources(p.sources))
    if not ds and not sc:
        raise StageError("params: datasets.names is empty and no sources are declared")
    return ds + sc


def min_class_count(params: ParamsLike) -> int:
    """``validate.min_class_count``: positives and negatives each split of a source needs."""
    return int(as_params(params).validate_.min_class_count)


def carried_columns(frame: pd.DataFrame) -> list[str]:
    """The per-row columns that travel with a source's rows (weight, time, treatment, segments)."""
    return [c for c in frame.columns if c in CARRIED or c.startswith(SEGMENT_PREFIX)]


def labels01(values: pd.Series, positive: Any | None) -> np.ndarray:
    """The label as 0/1 (0 where unusable): ``calibflow.source_rules``' one rule."""
    from calibflow.source_rules import label_array

    return label_array(values, positive)[1]


def score_predictions(frame: pd.DataFrame, spec: SourceSpec) -> pd.DataFrame:
    """A score source's "predictions" in train's layout: no model, the user's scores as margin/prob."""
    margin, prob = src.to_margin(frame["score"].to_numpy(np.float64), spec.score_kind or "probability")
    out = frame[["row", "split", "y", *carried_columns(frame)]].copy()
    out["margin"] = margin
    out["prob"] = prob
    return out


# ---- source fingerprints (written by the sources@ stage, read by fetch and select)


def fingerprint_path(root: str | os.PathLike[str], name: str) -> Path:
    return Path(root) / SOURCES_DIR / name / "fingerprint.json"


def stamp(params: ParamsLike, name: str, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The fingerprint record of source ``name`` (declared path + per-file stamps)."""
    declared = specs(params, root)
    if name not in declared:
        known = ", ".join(declared) or "none"
        raise StageError(f"no source named {name!r} in params.yaml (declared: {known})")
    decl_path = as_params(params).sources[name]["path"]
    return {"name": name, "path": decl_path, **src.fingerprint(declared[name])}


def read_fingerprint(params: ParamsLike, name: str, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The recorded fingerprint of ``name`` when it matches the declaration, else a fresh one."""
    p = fingerprint_path(root, name)
    if p.is_file():
        rec = json.loads(p.read_text())
        if rec.get("path") == (as_params(params).sources or {}).get(name, {}).get("path"):
            return rec
    return stamp(params, name, root)


def manifest_entry(params: ParamsLike, name: str, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """A user source's files as ``data/raw/manifest.json`` records them: path -> sha256 (or "(size+mtime)"
    for a large source), bytes, and the fingerprint's own fields."""
    fp = read_fingerprint(params, name, root)
    stamp = {f["path"]: {k: v for k, v in f.items() if k != "path"} for f in fp["files"]}
    return {p: {"sha256": s.get("sha256", "(size+mtime)"), "bytes": s["size"], **s} for p, s in stamp.items()}
