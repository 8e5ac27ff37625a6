"""A user source through every stage in-process: its params (reduced sizes) and the stages in order."""

from __future__ import annotations

from pathlib import Path

import yaml

from calibflow.pipeline import (
    calibrate,
    calibrate_segments,
    evaluate,
    fetch,
    fingerprint,
    prepare,
    report,
    select,
    train,
    validate,
)

REPO = Path(__file__).resolve().parents[2]
METHODS = ["platt", "isotonic"]


def source_params(path: str, with_features: bool = True) -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["datasets"]["names"] = []
    params["papers"] = []
    params["calibrate"]["methods"] = METHODS
    params["evaluate"].update(n_bootstrap=20, n_bins=10)
    params["model"].update(n_estimators=10, max_depth=3, n_jobs=1)
    params["sources"] = {
        "ads": {
            "path": path,
            "label": "clicked",
            "score": "p_model",
            "score_kind": "probability",
            "time": "date",
            "segments": ["country"],
            "weight": "weight",
        }
    }
    if with_features:
        params["sources"]["feat"] = {
            "path": path,
            "label": "clicked",
            "features": ["x1", "x2", "x3", "country"],
            "split": {"kind": "random", "fractions": {"train": 0.5, "calib": 0.25, "test": 0.25}},
        }
    return params


def run_pipeline(params: dict, root: Path, with_report: bool = True, segments: bool = False) -> None:
    """The stages in dvc.yaml's order, in-process (as `dvc repro` would run them); ``segments``: the
    calibrate_segments stage too (per-segment fits of the sources' segment columns)."""
    for name in params["sources"]:
        fingerprint.run(name, params, root)
    fetch.run(params, root)
    validate.run("raw", params, root)
    prepare.run(params, root)
    validate.run("prepared", params, root)
    train.run(params, root)
    for m in params["calibrate"]["methods"]:
        calibrate.run(m, params, root)
    if segments:
        calibrate_segments.run(params, root)
    validate.run("calibrated", params, root)
    evaluate.run(params, root)
    select.run(params, root)
    if with_report:
        report.run(params, root)
