"""Stage ``calibrate@<method>``: fit one calibration method on every dataset's calibration split.

``python -m calibflow.pipeline.calibrate <method>``. For each dataset and source, from the ``calib`` split's
bucket table (the one path, issue 35: ``_aggregate.split_table``), the base model's margins (logits) or the
source's scores fit
``calibflow.calibrators.make(method, input=calibrate.input, **calibrate.options[method])``;
the fitted calibrator is saved as JSON (``data/calibrated/<method>/<name>.json``) and, where train wrote a
predictions file (datasets, features sources), its test-split predictions as Parquet (``<name>.parquet``:
``row``, ``y``, ``margin``, ``prob``). The saved JSON is reloaded and must reproduce the map exactly on the
table's scores, so the artifact is known usable.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibflow.calibrators import available, from_json
from calibflow.io import write_json, write_text
from calibflow.metrics import expit
from calibflow.pipeline import _aggregate, _sources, _streaming
from calibflow.pipeline._common import (
    SPECIAL_METHODS,
    Layout,
    Params,
    ParamsLike,
    StageError,
    as_params,
    atomic_dir,
    base_parser,
    cli,
    load_params,
    methods,
    require,
)

log = logging.getLogger("calibflow.pipeline.calibrate")
#: numba, imported late by the compiled passes: the run's stage host imports it once for every stage.
HOST_PRELOAD = ("numba",)


def _score_column(input_kind: str) -> str:
    return "prob" if input_kind == "probability" else "margin"


def _fit_table(
    method: str, lay: Layout, name: str, input_kind: str, options: dict[str, Any], params: Params
) -> tuple[str, tuple[Any, pd.DataFrame]]:
    """``method`` fitted on the calib split's bucket table: its JSON, the calibrator and the table."""
    from calibflow.aggregate import fit_from_table

    scale = _aggregate.scale_config(params)
    table = _aggregate.split_table(lay, name, "calib", scale, weighted=True, input_kind=input_kind)
    try:
        calibrator = fit_from_table(table, method, input_kind, **options)
    except ValueError as exc:
        raise StageError(f"{name}: {exc}") from None
    return calibrator.to_json(), (calibrator, table)


def _check_json(
    method: str, name: str, calibrator: Any, text: str, table: pd.DataFrame, input_kind: str
) -> None:
    """The saved JSON must reload to the same map (checked on the table's group scores)."""
    z = (table["sum_z"] / table["n"]).to_numpy(np.float64)
    x = expit(z) if input_kind == "probability" else z
    if not np.array_equal(calibrator.predict(x), from_json(text).predict(x)):
        raise StageError(f"{method}: the saved JSON does not reproduce its predictions on {name}")


def test_predictions(lay: Layout, name: str, text: str, input_kind: str) -> pd.DataFrame:
    """A dataset's or features source's test rows (``row``, ``y``, ``margin``, ``prob``) under the fitted
    calibrator: the predictions file read by split (validate@calibrated and calibrate_segments' checks read
    it). A score source has no such file: its test split is a table."""
    test = _aggregate.test_rows(lay, name)
    prob = from_json(text).predict(test[_score_column(input_kind)].to_numpy(np.float64))
    out = pd.DataFrame({"row": test["row"].to_numpy(), "y": test["y"].to_numpy(np.int64)})
    out["margin"] = test["margin"].to_numpy(np.float64)
    out["prob"] = prob
    return out


def run(method: str, params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Calibrate every dataset with ``method``; ``data/calibrated/<method>`` is swapped in at the end."""
    if method in SPECIAL_METHODS:
        raise StageError(
            f"{method!r} needs inputs beyond (score, label); it is not a tabular pipeline method"
        )
    if method not in available():
        raise StageError(f"unknown calibrator {method!r}; available: {', '.join(available())}")
    params = as_params(params)
    lay = Layout(Path(root))
    input_kind = str(params.calibrate.input)
    options = dict((params.calibrate.options or {}).get(method) or {})
    info: dict[str, Any] = {"method": method, "input": input_kind, "options": options, "datasets": {}}
    with atomic_dir(lay.calibrated_method(method)) as tmp:
        for name in _sources.names(params):
            path = _streaming.rows_file(lay, name)
            if path.parent != lay.prepared:  # a score source's tables folder is checked where it is read
                require(path, "predictions", "the train stage")
            t0 = time.perf_counter()
            # one path for every source (issue 35): the fit reads the calib split's table
            text, (calibrator, table) = _fit_table(method, lay, name, input_kind, options, params)
            _check_json(method, name, calibrator, text, table, input_kind)
            write_text(tmp / f"{name}.json", text + "\n")
            rec: dict[str, Any] = {"path": _aggregate.AGGREGATE}
            if path.parent == lay.prepared:  # a score source: no per-row file, nothing to predict
                rec.update(n_test=int(_streaming.split_counts(lay, name)["test"]), test_predictions=None)
            else:
                out = test_predictions(lay, name, text, input_kind)
                out.to_parquet(tmp / f"{name}.parquet", index=False)
                rec["n_test"] = len(out)
            # No wall-clock time in this DVC output: same inputs must give the same bytes (timing: the log).
            info["datasets"][name] = rec
            log.info("calibrated %s with %s in %.2f s", name, method, time.perf_counter() - t0)
        write_json(tmp / "fit.json", info)
    return info


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument(
        "method", nargs="?", help="a registered calibrator name (calibflow.calibrators.available())"
    )
    parser.add_argument(
        "--all", action="store_true", help="every method of calibrate.methods in one process (user projects)"
    )
    args = parser.parse_args(argv)
    if args.all == (args.method is not None):
        parser.error("give one method, or --all")
    if args.all:
        return cli(lambda: run_all(load_params(args.params), args.root))
    return cli(lambda: run(args.method, load_params(args.params), args.root))


def run_all(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Every method of ``calibrate.methods``, one ``data/calibrated/<method>`` each, in one process.

    A user project's single ``calibrate`` stage: one interpreter start instead of one per method, which is
    most of the time on a source of 1e5 rows. Each method's folder is still swapped in atomically."""
    params = as_params(params)
    return {m: run(m, params, root) for m in methods(params)}


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
