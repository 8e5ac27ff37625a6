"""The row computation the stages used before issue 35 ("one path"), kept as the tests' control.

Until issue 35 a source at or below ``scale.row_threshold`` rows went through pandas rows: calibrators fitted
on the calib rows, evaluate's row bootstrap (``evaluate.n_bootstrap`` resamples), select's paired row
bootstrap and CLT interval, ``multicalibration`` on every calib row. The stages now take the table path for
every source; this module is the old row path, code for code (``git show bd2f54a:calibflow/pipeline/...``),
so a test can run it on the same prepared split and compare the cards and metrics within the tolerances of
docs/benchmarks/scale.md. No stage imports it.

``prepare_rows`` writes ``data/prepared/<name>.parquet`` for every source (the old row path's prepare); train
(or ``_scores.write_all``) then writes the predictions file the other functions read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from calibflow import diagnostics, metrics, selection
from calibflow import segments as seg
from calibflow.calibrators import available, from_json, make
from calibflow.intervals import (
    bootstrap_intervals,
    jeffreys_interval,
    percentile_interval,
    resample_counts,
    resample_metrics,
    resampled,
)
from calibflow.io import write_json, write_text
from calibflow.pipeline import _sources
from calibflow.pipeline._common import (
    SPECIAL_METHODS,
    UNCALIBRATED,
    Layout,
    Params,
    ParamsLike,
    StageError,
    as_params,
    atomic_dir,
    methods,
    require,
    segmented_methods,
)
from calibflow.pipeline.calibrate_segments import fit_segmented
from calibflow.pipeline.params_schema import Evaluate
from calibflow.pipeline.select import (
    MAX_SEGMENTS,
    RULE_AUTO,
    _auto_candidates,
    _calibrator_text,
    _card,
    _challenge,
    _decide,
    _score_column,
    _use_clt,
    _with_decision,
    _with_segments,
    headline,
    models_dir,
    with_score_kind,
)

ROWS = "rows"


# ---- prepare (every source to rows) -----------------------------------------------------------------


def prepare_rows(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The old prepare: every dataset and source as a prepared rows file (no source streamed)."""
    from calibflow.pipeline import prepare

    params = as_params(params)
    lay = Layout(Path(root))
    fractions = prepare._fractions(params)
    record: dict[str, Any] = {
        "seed": int(params.seed),
        "fractions": fractions,
        "stratify": bool(params.prepare.stratify),
        "max_rows": int(params.datasets.max_rows or 0),
        "datasets": {},
    }
    with atomic_dir(lay.prepared) as tmp:
        specs = _sources.specs(params, root)
        for name in [n for n in _sources.names(params) if n not in specs]:
            frame, rec = prepare.prepare_one(name, params, lay.raw, fractions)
            frame.to_parquet(tmp / f"{name}.parquet", index=False)
            record["datasets"][name] = rec
        for name, spec in specs.items():
            frame, rec = prepare.prepare_source(spec, int(params.seed))
            frame.to_parquet(tmp / f"{name}.parquet", index=False)
            record["datasets"][name] = rec
        write_json(tmp / "splits.json", record)
    return record


# ---- calibrate -------------------------------------------------------------------------------------


def _score_column_of(input_kind: str) -> str:
    return "prob" if input_kind == "probability" else "margin"


def calibrate_one(
    method: str, preds: pd.DataFrame, input_kind: str, options: dict[str, Any]
) -> tuple[str, pd.DataFrame]:
    """Fit on the calib rows of ``preds``; return the calibrator's JSON and its test predictions."""
    col = _score_column_of(input_kind)
    cal = preds[preds["split"] == "calib"]
    test = preds[preds["split"] == "test"]
    if cal.empty or test.empty:
        raise StageError("predictions need both 'calib' and 'test' rows")
    calibrator = make(method, **{"input": input_kind, **options})
    # A source's declared `weight` column weighs the fit (built-in datasets carry none).
    w = cal["weight"].to_numpy(np.float64) if "weight" in cal.columns else None
    calibrator.fit(cal[col].to_numpy(np.float64), cal["y"].to_numpy(np.float64), sample_weight=w)
    prob = calibrator.predict(test[col].to_numpy(np.float64))
    text = calibrator.to_json()
    again = from_json(text).predict(test[col].to_numpy(np.float64))
    if not np.array_equal(prob, again):
        raise StageError(
            f"{method}: the saved JSON does not reproduce its predictions (max diff "
            f"{np.max(np.abs(prob - again)):.3g})"
        )
    out = pd.DataFrame(
        {
            "row": test["row"].to_numpy(),
            "y": test["y"].to_numpy(np.int64),
            "margin": test["margin"].to_numpy(np.float64),
            "prob": prob,
        }
    )
    return text, out


def calibrate_rows(method: str, params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The old ``calibrate@<method>`` on the row path: fit on the calib rows, predict the test rows."""
    if method in SPECIAL_METHODS or method not in available():
        raise StageError(f"{method!r} is not a tabular pipeline method")
    params = as_params(params)
    lay = Layout(Path(root))
    input_kind = str(params.calibrate.input)
    options = dict((params.calibrate.options or {}).get(method) or {})
    info: dict[str, Any] = {"method": method, "input": input_kind, "options": options, "datasets": {}}
    with atomic_dir(lay.calibrated_method(method)) as tmp:
        for name in _sources.names(params):
            path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
            text, out = calibrate_one(method, pd.read_parquet(path), input_kind, options)
            write_text(tmp / f"{name}.json", text + "\n")
            out.to_parquet(tmp / f"{name}.parquet", index=False)
            info["datasets"][name] = {"n_test": len(out), "path": ROWS}
        write_json(tmp / "fit.json", info)
    return info


# ---- calibrate_segments ----------------------------------------------------------------------------


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


def calibrate_segments_rows(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The old ``calibrate_segments`` on the row path: every segmented method on every calib row."""
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
                path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
                res = calibrate_source(method, pd.read_parquet(path), input_kind, options)
                if res is None:
                    continue
                text, out, unseen = res
                write_text(tmp / method / f"{name}.json", text + "\n")
                out.to_parquet(tmp / method / f"{name}.parquet", index=False)
                done[name] = {"n_test": len(out), "unseen_test_rows": unseen, "path": ROWS}
            info["methods"][method] = done
        write_json(tmp / "fit.json", info)
    return info


# ---- evaluate (row bootstrap) ----------------------------------------------------------------------


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
        rec["path"] = ROWS
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


def evaluate_rows(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The old ``evaluate`` on the row path (row bootstrap intervals)."""
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
            y, probs = _predictions(lay, name, method_list, segmented_files(lay, params, name))
            res = evaluate_dataset(y, probs, params.evaluate, int(params.seed))
            for m, (rec, rel, hist) in res.items():
                write_json(mdir / name / f"{m}.json", rec)
                write_json(rdir / name / f"{m}.json", rel)
                write_json(hdir / name / f"{m}.json", hist)
            result[name] = {m: v[0] for m, v in res.items()}
    return result


# ---- select (paired row bootstrap, CLT interval) ---------------------------------------------------


#: The card's metrics, each compared on the same resamples (a paired bootstrap, ``calibflow.intervals``).
CARD_METRICS = ("log_loss", "ece", "brier", "calibration_ratio")


def compare(
    y: np.ndarray, p_unc: np.ndarray, p_cal: np.ndarray, cfg: Evaluate, rng_seed: int
) -> dict[str, Any]:
    """The card's ``metrics``: each metric uncalibrated vs calibrated, the change and its paired interval."""
    n_bins, level = int(cfg.n_bins), float(cfg.ci_level)
    counts = resample_counts(int(cfg.n_bootstrap), y, rng_seed)
    boot = {k: resampled(y, p, counts, n_bins, CARD_METRICS) for k, p in (("unc", p_unc), ("cal", p_cal))}
    point = {
        k: {m: float(v[0]) for m, v in resample_metrics(y, p, np.ones_like(y), n_bins, CARD_METRICS).items()}
        for k, p in (("unc", p_unc), ("cal", p_cal))
    }
    out: dict[str, Any] = {}
    for m in ("log_loss", "ece", "brier"):
        out[m] = {
            "uncalibrated": point["unc"][m],
            "calibrated": point["cal"][m],
            "delta": point["cal"][m] - point["unc"][m],
            "delta_ci": percentile_interval(boot["cal"][m] - boot["unc"][m], level),
        }
    out["calibration_ratio"] = {
        "uncalibrated": point["unc"]["calibration_ratio"],
        "calibrated": point["cal"]["calibration_ratio"],
        # the counts' interval (exact Poisson, coverage measured), as each segment's: not the bootstrap
        "ci": seg.count_interval(y, np.asarray(p_cal, np.float64), level),
    }
    return out


def segment_ratios(
    test: pd.DataFrame, p_cal: np.ndarray, cfg: Evaluate, rng_seed: int
) -> list[dict[str, Any]]:
    """Per declared segment value: rows, positives, ``sum p / sum y`` before/after with intervals, a flag
    where the interval after calibration excludes 1 (``calibflow.segments.segment_check``: nulls are their
    own level, values past the largest are pooled, so each column's rows add up to the test rows)."""
    cols = [c for c in test.columns if c.startswith(_sources.SEGMENT_PREFIX)]
    if not cols:
        return []
    segments = {c[len(_sources.SEGMENT_PREFIX) :]: test[c].to_numpy(dtype=object) for c in cols}
    return seg.segment_check(
        test["y"].to_numpy(np.float64),
        test["prob"].to_numpy(np.float64),
        p_cal,
        segments,
        n_boot=int(cfg.n_bootstrap),
        seed=rng_seed,
        level=float(cfg.ci_level),
        top=MAX_SEGMENTS,
    )


def segmented_challenge(
    lay: Layout,
    params: Params,
    name: str,
    test: pd.DataFrame,
    global_method: str,
    p_global: np.ndarray,
    margin: float,
) -> dict[str, Any] | None:
    """The best segmented calibrator (lowest test log loss) against the chosen global one, paired test.

    None when the source has no segmented fits. ``chosen`` is True only when the paired interval of the
    log-loss change (segmented minus global, ``selection.paired_log_loss``) lies below minus the practical
    margin on the test split, the test the global choice passed; ``reason`` is the card's one line on it.
    """
    probs: dict[str, np.ndarray] = {}
    for m in segmented_methods(params):
        path = lay.calibrated_segments / m / f"{name}.parquet"
        if not path.is_file():
            continue
        c = pd.read_parquet(path, columns=["row", "prob"]).sort_values("row")
        if not np.array_equal(c["row"].to_numpy(), test["row"].to_numpy()):
            raise StageError(f"{path}: test rows differ from the predictions; rerun calibrate_segments")
        probs[m] = c["prob"].to_numpy(np.float64)
    if not probs:
        return None
    y = test["y"].to_numpy(np.float64)
    ll = {m: metrics.log_loss(y, p) for m, p in probs.items()}
    best = min(ll, key=lambda m: (ll[m], m))
    level = float(params.evaluate.ci_level)
    # the same paired test and practical margin the global choice had to clear
    cmp = selection.paired_log_loss(y, p_global, probs[best], level)
    text = (lay.calibrated_segments / best / f"{name}.json").read_text()
    rec = _challenge(best, ll, metrics.log_loss(y, p_global), cmp, global_method, margin, level)
    return {**rec, "text": text, "probs": probs[best]}


def _calib_rate(lay: Layout, name: str) -> float:
    """The calibration split's base rate (weighted where the rows carry weights): the constant a card
    compares the chosen map with."""
    path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
    cols = [c for c in ("y", "weight") if c in pq.ParquetFile(path).schema_arrow.names]
    c = pd.read_parquet(path, columns=cols, filters=[("split", "==", "calib")])
    w = c["weight"].to_numpy(np.float64) if "weight" in c.columns else np.ones(len(c))
    return float(w @ c["y"].to_numpy(np.float64) / w.sum()) if len(c) and w.sum() > 0 else float("nan")


def _test_frame(lay: Layout, name: str) -> pd.DataFrame:
    path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
    preds = pd.read_parquet(path)
    return preds[preds["split"] == "test"].sort_values("row").reset_index(drop=True)


def select_one(
    lay: Layout, params: Params, name: str, is_source: bool, rule: str
) -> tuple[str, dict[str, Any]]:
    """The chosen calibrator's JSON text and its card."""
    cfg = params.evaluate
    cands = methods(params)
    how = ROWS
    test = _test_frame(lay, name)
    y = test["y"].to_numpy(np.float64)
    probs: dict[str, np.ndarray] = {}
    for m in cands:
        cpath = require(
            lay.calibrated_method(m) / f"{name}.parquet", "calibrated predictions", f"calibrate@{m}"
        )
        c = pd.read_parquet(cpath, columns=["row", "prob"]).sort_values("row")
        if not np.array_equal(c["row"].to_numpy(), test["row"].to_numpy()):
            raise StageError(f"{cpath}: test rows differ from the predictions; rerun calibrate@{m}")
        probs[m] = c["prob"].to_numpy(np.float64)
    ll = {m: metrics.log_loss(y, p) for m, p in probs.items()}
    p_unc = test["prob"].to_numpy(np.float64)
    probs[selection.IDENTITY] = p_unc
    level = float(cfg.ci_level)
    paired = {m: selection.paired_log_loss(y, p_unc, probs[m], level) for m in _auto_candidates(cands)}
    decision = _decide(lay, params, name, paired, metrics.log_loss(y, p_unc), rule)
    method = decision.method
    text = _calibrator_text(lay, params, name, method)
    p_chosen = probs[method]
    challenge = (
        segmented_challenge(lay, params, name, test, method, p_chosen, decision.margin)
        if rule == RULE_AUTO
        else None
    )
    if challenge is not None and challenge["chosen"]:
        method, text, p_chosen = challenge["segmented_method"], challenge["text"], challenge["probs"]
    met = compare(y, p_unc, p_chosen, cfg, int(params.seed))
    _use_clt(met["log_loss"], selection.paired_log_loss(y, p_unc, p_chosen, level))
    segs = segment_ratios(test, p_chosen, cfg, int(params.seed))
    card = _card(lay, params, name, is_source, rule, method, met, ll, segs, how, text)
    card = _with_decision(card, decision, rule, level)
    rate = _calib_rate(lay, name)
    note = diagnostics.ranking_note(y, p_unc, p_chosen, rate, decision.margin, method, level)
    if note is not None:  # the report says it first
        card["ranking"] = note
    card = _with_segments(card, challenge, segs, text, cfg)
    if segs:  # the report draws the worst segments' reliability and checks the rows add up
        card["segment_reliability"] = _worst_reliability(test, p_chosen, segs, level)
        card["segment_test_rows"] = int(len(test))
    return text, card


def _worst_reliability(
    test: pd.DataFrame, p: np.ndarray, segs: list[dict[str, Any]], level: float
) -> list[dict[str, Any]]:
    cols = [c for c in test.columns if c.startswith(_sources.SEGMENT_PREFIX)]
    segments = {c[len(_sources.SEGMENT_PREFIX) :]: test[c].to_numpy(dtype=object) for c in cols}
    worst = seg.worst_segments(segs)
    return seg.segment_reliability(test["y"].to_numpy(np.float64), p, segments, worst, level=level)



def select_rows(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The old ``select`` on the row path: cards and calibrators written as the stage writes them."""
    params = as_params(params)
    lay = Layout(Path(root))
    rule = str(params.select.rule)
    specs = _sources.specs(params, root)
    chosen = [(name, *select_one(lay, params, name, name in specs, rule)) for name in _sources.names(params)]
    chosen = [
        (name, with_score_kind(text, card["input"]["score_kind"], _score_column(specs, name)), card)
        for name, text, card in chosen
    ]
    for name, text, card in chosen:
        with atomic_dir(models_dir(root) / name) as tmp:
            write_text(tmp / "calibrator.json", text if text.endswith("\n") else text + "\n")
            write_json(tmp / "card.json", card)
    write_json(Path(root) / "metrics" / "headline.json", headline({name: card for name, _, card in chosen}))
    return {name: card for name, _, card in chosen}


def downstream_rows(params: ParamsLike, root: str | os.PathLike[str], segmented: bool = False) -> None:
    """calibrate (every method), calibrate_segments (``segmented``), evaluate and select on the rows."""
    for m in methods(params):
        calibrate_rows(m, params, root)
    if segmented:
        calibrate_segments_rows(params, root)
    evaluate_rows(params, root)
    select_rows(params, root)
