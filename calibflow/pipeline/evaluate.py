"""Stage ``evaluate``: every dataset x method on the test split, with bootstrap 95% intervals.

``python -m calibflow.pipeline.evaluate``. Methods are the base model itself (``uncalibrated``) and each
entry of
``calibrate.methods``. Metrics (``calibflow.metrics``): ECE and MCE (``evaluate.n_bins`` equal-width bins),
Brier, log loss, KS, calibration ratio ``sum p / sum y`` (1 is perfect) and AUC (is the ranking kept?), plus
the selection-set metrics of the top ``evaluate.selection_alpha`` by predicted probability.

One path for every dataset and source, of any size (issue 35): the metrics come from the test split's bucket
table (``_aggregate``: exact distinct-score tables where they fit ``scale.distinct_max``, the fine grid
otherwise, tolerances in docs/benchmarks/scale.md). Intervals: percentile intervals over the table's
``scale.replicates`` Poisson replicate columns (seeded by ``scale.seed``), the same replicate weights for
every method (paired), so two methods' intervals are comparable; no row bootstrap.
Outputs (``metrics/headline.json``, the verdicts ``dvc metrics show`` lists, is the select stage's):
``metrics/evaluation/<dataset>/<method>.json`` (the detail), reliability bins (equal-mass by default,
``evaluate.reliability_bins``, each with a Jeffreys interval) ``plots/reliability/<dataset>/<method>.json``
and class-wise histograms of the predicted probability ``plots/histograms/<dataset>/<method>.json``.
A source with segments is evaluated under its segmented calibrators too (``calibrate.segmented``, the
``calibrate_segments`` stage's test predictions), with the same records, so select's choice and the
report's figures have them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from calibflow.io import write_json
from calibflow.pipeline import _aggregate, _sources
from calibflow.pipeline._common import (
    UNCALIBRATED,
    Layout,
    Params,
    ParamsLike,
    as_params,
    atomic_dir,
    base_parser,
    cli,
    load_params,
    methods,
    require,
    segmented_methods,
)

log = logging.getLogger("calibflow.pipeline.evaluate")
#: numba, imported late by the compiled passes: the run's stage host imports it once for every stage.
HOST_PRELOAD = ("numba",)
def segmented_files(lay: Layout, params: Params, name: str) -> dict[str, Any]:
    """The segmented calibrators' test predictions of ``name`` that calibrate_segments wrote (a source
    without segments, or a method it could not fit there, has none): method -> Parquet path."""
    files = {m: lay.calibrated_segments / m / f"{name}.parquet" for m in segmented_methods(params)}
    return {m: f for m, f in files.items() if f.is_file() and m not in methods(params)}


def evaluate_aggregate(lay: Layout, params: Params, name: str, method_list: list[str]):
    """Every method from the test split's bucket table, intervals from its Poisson replicate columns.

    The keys the row computation's records had (``calibflow.aggregate.diagnostics`` for KS, smooth ECE,
    Kuiper, the log-loss miscalibration term and the selection metrics), plus their bucket-resolution bounds.
    """
    scale = _aggregate.scale_config(params)
    input_kind = str(params.calibrate.input)
    test = _aggregate.split_table(lay, name, "test", scale, scale.replicates, input_kind=input_kind)
    texts = {
        m: require(lay.calibrated_method(m) / f"{name}.json", "calibrator", f"calibrate@{m}").read_text()
        for m in method_list
    }
    extra = {UNCALIBRATED: test}
    # a segmented calibrator's probabilities need each row's segments: its test predictions file (written
    # by calibrate_segments) goes through the same pass, on its probabilities
    for m, f in segmented_files(lay, params, name).items():
        extra[m] = _aggregate.probability_table(f, scale, scale.replicates)
    # the methods' tables are built one at a time as evaluate_tables reaches them (memory: one at a time)
    order = [UNCALIBRATED, *texts, *(m for m in extra if m != UNCALIBRATED)]
    tables = _aggregate.CalibratedTables(test, texts, input_kind, extra, order)
    return _aggregate.evaluate_tables(tables, params.evaluate)


def run(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Evaluate every dataset x method; the three output folders are swapped in at the end."""
    params = as_params(params)
    lay = Layout(Path(root))
    method_list = methods(params)
    result: dict[str, Any] = {}
    with (
        atomic_dir(lay.evaluation) as mdir,
        atomic_dir(lay.plots / "reliability") as rdir,
        atomic_dir(lay.plots / "histograms") as hdir,
    ):
        for name in _sources.names(params):
            res = evaluate_aggregate(lay, params, name, method_list)  # one path for every source
            for m, (rec, rel, hist) in res.items():
                write_json(mdir / name / f"{m}.json", rec)
                write_json(rdir / name / f"{m}.json", rel)
                write_json(hdir / name / f"{m}.json", hist)
            result[name] = {m: v[0] for m, v in res.items()}
            best = min(result[name], key=lambda m: result[name][m]["ece"])
            log.info("evaluated %s: %d methods, lowest ECE %s", name, len(res), best)
    return result


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
