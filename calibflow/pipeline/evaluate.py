"""Stage ``evaluate``: every dataset x method on the test split, with bootstrap 95% intervals.

``python -m calibflow.pipeline.evaluate``. Methods are the base model itself (``uncalibrated``) and each
entry of
``calibrate.methods``. Metrics (``calibflow.metrics``): ECE and MCE (``evaluate.n_bins`` equal-width bins),
Brier, log loss, KS, calibration ratio ``sum p / sum y`` (1 is perfect) and AUC (is the ranking kept?), plus
the selection-set metrics of the top ``evaluate.selection_alpha`` by predicted probability.

Intervals: percentile bootstrap over test rows, ``evaluate.n_bootstrap`` resamples drawn once per dataset
from the global seed and shared by all methods (paired), so two methods' intervals are comparable.
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

import numpy as np
import pandas as pd

from calibflow import diagnostics, metrics
from calibflow.intervals import bootstrap_intervals, jeffreys_interval, resample_counts
from calibflow.io import write_json
from calibflow.pipeline import _aggregate, _sources
from calibflow.pipeline._common import (
    UNCALIBRATED,
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
    segmented_methods,
)
from calibflow.pipeline.params_schema import Evaluate

log = logging.getLogger("calibflow.pipeline.evaluate")
def reliability_records(
    y: np.ndarray, p: np.ndarray, n_bins: int, strategy: str = "quantile", level: float = 0.95
) -> list[dict[str, float]]:
    """Non-empty reliability bins as records (the shape ``dvc plots`` reads), each with its interval.

    ``strategy="quantile"`` (the default) gives equal-mass bins: every bin holds about ``n / n_bins`` test
    rows, so at a 2% base rate the diagram still has ``n_bins`` points where equal-width bins would put
    nearly all rows in the first one. ``low``/``high``: Jeffreys interval of the observed rate;
    ``band_low``/``band_high``: the consistency band of a calibrated model at the bin's predictions.
    """
    rel = metrics.reliability(y, p, n_bins=n_bins, strategy=strategy)
    ok = rel.count > 0
    pos = np.round(rel.observed * rel.count)
    lo, hi = jeffreys_interval(pos[ok], rel.count[ok], level)
    # Consistency band (Broecker & Smith 2007): where a calibrated model's observed rate would fall in this
    # bin, labels redrawn as Bernoulli(p) with a fixed seed; a point outside it is evidence of miscalibration.
    band = diagnostics.consistency_bands(y, p, n_bins, strategy, level=level, n_draws=400, seed=0)
    keys = ("count", "positives", "mean_pred", "observed", "low", "high", "band_low", "band_high")
    cols = (rel.count[ok], pos[ok], rel.mean_pred[ok], rel.observed[ok], lo, hi, band.band_low[ok],
            band.band_high[ok])
    return [
        {"bin": int(i), **{k: float(c[j]) for k, c in zip(keys, cols, strict=True)}}
        for j, i in enumerate(np.flatnonzero(ok))
    ]


def histogram_records(y: np.ndarray, p: np.ndarray, bins: int) -> list[dict[str, float]]:
    edges = np.linspace(0.0, 1.0, bins + 1)
    neg, _ = np.histogram(p[y == 0], bins=edges)
    pos, _ = np.histogram(p[y == 1], bins=edges)
    return [
        {
            "bin_low": float(edges[i]),
            "bin_high": float(edges[i + 1]),
            "negatives": int(neg[i]),
            "positives": int(pos[i]),
        }
        for i in range(bins)
    ]


def segmented_files(lay: Layout, params: Params, name: str) -> dict[str, Any]:
    """The segmented calibrators' test predictions of ``name`` that calibrate_segments wrote (a source
    without segments, or a method it could not fit there, has none): method -> Parquet path."""
    files = {m: lay.calibrated_segments / m / f"{name}.parquet" for m in segmented_methods(params)}
    return {m: f for m, f in files.items() if f.is_file() and m not in methods(params)}


def _predictions(
    lay: Layout, name: str, method_list: list[str], segmented: dict[str, Any] | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Test labels and each method's test probabilities (``segmented``: method -> its file), on ``row``."""
    path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
    base = pd.read_parquet(path, columns=["row", "split", "y", "prob"])
    base = base[base["split"] == "test"].sort_values("row").reset_index(drop=True)
    probs = {UNCALIBRATED: base["prob"].to_numpy(np.float64)}
    files = {m: (lay.calibrated_method(m) / f"{name}.parquet", f"calibrate@{m}") for m in method_list}
    files.update({m: (f, "calibrate_segments") for m, f in (segmented or {}).items()})
    for m, (cpath, stage) in files.items():
        require(cpath, "calibrated predictions", stage)
        c = pd.read_parquet(cpath, columns=["row", "prob"]).sort_values("row").reset_index(drop=True)
        if not np.array_equal(c["row"].to_numpy(), base["row"].to_numpy()):
            raise StageError(f"{cpath}: test rows differ from {path}; rerun {stage}")
        probs[m] = c["prob"].to_numpy(np.float64)
    return base["y"].to_numpy(np.float64), probs


def evaluate_dataset(y: np.ndarray, probs: dict[str, np.ndarray], cfg: Evaluate, rng_seed: int):
    """Metrics, reliability and histogram records of every method on one dataset."""
    n_bins = int(cfg.n_bins)
    strategy = str(cfg.reliability_bins)
    if strategy not in ("quantile", "uniform"):
        raise StageError(f"params: evaluate.reliability_bins is {strategy!r}; use quantile or uniform")
    counts = resample_counts(int(cfg.n_bootstrap), y, rng_seed)
    alpha = cfg.selection_alpha
    level = float(cfg.ci_level)
    out = {}
    for m, p in probs.items():
        rec: dict[str, Any] = {"n_test": int(y.size), "positive_rate": float(y.mean())}
        rec["path"] = _aggregate.ROWS
        rec.update(metrics.summary(y, p, n_bins=n_bins))
        rec.update(_diagnostics(y, p))
        if counts.shape[0]:
            rec["ci"] = {"level": level, **bootstrap_intervals(y, p, counts, n_bins, level)}
        if alpha:
            rec["selection"] = metrics.selection_metrics(y, p, alpha=float(alpha), n_bins=10)
        out[m] = (
            rec,
            reliability_records(y, p, n_bins, strategy, level),
            histogram_records(y, p, int(cfg.hist_bins)),
        )
    return out


def _diagnostics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Binning-free diagnostics: smooth ECE, the Kuiper test's p-value (small = miscalibrated)
    and the part of the log loss a perfect monotone recalibration would remove (CORP miscalibration)."""
    tests = diagnostics.cumulative_tests(y, p)
    return {
        "smooth_ece": diagnostics.smooth_ece(y, p),
        "kuiper_pvalue": tests.kuiper_pvalue,
        "log_loss_miscalibration": diagnostics.decomposition(y, p, "log_loss").miscalibration,
    }


def evaluate_aggregate(lay: Layout, params: Params, name: str, method_list: list[str]):
    """The aggregate path: every method from the test split's bucket table, Poisson intervals.

    Same keys as the row path's records (``calibflow.aggregate.diagnostics`` for KS, smooth ECE, Kuiper,
    the log-loss miscalibration term and the selection metrics), plus their bucket-resolution bounds.
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
    cfg = params.evaluate
    method_list = methods(params)
    result: dict[str, Any] = {}
    with (
        atomic_dir(lay.evaluation) as mdir,
        atomic_dir(lay.plots / "reliability") as rdir,
        atomic_dir(lay.plots / "histograms") as hdir,
    ):
        for name in _sources.names(params):
            if _aggregate.path_for(params, name, lay) == _aggregate.AGGREGATE:
                res = evaluate_aggregate(lay, params, name, method_list)
            else:
                y, probs = _predictions(lay, name, method_list, segmented_files(lay, params, name))
                res = evaluate_dataset(y, probs, cfg, int(params.seed))
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
