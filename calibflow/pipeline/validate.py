"""Stage ``validate``: Great Expectations suites on raw data, prepared splits and calibrator outputs.

``python -m calibflow.pipeline.validate raw|prepared|calibrated``. One ephemeral GX context per run
(nothing written to a
``gx/`` folder); each suite is a list of expectations built here from what we know about each dataset
(``calibflow.datasets.RAW_SPECS``, from ``shared/datasets/PROVENANCE.md``) and from the params. The result
of every phase is
saved as ``reports/validation/<phase>.json``. A failing suite prints a readable summary of the failed
expectations, saves them to ``reports/validation/<phase>.failed.json`` (so the last good ``<phase>.json``
stays in place) and exits 1, which stops ``dvc repro``.

Some expectations run on derived columns (a 0/1 ``label_is_positive`` for class balance on raw string
labels, a per-row ``features_finite`` flag for wide design matrices) because GX has no "proportion of value"
expectation and one expectation per feature column would make a 500-column suite slow.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from calibflow.datasets import RAW_SPECS
from calibflow.io import write_json
from calibflow.pipeline import _sources, _streaming
from calibflow.pipeline._common import (
    PHASES,
    SPLITS,
    Layout,
    Params,
    ParamsLike,
    StageError,
    as_params,
    base_parser,
    cli,
    feature_columns,
    load_params,
    methods,
    require,
    segmented_methods,
)

log = logging.getLogger("calibflow.pipeline.validate")
#: Largest decrease of a monotone calibrator's output along increasing margins that counts as rounding.
MONOTONE_TOL = 1e-9
#: Imported late here (a stage that validates nothing need not pay for it); the run's warm stage host
#: (``calibflow.flows.stage_host``) imports them once for the three validations of a run.
HOST_PRELOAD = ("great_expectations", "great_expectations.expectations")


class ValidationFailed(StageError):
    """At least one suite failed; the message lists the failed expectations."""


# ------------------------------------------------------------------------------------------- suite builders


def _gxe():
    import great_expectations.expectations as gxe

    return gxe


def raw_suite(name: str, df: pd.DataFrame) -> tuple[pd.DataFrame, list[Any]]:
    """The raw-data suite of ``name`` and the frame it runs on (with the derived label indicator)."""
    gxe = _gxe()
    spec = RAW_SPECS.get(name)
    if spec is None:  # an unregistered dataset still gets the basics
        return df, [gxe.ExpectTableRowCountToBeBetween(min_value=1)]
    frame = df.copy()
    lab = frame[spec.label]
    if spec.positive:
        frame["label_is_positive"] = lab.astype(object).isin(spec.positive).astype("int64")
    else:  # a continuous target thresholded at its median, as calibflow.datasets does
        frame["label_is_positive"] = (lab > lab.median()).astype("int64")
    exps: list[Any] = [gxe.ExpectTableRowCountToEqual(value=spec.rows)]
    exps += [gxe.ExpectColumnToExist(column=c) for c in spec.columns]
    exps += [gxe.ExpectColumnValuesToBeOfType(column=c, type_=t) for c, t in spec.types.items()]
    exps += [gxe.ExpectColumnValuesToNotBeNull(column=c) for c in spec.not_null]
    exps += [
        gxe.ExpectColumnValuesToBeBetween(column=c, min_value=lo, max_value=hi)
        for c, (lo, hi) in spec.ranges.items()
    ]
    exps += [gxe.ExpectColumnValuesToBeInSet(column=c, value_set=v) for c, v in spec.sets.items()]
    lo, hi = spec.positive_rate
    exps.append(gxe.ExpectColumnMeanToBeBetween(column="label_is_positive", min_value=lo, max_value=hi))
    return frame, exps


def prepared_suites(
    name: str, df: pd.DataFrame, params: Params
) -> list[tuple[str, pd.DataFrame, list[Any]]]:
    """Suites on one prepared dataset: the whole frame, then each split's size and class balance."""
    gxe = _gxe()
    prep = params.prepare
    fractions = prep.fractions
    feats = feature_columns(df)
    frame = df[["row", "split", "y"]].copy()
    frame["features_finite"] = np.isfinite(df[feats].to_numpy(dtype=np.float64)).all(axis=1)
    n = len(frame)
    exps = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        gxe.ExpectColumnValuesToBeUnique(column="row"),
        gxe.ExpectColumnValuesToNotBeNull(column="y"),
        gxe.ExpectColumnValuesToBeInSet(column="y", value_set=[0, 1]),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=list(SPLITS)),
        gxe.ExpectColumnValuesToBeInSet(column="features_finite", value_set=[True]),
    ]
    spec = RAW_SPECS.get(name)
    if spec is not None:  # no row lost: all rows, or exactly the configured subsample
        max_rows = int(params.datasets.max_rows or 0)
        exps.append(gxe.ExpectTableRowCountToEqual(value=min(max_rows, spec.rows) if max_rows else spec.rows))
    rate = spec.positive_rate if spec else (0.0, 1.0)
    tol = float(prep.balance_tolerance)
    out = [(f"prepared.{name}", frame, exps)]
    for split in SPLITS:
        part = frame[frame["split"] == split]
        want = float(getattr(fractions, split)) * n
        slack = max(2.0, 0.01 * n)
        lo_n, hi_n = int(np.floor(want - slack)), int(np.ceil(want + slack))
        lo_r, hi_r = max(0.0, rate[0] - tol), min(1.0, rate[1] + tol)
        exps_split = [
            gxe.ExpectTableRowCountToBeBetween(min_value=lo_n, max_value=hi_n),
            gxe.ExpectColumnMeanToBeBetween(column="y", min_value=lo_r, max_value=hi_r),
            gxe.ExpectColumnDistinctValuesToEqualSet(column="y", value_set=[0, 1]),
        ]
        out.append((f"prepared.{name}.{split}", part, exps_split))
    return out


def calibrated_suite(df: pd.DataFrame, monotone: bool) -> tuple[pd.DataFrame, list[Any]]:
    """A calibrator's test predictions: probabilities in [0, 1], no NaN, order kept when monotone.

    Order: rows sorted by the base model's margin, a monotone map must not decrease. The check runs on
    ``prob_drop`` = running maximum of ``prob`` minus ``prob`` (0 where the order holds) and allows
    ``MONOTONE_TOL``: spline-type maps evaluated in floating point dip by ~1e-17, which is not a reversal.
    """
    gxe = _gxe()
    frame = df.sort_values("margin", kind="mergesort").reset_index(drop=True)
    prob = frame["prob"].to_numpy(np.float64)
    frame["prob_drop"] = np.fmax.accumulate(np.nan_to_num(prob, nan=-np.inf)) - prob
    exps = [
        gxe.ExpectTableRowCountToBeBetween(min_value=1),
        gxe.ExpectColumnValuesToNotBeNull(column="prob"),
        gxe.ExpectColumnValuesToBeBetween(column="prob", min_value=0.0, max_value=1.0),
        gxe.ExpectColumnValuesToBeInSet(column="y", value_set=[0, 1]),
    ]
    if monotone:
        exps.append(
            gxe.ExpectColumnValuesToBeBetween(column="prob_drop", min_value=0.0, max_value=MONOTONE_TOL)
        )
    return frame, exps


def segmented_suite(df: pd.DataFrame, segment_cols: list[str]) -> tuple[pd.DataFrame, list[Any]]:
    """A segmented calibrator's test predictions (with the rows' segment columns): the output checks of
    :func:`calibrated_suite`, and the order kept *within* each segment (every combination of the segment
    columns' values, nulls included): the segmented methods are increasing in the score there, not across."""
    gxe = _gxe()
    # one integer per combination of values (nulls a value of their own), not a joined string per row: the
    # join was a Python call per row (10 s for 1e5 rows of a 200-value column on the loaded machine)
    key = df.groupby(segment_cols, dropna=False, sort=False, observed=True).ngroup() if segment_cols else 0
    frame = df.assign(_segment=key).sort_values(["_segment", "margin"], kind="mergesort")
    frame = frame.reset_index(drop=True)
    prob = frame["prob"].astype(np.float64).fillna(-np.inf)
    frame["prob_drop"] = prob.groupby(frame["_segment"]).cummax() - frame["prob"]
    frame = frame.drop(columns=["_segment", *segment_cols])
    _, exps = calibrated_suite(frame, monotone=False)
    exps.append(gxe.ExpectColumnValuesToBeBetween(column="prob_drop", min_value=0.0, max_value=MONOTONE_TOL))
    return frame, exps


def _segmented_frames(params: Params, lay: Layout):
    """(method, source, test predictions joined with their segment columns) for every segmented fit."""
    for method in segmented_methods(params):
        if method in methods(params):
            continue
        for name in _sources.names(params):
            path = lay.calibrated_segments / method / f"{name}.parquet"
            if not path.is_file():  # no segments declared, or a method the aggregate path does not fit
                continue
            preds = require(_streaming.rows_file(lay, name), "predictions", "the train stage")
            names = pq.ParquetFile(preds).schema_arrow.names
            cols = [c for c in names if c.startswith(_sources.SEGMENT_PREFIX)]
            segs = pd.read_parquet(preds, columns=["row", *cols], filters=[("split", "==", "test")])
            yield method, name, pd.read_parquet(path).merge(segs, on="row", how="left", validate="1:1"), cols


def metrics_suite(rows: list[dict[str, Any]]) -> tuple[pd.DataFrame, list[Any]]:
    """Every (dataset, method) has finite headline metrics in their ranges."""
    gxe = _gxe()
    frame = pd.DataFrame(rows)
    exps = [gxe.ExpectTableRowCountToEqual(value=len(rows))]
    for col, hi in (("ece", 1.0), ("brier", 1.0), ("ks", 1.0), ("auc", 1.0), ("log_loss", 50.0)):
        exps.append(gxe.ExpectColumnValuesToNotBeNull(column=col))
        exps.append(gxe.ExpectColumnValuesToBeBetween(column=col, min_value=0.0, max_value=hi))
    return frame, exps


# --------------------------------------------------------------------------------------------- running


def _context():
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx


def _clean(v: Any) -> Any:
    """JSON-safe copy of a GX result value (numpy scalars, NaN)."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not np.isfinite(v):
        return None if np.isnan(v) else str(v)
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    return str(v)


def _describe(res: Any) -> dict[str, Any]:
    cfg = res.expectation_config
    kwargs = {k: v for k, v in cfg.kwargs.items() if k != "batch_id"}
    r = res.result or {}
    rec = {"expectation": cfg.type, "kwargs": _clean(kwargs), "success": bool(res.success)}
    if "observed_value" in r:
        rec["observed"] = _clean(r["observed_value"])
    if "unexpected_count" in r:
        rec["unexpected_count"] = int(r["unexpected_count"])
        rec["unexpected_percent"] = _clean(r.get("unexpected_percent"))
        rec["examples"] = _clean(list(r.get("partial_unexpected_list") or [])[:5])
    exc = res.exception_info or {}
    if exc.get("raised_exception"):
        rec["error"] = str(exc.get("exception_message"))
    rec["message"] = _message(rec)
    return rec


def _message(rec: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in rec["kwargs"].items())
    head = f"{rec['expectation']}({args})"
    if rec.get("error"):
        return f"{head}: raised {rec['error']}"
    if "unexpected_count" in rec:
        pct = rec.get("unexpected_percent")
        pct_s = f" ({pct:.2f}%)" if isinstance(pct, float) else ""
        return f"{head}: {rec['unexpected_count']} unexpected value(s){pct_s}, e.g. {rec.get('examples')}"
    if "observed" in rec:
        return f"{head}: observed {rec['observed']!r}"
    return f"{head}: failed"


def run_suites(suites: list[tuple[str, pd.DataFrame, list[Any]]]) -> list[dict[str, Any]]:
    """Run each ``(name, frame, expectations)`` in one ephemeral context; JSON-ready results.

    One whole-frame batch definition serves every suite (the frame is a batch parameter) and each suite
    validates its batch directly: no data source, suite or validation definition is registered per suite.
    Each registration re-serialised the context's whole configuration to YAML; at 15 suites (the
    calibrated phase of a 14-method project) that was a fifth of the phase's CPU. The results are the
    same records.
    """
    import great_expectations as gx

    ctx = _context()
    whole = ctx.data_sources.add_pandas("frames").add_dataframe_asset("frame")
    bdef = whole.add_batch_definition_whole_dataframe("whole")
    out = []
    for name, frame, exps in suites:
        suite = gx.ExpectationSuite(name=name, expectations=list(exps))
        res = bdef.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
        recs = [_describe(r) for r in res.results]
        failures = [r for r in recs if not r["success"]]
        out.append(
            {
                "name": name,
                "success": bool(res.success),
                "evaluated": len(recs),
                "failed": len(failures),
                "rows": int(len(frame)),
                "failures": failures,
                "expectations": recs,
            }
        )
    return out


def summarize(result: dict[str, Any]) -> str:
    """A readable account of a phase: one line per suite, then each failed expectation."""
    lines = [f"validation {result['phase']}: {'passed' if result['success'] else 'FAILED'}"]
    for s in result["suites"]:
        state = "ok" if s["success"] else "FAILED"
        lines.append(
            f"  [{state}] {s['name']}: {s['evaluated'] - s['failed']}/{s['evaluated']} expectations met"
        )
        lines += [f"      - {f['message']}" for f in s["failures"]]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- phases


def _raw_suites(params: Params, lay: Layout):
    from calibflow import datasets

    out = []
    for name in _dataset_list(params):
        frame, exps = raw_suite(name, datasets.load(name, data_dir=lay.raw))
        out.append((f"raw.{name}", frame, exps))
    return out


def _prepared_suites(params: Params, lay: Layout):
    out = []
    for name in _dataset_list(params):
        path = require(lay.prepared / f"{name}.parquet", "prepared data", "the prepare stage")
        out += prepared_suites(name, pd.read_parquet(path), params)
    return out


def calibrated_metrics(y: np.ndarray, p: np.ndarray, n_bins: int) -> dict[str, float]:
    """The quick headline metrics the output suite checks for finiteness (no bootstrap)."""
    from calibflow import metrics

    keys = ("ece", "brier", "ks", "auc", "log_loss")
    try:
        row = metrics.summary(y, p, n_bins=n_bins)
    except ValueError:  # NaN or out-of-range input, or one class only: the suite reports them as missing
        return dict.fromkeys(keys, float("nan"))
    return {k: row[k] for k in keys}


def _calibrated_suites(params: Params, lay: Layout):
    from calibflow.calibrators import get_class

    out, rows = [], []
    n_bins = 15  # only finiteness is checked here; evaluate uses its own evaluate.n_bins
    for method in methods(params):
        monotone = bool(get_class(method).monotone)
        for name in _sources.names(params):
            if _streaming.rows_file(lay, name).parent == lay.prepared:  # no per-row file: check the table
                frame, exps, row = _calibrated_table_suite(params, lay, method, name, monotone, n_bins)
                out.append((f"calibrated.{method}.{name}", frame, exps))
                rows.append({"dataset": name, "method": method, **row})
                continue
            path = require(
                lay.calibrated_method(method) / f"{name}.parquet",
                "calibrated predictions",
                f"calibrate@{method}",
            )
            df = pd.read_parquet(path)
            frame, exps = calibrated_suite(df, monotone)
            out.append((f"calibrated.{method}.{name}", frame, exps))
            y, p = df["y"].to_numpy(float), df["prob"].to_numpy(float)
            rows.append({"dataset": name, "method": method, **calibrated_metrics(y, p, n_bins)})
    for method, name, df, cols in _segmented_frames(params, lay):
        frame, exps = segmented_suite(df, cols)
        out.append((f"calibrated.{method}.{name}", frame, exps))
        y, p = df["y"].to_numpy(float), df["prob"].to_numpy(float)
        rows.append({"dataset": name, "method": method, **calibrated_metrics(y, p, n_bins)})
    frame, exps = metrics_suite(rows)
    out.append(("calibrated.metrics", frame, exps))
    return out


def _calibrated_table_suite(
    params: Params, lay: Layout, method: str, name: str, monotone: bool, n_bins: int
) -> tuple[pd.DataFrame, list[Any], dict[str, float]]:
    """A streamed source's calibrator checked on the test split's bucket table: one row per (bucket,
    label) with the group's mean margin and its calibrated probability, the row suite's expectations on it
    (a map that breaks order or leaves [0, 1] does so at some group's mean), and the headline metrics."""
    from calibflow.aggregate import diagnostics as agg_diag
    from calibflow.aggregate import metrics_from_table
    from calibflow.pipeline import _aggregate  # the table path only: its fits and numba kernels

    text = require(lay.calibrated_method(method) / f"{name}.json", "calibrator", f"calibrate@{method}")
    input_kind = str(params.calibrate.input)
    test = _aggregate.split_table(lay, name, "test", _aggregate.scale_config(params), input_kind=input_kind)
    t = _aggregate.calibrated_tables(test, {method: text.read_text()}, input_kind)[method]
    df = pd.DataFrame({"margin": t["sum_z"] / t["n"], "prob": t["prob"], "y": t["label"]})
    frame, exps = calibrated_suite(df, monotone)
    try:
        res = metrics_from_table(t, n_bins=n_bins)["overall"]
        ks = agg_diag.cumulative_from_table(t, agg_diag.groups(t))["ks"]
        row = {k: float(res[k]) for k in ("ece", "brier", "auc", "log_loss")} | {"ks": float(ks)}
    except ValueError:
        row = dict.fromkeys(("ece", "brier", "ks", "auc", "log_loss"), float("nan"))
    return frame, exps, row


_BUILDERS = {"raw": _raw_suites, "prepared": _prepared_suites, "calibrated": _calibrated_suites}


def _dataset_list(params: Params) -> list[str]:
    _sources.names(params)  # at least one dataset or source
    return [str(n) for n in params.datasets.names or []]


def _source_suites(phase: str, params: Params, lay: Layout):
    """Suites generated from each source's declaration, and per suite how to word a failure in one line."""
    from calibflow.pipeline import validate_sources as vs

    k = _sources.min_class_count(params)
    suites: list[tuple[str, pd.DataFrame, list[Any]]] = []
    explain: dict[str, Any] = {}
    specs = _sources.specs(params, lay.root)
    if phase == "raw":
        for name, spec in specs.items():
            if spec.kind == "score":  # any size: one DuckDB scan, GX on its counts (prepare streams it)
                frame, exps, prof = vs.raw_suite_streaming(spec, k)
                suites.append((f"raw.{name}", frame, exps))
                explain[f"raw.{name}"] = lambda f, s=spec, p=prof: vs.raw_message_streaming(s, p, f, k)
                continue
            frame, exps, checks = vs.raw_suite(spec, k)
            suites.append((f"raw.{name}", frame, exps))
            explain[f"raw.{name}"] = lambda f, s=spec, fr=frame, c=checks: vs.raw_message(
                s, fr, f, c.get(f["kwargs"].get("column"), vs.Check("", "", "")), k
            )
    elif phase == "prepared":
        record = {}
        splits_file = lay.prepared / "splits.json"
        if splits_file.is_file():
            record = json.loads(splits_file.read_text()).get("datasets", {})
        for name, spec in specs.items():
            used = ["calib", "test"] if spec.kind == "score" else list(SPLITS)
            windows = (record.get(name) or {}).get("split")
            if _streaming.prepared_streaming(lay, name):  # per-split counts from prepare's pass and tables
                counts = _streaming.split_frame(lay, name)
                for sname, part, exps in vs.split_suites_streaming(name, counts, used, k):
                    suites.append((sname, part, exps))
                    split = sname.rsplit(".", 1)[1]
                    explain[sname] = lambda f, n=name, sp=split, pt=part, w=windows: (
                        vs.split_message_streaming(n, sp, pt, k, w)
                    )
                continue
            path = require(lay.prepared / f"{name}.parquet", "prepared data", "the prepare stage")
            df = pd.read_parquet(path, columns=["split", "y"])
            for sname, part, exps in vs.split_suites(name, df, used, k):
                suites.append((sname, part, exps))
                split = sname.rsplit(".", 1)[1]
                explain[sname] = lambda f, n=name, sp=split, pt=part, w=windows: vs.split_message(
                    n, sp, pt, k, w
                )
    return suites, explain


def run(phase: str, params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Validate one phase and write its JSON; on failure save the failures and raise ``ValidationFailed``."""
    if phase not in PHASES:
        raise StageError(f"unknown validation phase {phase!r}; expected one of {PHASES}")
    params = as_params(params)
    lay = Layout(Path(root))
    suites = _BUILDERS[phase](params, lay)
    src_suites, explain = _source_suites(phase, params, lay)
    results = run_suites(suites + src_suites)
    result = {"phase": phase, "success": all(s["success"] for s in results), "suites": results}
    good, failed = lay.validation / f"{phase}.json", lay.validation / f"{phase}.failed.json"
    text = summarize(result)
    if not result["success"]:
        write_json(failed, result)
        # A source's failures in one short line each (source, column, count, rows); datasets' in full.
        lines = [explain[s["name"]](f) for s in results if s["name"] in explain for f in s["failures"]]
        lines = list(dict.fromkeys(lines))
        if any(not s["success"] for s in results if s["name"] not in explain):
            lines.append(text)
        raise ValidationFailed("\n".join(lines) + f"\n(details: {failed}; the last good {good.name} is kept)")
    write_json(good, result)
    failed.unlink(missing_ok=True)
    log.info(text)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("phase", choices=PHASES)
    args = parser.parse_args(argv)
    return cli(lambda: run(args.phase, load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
