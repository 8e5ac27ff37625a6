"""Stage ``calibrate_segments``: the segmented calibrators, for every source that declares ``segments:``.

``python -m calibflow.pipeline.calibrate_segments``. For each source whose predictions carry segment columns
(``s:<column>``) and each method of ``calibrate.segmented`` (default: partial_pooling; multicalibration when
named), the method is fitted on the calib rows with those columns (named as in the source, so the saved
calibrator names the columns ``calibflow apply`` must read) and scored on the test rows. Writes
``data/calibrated_segments/<method>/<name>.json`` and ``<name>.parquet`` (``row``, ``y``, ``margin``,
``prob``), and ``fit.json`` (per method and source: test rows, test rows with a value unseen in fitting per
column). Datasets and sources without segments are skipped. One path for every source (issue 35):
``partial_pooling`` is fitted from the calib split's pass tables (``calibflow.aggregate.segment_fit``:
memory bounded by the tables, not the rows); a method that needs the rows jointly (``multicalibration``) is
fitted on a bounded seeded sample of about ``scale.fit_rows`` calib rows read by DuckDB, and ``fit.json``
says which rows (``fit_note``, ``fit_sample``; select copies the note onto the card). For a score source
(prepare kept tables, not rows) no test predictions are written: select compares the fit with the global
choice in one pass over the source's test rows. The folder is swapped in atomically.
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
from calibflow.pipeline._streaming import rows_file, split_counts
from calibflow.segments import unseen_counts

log = logging.getLogger("calibflow.pipeline.calibrate_segments")


def fit_segmented(
    method: str,
    fit: dict[str, Any],
    test: dict[str, Any],
    input_kind: str = "logit",
    options: dict[str, Any] | None = None,
) -> tuple[str, np.ndarray, dict[str, int]]:
    """Fit a segmented calibrator on ``fit``, predict ``test``: its JSON, test probabilities, unseen counts.

    ``fit`` and ``test`` hold ``scores``, ``segments`` (a dict of columns) and, for ``fit``, ``y`` and an
    optional ``weight``. The JSON is reloaded and must reproduce the test probabilities exactly, so the
    artifact written from it is known usable. (In this stage since issue 40: pipeline code, it imported the
    calibrators back up from ``calibflow.segments``.)
    """
    from calibflow.calibrators import from_json, get_class, make, segmented_methods

    if "segments" not in get_class(method).needs:
        known = ", ".join(segmented_methods())
        raise ValueError(f"{method!r} is not a segmented calibrator (those: {known})")
    cal = make(method, **{"input": input_kind, **(options or {})})
    cal.fit(fit["scores"], fit["y"], sample_weight=fit.get("weight"), segments=fit["segments"])
    prob = cal.predict(test["scores"], segments=test["segments"])
    text = cal.to_json()
    again = from_json(text).predict(test["scores"], segments=test["segments"])
    if not np.array_equal(prob, again):
        raise ValueError(f"{method}: the saved JSON does not reproduce its predictions")
    return text, prob, cal.unseen_counts(test["segments"], len(prob))


def sampled_source(
    lay: Layout, params: Params, name: str, method: str, input_kind: str, options: dict[str, Any]
) -> tuple[str, pd.DataFrame | None, dict[str, Any]] | None:
    """A segmented method that cannot be fitted from tables (``multicalibration``), fitted on a bounded
    seeded sample of the calib rows (about ``scale.fit_rows``; ``segment_compare.RowSample``): the rows
    are read by DuckDB (the source's split expression, or the predictions file by split), the segments as
    ``calibflow apply`` reads them. Its JSON, the test predictions (a dataset or features source; None for
    a score source, whose test split select scores in one pass) and the record saying which rows."""
    from calibflow.aggregate import segment_compare as sc

    names = _aggregate.segment_names(lay, name)
    if not names:
        return None
    scale = _aggregate.scale_config(params)
    calib_rows = int(split_counts(lay, name)["calib"])
    sample = sc.row_sample(scale.fit_rows, calib_rows, scale.seed)
    path = rows_file(lay, name)
    streamed = path.parent == lay.prepared
    score = "prob" if input_kind == "probability" else "margin"
    if streamed:
        spec = _sources.specs(params, lay.root)[name]
        rows = sc.stream_split_rows(spec, int(params.seed), input_kind, "calib", sample, weight=True)
    else:
        weight = "weight" if "weight" in pq.ParquetFile(path).schema_arrow.names else None
        segs = {c: _sources.SEGMENT_PREFIX + c for c in names}
        rows = sc.file_test_rows(str(path), "y", score, "prob", segs, "split = $split", {"split": "calib"},
                                 sample, weight)
    fit = sc.fetch_rows(rows, names, scale.threads or None)
    if fit["y"].size == 0 or np.unique(fit["y"]).size < 2:
        raise StageError(f"{method} ({name}): the sample of calib rows needs both classes")
    rec: dict[str, Any] = {
        "fit_rows": int(fit["y"].size),
        "calib_rows": calib_rows,
        "fit_sample": None if sample is None else sample.describe(),
        "fit_note": (f"fitted on every one of the {calib_rows:,} calib rows" if sample is None else
                     f"fitted on a seeded sample of {fit['y'].size:,} of {calib_rows:,} calib rows "
                     f"(scale.fit_rows {scale.fit_rows:,}): {method} needs each row's segments"),
    }
    if streamed:  # no test rows here: the reload is checked on the first sampled rows
        probe = {"scores": fit["scores"][:64], "segments": {c: v[:64] for c, v in fit["segments"].items()}}
        try:
            text, _, _ = fit_segmented(method, fit, probe, input_kind, options)
        except ValueError as exc:
            raise StageError(f"{method} ({name}): {exc}") from None
        return text, None, rec
    seg_cols = [_sources.SEGMENT_PREFIX + c for c in names]
    test = pd.read_parquet(path, filters=[("split", "==", "test")],
                           columns=["row", "y", "margin", "prob", *seg_cols])
    tsegs = {c: test[_sources.SEGMENT_PREFIX + c].to_numpy(dtype=object) for c in names}
    try:
        text, prob, unseen = fit_segmented(method, fit, {"scores": test[score].to_numpy(np.float64),
                                                         "segments": tsegs}, input_kind, options)
    except ValueError as exc:
        raise StageError(f"{method} ({name}): {exc}") from None
    out = pd.DataFrame({"row": test["row"].to_numpy(), "y": test["y"].to_numpy(np.int64)})
    out["margin"] = test["margin"].to_numpy(np.float64)
    out["prob"] = prob
    return text, out, {"unseen_test_rows": unseen, **rec}


#: The segmented method the aggregate path can fit from tables (the others need the rows).
FROM_TABLES = "partial_pooling"
NOT_EVALUATED = (
    "score source: prepare kept tables, not rows; no test predictions file: select scores the test rows "
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
                # one path (issue 35): partial_pooling from the calib split's tables; a method that needs
                # the rows jointly from a bounded seeded sample of them (its record says so)
                if method == FROM_TABLES:
                    res = calibrate_aggregate_source(lay, params, name, input_kind, options)
                    if res is not None:
                        res = (res[0], res[1], {"unseen_test_rows": res[2]})
                else:
                    res = sampled_source(lay, params, name, method, input_kind, options)
                if res is None:
                    continue
                text, out, extra = res
                how = _aggregate.AGGREGATE
                write_text(tmp / method / f"{name}.json", text + "\n")
                if out is None:
                    extra.pop("unseen_test_rows", None)
                    done[name] = {"path": how, "n_test": 0, "not_evaluated": NOT_EVALUATED, **extra}
                    log.info("calibrated %s with %s (%s)", name, method, NOT_EVALUATED)
                    continue
                out.to_parquet(tmp / method / f"{name}.parquet", index=False)
                done[name] = {"n_test": len(out), "path": how, **extra}
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
