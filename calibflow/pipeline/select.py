"""Stage ``select``: the calibrator to deploy for every dataset and source, with its model card.

``python -m calibflow.pipeline.select``. Rule (``select.rule`` in params.yaml):

- ``auto`` (default): the method of ``calibrate.methods`` with the lowest test log loss among the monotone
  ones (a deployed calibrator must keep the model's ranking), then compared with the uncalibrated scores by a
  paired percentile bootstrap over test rows (``evaluate.n_bootstrap`` resamples from the global seed, each
  resample scoring both on the same rows). The card states plainly whether the interval of the log-loss
  change excludes zero; the chosen calibrator is written either way.
- a method name: that method, with the same comparison.

Writes ``models/<name>/calibrator.json`` (the fitted calibrator's JSON, loadable by
``calibflow.calibrators.from_json``) and ``models/<name>/card.json`` (method, params, rule, a one-line
reason, test metrics with intervals, per-segment calibration ratios ``sum p / sum y`` with intervals when
the source declares segments, the data fingerprint, time range and split, calibflow's version). Each
``models/<name>`` folder is swapped in atomically, so a failed run keeps the last good calibrator.
"""

from __future__ import annotations

import importlib.metadata as im
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from calibflow import metrics
from calibflow.calibrators import get_class
from calibflow.io import read_json, write_json, write_text
from calibflow.pipeline import _aggregate, _sources
from calibflow.pipeline._common import (
    UNCALIBRATED,
    Layout,
    StageError,
    atomic_dir,
    base_parser,
    cli,
    load_params,
    methods,
    require,
    section,
    seed,
)

log = logging.getLogger("calibflow.pipeline.select")
RULE_AUTO = "auto"
RULE_TEXT = "lowest test log loss among monotone methods, paired bootstrap vs uncalibrated"
#: Most values per segment column shown on a card (the largest segments).
MAX_SEGMENTS = 20
_EPS = 1e-15


def _nll(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    pc = np.clip(p, _EPS, 1 - _EPS)
    return -(y * np.log(pc) + (1 - y) * np.log1p(-pc))


class _Rows:
    """Per-row pieces of each metric, so a resample's metric is a weighted sum (one pass per resample)."""

    def __init__(self, y: np.ndarray, p: np.ndarray, n_bins: int) -> None:
        self.y, self.p, self.n_bins = y, p, n_bins
        self.nll = _nll(y, p)
        self.sq = (p - y) ** 2
        self.bins = metrics.bin_index(p, n_bins)
        self.resid = y - p

    def stats(self, c: np.ndarray) -> dict[str, float]:
        tot = c.sum()
        sy = c @ self.y
        gap = np.bincount(self.bins, weights=c * self.resid, minlength=self.n_bins)
        return {
            "log_loss": float(c @ self.nll / tot),
            "brier": float(c @ self.sq / tot),
            "ece": float(np.abs(gap).sum() / tot),
            "calibration_ratio": float(c @ self.p / sy) if sy > 0 else float("nan"),
        }


def paired_bootstrap(
    y: np.ndarray, p_unc: np.ndarray, p_cal: np.ndarray, n_boot: int, rng_seed: int, n_bins: int
) -> dict[str, dict[str, np.ndarray]]:
    """Metrics of both probability vectors on the same ``n_boot`` resamples of the rows (paired)."""
    a, b = _Rows(y, p_unc, n_bins), _Rows(y, p_cal, n_bins)
    rng = np.random.default_rng(rng_seed)
    n = y.size
    out: dict[str, dict[str, list[float]]] = {"unc": {}, "cal": {}}
    for _ in range(n_boot):
        c = np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)
        for key, rows in (("unc", a), ("cal", b)):
            for m, v in rows.stats(c).items():
                out[key].setdefault(m, []).append(v)
    return {k: {m: np.asarray(v) for m, v in d.items()} for k, d in out.items()}


def _ci(values: np.ndarray, level: float) -> list[float] | None:
    v = values[np.isfinite(values)]
    if not v.size:
        return None
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(v, [tail, 1.0 - tail])
    return [float(lo), float(hi)]


def compare(
    y: np.ndarray, p_unc: np.ndarray, p_cal: np.ndarray, cfg: dict[str, Any], rng_seed: int
) -> dict[str, Any]:
    """The card's ``metrics``: each metric uncalibrated vs calibrated, the change and its paired interval."""
    n_bins, level = int(cfg.get("n_bins", 15)), float(cfg.get("ci_level", 0.95))
    boot = paired_bootstrap(y, p_unc, p_cal, int(cfg.get("n_bootstrap", 200)), rng_seed, n_bins)
    point = {
        "unc": _Rows(y, p_unc, n_bins).stats(np.ones_like(y)),
        "cal": _Rows(y, p_cal, n_bins).stats(np.ones_like(y)),
    }
    out: dict[str, Any] = {}
    for m in ("log_loss", "ece", "brier"):
        out[m] = {
            "uncalibrated": point["unc"][m],
            "calibrated": point["cal"][m],
            "delta": point["cal"][m] - point["unc"][m],
            "delta_ci": _ci(boot["cal"][m] - boot["unc"][m], level),
        }
    out["calibration_ratio"] = {
        "uncalibrated": point["unc"]["calibration_ratio"],
        "calibrated": point["cal"]["calibration_ratio"],
        "ci": _ci(boot["cal"]["calibration_ratio"], level),
    }
    return out


def segment_ratios(
    test: pd.DataFrame, p_cal: np.ndarray, cfg: dict[str, Any], rng_seed: int
) -> list[dict[str, Any]]:
    """Per declared segment value: rows, positives, ``sum p / sum y`` before/after, bootstrap interval."""
    level, n_boot = float(cfg.get("ci_level", 0.95)), int(cfg.get("n_bootstrap", 200))
    y, p_unc = test["y"].to_numpy(np.float64), test["prob"].to_numpy(np.float64)
    out = []
    for col in [c for c in test.columns if c.startswith(_sources.SEGMENT_PREFIX)]:
        values = test[col].astype(str)
        for i, (value, n) in enumerate(values.value_counts().head(MAX_SEGMENTS).items()):
            idx = np.flatnonzero((values == value).to_numpy())
            ys, pc = y[idx], p_cal[idx]
            pos = float(ys.sum())
            rng = np.random.default_rng([rng_seed, i])
            ratios = []
            for _ in range(n_boot):
                r = rng.integers(0, idx.size, size=idx.size)
                s = ys[r].sum()
                ratios.append(pc[r].sum() / s if s > 0 else np.nan)
            out.append(
                {
                    "column": col[len(_sources.SEGMENT_PREFIX) :],
                    "value": str(value),
                    "n": int(n),
                    "positives": int(pos),
                    "ratio_uncalibrated": float(p_unc[idx].sum() / pos) if pos else None,
                    "ratio": float(pc.sum() / pos) if pos else None,
                    "ratio_ci": _ci(np.asarray(ratios), level),
                }
            )
    return out


def choose(candidates: list[str], test_log_loss: dict[str, float], rule: str) -> str:
    """The method the rule picks among ``candidates`` (``auto``: lowest test log loss)."""
    if rule != RULE_AUTO:
        if rule not in candidates:
            raise StageError(
                f"params: select.rule {rule!r} is not a method in calibrate.methods "
                f"({', '.join(candidates)}) nor {RULE_AUTO!r}"
            )
        return rule
    mono = [m for m in candidates if get_class(m).monotone]
    if not mono:
        raise StageError("params: select.rule auto needs a monotone method in calibrate.methods")
    return min(mono, key=lambda m: (test_log_loss[m], m))


def _reason(method: str, n_mono: int, rule: str, met: dict[str, Any], level: float) -> str:
    ll = met["log_loss"]
    ci = ll["delta_ci"]
    pct = f"{100 * level:.0f}%"
    how = (
        f"lowest test log loss of {n_mono} monotone methods" if rule == RULE_AUTO else "named in select.rule"
    )
    if ci is None:
        verdict = "no interval"
    elif ci[1] < 0:
        verdict = "better than the uncalibrated scores"
    elif ci[0] > 0:
        verdict = "WORSE than the uncalibrated scores: keep your scores or review the methods"
    else:
        verdict = "not distinguishable from the uncalibrated scores (interval includes 0)"
    ci_s = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "n/a"
    return (
        f"{method}: {how}; log loss {ll['uncalibrated']:.4f} -> {ll['calibrated']:.4f} "
        f"(change {ll['delta']:+.4f}, {pct} CI {ci_s}), {verdict}"
    )


def _data_record(lay: Layout, params: dict[str, Any], name: str, is_source: bool) -> dict[str, Any]:
    """Fingerprint, time range and split of the data behind ``name`` (from fetch/fingerprint/prepare)."""
    from calibflow.pipeline import fingerprint

    if is_source:
        fp = fingerprint.read(params, name, lay.root)
        fp = {k: v for k, v in fp.items() if k != "name"}
    else:
        manifest = read_json(lay.manifest) if lay.manifest.is_file() else {}
        files = manifest.get(name, {})
        fp = {
            "method": "sha256",
            "files": [
                {"path": p, "size": m.get("bytes"), "sha256": m.get("sha256")}
                for p, m in sorted(files.items())
            ],
        }
    splits = read_json(lay.prepared / "splits.json") if (lay.prepared / "splits.json").is_file() else {}
    rec = (splits.get("datasets") or {}).get(name) or {}
    split = dict(rec.get("split") or {})
    if not is_source:
        split = {"kind": "random", "fractions": splits.get("fractions")}
    split["rows"] = rec.get("counts")
    return {"fingerprint": fp, "time_range": rec.get("time_range"), "split": split}


def _input_record(params: dict[str, Any], name: str, is_source: bool) -> dict[str, Any]:
    """What ``calibflow apply`` feeds the calibrator: which score, of which kind, converted to which input."""
    cal_input = str(section(params, "calibrate").get("input", "logit"))
    if is_source:
        spec = _sources.specs(params)[name]
        if spec.kind == "score":
            return {"score": spec.score, "score_kind": spec.score_kind, "calibrator_input": cal_input}
        return {
            "score": f"margin of data/models/{name}.json",
            "score_kind": "logit",
            "calibrator_input": cal_input,
        }
    return {
        "score": f"margin of data/models/{name}.json",
        "score_kind": "logit",
        "calibrator_input": cal_input,
    }


def _test_frame(lay: Layout, name: str) -> pd.DataFrame:
    path = require(lay.predictions / f"{name}.parquet", "predictions", "the train stage")
    preds = pd.read_parquet(path)
    return preds[preds["split"] == "test"].sort_values("row").reset_index(drop=True)


def _aggregate_metrics(lay: Layout, params: dict[str, Any], name: str) -> tuple[dict[str, float], Any]:
    """Test log loss per candidate and a ``compare`` for a method, from bucket tables (issue 17)."""
    scale = _aggregate.scale_config(params)
    cfg = section(params, "evaluate")
    input_kind = str(section(params, "calibrate").get("input", "logit"))
    tabs = _aggregate.split_tables(
        lay, name, "test", scale, scale.replicates, input_kind=input_kind, segments=True
    )
    test = tabs.fine
    texts = {
        m: require(lay.calibrated_method(m) / f"{name}.json", "calibrator", f"calibrate@{m}").read_text()
        for m in methods(params)
    }
    tables = _aggregate.calibrated_tables(test, texts, input_kind)
    ll = {m: _aggregate.table_log_loss(t) for m, t in tables.items()}
    n_bins, level = int(cfg.get("n_bins", 15)), float(cfg.get("ci_level", 0.95))

    def compare_for(m: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        segs = _aggregate.segment_tables_ratios(
            tabs, texts[m], input_kind, level, MAX_SEGMENTS, scale.replicates, scale.seed
        )
        return _aggregate.compare_tables(test, tables[m], n_bins, level), segs

    return ll, compare_for


def select_one(
    lay: Layout, params: dict[str, Any], name: str, is_source: bool, rule: str
) -> tuple[str, dict[str, Any]]:
    """The chosen calibrator's JSON text and its card."""
    cfg = section(params, "evaluate")
    cands = methods(params)
    how = _aggregate.path_for(params, name, lay)
    if how == _aggregate.AGGREGATE:
        return _select_aggregate(lay, params, name, is_source, rule)
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
    method = choose(cands, ll, rule)
    text = require(
        lay.calibrated_method(method) / f"{name}.json", "calibrator", f"calibrate@{method}"
    ).read_text()
    met = compare(y, test["prob"].to_numpy(np.float64), probs[method], cfg, seed(params))
    segs = segment_ratios(test, probs[method], cfg, seed(params))
    return text, _card(lay, params, name, is_source, rule, method, met, ll, segs, how)


def _select_aggregate(
    lay: Layout, params: dict[str, Any], name: str, is_source: bool, rule: str
) -> tuple[str, dict[str, Any]]:
    """Select from bucket tables keyed by the source's segment columns (per-segment ratios with the
    Poisson replicates' intervals in place of the row bootstrap's)."""
    ll, compare_for = _aggregate_metrics(lay, params, name)
    method = choose(methods(params), ll, rule)
    text = require(
        lay.calibrated_method(method) / f"{name}.json", "calibrator", f"calibrate@{method}"
    ).read_text()
    met, segs = compare_for(method)
    return text, _card(lay, params, name, is_source, rule, method, met, ll, segs, _aggregate.AGGREGATE)


def _card(
    lay: Layout,
    params: dict[str, Any],
    name: str,
    is_source: bool,
    rule: str,
    method: str,
    met: dict[str, Any],
    ll: dict[str, float],
    segments: Any,
    how: str,
) -> dict[str, Any]:
    cfg = section(params, "evaluate")
    cands = methods(params)
    text = require(
        lay.calibrated_method(method) / f"{name}.json", "calibrator", f"calibrate@{method}"
    ).read_text()
    n_mono = sum(get_class(m).monotone for m in cands)
    card = {
        "name": name,
        "kind": "source" if is_source else "dataset",
        "method": method,
        "params": json.loads(text).get("params", {}),
        "rule": RULE_TEXT if rule == RULE_AUTO else f"named method: {rule}",
        "reason": _reason(method, n_mono, rule, met, float(cfg.get("ci_level", 0.95))),
        "metrics": met,
        "segments": segments,
        "candidates": {
            m: {"test_log_loss": v, "monotone": bool(get_class(m).monotone)} for m, v in ll.items()
        },
        "baseline": UNCALIBRATED,
        "input": _input_record(params, name, is_source),
        "data": _data_record(lay, params, name, is_source),
        "calibflow_version": im.version("calibflow"),
        "path": how,
    }
    return card


def models_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / "models"


def run(params: dict[str, Any], root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Select and write the calibrator and card of every dataset and source."""
    lay = Layout(Path(root))
    rule = str((params.get("select") or {}).get("rule", RULE_AUTO))
    specs = _sources.specs(params, root)
    chosen = [(name, *select_one(lay, params, name, name in specs, rule)) for name in _sources.names(params)]
    for name, text, card in chosen:  # all computed first: one failure writes nothing
        with atomic_dir(models_dir(root) / name) as tmp:
            write_text(tmp / "calibrator.json", text if text.endswith("\n") else text + "\n")
            write_json(tmp / "card.json", card)
        log.info("selected for %s: %s", name, card["reason"])
    return {name: card for name, _, card in chosen}


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    raise SystemExit(main())
