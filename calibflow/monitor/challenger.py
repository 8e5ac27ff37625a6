"""Challengers: fitted on the trailing calibration window, scored beside the champion on the newest
held-out window, and the best one compared with it by a paired bootstrap (the gate's evidence).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import stats

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow import sources as S
from calibflow.intervals import paired_mean_interval
from calibflow.monitor.config import CHANGE_TOL, PATCH_METHOD, MonitorConfig, _check
from calibflow.monitor.scoring import per_row_loss, predict_frame


def keeps_ranking(cal: C.BaseCalibrator, scores: NDArray[np.float64], score_kind: str) -> bool:
    """Monotone: the class says so and predictions on the sorted user scores never decrease."""
    return _monotone_on_sorted(cal, np.sort(scores), score_kind)


def _monotone_on_sorted(cal: C.BaseCalibrator, ordered: NDArray[np.float64], score_kind: str) -> bool:
    """``keeps_ranking`` on scores already sorted (the gate sorts its rows once for every challenger)."""
    if not getattr(type(cal), "monotone", False):
        return False
    p = S.calibrate_scores(cal, ordered, score_kind)
    return bool(np.all(np.diff(p) >= -1e-12))


def keeps_ranking_within(
    cal: C.BaseCalibrator, frame: pd.DataFrame, score_kind: str, p: NDArray[np.float64] | None = None
) -> bool:
    """A per-segment map keeps the ranking inside every cell of its segment columns (across cells the
    order may change, as select's segmented calibrators do): predictions on each cell's sorted scores
    never decrease. ``p``: the map's predictions on ``frame``'s rows when already computed.

    The rows are not reordered (a copy of the frame was the 1e7-row morning's memory peak): the
    predictions are, each row's prediction being its own."""
    names = [str(c) for c in getattr(cal, "segment_names_", [])]
    if not len(frame):
        return True
    cells = _cells(frame, names)
    order = np.lexsort((frame["score"].to_numpy(float), cells))
    if p is None:
        p = predict_frame(cal, frame, score_kind)
    cells = cells[order]
    same = cells[1:] == cells[:-1]
    return bool(np.all(np.diff(np.asarray(p)[order])[same] >= -1e-12))


def _cells(frame: pd.DataFrame, names: list[str]) -> NDArray[np.int64]:
    """One code per combination of the ``names`` columns' values (a NULL is a value of its own): the
    cells of ``groupby(names, dropna=False).ngroup()``, numbered in another order."""
    if len(names) == 1:
        return pd.factorize(frame[names[0]], use_na_sentinel=False)[0].astype(np.int64, copy=False)
    code = np.zeros(len(frame), np.int64)
    for c in names:
        k, levels = pd.factorize(frame[c], use_na_sentinel=False)
        code = pd.factorize(code * max(len(levels), 1) + k)[0].astype(np.int64)  # < rows: no overflow
    return code


def fit_challenger(
    method: str,
    input_kind: str,
    scores: NDArray[np.float64],
    y: NDArray[np.float64],
    score_kind: str,
    segments: dict[str, NDArray[Any]] | None = None,
) -> C.BaseCalibrator:
    """``method`` fitted on the user's scores converted to ``input_kind``, recording ``score_kind``;
    a segmented method also gets the ``segments`` columns."""
    x = S.calibrator_input(scores, score_kind, input_kind)
    cal = C.make(method, input=input_kind)
    cal = cal.fit(x, y, segments=segments) if segments is not None else cal.fit(x, y)
    return S.record_score_kind(cal, score_kind)


def _candidates(cfg: MonitorConfig, segments: tuple[str, ...], frame: pd.DataFrame) -> list[str]:
    """Global methods, plus the segmented ones when the source declares segments that the rows carry."""
    seg = bool(segments) and all(c in frame.columns for c in segments)
    return [*cfg.methods, *(cfg.segmented_methods if seg else ())]


def challenge(
    champion: C.BaseCalibrator,
    calib: pd.DataFrame,
    held_out: pd.DataFrame,
    cfg: MonitorConfig,
    rng: np.random.Generator,
    score_kind: str | None = None,
    pinned: int | None = None,
    segments: tuple[str, ...] = (),
    worse_before: int | list[tuple[float, float]] = 0,
    patch: tuple[C.BaseCalibrator | None, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], C.BaseCalibrator | None]:
    """Fit the challengers on ``calib``, compare the best with the champion on ``held_out``.

    ``score`` columns are the user's scores of ``score_kind`` (default: the champion's recorded kind).
    With ``segments`` (the source's declared columns) the segmented methods compete too, under the same
    paired test, Bonferroni level and ``min_gain``; their ranking check is within each segment cell.
    ``min_gain`` is a share of the champion's loss on the rows the challenger changes (its logit moves by
    more than ``CHANGE_TOL``), so a one-segment fix is judged on that segment, not diluted by the whole
    source. ``worse_before``: the (gain, standard error) of the consecutive earlier gates (same champion)
    whose best monotone challenger was better on average (an int: that many windows like this one). When
    this window makes ``replace_after`` in a row and the pooled gain's interval over them (same level)
    excludes 0, the champion is replaced whatever ``min_gain`` says: a small but sure bias is served every
    day, and one segment's 160 positives a day rarely exclude 0 on one window alone.
    ``patch``: while segment levels have open drift incidents (``patch_targets``), the segmented methods
    do not refit every level: ``PATCH_METHOD`` competes as this ``patch_challenger`` result (the champion
    with only those levels refitted; none yet while it waits for data) and the others sit out.
    Returns the gate record (every challenger's metric, the best, the paired interval, the decision and
    its reason) and the fitted best challenger when it is to be promoted, else None.
    """
    kind = score_kind or getattr(champion, "score_kind_", None)
    _check(kind is not None, "the champion records no score_kind and none was given")
    ys, ss = calib["label"].to_numpy(float), calib["score"].to_numpy(float)
    yh, sh = held_out["label"].to_numpy(float), held_out["score"].to_numpy(float)
    metric = cfg.selection_metric
    p_champ = predict_frame(champion, held_out, kind)
    champ_loss = per_row_loss(yh, p_champ, metric)
    rec: dict[str, Any] = {"metric": metric, "champion": float(champ_loss.mean()), "challengers": {}}
    fitted: dict[str, C.BaseCalibrator] = {}
    # Only the best challenger so far keeps its per-row losses and predictions (``min``'s pick: the first
    # of the lowest): at a 1e6-row gate sample each method's pair was 16 MB held to the end.
    best: str | None = None
    best_loss = best_p = np.empty(0)
    ordered: NDArray[np.float64] | None = None  # both windows' scores sorted, once for every challenger
    for m in _candidates(cfg, segments, calib):
        per_seg = "segments" in C.get_class(m).needs
        cols = {c: calib[c].to_numpy(dtype=object) for c in segments} if per_seg else None
        if per_seg and patch is not None:
            if m != PATCH_METHOD or patch[0] is None:
                why = "waiting for data on the drifted levels" if m == PATCH_METHOD else "a patch competes"
                rec["challengers"][m] = {"skipped": why, "patch": patch[1]}
                continue
            cal = patch[0]
        else:
            try:
                cal = fit_challenger(m, str(champion.input_kind), ss, ys, kind, cols)
            except ValueError as exc:  # e.g. a method that cannot fit this window; recorded, never silent
                rec["challengers"][m] = {"error": str(exc)}
                continue
        p_new = predict_frame(cal, held_out, kind)
        loss = per_row_loss(yh, p_new, metric)
        if per_seg:
            both = pd.concat([calib[["score", *segments]], held_out[["score", *segments]]], ignore_index=True)
            p_both = np.concatenate([predict_frame(cal, calib, kind), p_new])  # held_out's: p_new
            mono = keeps_ranking_within(cal, both, kind, p_both)
            del both, p_both
        else:
            if ordered is None:
                ordered = np.sort(np.concatenate([ss, sh]))
            mono = _monotone_on_sorted(cal, ordered, kind)
        rec["challengers"][m] = {"value": float(loss.mean()), "monotone": mono, "segmented": per_seg}
        if per_seg and patch is not None:
            rec["challengers"][m]["patch"] = patch[1]
        fitted[m] = cal
        if best is None or rec["challengers"][m]["value"] < rec["challengers"][best]["value"]:
            best, best_loss, best_p = m, loss, p_new
        del loss, p_new
    if not fitted or best is None:
        rec.update(best=None, promoted=False, reason="no challenger could be fitted")
        return rec, None
    level = 1 - (1 - cfg.ci_level) / len(fitted)  # Bonferroni: the best of m is picked on this window
    delta, lo, hi = paired_mean_interval(champ_loss - best_loss, cfg.n_bootstrap, level, rng)
    mono = rec["challengers"][best]["monotone"]
    changed = _changed_rows(p_champ, best_p)
    need = cfg.min_gain * float(champ_loss[changed].sum()) / max(champ_loss.size, 1)
    z = float(stats.norm.isf((1 - level) / 2))
    se = max((hi - lo) / (2 * z), 1e-12)
    worse = bool(delta > 0 and mono)  # the champion is worse on average on this window
    prev = worse_before if isinstance(worse_before, list) else [(delta, se)] * int(worse_before)
    run = [*prev, (delta, se)] if worse else []
    pooled = sum(d for d, _ in run)
    pooled_lo = pooled - z * math.sqrt(sum(e * e for _, e in run)) if run else 0.0
    streak = len(run)
    by_gain = bool(lo > 0 and mono) and delta >= need and pinned is None
    by_streak = worse and streak >= cfg.replace_after and pooled_lo > 0 and pinned is None
    promoted = by_gain or by_streak
    if by_gain:
        reason = f"{best} better by {delta:.5f} {metric}, {level:.3f} interval [{lo:.5f}, {hi:.5f}] > 0"
    elif by_streak:
        reason = (
            f"{best} better by {delta:.5f} {metric} ({level:.3f} interval [{lo:.5f}, {hi:.5f}]): the "
            f"champion was found worse on {streak} consecutive windows (replace_after={cfg.replace_after}; "
            f"pooled gain {pooled:.5f}, interval above 0), so it is replaced although the gain is under "
            f"min_gain ({need:.5f}) or one window's interval includes 0"
        )
    elif not mono:
        reason = f"{best} would reverse the ranking (not monotone): kept the champion"
    elif lo <= 0:
        reason = f"{best} not better: {level:.3f} interval [{lo:.5f}, {hi:.5f}] includes or is below 0"
    elif delta < need:
        reason = f"{best} better by {delta:.5f} only, under min_gain ({need:.5f}): kept the champion"
    else:
        reason = f"{best} better by {delta:.5f}, but a rollback pins v{pinned}: kept the champion"
    rec.update(best=best, delta=delta, delta_ci=[lo, hi], ci_level=level, promoted=promoted, reason=reason)
    rec.update(min_gain_needed=need, changed_share=float(changed.mean()) if changed.size else 0.0)
    rec.update(champion_worse=worse, worse_streak=streak, delta_se=se)
    return rec, (fitted[best] if promoted else None)


def _changed_rows(p_old: NDArray[np.float64], p_new: NDArray[np.float64]) -> NDArray[np.bool_]:
    """Rows whose prediction a challenger moves by more than ``CHANGE_TOL`` on the logit scale."""
    a, b = M.clip_probability(p_old), M.clip_probability(p_new)
    moved = np.abs((np.log(b) - np.log1p(-b)) - (np.log(a) - np.log1p(-a)))
    return moved > CHANGE_TOL
