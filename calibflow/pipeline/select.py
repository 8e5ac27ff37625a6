"""Stage ``select``: the calibrator to deploy for every dataset and source, with its model card.

``python -m calibflow.pipeline.select``. Rule (``select.rule`` in params.yaml):

- ``auto`` (default): ``calibflow.selection``: keep your scores (an ``identity`` calibrator is written)
  unless a monotone method of ``calibrate.methods`` lowers test log loss by more than ``select.margin``
  (a fraction of the uncalibrated log loss, default 0.1%) with its whole paired interval (from the test
  table's ``scale.replicates`` Poisson replicate columns, the same weights for both probability vectors,
  so the verdict does not depend on ``evaluate.n_bootstrap``); among the
  methods within the margin of the best, the fewest parameters and then the most familiar one wins.
  The card states the rule, the verdict and the runner-up.
- ``identity``: always keep the scores; a method name: that method, with the same comparison.

One path for every dataset and source, of any size (issue 35): every number comes from the test split's
bucket tables (``_aggregate``); the segmented challenge scores the test rows in one DuckDB pass.

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

from calibflow import diagnostics, selection
from calibflow import segments as seg
from calibflow.aggregate import segment_compare
from calibflow.aggregate.table import add_replicates
from calibflow.calibrators import from_json, get_class, make
from calibflow.io import read_json, write_json, write_text
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
from calibflow.pipeline._streaming import rows_file
from calibflow.pipeline.params_schema import Evaluate
from calibflow.report._format import fmt_sig
from calibflow.report.data import RANKING_BASELINES

log = logging.getLogger("calibflow.pipeline.select")
#: numba, imported late by the compiled passes: the run's stage host imports it once for every stage.
HOST_PRELOAD = ("numba",)
RULE_AUTO = "auto"
#: Most values per segment column shown on a card (the largest segments).
MAX_SEGMENTS = 20


def _challenge(
    best: str,
    ll: dict[str, float],
    ll_global: float,
    cmp: selection.Paired,
    global_method: str,
    margin: float,
    level: float,
) -> dict[str, Any]:
    """The segmented challenge's card record and its one line (the row path's and the pass's)."""
    better = cmp.high < -margin
    ci_s = f"[{fmt_sig(cmp.low, signed=True)}, {fmt_sig(cmp.high, signed=True)}]"
    verdict = (
        f"better on the test split by more than the margin {fmt_sig(margin)}: {best} is deployed"
        if better
        else f"not better by more than the margin {fmt_sig(margin)}: the global {global_method} is kept"
    )
    reason = (
        f"per segment: {best} vs global {global_method}, test log loss {fmt_sig(ll_global)}"
        f" -> {fmt_sig(ll[best])} (change {fmt_sig(cmp.delta, signed=True)}, {100 * level:g}% paired CI "
        f"{ci_s}), {verdict}"
    )
    return {
        "global_method": global_method,
        "segmented_method": best,
        "candidates": ll,
        "delta": cmp.delta,
        "delta_ci": cmp.ci(),
        "chosen": bool(better),
        "reason": reason,
    }


def _data_record(lay: Layout, params: Params, name: str, is_source: bool) -> dict[str, Any]:
    """Fingerprint, time range and split of the data behind ``name`` (from fetch/fingerprint/prepare)."""

    if is_source:
        fp = _sources.read_fingerprint(params, name, lay.root)
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


def _input_record(params: Params, name: str, is_source: bool) -> dict[str, Any]:
    """What ``calibflow apply`` feeds the calibrator: which score, of which kind, converted to which input."""
    cal_input = str(params.calibrate.input)
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


def _aggregate_metrics(lay: Layout, params: Params, name: str) -> tuple[dict[str, float], Any, Any]:
    """Test log loss per candidate, a ``compare`` for a method (the card's ``metrics``) and its per-segment
    ratios (``segments_for``: asked for the chosen method only), from bucket tables."""
    scale = _aggregate.scale_config(params)
    cfg = params.evaluate
    input_kind = str(params.calibrate.input)
    tabs = _aggregate.split_tables(
        lay, name, "test", scale, scale.replicates, input_kind=input_kind, segments=True
    )
    test = tabs.fine
    texts = {
        m: require(lay.calibrated_method(m) / f"{name}.json", "calibrator", f"calibrate@{m}").read_text()
        for m in methods(params)
    }
    texts[selection.IDENTITY] = _calibrator_text(lay, params, name, selection.IDENTITY)  # "keep"
    # Each calibrator parsed once; each method's table built when used and not kept (it shares the test
    # table's replicate counts; all of them at once cost methods x groups x 5 columns).
    cals = {m: from_json(t) for m, t in texts.items()}

    def table(m: str) -> pd.DataFrame:
        return _aggregate.calibrated_table(test, cals[m], input_kind)

    ll = {m: _aggregate.table_log_loss(table(m)) for m in cals}
    n_bins, level = int(cfg.n_bins), float(cfg.ci_level)
    memo: dict[str, Any] = {}  # the uncalibrated table's metrics: the same for every method
    seg_memo: dict[str, pd.DataFrame] = {}

    def compare_for(m: str) -> dict[str, Any]:
        return _aggregate.compare_tables(test, table(m), n_bins, level, memo)

    def segments_for(m: str) -> list[dict[str, Any]]:
        return _aggregate.segment_tables_ratios(
            tabs, cals[m], input_kind, level, MAX_SEGMENTS, scale.replicates, scale.seed, seg_memo
        )

    compare_for.test_auc = _aggregate.test_auc(test, n_bins)  # type: ignore[attr-defined]
    return ll, compare_for, segments_for


def select_one(
    lay: Layout, params: Params, name: str, is_source: bool, rule: str
) -> tuple[str, dict[str, Any]]:
    """The chosen calibrator's JSON text and its card: from bucket tables for every dataset and source
    (one path, issue 35)."""
    return _select_aggregate(lay, params, name, is_source, rule)


#: A challenge's keys that are the deployed calibrator's payload, not the card's ``segmented`` record.
_NOT_ON_CARD = ("text", "probs", "metrics", "segments", "reliability")


def _with_segments(
    card: dict[str, Any],
    challenge: dict[str, Any] | None,
    segs: list[dict[str, Any]],
    text: str,
    cfg: Evaluate,
) -> dict[str, Any]:
    """Add the segmented challenge and the per-segment flags to a card (a winning challenger calibrates)."""
    if challenge is not None and challenge["chosen"]:
        card["verdict"] = selection.CALIBRATE
        glob = challenge["global_method"]
        why = f"Use {card['method']}: per-segment calibrator, better than the global {glob}"
        card["reason"] = f"{why}; {challenge['reason']}"
    if challenge is not None:
        card["segmented"] = {k: v for k, v in challenge.items() if k not in _NOT_ON_CARD}
        card["segment_reason"] = challenge["reason"]
        card["input"]["segments"] = list(json.loads(text)["state"].get("segment_names_") or [])
    if segs:
        card["segment_flags"] = seg.flag_lines(segs)
        # with many segments some intervals exclude 1 by chance alone: say how many to expect
        card["segment_flags_by_chance"] = seg.chance_flags(segs, float(cfg.ci_level))
        card["segment_min_positives"] = seg.MIN_POSITIVES
        too_few = seg.too_few_line(segs)  # listed, not flagged and not hidden
        if too_few:
            card["segment_too_few"] = too_few
    return card

def _select_aggregate(
    lay: Layout, params: Params, name: str, is_source: bool, rule: str
) -> tuple[str, dict[str, Any]]:
    """Select from bucket tables keyed by the source's segment columns (per-segment ratios with the
    Poisson replicates' intervals in place of the row bootstrap's). The log-loss comparisons come from
    the same replicates (a fixed count, ``scale.replicates``, seeded by ``scale.seed``): per-row
    differences are not available from buckets, and the verdict still does not depend on
    ``evaluate.n_bootstrap``."""
    ll, compare_for, segments_for = _aggregate_metrics(lay, params, name)
    ll_unc = ll.pop(selection.IDENTITY)  # the identity's table is the uncalibrated one
    level = float(params.evaluate.ci_level)
    compared = {m: compare_for(m) for m in _auto_candidates(methods(params))}
    paired = {m: _paired_from_replicates(c["log_loss"], level) for m, c in compared.items()}
    decision = _decide(lay, params, name, paired, ll_unc, rule)
    method = decision.method
    text = _calibrator_text(lay, params, name, method)
    met = compared[method] if method in compared else compare_for(method)
    segs = segments_for(method)  # the card's per-segment rows: the chosen method's only
    challenge = (
        _segmented_pass(lay, params, name, method, decision.margin) if rule == RULE_AUTO else None
    )
    if challenge is not None and challenge["chosen"]:
        method, text, met, segs = (challenge[k] for k in ("segmented_method", "text", "metrics", "segments"))
    card = _card(lay, params, name, is_source, rule, method, met, ll, segs, _aggregate.AGGREGATE, text)
    card = _with_decision(card, decision, rule, level)
    card = _with_segments(card, challenge, segs, text, params.evaluate)
    # AUC only here: the constant's check needs the calibration split's base rate, not read on this path
    auc, n1, n0 = compare_for.test_auc  # type: ignore[attr-defined]
    ll_chosen = float(met.get("log_loss", {}).get("calibrated") or 0.0)
    note = diagnostics.ranking_note_from(auc, n1, n0, None, ll_chosen, float("nan"), decision.margin, method,
                                         level)
    if note is not None:  # the report says it first
        card["ranking"] = note
    if challenge is not None and challenge["chosen"]:
        card["segment_interval"] = segment_compare.RATIO_INTERVAL
        card["chosen_reliability"] = challenge["reliability"]
        card["segment_test_rows"] = challenge["n_test"]  # the report checks each column adds up to it
    if segs:  # the report draws the worst segments' reliability and checks the rows add up
        card["segment_reliability"], note = _worst_reliability(lay, params, name, segs, text)
        if note:
            card["segment_reliability_rows"] = note
        card.setdefault("segment_test_rows", _column_rows(segs))
    return text, card


def _column_rows(segs: list[dict[str, Any]]) -> int:
    """The test rows the card's per-segment rows hold (every column's rows add up to them)."""
    return int(sum(s["n"] for s in segs if s["column"] == segs[0]["column"]))


def _worst_reliability(
    lay: Layout, params: Params, name: str, segs: list[dict[str, Any]], text: str
) -> tuple[list[dict[str, Any]], str | None]:
    """The worst segments' reliability bins (``segments.worst_segments``, ``segments.segment_reliability``)
    under the chosen calibrator, from the test rows read by DuckDB: a reliability diagram of one segment
    value needs its rows' probabilities. Only up to ``scale.fit_rows`` test rows (all of them read); above
    it none are drawn and the note says so (a sample would cost one more pass over a large source, and
    the per-segment ratios with their intervals are on the card)."""
    worst = seg.worst_segments(segs)
    if not worst:
        return [], None
    scale = _aggregate.scale_config(params)
    stored = _column_rows(segs)
    if scale.fit_rows and stored > scale.fit_rows:
        return [], (f"worst segments' reliability not drawn: {stored:,} test rows, above scale.fit_rows "
                    f"{scale.fit_rows:,}")
    names = _aggregate.segment_names(lay, name)
    rows = segment_compare.fetch_rows(_test_rows(lay, params, name, names), names, scale.threads or None)
    cal = from_json(text)
    segments = rows["segments"] if json.loads(text)["state"].get("segment_names_") else None
    p = cal.predict(rows["scores"], segments=segments) if segments else cal.predict(rows["scores"])
    level = float(params.evaluate.ci_level)
    return seg.segment_reliability(rows["y"], p, rows["segments"], worst, level=level), None


def _test_rows(lay: Layout, params: Params, name: str, names: list[str],
               sample: segment_compare.RowSample | None = None) -> Any:
    """``name``'s test rows for the pass: the source itself when prepare streamed it (its split
    expression), else the predictions file filtered to the test split; ``sample``: only those rows."""
    path = rows_file(lay, name)
    input_kind = str(params.calibrate.input)
    if path.parent == lay.prepared:
        spec = _sources.specs(params, lay.root)[name]
        return segment_compare.stream_test_rows(spec, int(params.seed), input_kind, sample)
    score = "prob" if input_kind == "probability" else "margin"
    segs = {c: _sources.SEGMENT_PREFIX + c for c in names}
    return segment_compare.file_test_rows(str(path), "y", score, "prob", segs, "split = $split",
                                          {"split": "test"}, sample)


def _check_scored(name: str, n: int, stored: int, sample: segment_compare.RowSample | None) -> None:
    """The pass scored the rows prepare stored (all of them, or a sample of plausible size)."""
    if sample is None and n == stored:
        return
    if sample is not None and segment_compare.plausible_sample_size(n, stored, sample):
        return
    what = f"{n} test rows scored" + (f" in a sample of fraction {sample.fraction:.4g}" if sample else "")
    raise StageError(f"{name}: {what}, {stored} in the stored test table: the rows changed since prepare; "
                     "run the pipeline again")


def _segmented_pass(
    lay: Layout, params: Params, name: str, global_method: str, margin: float
) -> dict[str, Any] | None:
    """The segmented challenge (the best segmented calibrator against the chosen global one, the paired
    test on per-row log-loss differences and the practical margin; :func:`_challenge`'s record), from
    one pass over the test rows (``calibflow.aggregate.segment_compare``); when the segmented method
    wins, also the card's metrics, per-segment rows and reliability bins for it. None without fits."""
    fits = {m: lay.calibrated_segments / m / f"{name}.json" for m in segmented_methods(params)}
    fits = {m: p for m, p in fits.items() if p.is_file()}
    if not fits:
        return None
    scale, cfg = _aggregate.scale_config(params), params.evaluate
    level = float(cfg.ci_level)
    cals = {m: from_json(p.read_text()) for m, p in fits.items()}
    glob = None if global_method == selection.IDENTITY else from_json(
        _calibrator_text(lay, params, name, global_method))
    names = _aggregate.segment_names(lay, name)
    input_kind = str(params.calibrate.input)
    test = _aggregate.split_table(lay, name, "test", scale, scale.replicates, input_kind=input_kind)
    stored = round(float(test["n"].sum()))
    # above compare_rows test rows a seeded sample decides: the interval has ample power on a few
    # million rows, and the pass costs ~0.6 us a row
    sample = segment_compare.row_sample(scale.compare_rows, stored, scale.seed)
    try:
        res = segment_compare.compare(_test_rows(lay, params, name, names, sample), glob, cals, names,
                                      scale.grid, threads=scale.threads or None,
                                      uncalibrated_table=sample is not None)
    except ValueError as exc:
        raise StageError(f"{name}: scoring the test rows per segment: {exc}") from None
    _check_scored(name, res.n, stored, sample)
    best = min(res.log_loss, key=lambda m: (res.log_loss[m], m))
    cmp = selection.paired_from_moments(*res.vs_global[best].astuple(), level)
    rec = _challenge(best, res.log_loss, res.log_loss_global, cmp, global_method, margin, level)
    rec["text"], rec["n_test"] = fits[best].read_text(), res.n
    rec["test_rows"], rec["test_rows_compared"] = stored, res.n
    rec["test_rows_sample"] = None if sample is None else sample.describe()
    if sample is not None:
        rec["reason"] += (f" (on a seeded sample of {res.n:,} of {stored:,} test rows, "
                          f"scale.compare_rows {scale.compare_rows:,})")
    notes = {m: n for m in fits if (n := _fit_note(lay, m, name))}
    if notes:  # a method that needs rows was fitted on a seeded sample of them: the card says so
        rec["fit_notes"] = notes
    if best in notes:
        rec["reason"] += f"; {best} {notes[best]}"
    if rec["chosen"]:
        t = add_replicates(res.tables[best], scale.replicates, scale.seed)
        # sampled: before and after on the same rows (the stored test table holds them all)
        before = test if res.table_uncalibrated is None else add_replicates(
            res.table_uncalibrated, scale.replicates, scale.seed)
        met = _aggregate.compare_tables(before, t, int(cfg.n_bins), level)
        rec["metrics"] = _pass_metrics(res, best, met, level)
        rec["segments"] = segment_compare.segment_ratio_records(res, best, level, MAX_SEGMENTS)
        rec["reliability"] = _aggregate.reliability_from_table(t, int(cfg.n_bins), level,
                                                               str(cfg.reliability_bins))
    return rec


def _fit_note(lay: Layout, method: str, name: str) -> str | None:
    """calibrate_segments' note on which calib rows fitted ``method`` (a sample, for a method that needs
    rows), or None."""
    f = lay.calibrated_segments / "fit.json"
    if not f.is_file():
        return None
    rec = ((read_json(f).get("methods") or {}).get(method) or {}).get(name) or {}
    return rec.get("fit_note")


def _pass_metrics(res: Any, method: str, met: dict[str, Any], level: float) -> dict[str, Any]:
    """The card's metrics for a segmented calibrator scored by the pass: log loss and Brier with the
    paired CLT interval on per-row differences (as the row path's log loss); ECE and the ratio from the
    tables, the ECE change without an interval (the two tables' replicates are not paired)."""
    ll = met["log_loss"]
    ll.update(uncalibrated=res.log_loss_uncalibrated, calibrated=res.log_loss[method])
    for key, mom in (("log_loss", res.vs_uncalibrated[method]), ("brier", res.brier_vs_uncalibrated[method])):
        p = selection.paired_from_moments(*mom.astuple(), level)
        met[key].update(delta=p.delta, delta_ci=p.ci(), delta_ci_kind="normal (CLT) on per-row differences")
    met["ece"].update(delta_ci=None, delta_ci_kind="none: not paired on the aggregate path")
    return met


# ---- the verdict (calibflow.selection) -------------------------------------------------------------


def _auto_candidates(cands: list[str]) -> list[str]:
    """The methods ``auto`` may deploy: monotone calibrators (not the ranking baselines sigmoid/minmax,
    which are the uncalibrated scores under other names)."""
    return [m for m in cands if get_class(m).monotone and m not in RANKING_BASELINES]


def _decide(
    lay: Layout,
    params: Params,
    name: str,
    paired: dict[str, selection.Paired],
    ll_unc: float,
    rule: str,
) -> selection.Decision:
    """The rule's decision; a rule naming a method (or ``identity``) overrides only the method written."""
    texts = {m: _calibrator_text(lay, params, name, m) for m in paired}
    n_params = {m: selection.parameter_count(json.loads(t)) for m, t in texts.items()}
    decision = selection.decide(ll_unc, paired, n_params, float(params.select.margin))
    if rule == RULE_AUTO:
        return decision
    if rule != selection.IDENTITY and rule not in methods(params):
        raise StageError(
            f"params: select.rule {rule!r} is not a method in calibrate.methods "
            f"({', '.join(methods(params))}), {selection.IDENTITY!r} nor {RULE_AUTO!r}"
        )
    decision.method = rule
    decision.verdict = selection.KEEP if rule == selection.IDENTITY else selection.CALIBRATE
    return decision


def _calibrator_text(lay: Layout, params: Params, name: str, method: str) -> str:
    """A fitted calibrator's JSON; the identity is built here (it fits nothing) on the calibrators' input."""
    if method == selection.IDENTITY:
        cal_input = str(params.calibrate.input)
        probe = [0.25, 0.75] if cal_input == "probability" else [-1.0, 1.0]
        return make(selection.IDENTITY, input=cal_input).fit(probe, [0, 1]).to_json()
    path = lay.calibrated_method(method) / f"{name}.json"
    return require(path, "calibrator", f"calibrate@{method}").read_text()


def _paired_from_replicates(m: dict[str, Any], level: float) -> selection.Paired:
    """A ``Paired`` from a replicate interval (aggregate path); se read back from the interval's width."""
    lo, hi = m.get("delta_ci") or [float("nan"), float("nan")]
    from scipy.stats import norm

    se = (hi - lo) / (2 * float(norm.ppf(0.5 + level / 2)))
    return selection.Paired(float(m["delta"]), float(lo), float(hi), float(se), 0)


def _use_clt(ll: dict[str, Any], p: selection.Paired) -> None:
    """The card's log-loss interval is the one the verdict used; the bootstrap one stays beside it."""
    ll["delta_ci_bootstrap"] = ll.get("delta_ci")
    ll["delta_ci"] = p.ci()
    ll["delta_ci_kind"] = "normal (CLT) on per-row differences"


def _with_decision(
    card: dict[str, Any], decision: selection.Decision, rule: str, level: float
) -> dict[str, Any]:
    """Add the verdict, the runner-up and the rule's text to a card; the reason says it in one line."""
    card["verdict"] = decision.verdict
    card["selection"] = decision.to_dict()
    card["runner_up"] = decision.runner_up
    text = selection.rule_text(decision.margin_fraction, level)
    card["rule"] = text if rule == RULE_AUTO else f"named in select.rule: {rule} (the auto rule: {text})"
    card["reason"] = verdict_reason(card["method"], decision, card["metrics"]["log_loss"], level)
    return card


def verdict_reason(method: str, d: selection.Decision, ll: dict[str, Any], level: float) -> str:
    """One line a person can act on: keep or use, by how much, against which margin, and the runner-up."""
    pct = f"{100 * level:g}%"
    of = fmt_sig(d.log_loss_uncalibrated)
    margin = f"margin {fmt_sig(d.margin)} ({100 * d.margin_fraction:g}% of {of})"
    runner = ""
    if d.runner_up:
        c = d.comparisons.get(d.runner_up) or {}
        runner = (
            f"; runner-up {d.runner_up}: change {fmt_sig(c.get('delta'), signed=True)} "
            f"[{fmt_sig(c.get('low'), signed=True)}, {fmt_sig(c.get('high'), signed=True)}], "
            f"{d.runner_up_reason}"
        )
    if d.verdict == selection.KEEP:
        return f"Keep your scores: no calibrator lowers test log loss by more than the {margin}{runner}"
    ci = ll.get("delta_ci") or [float("nan"), float("nan")]
    return (
        f"Use {method}: test log loss {fmt_sig(ll['uncalibrated'])} -> {fmt_sig(ll['calibrated'])} "
        f"(change {fmt_sig(ll['delta'], signed=True)}, {pct} CI [{fmt_sig(ci[0], signed=True)}, "
        f"{fmt_sig(ci[1], signed=True)}]), more than the {margin}{runner}"
    )


def headline(cards: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``metrics/headline.json`` (``dvc metrics show``): per dataset or source the verdict, the method
    written, and what it rests on: the best calibrator's log-loss change with its paired interval against
    the margin it had to clear (the same numbers whether the verdict is keep or calibrate)."""
    out: dict[str, dict[str, Any]] = {}
    for name, card in cards.items():
        sel = card.get("selection") or {}
        best = sel.get("best")
        c = (sel.get("comparisons") or {}).get(best) or {}
        out[name] = {
            "verdict": card.get("verdict"),
            "method": card["method"],
            "log_loss_uncal": _round(card["metrics"]["log_loss"]["uncalibrated"]),
            "margin": _round(sel.get("margin")),
            "best": best,
            "delta_best": _round(c.get("delta")),
            "delta_best_low": _round(c.get("low")),
            "delta_best_high": _round(c.get("high")),
        }
    return out


def _round(v: Any) -> float | None:
    return None if v is None or not np.isfinite(v) else float(f"{float(v):.6g}")


def _card(
    lay: Layout,
    params: Params,
    name: str,
    is_source: bool,
    rule: str,
    method: str,
    met: dict[str, Any],
    ll: dict[str, float],
    segments: Any,
    how: str,
    text: str,
) -> dict[str, Any]:
    payload = json.loads(text)
    card = {
        "name": name,
        "kind": "source" if is_source else "dataset",
        "method": method,
        "params": payload.get("params", {}),
        "rule": rule,
        "reason": "",
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
    if payload.get("state", {}).get("targets_") == "prior":  # stated: not the plain maximum likelihood
        card["platt_targets"] = ("Platt fitted on Platt's prior-corrected targets ((N+ + 1)/(N+ + 2) and "
                                 "1/(N- + 2)): the calibration set is small or separable")
    return card


def with_score_kind(text: str, kind: str, column: str | None = None) -> str:
    """The calibrator's JSON with the scale of the user's score (and its column) recorded in it (what
    `calibflow apply` reads; the card alone could be separated from the file)."""
    from calibflow.sources import record_score_kind

    return record_score_kind(from_json(text), kind, column).to_json()


def _score_column(specs: dict[str, Any], name: str) -> str | None:
    """A score source's score column; none for a features source (its input is the trained model's margin)."""
    spec = specs.get(name)
    return spec.score if spec is not None and spec.kind == "score" else None


def models_dir(root: str | os.PathLike[str]) -> Path:
    return Layout(Path(root)).deployed


def run(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Select and write the calibrator and card of every dataset and source."""
    params = as_params(params)
    lay = Layout(Path(root))
    rule = str(params.select.rule)
    specs = _sources.specs(params, root)
    chosen = [(name, *select_one(lay, params, name, name in specs, rule)) for name in _sources.names(params)]
    chosen = [
        (name, with_score_kind(text, card["input"]["score_kind"], _score_column(specs, name)), card)
        for name, text, card in chosen
    ]
    for name, text, card in chosen:  # all computed first: one failure writes nothing
        with atomic_dir(models_dir(root) / name) as tmp:
            write_text(tmp / "calibrator.json", text if text.endswith("\n") else text + "\n")
            write_json(tmp / "card.json", card)
        log.info("selected for %s: %s", name, card["reason"])
    write_json(Path(root) / "metrics" / "headline.json", headline({name: card for name, _, card in chosen}))
    return {name: card for name, _, card in chosen}


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
