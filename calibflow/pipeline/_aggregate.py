"""The stages' one data path (issue 35): every dataset and source, of any size, is fitted and evaluated
from bucket tables (``calibflow.aggregate``), never from row arrays.

Which rows. A score source's tables are the ones prepare's one DuckDB pass stored (``_streaming``). A
dataset or features source (a trained XGBoost model scores it) has a predictions file
(``data/predictions/<name>.parquet``: the prepared split, in train's layout); its tables are built by
DuckDB from that file with the split applied as a ``WHERE split = ...`` filter, so the split assignment is
exactly the one prepare made. The score is the column the calibrators
receive (``margin``, or ``prob`` for ``calibrate.input: probability``); a declared ``weight`` column weighs
the fit (as on the row path).

Intervals come from the table's Poisson-bootstrap replicates (``scale.replicates``, ``scale.seed``); the
paired comparisons of select use the same replicate weights for both probability vectors.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from calibflow.aggregate import diagnostics as agg_diag
from calibflow.aggregate.metrics import (
    _collapse,
    _point,
    _replicate_cols,
    calibrated_table,
    collapsed,
    overall_and_draws,
)
from calibflow.aggregate.replicates import replicate_metrics
from calibflow.aggregate.run import tables_for
from calibflow.aggregate.segments import segment_metrics, segment_records
from calibflow.aggregate.switch import ScaleConfig
from calibflow.aggregate.table import add_replicates
from calibflow.aggregate.tables import TABLES_META, Tables
from calibflow.intervals import jeffreys_interval, percentile_interval
from calibflow.io import read_json
from calibflow.pipeline._common import Layout, StageError
from calibflow.pipeline._sources import SEGMENT_PREFIX
from calibflow.pipeline._streaming import rows_file, scale_config, stored_tables  # noqa: F401 (stages' use)
from calibflow.pipeline.params_schema import Evaluate

#: The path every stage records (issue 35: one path for every source; the row computation is gone from
#: the stages and kept only as the tests' control, tests/helpers/row_reference.py).
AGGREGATE = "aggregate"


def split_tables(
    lay: Layout,
    name: str,
    split: str,
    cfg: ScaleConfig,
    replicates: int = 0,
    weighted: bool = False,
    input_kind: str = "logit",
    segments: bool = False,
) -> Tables:
    """The pass's tables of one split of ``name``'s predictions, on the column the calibrators receive
    (``calibrate.input``: ``prob`` for "probability", else ``margin``), so a distinct-score table hands
    them the very values the row path does. ``calibflow fit``'s code path (``calibflow.aggregate.run``),
    on ``scale.engine``.

    ``weighted``: rows weighed by the source's ``weight`` column, as the row path weighs the fit (its
    evaluation is unweighted, so the test tables are too). ``segments``: per declared segment column
    (``s:<name>`` in the predictions) a coarse (value x cell) table, keyed by the column's name without
    the prefix.
    """
    path = rows_file(lay, name)
    if path.parent == lay.prepared:
        tabs = _stored(lay, name, split, cfg, replicates, input_kind)
        if not segments:
            tabs.segments, tabs.starts = {}, {}
        return tabs
    cols = pq.ParquetFile(path).schema_arrow.names
    weight = "weight" if weighted and "weight" in cols else None
    seg_cols = [c for c in cols if c.startswith(SEGMENT_PREFIX)] if segments else []
    col, kind = ("prob", "probability") if input_kind == "probability" else ("margin", "logit")
    try:
        tabs = tables_for(
            str(path), col, "y", cfg.engine, cfg.address, kind=kind, segments=seg_cols,
            weight=weight, grid=cfg.grid, replicates=replicates, seed=cfg.seed, cells=cfg.cells,
            threads=cfg.threads or None, distinct_max=cfg.distinct_max, where="split = $split",
            where_params={"split": split},
        )
    except ValueError as exc:
        raise StageError(f"{name} ({split}): {exc}") from None
    if tabs.fine.empty or tabs.fine["label"].nunique() < 2:
        raise StageError(f"{name}: the {split!r} split needs both classes for the aggregate path")
    tabs.segments = {c[len(SEGMENT_PREFIX) :]: t for c, t in tabs.segments.items()}
    tabs.starts = {c[len(SEGMENT_PREFIX) :]: t for c, t in tabs.starts.items()}
    return tabs


def _stored(lay: Layout, name: str, split: str, cfg: ScaleConfig, replicates: int, input_kind: str) -> Tables:
    """A streamed source's split: the tables prepare's one pass stored (weighted on calib where a weight
    is declared, as the row path fits), replicates drawn from the fine table (``scale.seed``)."""
    tabs = stored_tables(lay, name, split, input_kind)
    if tabs.fine.empty or tabs.fine["label"].nunique() < 2:
        raise StageError(f"{name}: the {split!r} split needs both classes for the aggregate path")
    tabs.fine = add_replicates(tabs.fine, replicates, cfg.seed)
    return tabs


#: split_table's last table, so that a process fitting several methods (``calibrate --all``) or checking
#: them (validate@calibrated) makes one pass, not one per method. Keyed by the file's identity (path,
#: size, mtime) and every option, so a rewritten file or another option is a new pass. One entry: a
#: distinct-score table can hold 2^20 groups with their replicates (~300 MB).
_MEMO: dict[tuple, pd.DataFrame] = {}
_MEMO_MAX = 1


def probability_table(path: Any, cfg: ScaleConfig, replicates: int = 0) -> pd.DataFrame:
    """The fine table of a calibrated predictions file (``row``, ``y``, ``prob``: a segmented calibrator's
    test rows), on its probabilities, with ``replicates`` Poisson columns."""
    try:
        tabs = tables_for(str(path), "prob", "y", cfg.engine, cfg.address, kind="probability",
                          grid=cfg.grid, replicates=replicates, seed=cfg.seed, cells=cfg.cells,
                          threads=cfg.threads or None)
    except ValueError as exc:
        raise StageError(f"{path}: {exc}") from None
    return tabs.fine


def split_table(lay: Layout, name: str, split: str, cfg: ScaleConfig, replicates: int = 0,
                weighted: bool = False, input_kind: str = "logit") -> pd.DataFrame:
    """:func:`split_tables`' fine global table (what fits and the global metrics read); a copy of the
    process's earlier pass when the same file and options were asked for before."""
    path = rows_file(lay, name)
    if path.parent == lay.prepared:
        # stored tables: a read of a few MB and the replicates' draws, paid once per process (calibrate
        # --all and validate@calibrated ask for the same split once per method), not once per method
        folder = path / split
        files = sorted(folder.glob("*")) if folder.is_dir() else []
        ident = tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file())
        key = (str(folder.resolve()), ident, cfg, replicates, input_kind, "stored")
        if not ident:  # no tables: _stored says what is missing
            return _stored(lay, name, split, cfg, replicates, input_kind).fine
    else:
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns, split, cfg, replicates, weighted, input_kind)
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.pop(next(iter(_MEMO)))
        if key[-1] == "stored":
            _MEMO[key] = _stored(lay, name, split, cfg, replicates, input_kind).fine
        else:
            _MEMO[key] = split_tables(lay, name, split, cfg, replicates, weighted, input_kind).fine
    return _MEMO[key].copy()


def segment_tables_ratios(  # noqa: PLR0913
    tabs: Tables, text: Any, input_kind: str, level: float, top: int, replicates: int, seed: int,
    memo: dict[str, pd.DataFrame] | None = None,
) -> list[dict[str, Any]]:
    """Select's per-segment ``sum p / sum y`` before and after the calibrator (JSON ``text``, or the
    calibrator itself), per segment column from its coarse table, the largest ``top`` values of each,
    with paired Poisson intervals (``calibflow.aggregate.segments``). ``memo``: a dict kept across the
    calls of one table (per column, the uncalibrated metrics: the same for every method)."""
    from calibflow.calibrators import from_json

    cal = tabs.calibrated_segments(from_json(text) if isinstance(text, str) else text, input_kind)
    memo = {} if memo is None else memo
    opts = {"replicates": replicates, "seed": seed, "level": level}
    out = []
    for col, t in tabs.segments.items():
        if col not in memo:
            memo[col] = segment_metrics(t, **opts)
        out += segment_records(t, cal[col], col, top, unc_metrics=memo[col], **opts)
    return out


def segment_names(lay: Layout, name: str) -> list[str]:
    """The declared segment columns of ``name``'s predictions (without the ``s:`` prefix), in file order."""
    path = rows_file(lay, name)
    if path.parent == lay.prepared:
        return list(read_json(path / "test" / TABLES_META)["segments"])
    cols = pq.ParquetFile(path).schema_arrow.names
    return [c[len(SEGMENT_PREFIX) :] for c in cols if c.startswith(SEGMENT_PREFIX)]


def test_rows(lay: Layout, name: str) -> pd.DataFrame:
    """The test rows' ``row``, ``y``, ``margin``, ``prob`` (read with a split filter, not the whole file)."""
    path = rows_file(lay, name)
    cols = ["row", "y", "margin", "prob"]
    return pd.read_parquet(path, columns=cols, filters=[("split", "==", "test")])


def _metric_record(res: dict[str, Any], level: float) -> dict[str, Any]:
    """``metrics_from_table``'s overall block in evaluate's record shape."""
    rec: dict[str, Any] = {
        "n_test": int(res["n"]),
        "positive_rate": res["positives"] / res["n"],
        **{k: res[k] for k in ("ece", "mce", "brier", "log_loss", "calibration_ratio", "auc")},
        "auc_tie_bound": res["auc_tie_bound"],
        "path": AGGREGATE,
    }
    if "ci" in res:
        rec["ci"] = {"level": level, **{k: {"low": v[0], "high": v[1]} for k, v in res["ci"].items()}}
        rec["replicates"] = res["replicates"]
    return rec


def diagnostics_record(
    t: pd.DataFrame, selection_alpha: float | None, level: float, g: pd.DataFrame | None = None,
    ks_draws: np.ndarray | None = None,
) -> dict[str, Any]:
    """The row path's binning-free keys from the table (``calibflow.aggregate.diagnostics``): KS with its
    bucket bound, smooth ECE, the Kuiper p-value (and the lowest the rows allow), the log-loss
    miscalibration term (a lower bound on the logit grid), the selection-set metrics, KS's interval
    (from ``ks_draws``, the replicates' KS, where the caller has them)."""
    g = agg_diag.groups(t) if g is None else g
    cum = agg_diag.cumulative_from_table(t, g)
    rec: dict[str, Any] = {
        "ks": cum["ks"],
        "ks_bound": cum["ks_bound"],
        "smooth_ece": agg_diag.smooth_ece_from_table(t, g),
        "kuiper_pvalue": cum["kuiper_pvalue"],
        "kuiper_pvalue_low": cum["kuiper_pvalue_low"],
        "log_loss_miscalibration": agg_diag.log_loss_miscalibration_from_table(t, g),
    }
    reps = agg_diag.ks_replicates(t, g) if ks_draws is None else ks_draws
    reps = reps[np.isfinite(reps)]
    if reps.size:
        tail = (1.0 - level) / 2.0
        lo, hi = np.quantile(reps, [tail, 1.0 - tail])
        rec["ks_ci"] = {"low": float(lo), "high": float(hi)}
    if selection_alpha:
        rec["selection"] = agg_diag.selection_from_table(t, alpha=float(selection_alpha), n_bins=10, g=g)
    return rec


def reliability_from_table(
    t: pd.DataFrame,
    n_bins: int,
    level: float,
    strategy: str = "quantile",
    g: pd.DataFrame | None = None,
) -> list[dict[str, float]]:
    """Evaluate's reliability records from the table: equal-mass (edges from cumulative weights) or
    equal-width bins, each with its Jeffreys interval and consistency band, as the row path writes them."""

    rel = agg_diag.reliability_bins(t, n_bins, strategy, level=level, g=g)
    cnt, pos = rel["count"], rel["positives"]
    ok = cnt > 0
    lo, hi = jeffreys_interval(pos[ok], cnt[ok], level)
    keys = ("count", "positives", "mean_pred", "observed", "band_low", "band_high")
    return [
        {
            "bin": int(i),
            **{k: float(rel[k][i]) for k in keys[:4]},
            "low": float(lo[j]),
            "high": float(hi[j]),
            **{k: float(rel[k][i]) for k in keys[4:]},
        }
        for j, i in enumerate(np.flatnonzero(ok))
    ]


def histogram_from_table(t: pd.DataFrame, bins: int) -> list[dict[str, float]]:
    g = _collapse(t)
    n, y = g["n"].to_numpy(), g["label"].to_numpy()
    idx = np.minimum((g["sum_q"].to_numpy() / n * bins).astype(np.intp), bins - 1)
    neg = np.bincount(idx, weights=np.where(y == 0, n, 0.0), minlength=bins)
    pos = np.bincount(idx, weights=np.where(y == 1, n, 0.0), minlength=bins)
    return [
        {
            "bin_low": i / bins,
            "bin_high": (i + 1) / bins,
            "negatives": int(round(neg[i])),
            "positives": int(round(pos[i])),
        }
        for i in range(bins)
    ]


def evaluate_tables(
    tables: Mapping[str, pd.DataFrame], cfg: Evaluate
) -> dict[str, tuple[dict, list, list]]:
    """Evaluate's ``(record, reliability, histogram)`` per method, each from its (calibrated) test table,
    with the row path's keys (``evaluate.reliability_bins``: quantile or uniform, as on the rows)."""
    n_bins = int(cfg.n_bins)
    level = float(cfg.ci_level)
    strategy = str(cfg.reliability_bins)
    if strategy not in ("quantile", "uniform"):
        raise StageError(f"params: evaluate.reliability_bins is {strategy!r}; use quantile or uniform")
    out = {}
    for m in tables:
        # grouped once (a calibrated table with ties is a groupby of every column); the table itself is
        # dropped before the next method's is built (``tables`` may build them on access)
        t = collapsed(tables[m])
        res, draws = overall_and_draws(t, n_bins, level)  # t is in group order: _collapse(t) is t
        rec = _metric_record(res, level)
        g = agg_diag.groups(t)
        diag = diagnostics_record(t, cfg.selection_alpha, level, g, draws.get("ks"))
        ks_ci = diag.pop("ks_ci", None)
        rec.update(diag)
        if ks_ci and "ci" in rec:
            rec["ci"]["ks"] = ks_ci
        hist = histogram_from_table(t, int(cfg.hist_bins))
        out[m] = (rec, reliability_from_table(t, n_bins, level, strategy, g), hist)
    return out


class CalibratedTables(Mapping[str, pd.DataFrame]):
    """The test table under each fitted calibrator (JSON text), the calibrator applied at group means,
    built when asked for and not kept: each shares the test table's replicate columns, and holding
    every method's new columns at once would cost methods x groups x 5 columns (1e6 groups, 15
    methods: ~540 MB). ``extra``: tables already built (the uncalibrated one, segmented methods'), listed
    after the calibrators' unless ``order`` says otherwise."""

    def __init__(self, test: pd.DataFrame, texts: dict[str, str], input_kind: str,
                 extra: dict[str, pd.DataFrame] | None = None, order: list[str] | None = None) -> None:
        self.test, self.texts, self.kind = test, texts, input_kind
        self.extra = dict(extra or {})
        self.order = order or [*texts, *(m for m in self.extra if m not in texts)]

    def __getitem__(self, m: str) -> pd.DataFrame:
        from calibflow.calibrators import from_json

        if m in self.extra:
            return self.extra[m]
        return calibrated_table(self.test, from_json(self.texts[m]), self.kind)

    def __iter__(self) -> Iterator[str]:
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def calibrated_tables(test: pd.DataFrame, texts: dict[str, str], input_kind: str) -> dict[str, pd.DataFrame]:
    """The test table under each fitted calibrator (JSON text), the calibrator applied at group means."""
    from calibflow.calibrators import from_json

    return {m: calibrated_table(test, from_json(t), input_kind) for m, t in texts.items()}


def compare_tables(
    unc: pd.DataFrame, cal: pd.DataFrame, n_bins: int, level: float, memo: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Select's card ``metrics`` from two tables; the replicates are paired (same Poisson weights).
    ``memo``: a dict kept across calls with the same ``unc`` (its metrics are computed once)."""
    memo = {} if memo is None else memo
    if "unc" not in memo:
        gu = _collapse(unc)
        memo["unc"] = (_point(gu, gu["n"].to_numpy(), n_bins, False),
                       replicate_metrics(gu, _replicate_cols(gu), n_bins))
    pu, du = memo["unc"]
    gc = _collapse(cal)
    pc = _point(gc, gc["n"].to_numpy(), n_bins, False)
    reps = _replicate_cols(gc)
    dc = replicate_metrics(gc, reps, n_bins)
    out: dict[str, Any] = {}
    for m in ("log_loss", "ece", "brier"):
        diff = dc[m] - du[m]
        out[m] = {
            "uncalibrated": pu[m],
            "calibrated": pc[m],
            "delta": pc[m] - pu[m],
            "delta_ci": percentile_interval(diff, level) if reps else None,
        }
    out["calibration_ratio"] = {
        "uncalibrated": pu["calibration_ratio"],
        "calibrated": pc["calibration_ratio"],
        "ci": _overall_ratio_ci(gc, level) if reps else None,
    }
    return out


def _overall_ratio_ci(g: pd.DataFrame, level: float) -> list[float] | None:
    """The whole test's ``sum p / sum y`` interval from the table's counts: the rows' own interval
    (``calibflow.intervals.ratio_interval``), not the replicates' percentile interval."""
    from calibflow.intervals import ratio_interval

    n, y = g["n"].to_numpy(np.float64), g["label"].to_numpy(np.float64)
    pos, sq = float(n @ y), float(g["sum_q"].sum())
    if pos <= 0:
        return None
    lo, hi = ratio_interval(pos, sq, max(sq - float(g["sum_q2"].sum()), 0.0), level)
    return [float(lo), float(hi)]


def segment_ratios(
    unc: pd.DataFrame, cal: pd.DataFrame, names: list[str], level: float, top: int
) -> list[dict[str, Any]]:
    """Select's per-segment ``sum p / sum y`` from two tables keyed by the same ``seg_i`` columns."""
    return agg_diag.segment_ratios(unc, cal, names, level=level, top=top)


def table_log_loss(t: pd.DataFrame) -> float:
    # sums over the table's rows: grouping them by (bucket, label) first changes nothing but the cost
    return float(t["sum_ll"].sum() / t["n"].sum())



def test_auc(t: pd.DataFrame, n_bins: int) -> tuple[float, float, float]:
    """The uncalibrated scores' AUC over a test table's cells (ties inside a cell counted half), its
    positives and negatives: what ``diagnostics.ranking_note_from`` needs on this path."""
    g = _collapse(t)
    n, y = g["n"].to_numpy(np.float64), g["label"].to_numpy(np.float64)
    return float(_point(g, g["n"].to_numpy(), n_bins, False)["auc"]), float(n @ y), float(n @ (1 - y))
