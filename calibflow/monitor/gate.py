"""One window's step (``process_window``): score the champion, judge it against its bands, run the
gate (promote a challenger, replace a champion found worse), and return the new state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from calibflow import calibrators as C
from calibflow.intervals import paired_mean_interval
from calibflow.monitor.alerts import _alerts, incidents
from calibflow.monitor.challenger import challenge
from calibflow.monitor.config import ALL, PATCH_METHOD, WATCHED, MonitorConfig
from calibflow.monitor.patch import (
    champion_patch,
    drifted_rows,
    patch_challenger,
    patch_significant,
    patch_targets,
    refresh_due,
)
from calibflow.monitor.scoring import COUNTS, per_row_loss, predict_frame, score, segment_masks, unjudged
from calibflow.monitor.state import MonitorState
from calibflow.monitor.thresholds import bands, out_of_band, practically_off_pooled
from calibflow.monitor.windows import Window, window_index


def process_window(
    state: MonitorState,
    window: Window,
    frame: pd.DataFrame,
    calib: pd.DataFrame,
    cfg: MonitorConfig,
    segments: tuple[str, ...] = (),
    fingerprint: str | None = None,
    scores: dict[str, dict[str, Any]] | None = None,
) -> MonitorState:
    """One window: champion scores + bands + alerts for every segment, then the gate. Returns a new state.

    ``frame``: the window's rows; ``calib``: the rows of the ``calib_windows`` periods before it (the
    challengers' trailing calibration window); both with the user's score on ``state.score_kind``.
    Refuses a window already in the state (no double count) or older than the newest one (``truncate``
    first: a late day is rescored from its window on). ``scores``: the champion's rows per segment name,
    already computed from the window's tables (``monitor.scale.score_frame``, for large windows).
    """
    if window.key in state.processed:
        raise ValueError(f"window {window.key} already processed for source {state.source!r}")
    if state.processed and window.key < state.processed[-1]:
        raise ValueError(f"window {window.key} is older than the last processed {state.processed[-1]}")
    # One generator per (seed, window): a resumed run draws exactly what an uninterrupted one would.
    rng = np.random.default_rng([cfg.seed, int(window.start.value // 10**9) & 0x7FFFFFFF])
    new = replace(
        state,
        history=list(state.history),
        gates=list(state.gates),
        alerts=list(state.alerts),
        notes=list(state.notes),
        versions=list(state.versions),
        processed=list(state.processed),
        windows=dict(state.windows),
    )
    champ = state.calibrator()
    if scores is None:
        y = frame["label"].to_numpy(float)
        p = predict_frame(champ, frame, state.score_kind) if len(frame) else np.empty(0)
        scores = {seg: score(y[mask], p[mask], cfg) for seg, mask in segment_masks(frame, segments)}
    overall_skipped = False
    masks = list(scores)
    earlier: dict[str, list[int]] = {}  # each segment's positives per earlier window, oldest first
    for r in state.history:
        earlier.setdefault(r["segment"], []).append(int(r["positives"]))
    for seg in masks:
        row = {"source": state.source, "window": window.key, "segment": seg, "version": state.champion}
        why = unjudged(scores[seg], earlier.get(seg, []), cfg)
        row.update({k: v for k, v in scores[seg].items() if k in COUNTS} if why else scores[seg])
        row["skipped"] = why
        if row["skipped"]:
            new.notes.append(f"{window.key} {seg}: {row['skipped']}")
            overall_skipped |= seg == ALL
        else:
            band = bands(new, seg, cfg, len(masks))
            row["band_ratio"], row["band_ece"] = band["calibration_ratio"], band["ece"]
            row["out"] = out_of_band(row, band, cfg, len(masks))
            if "calibration_ratio" not in row["out"] and practically_off_pooled(
                [*_recent(new, seg, state.champion, cfg.recovery - 1), row], cfg, len(masks)
            ):
                row["out"].insert(0, "calibration_ratio")
            found = _alerts(new, row, band, cfg)
            new.alerts.extend(found)
            row["alert"] = bool(found)
        new.history.append(row)
    # Drifted: out now, or inside an open incident; such a value never enters a reference.
    still_open = {(i["segment"], i["metric"]) for i in incidents(new, cfg) if i["closed"] is None}
    for row in new.history[len(state.history) :]:
        if not row["skipped"]:
            held = {m for m in WATCHED if (row["segment"], m) in still_open}
            row["drifted"] = sorted(set(row["out"]) | held)
    new.processed.append(window.key)
    new.windows[window.key] = {"fingerprint": fingerprint, "rows": int(len(frame))}
    ctx = WindowContext(state, window, frame, calib, cfg, rng, champ, segments)
    rec = _gate(new, ctx, overall_skipped)
    new.gates.append(rec)
    new.windows[window.key]["champion"] = new.champion
    return new


@dataclass(frozen=True)
class WindowContext:
    """What the gate reads about one window (``process_window``'s arguments and the champion): the state
    before the window, the window, its rows, the trailing calibration rows, the config, the window's
    generator and the champion in office. ``new``, the state being built, is passed beside it."""

    state: MonitorState
    window: Window
    frame: pd.DataFrame
    calib: pd.DataFrame
    cfg: MonitorConfig
    rng: np.random.Generator
    champ: C.BaseCalibrator
    segments: tuple[str, ...] = ()


def _gate(new: MonitorState, ctx: WindowContext, overall_skipped: bool) -> dict[str, Any]:
    """The gate's record for ``ctx.window``; a promotion is added to ``new`` (versions, champion)."""
    state, window, frame, calib, cfg = ctx.state, ctx.window, ctx.frame, ctx.calib, ctx.cfg
    rng, champ, segments = ctx.rng, ctx.champ, ctx.segments
    if overall_skipped:
        return {"window": window.key, "promoted": False, "reason": "window skipped: too few positives"}
    has_cols = all(c in frame.columns for c in segments)
    targets = patch_targets(new, cfg, segments) if has_cols else {}
    due = refresh_due(new, calib, cfg) if has_cols and segments else {}
    refresh = {seg: since for seg, since in due.items() if targets.get(seg, since) == since}
    targets = {**refresh, **targets}
    if targets and drifted_rows(calib, targets).mean() > 0.5:
        targets, refresh = {}, {}  # most of the source drifted: a global change, the global challengers'
    patch = patch_challenger(champ, calib, targets, cfg, state.score_kind) if targets else None
    if patch is not None and patch[0] is not None and state.pinned is None:
        sure = patch_significant(patch[1], cfg, refresh)
        if sure:
            if set(sure) != set(patch[1]["patched"]):
                patch = patch_challenger(champ, calib, {k: targets[k] for k in sure}, cfg, state.score_kind)
            rec = _patch_record(new, ctx, patch, refresh)
            if rec["promoted"]:
                return rec
    held_out = frame
    if targets:
        # Only segment levels drifted: the global challengers learn the undrifted rows (the whole trailing
        # window: those rows did not change); fitted on all rows, a global map spread the drifted level's
        # change over every segment (+3% on every unshifted country after a one-country shift).
        calib, since = calib[~drifted_rows(calib, targets)], None
        rest = ~drifted_rows(frame, targets)
        if (patch is None or patch[0] is None) and rest.any():
            # ... and, while no patch competes, they are judged on the undrifted rows too: on the whole
            # window a map that serves every country higher won on the drifted level's rows alone, and
            # replace_after promoted it (the study's seed 7: beta, every other country +1.5% for good).
            held_out = frame[rest]
    else:
        calib, since = _since_change(new, calib, cfg)
    n_calib_windows = int(np.unique(window_index(calib["time"], cfg)).size) if len(calib) else 0
    if n_calib_windows < cfg.min_calib_windows or calib["label"].sum() < cfg.min_positives:
        return {
            "window": window.key,
            "promoted": False,
            "reason": f"trailing calibration window too small ({n_calib_windows} period(s))",
        }
    rec, winner = challenge(
        champ, calib, held_out, cfg, rng, state.score_kind, state.pinned, segments,
        _worse_streak(new, state, sorted(targets) if len(held_out) < len(frame) else []),
        patch,
    )
    if patch is not None and patch[0] is not None and rec.get("best") == PATCH_METHOD:
        rec["reason"] += (
            f" (a patch of {', '.join(patch[1]['patched'])} only: every other row keeps the champion's"
            " prediction)"
        )
    rec["window"] = window.key
    rec["champion_version"] = state.champion
    if len(held_out) < len(frame):
        rec["judged_rows"] = int(len(held_out))
        rec["judged_outside"] = sorted(targets)
        rec["reason"] += (
            f" (judged on the {len(held_out)} of {len(frame)} window rows outside the drifted levels)"
        )
    if since is not None:
        rec["fitted_since"] = since
        rec["reason"] += f" (challengers fitted on the windows since the incident of {since[:10]})"
    if winner is not None:
        patched = patch[1]["patched"] if patch is not None and winner is patch[0] else None
        _promote(new, state, window, calib, rec, winner, patched)
    return rec


def _promote(
    new: MonitorState,
    state: MonitorState,
    window: Window,
    calib: pd.DataFrame,
    rec: dict[str, Any],
    winner: C.BaseCalibrator,
    patched: dict[str, dict[str, Any]] | None = None,
) -> None:
    """``winner`` becomes the champion (a new version); a patch records its levels (since, positives,
    periods), with the levels the champion had patched before, for ``refresh_due``."""
    t = pd.to_datetime(calib["time"])
    version = len(new.versions) + 1
    entry = {
        "version": version,
        "method": winner.name,
        "calibrator": winner.to_json(),
        "fitted_on": [t.min().isoformat(), t.max().isoformat()],
        "fitted_rows": int(len(calib)),
        "judged_on": [window.start.isoformat(), window.end.isoformat()],
        "judged": {k: rec[k] for k in ("metric", "champion", "delta", "delta_ci", "ci_level")},
        "promoted_after": window.key,
        "replaces": state.champion,
    }
    if patched:
        keep = champion_patch(state)
        keep.update({s: {k: fit[k] for k in ("since", "positives", "periods")} for s, fit in patched.items()})
        entry["patch"] = keep
    new.versions.append(entry)
    new.champion = version
    rec["new_version"] = version


def _patch_record(
    new: MonitorState,
    ctx: WindowContext,
    patch: tuple[C.BaseCalibrator | None, dict[str, Any]],
    refresh: dict[str, str],
) -> dict[str, Any]:
    """The gate's record when a patch is promoted on its levels' own evidence (``patch_significant``):
    a likelihood-ratio test on the level's rows since its incident, or a due refresh. The held-out window
    is still scored (recorded: delta and its interval), and a patch it finds worse (interval below 0) is
    not promoted: the gate then runs as usual."""
    state, window, frame, calib, cfg, rng, champ = (
        ctx.state, ctx.window, ctx.frame, ctx.calib, ctx.cfg, ctx.rng, ctx.champ
    )
    cal, prec = patch
    assert cal is not None
    metric = cfg.selection_metric
    y = frame["label"].to_numpy(float)
    champ_loss = per_row_loss(y, predict_frame(champ, frame, state.score_kind), metric)
    new_loss = per_row_loss(y, predict_frame(cal, frame, state.score_kind), metric)
    delta, lo, hi = paired_mean_interval(champ_loss - new_loss, cfg.n_bootstrap, cfg.ci_level, rng)
    parts = []
    for seg, fit in sorted(prec["patched"].items()):
        if seg in refresh:
            was = champion_patch(state)[seg]
            parts.append(f"{seg} refreshed on {fit['positives']:.0f} positives since "
                         f"{str(fit['since'])[:10]} ({fit['periods']} periods; was "
                         f"{float(was['positives']):.0f}, {was['periods']})")
        else:
            parts.append(f"{seg} on {fit['positives']:.0f} positives since {str(fit['since'])[:10]}: "
                         f"likelihood ratio {fit['lr']:.1f}, p = {fit['p']:.2g} (2 df)")
    rec: dict[str, Any] = {
        "window": window.key, "metric": metric, "champion": float(champ_loss.mean()),
        "challengers": {PATCH_METHOD: {"value": float(new_loss.mean()), "monotone": True, "segmented": True,
                                       "patch": prec}},
        "best": PATCH_METHOD, "delta": delta, "delta_ci": [lo, hi], "ci_level": cfg.ci_level,
        "champion_version": state.champion, "patch_rule": "refresh" if refresh else "likelihood_ratio",
    }
    if hi < 0:
        rec.update(promoted=False, reason=f"patch of {', '.join(parts)}: worse on the held-out window")
        return rec
    rec.update(promoted=True, reason=(
        f"patch of {'; '.join(parts)} (every other row keeps the champion's prediction; held-out "
        f"{metric} better by {delta:.5f}, {cfg.ci_level:.2f} interval [{lo:.5f}, {hi:.5f}])"))
    _promote(new, state, window, calib, rec, cal, prec["patched"])
    return rec


def _since_change(
    new: MonitorState, calib: pd.DataFrame, cfg: MonitorConfig
) -> tuple[pd.DataFrame, str | None]:
    """While drift incidents are open, the challengers are fitted on the windows since the newest one
    that has half the trailing window's periods behind it (at least ``min_calib_windows``, with
    ``min_positives``): the trailing window's older days describe the world before the change, and a map
    fitted half on them serves half the bias; fewer windows (three days) fitted per-segment maps so noisily
    that unshifted countries moved by 7-10%. The newest change first: an older incident still open (a
    small segment's) says less about today's world."""
    opened = sorted(
        {i["opened"] for i in incidents(new, cfg) if i["closed"] is None and i["metric"] in WATCHED},
        reverse=True,
    )
    if not opened or not len(calib):
        return calib, None
    need = max(cfg.min_calib_windows, cfg.calib_windows // 2)
    times = pd.to_datetime(calib["time"])
    for since in opened:
        recent = calib[times >= pd.Timestamp(since)]
        n = int(np.unique(window_index(recent["time"], cfg)).size) if len(recent) else 0
        if n >= need and recent["label"].sum() >= cfg.min_positives and len(recent) < len(calib):
            return recent, since
    return calib, None


def _recent(state: MonitorState, segment: str, version: int, n: int) -> list[dict[str, Any]]:
    """The last ``n`` scored windows of ``segment``, back to the first scored by another champion (a
    pooled test never mixes two maps' windows) or with the ratio already out (the pooled test finds a
    change one window misses; pooled with an out window it held a recovered segment out a day longer)."""
    out: list[dict[str, Any]] = []
    for r in reversed(state.history):
        if len(out) >= n:
            break
        if r["segment"] != segment or r.get("skipped"):
            continue
        if r["version"] != version or "calibration_ratio" in r.get("out", []):
            break
        out.append(r)
    return out[::-1]


def _worse_streak(
    new: MonitorState, state: MonitorState, outside: list[str] | None = None
) -> list[tuple[float, float]]:
    """(gain, se) of the consecutive latest gates that found the champion in office worse on average,
    judged on the same rows as this one: outside the same drifted levels (``outside``, the record's
    ``judged_outside``; none: the whole window). Why: the days before a level's incident opened were
    judged on every row, the drifted level's too, where any map serving higher wins; pooled with the
    first windows judged without it they replaced the champion by a global map (every other country
    +1.5%); so did a window judged without a small country's false incident but with DE's drifted rows."""
    out: list[tuple[float, float]] = []
    for g in reversed(new.gates):
        if not g.get("champion_worse") or g.get("champion_version") != state.champion or "delta_se" not in g:
            break
        if list(g.get("judged_outside", [])) != list(outside or []):
            break
        out.append((float(g["delta"]), float(g["delta_se"])))
    return out[::-1]
