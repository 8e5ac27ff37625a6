"""Stage ``calibrate_segments``: the segmented calibrators, for every source that declares ``segments:``.

``python -m calibflow.pipeline.calibrate_segments``. For each source whose predictions carry segment columns
(``s:<column>``) and each method of ``calibrate.segmented`` (default: partial_pooling; multicalibration
when named), the method is fitted on the calib rows with those columns (named as in the source, so the
saved calibrator names the columns ``calibflow apply`` must read) and scored on the test rows. Writes
``data/calibrated_segments/<method>/<name>.json`` and ``<name>.parquet`` (``row``, ``y``, ``margin``,
``prob``), and ``fit.json`` (per method and source: test rows, test rows with a value unseen in fitting per
column). Datasets and sources without segments are skipped. A source on the aggregate path (above
``scale.row_threshold`` rows) gets ``partial_pooling`` fitted from the calib split's pass tables
(``calibflow.aggregate.segment_fit``: memory bounded by the tables, not the rows); ``multicalibration``
needs the rows and is skipped there (``fit.json`` says so). For a source prepare streamed to tables no
test predictions are written: select compares the fit with the global choice in one pass over the source's
test rows. The folder is swapped in atomically.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from calibflow.io import write_json, write_text
from calibflow.pipeline import _aggregate, _sources
from calibflow.pipeline._common import (
    Layout,
    Params,
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
from calibflow.pipeline._streaming import rows_file
from calibflow.segments import fit_segmented, unseen_counts

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


#: The segmented method the aggregate path can fit from tables (the others need the rows).
FROM_TABLES = "partial_pooling"
NOT_EVALUATED = (
    "streamed source: fitted from prepare's tables; no test predictions file: select scores the test rows "
    "in one pass over the source (calibflow.aggregate.segment_compare) and compares it there"
)


def calibrate_aggregate_source(
    lay: Layout, params: Params, name: str, input_kind: str, options: dict[str, Any]
) -> tuple[str, pd.DataFrame | None, dict[str, int]] | None:
    """``partial_pooling`` from the calib split's tables; the test rows (read by split) predicted (None for a
    source prepare streamed to tables: no rows to predict)."""
    from calibflow.aggregate.segment_fit import partial_pooling_from_tables
    from calibflow.calibrators import from_json

    names = _aggregate.segment_names(lay, name)
    if not names:
        return None
    scale = _aggregate.scale_config(params)
    tabs = _aggregate.split_tables(
        lay, name, "calib", scale, weighted=True, input_kind=input_kind, segments=True
    )
    try:
        fitted = partial_pooling_from_tables(tabs.fine, tabs.segments, input_kind, **options)
    except (TypeError, ValueError) as exc:
        raise StageError(f"{FROM_TABLES} ({name}): {exc}") from None
    streamed = rows_file(lay, name).parent == lay.prepared
    if fitted.intersections and len(names) > 1 and not streamed:  # pairs need a joint pass over the rows
        _add_pairs(lay, name, fitted, names)
    text = fitted.to_json()
    if streamed:
        # prepare kept tables, not rows: no test predictions file is written here (evaluate and
        # validate@calibrated read such files); select scores the test rows in its own pass
        return text, None, {}
    col = "prob" if input_kind == "probability" else "margin"
    seg_cols = [_sources.SEGMENT_PREFIX + c for c in names]
    test = pd.read_parquet(rows_file(lay, name), filters=[("split", "==", "test")],
                           columns=["row", "y", "margin", "prob", *seg_cols])
    segs = {c: test[_sources.SEGMENT_PREFIX + c].to_numpy(dtype=object) for c in names}
    cal = from_json(text)
    out = pd.DataFrame({"row": test["row"].to_numpy(), "y": test["y"].to_numpy(np.int64)})
    out["margin"] = test["margin"].to_numpy(np.float64)
    out["prob"] = cal.predict(test[col].to_numpy(np.float64), segments=segs)
    return text, out, unseen_counts(cal.segment_names_, cal.vocab_, segs, len(out))


def _add_pairs(lay: Layout, name: str, cal: Any, names: list[str]) -> None:
    """Column pairs on the aggregate path: one joint table per pair of the calib split (DuckDB GROUP BY,
    ``segment_fit.pair_table``), tested and added as in the row fit (``segment_fit.add_pairs``)."""
    from itertools import combinations

    from calibflow.aggregate.segment_fit import add_pairs, pair_table

    path = rows_file(lay, name)
    weight = "weight" if "weight" in pq.ParquetFile(path).schema_arrow.names else None
    src = "(SELECT * FROM read_parquet($path) WHERE split = 'calib')"
    pre = _sources.SEGMENT_PREFIX
    tables = {(a, b): pair_table(src, {"path": str(path)}, "margin", "y", pre + a, pre + b, weight)
              for a, b in combinations(names, 2)}
    add_pairs(cal, tables)


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
                path = rows_file(lay, name)
                if not path.is_dir():  # a streamed source's prepare tables are a folder
                    require(path, "predictions", "the train stage")
                t0 = time.perf_counter()
                how = _aggregate.path_for(params, name, lay)
                if how == _aggregate.AGGREGATE and method != FROM_TABLES:
                    done[name] = {"path": how, "skipped": f"{method} needs rows; {FROM_TABLES} fits tables"}
                    continue
                if how == _aggregate.AGGREGATE:
                    res = calibrate_aggregate_source(lay, params, name, input_kind, options)
                else:
                    res = calibrate_source(method, pd.read_parquet(path), input_kind, options)
                if res is None:
                    continue
                text, out, unseen = res
                write_text(tmp / method / f"{name}.json", text + "\n")
                if out is None:
                    done[name] = {"path": how, "n_test": 0, "not_evaluated": NOT_EVALUATED}
                    log.info("calibrated %s with %s from tables (%s)", name, method, NOT_EVALUATED)
                    continue
                out.to_parquet(tmp / method / f"{name}.parquet", index=False)
                done[name] = {"n_test": len(out), "unseen_test_rows": unseen, "path": how}
                log.info("calibrated %s with %s in %.2f s", name, method, time.perf_counter() - t0)
            info["methods"][method] = done
        write_json(tmp / "fit.json", info)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    args = parser.parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
