"""A segment's fix where the change is (issue 38): while only segment levels have open drift incidents,
the segmented challenger is the champion with those levels refitted (``monitoring.patch_challenger``),
every other row keeping the champion's prediction exactly; the global challengers learn the undrifted
rows only. Known truth: one country's logit +0.5, the others unchanged."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibflow import calibrators as C
from calibflow import monitor as mon
from calibflow import sources as S
from calibflow.experiments import monitor_scenarios as X
from calibflow.monitor.patch import patch_significant, refresh_due

CFG = mon.MonitorConfig(n_bootstrap=50, calib_windows=6, min_calib_windows=3)  # 3 windows make a patch


@pytest.fixture(scope="module")
def frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Warm-up days (the world before) and four days after DE's logit rose by 0.5."""
    def days(r: range) -> pd.DataFrame:
        return pd.concat([X.day_frame("one_country", d, 20_000, 1, 10) for d in r], ignore_index=True)

    return days(range(3)), days(range(10, 14))


@pytest.fixture(scope="module")
def champion(frames):
    before, _ = frames
    cal = C.make("platt", input="probability").fit(before["score"].to_numpy(), before["label"].to_numpy())
    return S.record_score_kind(cal, "probability")


def _ratio(p: np.ndarray, frame: pd.DataFrame, mask: np.ndarray) -> float:
    return float(p[mask].sum() / frame["p_true"].to_numpy()[mask].sum())


def test_the_patch_changes_only_the_drifted_level_and_fixes_it(frames, champion):
    _, after = frames
    since = str(after["time"].min().floor("D").isoformat())
    patch, rec = mon.patch_challenger(champion, after, {"country=DE": since}, CFG, "probability")
    assert patch is not None and list(rec["patched"]) == ["country=DE"], rec
    old = mon.predict_frame(champion, after, "probability")
    new = mon.predict_frame(patch, after, "probability")
    de = after["country"].to_numpy() == "DE"
    assert np.array_equal(new[~de], old[~de])  # every other row: the champion's prediction, bit for bit
    assert _ratio(old, after, de) < 0.75  # the control: the champion serves DE ~35% low
    assert abs(_ratio(new, after, de) - 1) < 0.05
    again = C.from_json(patch.to_json())  # served from its JSON, as the monitor saves versions
    assert np.array_equal(mon.predict_frame(again, after, "probability"), new)
    assert mon.keeps_ranking_within(patch, after, "probability")


def test_a_patch_on_a_patch_keeps_the_first_level_and_adds_columns(frames, champion):
    _, after = frames
    since = str(after["time"].min().floor("D").isoformat())
    first, _ = mon.patch_challenger(champion, after, {"country=DE": since}, CFG, "probability")
    second, rec = mon.patch_challenger(first, after, {"device=tablet": since}, CFG, "probability")
    assert list(rec["patched"]) == ["device=tablet"]
    p1 = mon.predict_frame(first, after, "probability")
    p2 = mon.predict_frame(second, after, "probability")
    tablet = after["device"].to_numpy() == "tablet"
    assert np.array_equal(p2[~tablet], p1[~tablet])
    assert second.segment_names_ == ["country", "device"]


def test_a_level_waits_for_its_windows_and_an_isotonic_champion_gets_a_platt_base(frames):
    before, after = frames
    since = str(after["time"].max().floor("D").isoformat())  # one window since the incident: too few
    iso = S.record_score_kind(
        C.make("isotonic", input="probability").fit(before["score"].to_numpy(), before["label"].to_numpy()),
        "probability",
    )
    patch, rec = mon.patch_challenger(iso, after, {"country=DE": since}, CFG, "probability")
    assert patch is None and "country=DE" in rec["waiting"] and "platt" in rec["base"]


def test_no_patch_while_the_whole_source_is_off():
    state = mon.MonitorState(source="s")
    cfg = mon.MonitorConfig()
    rows = []
    for day, seg in ((0, "country=DE"), (1, "all")):
        w = (pd.Timestamp("2026-01-01") + pd.Timedelta(days=day)).isoformat()
        rows.append({"window": w, "segment": seg, "version": 1, "calibration_ratio": 0.7, "skipped": None,
                     "out": ["calibration_ratio"], "band_ratio": [0.9, 1.1]})
        state.alerts.append({"window": w, "segment": seg, "metric": "calibration_ratio"})
    state.history = rows[:1]
    assert mon.patch_targets(state, cfg, ("country",)) == {"country=DE": rows[0]["window"]}
    assert mon.patch_targets(state, cfg, ("device",)) == {}  # not a declared segment column here
    state.history = rows
    assert mon.patch_targets(state, cfg, ("country",)) == {}  # `all` is off: a global fix's job


def test_pooled_windows_page_a_one_segment_shift_that_one_window_misses_and_not_a_calibrated_one():
    """A segment of ~8% of rows (130 positives a day) 35% low: one window is 3.6 se under 0.9, under the
    34-segment z of 3.95; two such windows pooled are over it. On calibrated windows of the same size the
    pooled runs (2 and 3 windows) fire no more often than the one-window test (0 in 3,000 here)."""
    from calibflow.monitor.thresholds import practically_off_pooled

    cfg = mon.MonitorConfig()
    low = [{"calibration_ratio": r, "ratio_se": s, "positives": n}
           for r, s, n in ((0.636, 0.052, 135), (0.662, 0.055, 129))]
    assert not any(mon.practically_off(r, cfg, 34) for r in low)  # the control: one window at a time
    assert practically_off_pooled(low, cfg, 34)
    before = {"calibration_ratio": 1.0, "ratio_se": 0.1, "positives": 85}  # a change that began 2 days ago
    assert practically_off_pooled([before, *low], cfg, 34)
    rng = np.random.default_rng(0)
    fired = single = 0
    for _ in range(1000):
        rows = []
        for _ in range(3):
            p = rng.uniform(0.01, 0.12, 1600)
            y = (rng.random(p.size) < p).astype(float)
            rows.append({"calibration_ratio": float(p.sum() / y.sum()), "ratio_se": mon.ratio_se(y, p),
                         "positives": float(y.sum())})
        fired += practically_off_pooled(rows, cfg, 34)
        single += sum(mon.practically_off(r, cfg, 34) for r in rows)
    assert fired == 0 and single == 0


def test_a_patch_records_its_likelihood_ratio_and_is_refreshed_when_its_rows_double(frames, champion):
    """The patch's own evidence: its level's LR test against the champion on the rows since the incident
    (large for a 0.5 logit shift, small for a level that did not move); the champion's patch is refitted
    once those rows hold twice its positives, not before."""
    _, after = frames
    since = str(after["time"].min().floor("D").isoformat())
    patch, rec = mon.patch_challenger(champion, after, {"country=DE": since}, CFG, "probability")
    de = rec["patched"]["country=DE"]
    assert de["p"] < 1e-6 and de["periods"] == 4 and de["since"] == since
    assert patch_significant(rec, CFG, {}) == ["country=DE"]
    _, calm = mon.patch_challenger(champion, after, {"country=FR": since}, CFG, "probability")
    assert calm["patched"]["country=FR"]["p"] > 0.003  # FR did not move: no promotion on its own evidence
    assert patch_significant(calm, CFG, {}) == []
    assert patch_significant(calm, CFG, {"country=FR": since}) == ["country=FR"]  # a due refresh
    state = mon.MonitorState(source="s")
    state.versions = [{"version": 1}, {"version": 2, "patch": {"country=DE": {
        "since": since, "positives": de["positives"], "periods": de["periods"]}}}]
    state.champion = 2
    assert refresh_due(state, after, CFG) == {}  # the same rows: nothing new
    half = {"country=DE": {"since": since, "positives": de["positives"] / 2, "periods": 2}}
    state.versions[1]["patch"] = half
    assert refresh_due(state, after, CFG) == {"country=DE": since}
    state.versions[1]["patch"] = {"country=DE": {**half["country=DE"], "periods": CFG.calib_windows}}
    assert refresh_due(state, after, CFG) == {}  # it saw a whole trailing window: done


def test_a_patch_on_half_the_trailing_window_is_refreshed_once_its_rows_span_the_whole_window():
    """The trailing window caps a level's rows since its incident at ``calib_windows`` periods: a patch
    fitted on 4 of 6 periods waited for twice its positives, which 6 periods hold only by chance, and was
    served on its first 4 days' labels for good. The refresh counts periods (blind to the labels): due
    once the rows span twice the fitted periods or the whole trailing window."""
    rows = pd.concat([X.day_frame("one_country", d, 20_000, 1, 10) for d in range(10, 16)], ignore_index=True)
    since = str(rows["time"].min().floor("D").isoformat())
    de = (rows["country"] == "DE").to_numpy()
    first4 = de & (pd.to_datetime(rows["time"]) < pd.Timestamp(since) + pd.Timedelta(days=4)).to_numpy()
    fitted = float(rows["label"].to_numpy()[first4].sum())
    assert rows["label"].to_numpy()[de].sum() < 2 * fitted  # 6 periods: under twice the 4 periods' positives
    state = mon.MonitorState(source="s")
    state.versions = [{"version": 1}, {"version": 2, "patch": {"country=DE": {
        "since": since, "positives": fitted, "periods": 4}}}]
    state.champion = 2
    assert refresh_due(state, rows, CFG) == {"country=DE": since}  # 6 = calib_windows periods since
    assert refresh_due(state, rows[~first4 | ~de], CFG) == {}  # the control: only 2 newer periods
    four = rows[(pd.to_datetime(rows["time"]) < pd.Timestamp(since) + pd.Timedelta(days=4)).to_numpy()]
    state.versions[1]["patch"]["country=DE"]["periods"] = 2
    flipped = four.assign(label=np.where(four["country"] == "DE", 0.0, four["label"]))
    flipped.loc[flipped.index[flipped["country"] == "DE"][:5], "label"] = 1.0
    assert refresh_due(state, four, CFG) == refresh_due(state, flipped, CFG) == {"country=DE": since}


def test_while_the_patch_waits_the_global_challengers_are_judged_without_the_drifted_rows():
    """A drifted level's rows (DE, 35% under the champion) rewarded any global map that serves every
    country a little higher, and ``replace_after`` promoted one (the study's seed 7: beta, every other
    country +1.5% for good). While DE's patch waits for its windows, the gate's numbers do not depend on
    DE's labels in the held-out window."""
    from calibflow.monitor.gate import WindowContext, _gate

    cfg = mon.MonitorConfig(n_bootstrap=50, calib_windows=4, min_calib_windows=3, seed=3)
    calib = pd.concat([X.day_frame("one_country", d, 20_000, 2, 10) for d in range(6, 10)], ignore_index=True)
    frame = X.day_frame("one_country", 10, 20_000, 2, 10)
    de = (frame["country"] == "DE").to_numpy()
    w = mon.Window(frame["time"].min().floor("D"), frame["time"].min().floor("D") + pd.Timedelta(days=1))
    champ = S.record_score_kind(
        C.make("platt", input="probability").fit(calib["score"].to_numpy(), calib["label"].to_numpy()),
        "probability",
    )
    state = mon.MonitorState.start_with("s", champ, {"fitted_on": ["test"]}, "probability")
    state.history = [{"window": w.key, "segment": "country=DE", "version": 1, "calibration_ratio": 0.65,
                      "skipped": None, "out": ["calibration_ratio"], "band_ratio": [0.9, 1.1]}]
    state.alerts = [{"window": w.key, "segment": "country=DE", "metric": "calibration_ratio"}]
    assert mon.patch_targets(state, cfg, X.SEGMENTS) == {"country=DE": w.key}

    def gate(f: pd.DataFrame) -> dict:
        rng = np.random.default_rng(0)
        return _gate(state, WindowContext(state, w, f, calib, cfg, rng, champ, X.SEGMENTS), False)

    redrawn = np.random.default_rng(1).random(len(frame)) < 0.02
    calm = frame.assign(label=np.where(de, redrawn, frame["label"]))
    a, b = gate(frame), gate(calm)
    for k in ("best", "delta", "delta_ci", "champion", "promoted"):
        assert a[k] == b[k], (k, a[k], b[k])
    assert a["judged_rows"] == int((~de).sum()), a


def test_a_worse_streak_pools_only_windows_judged_on_the_same_rows():
    """The windows before a level's incident were judged on every row (the drifted level's too); the
    ones after it without the drifted levels. ``replace_after`` pools a streak of one set of rows only:
    a window judged without a small country's false incident still held DE's drifted rows."""
    from calibflow.monitor.gate import _worse_streak

    state = mon.MonitorState(source="s")
    state.champion = 1
    worse = {"champion_worse": True, "champion_version": 1, "delta": 1e-4, "delta_se": 3e-5}
    both = ["country=C16", "country=DE"]
    state.gates = [dict(worse), {**worse, "judged_outside": ["country=C16"]},
                   {**worse, "judged_rows": 18_000, "judged_outside": both}]
    assert _worse_streak(state, state, both) == [(1e-4, 3e-5)]  # the two other kinds left out
    assert _worse_streak(state, state, []) == []
    state.gates = state.gates[:1] * 2
    assert _worse_streak(state, state) == [(1e-4, 3e-5)] * 2  # as before on whole windows
    state.gates = [{**worse, "judged_outside": both}] * 3
    assert _worse_streak(state, state, both) == [(1e-4, 3e-5)] * 3
