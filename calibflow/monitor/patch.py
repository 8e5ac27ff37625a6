"""A segment's fix where the change is: while only segment levels have open drift incidents, the
champion with just those levels refitted on their rows since the incident (a challenger like the others).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import special, stats

from calibflow import calibrators as C
from calibflow import sources as S
from calibflow.monitor.alerts import incidents
from calibflow.monitor.challenger import fit_challenger
from calibflow.monitor.config import ALL, PATCH_METHOD, WATCHED, MonitorConfig
from calibflow.monitor.state import MonitorState
from calibflow.monitor.windows import window_index
from calibflow.segments import aligned, as_levels, level_codes


def patch_targets(state: MonitorState, cfg: MonitorConfig, segments: tuple[str, ...]) -> dict[str, str]:
    """``{"country=DE": opened}``: the declared segment levels with an open drift incident, and the window
    the earliest of them opened. Empty while the whole source (``all``) has one open: a global change is
    the global challengers' and the full segmented refit's to fix, not a patch's."""
    if not segments:
        return {}
    found = [i for i in incidents(state, cfg) if i["closed"] is None and i["metric"] in WATCHED]
    if any(i["segment"] == ALL for i in found):
        return {}
    out: dict[str, str] = {}
    for i in found:
        col, _, level = str(i["segment"]).partition("=")
        if col in segments and level:
            out[i["segment"]] = min(out.get(i["segment"], i["opened"]), i["opened"])
    return out


def drifted_rows(frame: pd.DataFrame, targets: dict[str, str]) -> NDArray[np.bool_]:
    """Rows of the drifted segment levels (``patch_targets``), whatever their time."""
    out = np.zeros(len(frame), dtype=bool)
    for seg in targets:
        col, _, label = seg.partition("=")
        if col in frame.columns:
            out |= frame[col].astype(str).to_numpy() == label
    return out


def _as_pooled(champion: C.BaseCalibrator) -> Any | None:
    """The champion as a partial-pooling map with the same predictions (a copy), or None when its form has
    no such writing: Platt ``expit(coef * z + intercept)`` is the pooled map with no levels, ``a =
    intercept``, ``b = log coef``, ``c = 0``."""
    if champion.name == PATCH_METHOD:
        return C.from_json(champion.to_json())
    if champion.name != "platt" or not float(getattr(champion, "coef_", 0.0)) > 0:
        return None
    pp = C.make(PATCH_METHOD, input=str(champion.input_kind))
    pp.global_ = np.array([float(champion.intercept_), math.log(float(champion.coef_)), 0.0])
    pp.segment_names_, pp.vocab_, pp.blocks_, pp.pair_tests_ = [], [], [], []
    pp.n_sweeps_, pp.converged_, pp.fitted_ = 0, True, True
    kind = getattr(champion, "score_kind_", None)
    return S.record_score_kind(pp, kind) if kind else pp


def _level_index(pp: Any, col: str, level: str) -> tuple[int, int] | None:
    """(block index, level index) of ``col``'s ``level`` in the pooled map, added with zero terms when
    new; None where a pair block would need re-keying (the column's vocabulary is then fixed)."""
    if col not in pp.segment_names_:
        pp.segment_names_.append(col)
        pp.vocab_.append([])
    k = pp.segment_names_.index(col)
    blocks = [i for i, b in enumerate(pp.blocks_) if [int(c) for c in b["columns"]] == [k]]
    if not blocks:
        pp.blocks_.append({"columns": [k], "keys": None, "offset": np.zeros(len(pp.vocab_[k])),
                           "log_slope": np.zeros(len(pp.vocab_[k])), "tau2": 0.0, "sigma2": 0.0})
        blocks = [len(pp.blocks_) - 1]
    b = pp.blocks_[blocks[0]]
    if level not in pp.vocab_[k]:
        if any(k in [int(c) for c in x["columns"]] and len(x["columns"]) == 2 for x in pp.blocks_):
            return None
        at = int(np.searchsorted(np.array(pp.vocab_[k], dtype=object), level)) if pp.vocab_[k] else 0
        pp.vocab_[k].insert(at, level)
        b["offset"] = np.insert(np.asarray(b["offset"], dtype=np.float64), at, 0.0)
        b["log_slope"] = np.insert(np.asarray(b["log_slope"], dtype=np.float64), at, 0.0)
    return blocks[0], pp.vocab_[k].index(level)


def _fit_level(pp: Any, rows: pd.DataFrame, score_kind: str, at: tuple[int, int]) -> dict[str, float]:
    """Refit one level's offset and log-slope on ``rows`` (maximum likelihood, Fisher scoring; a unit
    normal prior on the log-slope keeps a few rows' fit finite), every other term of the map held fixed."""
    blk, i = pp.blocks_[at[0]], at[1]
    off, ls = np.asarray(blk["offset"], dtype=np.float64), np.asarray(blk["log_slope"], dtype=np.float64)
    old = (float(off[i]), float(ls[i]))
    off[i], ls[i] = 0.0, 0.0
    blk["offset"], blk["log_slope"] = off, ls
    segs = {c: rows[c].to_numpy(dtype=object) for c in pp.segment_names_}
    x = S.calibrator_input(rows["score"].to_numpy(float), score_kind, str(pp.input))
    z = pp._convert(np.asarray(x, dtype=np.float64))
    rest_off, rest_ls = _level_terms(pp, segs, z.size)  # this level's terms are 0 now: the rest of the map
    a, b, c = (float(v) for v in pp.global_)
    base, u = a + rest_off, np.exp(b + rest_ls) * (z - c)
    y = rows["label"].to_numpy(float)
    ll_old = _loglik(y, base + float(old[0]) + math.exp(float(old[1])) * u)  # the champion on these rows
    d = g = 0.0
    for _ in range(100):
        v = math.exp(g) * u
        p = special.expit(base + d + v)
        r, w = y - p, p * (1 - p)
        grad = np.array([r.sum(), r @ v - g])
        h = np.array([[w.sum(), w @ v], [w @ v, w @ (v * v) + 1.0]]) + 1e-9 * np.eye(2)
        step = np.clip(np.linalg.solve(h, grad), -2.0, 2.0)
        d, g = d + float(step[0]), g + float(step[1])
        if float(np.abs(step).max()) < 1e-8:
            break
    off[i], ls[i] = d, g
    lr = max(2.0 * (_loglik(y, base + d + math.exp(g) * u) - ll_old), 0.0)
    return {"offset": d, "log_slope": g, "positives": float(y.sum()), "rows": int(y.size),
            "lr": lr, "p": float(stats.chi2.sf(lr, 2))}


def _loglik(y: NDArray[np.float64], logit: NDArray[np.float64]) -> float:
    """Bernoulli log-likelihood of ``y`` at these logits (stable for large |logit|)."""
    return float(-(y * np.logaddexp(0.0, -logit) + (1 - y) * np.logaddexp(0.0, logit)).sum())


def _level_terms(pp: Any, segs: dict[str, Any], n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per row, the sums of the pooled map's level offsets and log-slopes (its ``predict``, in parts)."""
    cols = aligned(segs, list(pp.segment_names_), n)
    codes = [level_codes(c, v) for c, v in zip(cols, pp.vocab_, strict=True)]
    off, ls = np.zeros(n), np.zeros(n)
    for blk in pp.blocks_:
        idx = pp._block_codes(blk, codes)
        seen = idx >= 0
        off[seen] += np.asarray(blk["offset"], dtype=np.float64)[idx[seen]]
        ls[seen] += np.asarray(blk["log_slope"], dtype=np.float64)[idx[seen]]
    return off, ls


def patch_challenger(
    champion: C.BaseCalibrator,
    calib: pd.DataFrame,
    targets: dict[str, str],
    cfg: MonitorConfig,
    score_kind: str,
) -> tuple[C.BaseCalibrator | None, dict[str, Any]]:
    """The champion with only the drifted levels (``patch_targets``) refitted, each on its own rows since
    its incident opened; every other row keeps the champion's prediction exactly.

    Why: a full segmented refit re-estimates every level from the few windows since the change, and its
    noise (and a between-level variance inflated by the one shifted level) moved unshifted countries by
    6-10%. A level is patched once it has ``min_calib_windows`` periods and ``min_positives`` positives
    since its incident: only its own rows move, so it need not wait for the half trailing window a full
    refit needs (waiting 7 windows served DE 35% low for the first 1-4 of the study's last 15 days); the
    first estimate is refined as its rows grow (``refresh_due``). Each patched level records its
    likelihood-ratio test against the champion on the same rows (``lr``, ``p``: 2 df). Returns the
    patch (None when no level is ready or the champion is not Platt or partial pooling) and a record."""
    pp = _as_pooled(champion)
    rec: dict[str, Any] = {"targets": dict(targets), "patched": {}, "waiting": {}}
    if pp is None:  # e.g. an isotonic champion: the patch sits on a Platt map of the undrifted rows
        rest = calib[~drifted_rows(calib, targets)]
        if rest["label"].sum() < cfg.min_positives:
            rec["reason"] = "too few undrifted rows for a Platt map under the patch"
            return None, rec
        platt = fit_challenger("platt", str(champion.input_kind), rest["score"].to_numpy(float),
                               rest["label"].to_numpy(float), score_kind)
        pp = _as_pooled(platt)
        rec["base"] = f"platt on the undrifted rows (the champion, {champion.name}, has no per-level form)"
    if pp is None:
        rec["reason"] = "no increasing Platt map on the undrifted rows to patch"
        return None, rec
    need = cfg.min_calib_windows
    times = pd.to_datetime(calib["time"])
    for seg, since in sorted(targets.items()):
        col, _, label = seg.partition("=")
        m = (calib[col].astype(str).to_numpy() == label) & (times >= pd.Timestamp(since)).to_numpy()
        rows = calib[m]
        n = int(np.unique(window_index(rows["time"], cfg)).size) if len(rows) else 0
        if n < need or rows["label"].sum() < cfg.min_positives:
            rec["waiting"][seg] = f"{n} period(s), {int(rows['label'].sum())} positives since {since[:10]}"
            continue
        at = _level_index(pp, col, str(as_levels(rows[col].to_numpy(dtype=object))[0]))
        if at is None:
            rec["waiting"][seg] = "a pair block fixes the column's levels"
            continue
        rec["patched"][seg] = {**_fit_level(pp, rows, score_kind, at), "since": since, "periods": n}
    if not rec["patched"]:
        return None, rec
    return S.record_score_kind(pp, score_kind), rec


#: A patched level is refitted (``refresh_due``) once its rows since the incident span this many times the
#: periods it was fitted on (or the whole trailing window): the estimate's variance about halves each time.
REFRESH_GROWTH = 2.0

def patch_significant(rec: dict[str, Any], cfg: MonitorConfig, refresh: dict[str, str]) -> list[str]:
    """The patched levels of ``rec`` (``patch_challenger``'s record) that the gate may promote without the
    held-out comparison: a new level whose likelihood-ratio test against the champion on its rows since
    the incident has p under the band's two-sided tail (``band_k`` sd: 0.0027 at 3), and a due refresh
    (``refresh``) of a level the champion patched. Why: the held-out window holds one day of the level
    (130 positives); its paired interval over the whole window included 0 on days when the patch halved
    the level's loss, so a 35% bias was served two more days, while the LR test on the 3 days since the
    incident (400 positives) is 6-7 sd."""
    alpha = 2 * float(stats.norm.sf(cfg.band_k))
    return sorted(
        seg for seg, fit in rec.get("patched", {}).items()
        if seg in refresh or float(fit.get("p", 1.0)) < alpha
    )


def champion_patch(state: MonitorState) -> dict[str, dict[str, Any]]:
    """The champion's patched levels (its version's ``patch`` record): level -> since, positives, periods."""
    v = state.versions[state.champion - 1] if 0 < state.champion <= len(state.versions) else {}
    return dict(v.get("patch") or {})


def refresh_due(state: MonitorState, calib: pd.DataFrame, cfg: MonitorConfig) -> dict[str, str]:
    """``{level: since}``: the champion's patched levels whose rows since their incident in ``calib`` now
    span ``REFRESH_GROWTH`` times the periods the patch was fitted on, or the whole trailing window
    (``calib_windows`` periods), while it was fitted on fewer. The same model refitted on a superset of its
    rows (the newest days added) is a better estimate of the same level: it is promoted without a held-out
    test, which cannot resolve a 5% error on one day of one level. Stops once the patch saw a whole
    trailing window.

    Why periods, not positives: the rule was "twice the positives", and the trailing window caps the rows
    since the incident at ``calib_windows`` periods, so a patch fitted on 7 periods (about half the window)
    waited for twice its positives that 14 periods hold only half the time: it was served for good on
    those 7 days' labels (the study's seed 7: DE 6.6% high from day 16 to the end; seed 108: 8%). A count of
    periods is also blind to the labels: a refit triggered by a count of positives lands on the days the
    labels ran high."""
    out: dict[str, str] = {}
    if not len(calib) or any(
        i["segment"] == ALL and i["closed"] is None and i["metric"] in WATCHED for i in incidents(state, cfg)
    ):
        return out  # the whole source is off: the global challengers' to fix
    times = pd.to_datetime(calib["time"])
    for seg, rec in champion_patch(state).items():
        col, _, label = seg.partition("=")
        fitted = int(rec.get("periods", 0))
        if col not in calib.columns or fitted >= cfg.calib_windows:
            continue
        m = (calib[col].astype(str).to_numpy() == label) & (times >= pd.Timestamp(rec["since"])).to_numpy()
        now = int(np.unique(window_index(calib["time"][m], cfg)).size) if m.any() else 0
        if now > fitted and now >= min(REFRESH_GROWTH * fitted, cfg.calib_windows):
            out[seg] = str(rec["since"])
    return out
