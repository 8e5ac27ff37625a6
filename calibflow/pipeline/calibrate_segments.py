"""Stage ``calibrate_segments``: the segmented calibrators, for every source that declares ``segments:``.

``python -m calibflow.pipeline.calibrate_segments``. For each source whose predictions carry segment columns
(``s:<column>``) and each method of ``calibrate.segmented`` (default: partial_pooling, multicalibration), the
method is fitted on the calib rows with those columns (named as in the source, so the saved calibrator names
the columns ``calibflow apply`` must read) and scored on the test rows. Writes
``data/calibrated_segments/<method>/<name>.json`` and ``<name>.parquet`` (``row``, ``y``, ``margin``,
``prob``), and ``fit.json`` (per method and source: test rows, test rows with a value unseen in fitting per
column). Datasets and sources without segments are skipped; so are sources on the aggregate path (their
segmented fits from bucket tables are the scale work's). The folder is swapped in atomically.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibflow.io import write_json, write_text
from calibflow.pipeline import _aggregate, _sources
from calibflow.pipeline._common import (
    Layout,
    ParamsLike,
    StageError,
    as_params,
    atomic_dir,
    base_parser,
    cli,
    load_params,
    require,
    segmented_methods,
)
from calibflow.segments import fit_segmented

log = logging.getLogger("calibflow.pipeline.calibrate_segments")


def _part(frame: pd.DataFrame, score_col: str, seg_cols: list[str]) -> dict[str, Any]:
    out = {
        "scores": frame[score_col].to_numpy(np.float64),
        "y": frame["y"].to_numpy(np.float64),
        "segments": {c[len(_sources.SEGMENT_PREFIX) :]: frame[c].to_numpy(dtype=object) for c in seg_cols},
    }
    if "weight" in frame.columns:
        out["weight"] = frame["weight"].to_numpy(np.float64)
    return out


def calibrate_source(
    method: str, preds: pd.DataFrame, input_kind: str, options: dict[str, Any]
) -> tuple[str, pd.DataFrame, dict[str, int]] | None:
    """One method on one source's predictions; None when they carry no segment column."""
    seg_cols = [c for c in preds.columns if c.startswith(_sources.SEGMENT_PREFIX)]
    if not seg_cols:
        return None
    col = "prob" if input_kind == "probability" else "margin"
    cal, test = preds[preds["split"] == "calib"], preds[preds["split"] == "test"]
    if cal.empty or test.empty:
        raise StageError("predictions need both 'calib' and 'test' rows")
    try:
        text, prob, unseen = fit_segmented(
            method, _part(cal, col, seg_cols), _part(test, col, seg_cols), input_kind, options
        )
    except ValueError as exc:
        raise StageError(f"{method}: {exc}") from None
    out = pd.DataFrame({"row": test["row"].to_numpy(), "y": test["y"].to_numpy(np.int64)})
    out["margin"] = test["margin"].to_numpy(np.float64)
    out["prob"] = prob
    return text, out, unseen


def run(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    params = as_params(params)
    lay = Layout(Path(root))
    cfg = params.calibrate
    input_kind = str(cfg.input)
    info: dict[str, Any] = {"input": input_kind, "methods": {}}
    with atomic_dir(lay.calibrated_segments) as tmp:
        for method in segmented_methods(params):
            options = dict((cfg.options or {}).get(method) or {})
            (tmp / method).mkdir()
            done: dict[str, Any] = {}
            for name in _sources.names(params):
                if _aggregate.path_for(params, name, lay) == _aggregate.AGGREGATE:
                    continue
                path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
                t0 = time.perf_counter()
                res = calibrate_source(method, pd.read_parquet(path), input_kind, options)
                if res is None:
                    continue
                text, out, unseen = res
                write_text(tmp / method / f"{name}.json", text + "\n")
                out.to_parquet(tmp / method / f"{name}.parquet", index=False)
                done[name] = {"n_test": len(out), "unseen_test_rows": unseen}
                log.info("calibrated %s with %s in %.2f s", name, method, time.perf_counter() - t0)
            info["methods"][method] = done
        write_json(tmp / "fit.json", info)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    raise SystemExit(main())
