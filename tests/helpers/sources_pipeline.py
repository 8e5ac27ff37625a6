"""A user source through every stage in-process: its params (reduced sizes) and the stages in order."""

from __future__ import annotations

from pathlib import Path

import yaml

from calibflow.pipeline import (
    calibrate,
    calibrate_segments,
    dag,
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


def run_pipeline(
    params: dict, root: Path, with_report: bool = True, segments: bool = False, rows: bool = False
) -> None:
    """The stages in the declared order (calibflow.pipeline.dag, as `dvc repro` runs a user project of these
    params: no fetch or train when every source brings its scores), in-process; ``segments``: the
    calibrate_segments stage too (per-segment fits of the sources' segment columns). ``rows``: prepare,
    calibrate, calibrate_segments, evaluate and select replaced by the row computation the stages used
    before issue 35 (helpers/row_reference.py), the control a test compares the one path with."""
    from calibflow.pipeline import _scores
    from calibflow.pipeline._common import as_params
    from helpers import row_reference as ref

    scores = dag.scores_only(params)
    methods = params["calibrate"]["methods"]
    steps = {
        "sources": lambda key: fingerprint.run(key, params, root),
        "fetch": lambda key: fetch.run(params, root),
        "validate": lambda key: validate.run(key, params, root),
        "prepare": lambda key: prepare.run(params, root, predictions=scores),
        "train": lambda key: train.run(params, root),
        "calibrate": lambda key: [calibrate.run(m, params, root) for m in params["calibrate"]["methods"]],
        "calibrate_segments": lambda key: calibrate_segments.run(params, root) if segments else None,
        "evaluate": lambda key: evaluate.run(params, root),
        "select": lambda key: select.run(params, root),
        "report": lambda key: report.run(params, root) if with_report else None,
    }
    if rows:
        def prepare_rows(key):
            ref.prepare_rows(params, root)
            if scores:
                _scores.write_all(as_params(params), root)

        steps.update({
            "prepare": prepare_rows,
            "calibrate": lambda key: [ref.calibrate_rows(m, params, root) for m in methods],
            "calibrate_segments": lambda key: ref.calibrate_segments_rows(params, root) if segments else None,
            "evaluate": lambda key: ref.evaluate_rows(params, root),
            "select": lambda key: ref.select_rows(params, root),
        })
    for name, key in dag.order(params):
        steps[name](key)
