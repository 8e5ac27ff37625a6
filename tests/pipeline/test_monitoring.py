"""The monitor: windows and label maturity, the gate, bands and alerts, resume, the page (no Prefect)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.monitor_data import make_project, write_days

from calibflow import calibrators as C
from calibflow import monitor as mon
from calibflow.experiments.monitoring import DAY0, simulate_stream
from calibflow.pipeline import monitor as tm
from calibflow.pipeline.params_schema import validate_monitor_section
from calibflow.report.monitoring import render_page


def _window(d: int) -> mon.Window:
    return mon.Window(DAY0 + pd.Timedelta(days=d), DAY0 + pd.Timedelta(days=d + 1))


def _gate(scenario: str, seed: int, methods=("platt", "beta", "isotonic")):
    df = simulate_stream(scenario, seed, days=20, rows=1500, warmup=14, shift_day=6)
    warm = df[df["day"] < 0]
    champ = C.make("platt").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    calib, held = df[(df["day"] >= 6) & (df["day"] < 19)], df[df["day"] == 19]
    cfg = mon.MonitorConfig(n_bootstrap=200, methods=methods)
    return mon.challenge(champ, calib, held, cfg, np.random.default_rng(seed), "score")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gate_promotes_on_a_real_shift(seed):
    rec, winner = _gate("base_rate", seed)
    assert rec["promoted"] and winner is not None and rec["delta_ci"][0] > 0
    assert rec["ci_level"] == pytest.approx(1 - 0.05 / 3)  # Bonferroni over three challengers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gate_does_not_promote_on_noise(seed):
    rec, winner = _gate("stable", seed)
    assert not rec["promoted"] and winner is None
    assert "not better" in rec["reason"]


def test_gate_refuses_a_challenger_that_reverses_the_ranking():
    rec, winner = _gate("base_rate", 0, methods=("histogram",))  # better, but not monotone
    assert rec["challengers"]["histogram"]["value"] < rec["champion"]
    assert not rec["promoted"] and winner is None and "monotone" in rec["reason"]


def test_matured_windows_honour_label_delay():
    times = pd.Series(DAY0 + pd.to_timedelta(np.arange(0, 10 * 24, 6), unit="h"))  # days 0..9
    cfg = mon.MonitorConfig(label_delay="2D")
    now = DAY0 + pd.Timedelta(days=6, hours=5)  # day 3 ends at day 4, matured at day 6: in; day 4 not
    assert [w.start for w in mon.matured_windows(times, now, cfg)] == [
        DAY0 + pd.Timedelta(days=d) for d in range(4)
    ]
    weekly = mon.MonitorConfig(period="7D", label_delay="0D")
    assert len(mon.matured_windows(times, DAY0 + pd.Timedelta(days=14), weekly)) == 2


def test_window_with_too_few_positives_is_skipped_with_a_note():
    df = simulate_stream("stable", 0, days=3, rows=100, warmup=0)
    champ = C.make("platt").fit(df["score"].to_numpy(), df["label"].to_numpy())
    state = mon.MonitorState.start("s", champ, {})
    cfg = mon.MonitorConfig(min_positives=50)
    state = mon.process_window(state, _window(0), df[df["day"] == 0], df.iloc[:0], cfg, ("segment",))
    assert all(r["skipped"] for r in state.history) and len(state.notes) == 3  # all, segment=A, segment=B
    assert "min_positives=50" in state.notes[0] and "skipped" in state.gates[-1]["reason"]
    with pytest.raises(ValueError, match="already processed"):
        mon.process_window(state, _window(0), df[df["day"] == 0], df.iloc[:0], cfg)


def test_config_rejects_typos_and_bad_values():
    with pytest.raises(ValueError, match="unknown key.*label_dealy"):
        mon.MonitorConfig.from_params({"label_dealy": "2D"})
    with pytest.raises(ValueError, match="selection_metric"):
        mon.MonitorConfig(selection_metric="ece")
    with pytest.raises(ValueError, match="not a duration"):
        mon.MonitorConfig(period="daily")
    with pytest.raises(ValueError, match="unknown calibrator"):
        mon.MonitorConfig(methods=("platt", "plat"))


def test_state_round_trips_through_json():
    df = simulate_stream("stable", 0, days=2, rows=500, warmup=0)
    champ = C.make("platt").fit(df["score"].to_numpy(), df["label"].to_numpy())
    state = mon.process_window(
        mon.MonitorState.start("s", champ, {}),
        _window(0),
        df[df["day"] == 0],
        df.iloc[:0],
        mon.MonitorConfig(min_positives=5, n_bootstrap=20),
    )
    again = mon.MonitorState.from_json(state.to_json())
    assert again == state
    assert np.allclose(again.calibrator().predict(np.array([0.0, 1.0])), champ.predict(np.array([0.0, 1.0])))


def test_run_on_a_source_alerts_promotes_and_writes_the_page(tmp_path):
    make_project(tmp_path, "base_rate", days=16, shift_day=8)
    params = tm.load_params(tmp_path / "params.yaml")
    res = tm.run(tmp_path, params, "ads", now=DAY0 + pd.Timedelta(days=18))
    assert len(res["windows"]) == 16
    first = min(pd.Timestamp(a["window"]) for a in res["alerts"] if a["segment"] == "all")
    assert first >= DAY0 + pd.Timedelta(days=8), "no alert before the shift on this seed"
    assert (first - DAY0).days <= 9
    assert res["promotions"] and all(
        pd.Timestamp(p["promoted_after"]) >= DAY0 + pd.Timedelta(days=8) for p in res["promotions"]
    )
    card = json.loads((tmp_path / "monitoring/ads/card.json").read_text())
    assert card["version"] == res["champion"] > 1 and card["fitted_on"] and card["judged_on"]
    hist = pd.read_csv(tmp_path / "plots/monitoring/ads.csv")
    assert len(hist) == 16 * 3 and not hist.duplicated(["window", "segment"]).any()
    page = (tmp_path / "reports/pages/monitoring-ads.html").read_text()
    assert page.count("<svg") >= 7 and "promoted v2" in page
    # one figure per metric, the segment picked by buttons (all first and picked), one series per segment
    radio = r'<input type="radio" name="seg" id="seg(\d+)"( checked)?><label for="seg\1">([^<]+)<'
    radios = re.findall(radio, page)
    assert [r[2] for r in radios][:1] == ["all"] and radios[0][1] and not any(r[1] for r in radios[1:])
    assert {"segment=A", "segment=B"} <= {r[2] for r in radios}
    assert page.count("<figure class='svg'>") == 2 and page.count('class="s s0"') == 2
    assert all(f"#seg{i}:checked~figure .s{i}" in page for i in range(len(radios)))
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "<script" not in page
    start, end = (pd.Timestamp(x).strftime("%Y-%m-%d") for x in card["fitted_on"])
    # spans read as times to the minute, not Python lists of nanosecond stamps
    assert re.search(rf"{start}( \d\d:\d\d)? to {end}( \d\d:\d\d)?</td>", page) and "['" not in page
    metrics = json.loads((tmp_path / "metrics/monitoring/ads.json").read_text())
    assert metrics["windows"] == 16 and metrics["promotions"] == len(res["promotions"])


def test_late_label_is_not_scored_before_it_matures(tmp_path):
    df = make_project(tmp_path, "stable", days=8, monitor={"label_delay": "2D"})
    params = tm.load_params(tmp_path / "params.yaml")
    day5 = DAY0 + pd.Timedelta(days=5)
    # Day 5's labels are still arriving: on day 6 only a third of its positives are in the file.
    early = df[df["day"] >= 0].copy()
    late = (early["day"] == 5) & (early["label"] == 1)
    early.loc[late[late].index[: int(late.sum() * 2 / 3)], "label"] = 0.0
    write_days(tmp_path, early)
    res = tm.run(tmp_path, params, "ads", now=DAY0 + pd.Timedelta(days=6, hours=6))
    assert [pd.Timestamp(w) for w in res["windows"]] == [DAY0 + pd.Timedelta(days=d) for d in range(4)]
    write_days(tmp_path, df[df["day"] >= 0])  # the labels are final now
    res = tm.run(tmp_path, params, "ads", now=DAY0 + pd.Timedelta(days=8, hours=6))
    assert [pd.Timestamp(w) for w in res["windows"]] == [DAY0 + pd.Timedelta(days=4), day5]
    state = mon.MonitorState.from_json((tmp_path / "monitoring/ads/state.json").read_text())
    row = next(r for r in state.history if r["window"] == day5.isoformat() and r["segment"] == "all")
    assert row["positives"] == int(df.loc[df["day"] == 5, "label"].sum())


def test_chunked_runs_equal_one_run(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for p in (a, b):
        p.mkdir()
        make_project(p, "base_rate", days=10, shift_day=5)
    now = DAY0 + pd.Timedelta(days=12)
    tm.run(a, tm.load_params(a / "params.yaml"), "ads", now=now, render=False)
    for _ in range(4):
        tm.run(b, tm.load_params(b / "params.yaml"), "ads", now=now, max_windows=3, render=False)
    assert (a / "monitoring/ads/state.json").read_text() == (b / "monitoring/ads/state.json").read_text()


def _processed(path) -> int:
    try:
        return len(json.loads(path.read_text())["processed"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def test_killed_run_resumes_without_losing_or_double_counting(tmp_path):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    for p in (ref, killed):
        p.mkdir()
        make_project(p, "slope", days=14, shift_day=6)
    now = (DAY0 + pd.Timedelta(days=16)).isoformat()
    tm.run(ref, tm.load_params(ref / "params.yaml"), "ads", now=now)
    cmd = [sys.executable, "-m", "calibflow.pipeline.monitor", "--source", "ads", "--now", now]
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [*cmd, "--root", str(killed), "--params", str(killed / "params.yaml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    state = killed / "monitoring/ads/state.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _processed(state) < 3:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # no cleanup runs: as if the machine died
    proc.wait()
    done = _processed(state)
    assert 3 <= done < 14, f"the kill landed after {done} windows"
    res = tm.run(killed, tm.load_params(killed / "params.yaml"), "ads", now=now)
    assert len(res["windows"]) == 14 - done  # only the windows the killed run had not saved
    assert state.read_text() == (ref / "monitoring/ads/state.json").read_text()


def test_bad_input_is_one_line(tmp_path, capsys):
    import yaml

    make_project(tmp_path, "stable", days=4)
    assert tm.main(["--root", str(tmp_path), "--params", str(tmp_path / "p.yaml")]) == 1
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "params file not found" in err
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())  # the file as written, edited below
    params["monitor"]["band_k"] = -1
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert tm.main(["--root", str(tmp_path), "--params", str(tmp_path / "params.yaml")]) == 1
    err = capsys.readouterr().err
    assert "band_k must be > 0" in err and "Traceback" not in err
    params["monitor"]["band_k"] = 3
    params["sources"]["ads"]["time"] = "tiem"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert tm.main(["--root", str(tmp_path), "--params", str(tmp_path / "params.yaml")]) == 1
    assert "tiem" in capsys.readouterr().err


def test_page_banner_lists_open_alerts():
    df = simulate_stream("base_rate", 0, days=12, rows=800, warmup=14, shift_day=8)
    warm = df[df["day"] < 0]
    champ = C.make("platt").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    state = mon.MonitorState.start("ads", champ, {})
    cfg = mon.MonitorConfig(
        reference_windows=4,
        n_bootstrap=30,
        min_positives=10,
        methods=("platt",),
        min_calib_windows=50,
        calib_windows=50,
    )  # no gate: the champion stays
    for d in range(10):
        state = mon.process_window(state, _window(d), df[df["day"] == d], df.iloc[:0], cfg)
    assert state.alerts and state.alerts[-1]["window"] == _window(9).key
    page = render_page(state, cfg=cfg)
    assert "Calibration drift: open on 2026-01-10" in page and "No open incident" not in page


def test_params_section_is_validated():
    import yaml

    params = yaml.safe_load(Path("params.yaml").read_text())
    validate_monitor_section(params["monitor"])
    with pytest.raises(ValueError, match="monitor.commit must be true or false"):
        validate_monitor_section({**params["monitor"], "commit": "yes"})
    with pytest.raises(ValueError, match="unknown key"):
        validate_monitor_section({**params["monitor"], "perod": "1D"})


def _drift_then_recover(shift_days: range, days: int = 24) -> pd.DataFrame:
    """Segment A's click rate doubles on ``shift_days`` and is back to normal after."""
    shifted = simulate_stream("segment_shift", 0, days=days, rows=2000, warmup=14, shift_day=shift_days.start)
    stable = simulate_stream("stable", 0, days=days, rows=2000, warmup=14)
    return pd.concat([shifted[shifted["day"].isin(shift_days)], stable[~stable["day"].isin(shift_days)]])


def test_one_incident_per_drift_open_until_back_in_band():
    df = _drift_then_recover(range(8, 16))
    warm = df[df["day"] < 0]
    champ = C.make("platt").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    state = mon.MonitorState.start("ads", champ, {})
    cfg = mon.MonitorConfig(
        reference_windows=5, n_bootstrap=50, recovery=3, min_calib_windows=50, calib_windows=50
    )
    for d in range(24):
        state = mon.process_window(state, _window(d), df[df["day"] == d], df.iloc[:0], cfg, ("segment",))
    a_ratio = [a for a in state.alerts if a["segment"] == "segment=A" and a["metric"] == "calibration_ratio"]
    assert len(a_ratio) >= 7  # an alert on (nearly) every shifted window ...
    found = mon.incidents(state, cfg)
    keys = [(i["segment"], i["metric"]) for i in found]
    assert len(keys) == len(set(keys))  # ... but one incident per (segment, metric)
    inc = next(i for i in found if i["segment"] == "segment=A" and i["metric"] == "calibration_ratio")
    assert inc["opened"] == _window(8).key and inc["closed"] == _window(18).key  # 3 windows back in band
    assert inc["worst"] < 0.75 and inc["windows"] >= 7
    # Windows judged drifted are flagged, so they never enter a reference.
    rows = [r for r in state.history if r["segment"] == "segment=A" and r["window"] == _window(12).key]
    assert "calibration_ratio" in rows[0]["drifted"]


def test_reference_skips_drifted_windows_and_the_band_is_a_prediction_interval():
    def row(v, drifted):
        return {
            "window": f"w{v}", "segment": "all", "version": 2, "skipped": "", "calibration_ratio": v,
            "ece": 0.01, "drifted": ["calibration_ratio"] if drifted else [],
        }  # fmt: skip

    rng = np.random.default_rng(0)
    good = list(1 + 0.02 * rng.standard_normal(10))
    state = mon.MonitorState(source="s", versions=[{}, {}], champion=2)
    state.history = [row(0.6 + 0.01 * i, True) for i in range(5)] + [row(v, False) for v in good]
    band = mon.bands(state, "all", mon.MonitorConfig(reference_windows=10))["calibration_ratio"]
    assert band[0] > 0.9 and band[1] < 1.1  # learned on the 10 in-band windows only, not the 0.6s
    # The band's half-width in sd: a t prediction interval for one new value at the normal 3-sd tail.
    q = mon.thresholds._pred_quantile(10, 3.0)
    assert 4.0 < q < 5.0
    refs = rng.standard_normal((20_000, 11))
    m, s = refs[:, :10].mean(1), refs[:, :10].std(1, ddof=1)
    new = refs[:, 10]
    assert np.mean(np.abs(new - m) > q * s) < 0.006  # ~0.27% as promised (two-sided)
    assert np.mean(np.abs(new - m) > 3 * s) > 0.01  # the old 3-sd band: several times that


def test_practical_ratio_limit_applies_without_a_learned_band():
    cfg = mon.MonitorConfig()
    state = mon.MonitorState(source="s", versions=[{}], champion=1)
    band = mon.bands(state, "all", cfg)
    base = {"ece": 0.01}
    off = {**base, "calibration_ratio": 0.76, "ratio_low": 0.70, "ratio_high": 0.82}
    noisy = {**base, "calibration_ratio": 0.93, "ratio_low": 0.85, "ratio_high": 1.01}
    assert mon.out_of_band(off, band, cfg) == ["calibration_ratio"]
    assert mon.out_of_band(noisy, band, cfg) == []  # its interval still reaches 1 +- 0.1


def test_min_gain_refuses_a_practically_nil_promotion():
    df = simulate_stream("base_rate", 0, days=20, rows=1500, warmup=14, shift_day=6)
    warm = df[df["day"] < 0]
    champ = C.make("platt").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    calib, held = df[(df["day"] >= 6) & (df["day"] < 19)], df[df["day"] == 19]
    rng = np.random.default_rng(0)
    rec, winner = mon.challenge(champ, calib, held, mon.MonitorConfig(min_gain=0.5), rng, "score")
    assert winner is None and "under min_gain" in rec["reason"] and rec["delta_ci"][0] > 0


def test_init_monitor_adds_the_source_keeping_every_comment(tmp_path):
    from calibflow.cli.monitor import add_monitor_source

    params = tmp_path / "params.yaml"
    text = Path("params.yaml").read_text()
    params.write_text(text)
    add_monitor_source(params, "ads")
    add_monitor_source(params, "ads")  # idempotent
    add_monitor_source(params, "b2")
    new = params.read_text()
    assert yaml_load(new)["monitor"]["sources"] == ["ads", "b2"]
    assert [ln for ln in new.splitlines() if "sources:" not in ln] == [
        ln for ln in text.splitlines() if "sources:" not in ln
    ]  # only that line changed; every comment kept
    params.write_text("seed: 1\nmonitor:\n  sources:\n    - a\n")
    with pytest.raises(ValueError, match="by hand"):
        add_monitor_source(params, "ads")


def yaml_load(text: str):
    import yaml

    return yaml.safe_load(text)


def test_a_per_segment_champion_is_served_with_its_segment_columns():
    """select may deploy a per-segment calibrator: the monitor feeds it the window's segment column, and a
    source that does not declare that column is refused in one line, never scored with a global map."""
    import pandas as pd

    from calibflow import calibrators as C
    from calibflow import sources as S
    from calibflow.monitor import predict_frame

    rng = np.random.default_rng(3)
    n = 20_000
    country = rng.choice(["BR", "FR", "IN"], size=n)
    z = rng.normal(-2.0, 1.0, size=n)
    shift = np.select([country == "BR", country == "IN"], [0.6, -0.5], 0.0)
    y = (rng.random(n) < 1 / (1 + np.exp(-(z + shift)))).astype(float)
    p = 1 / (1 + np.exp(-z))
    cal = C.make("partial_pooling", input="logit").fit(
        S.calibrator_input(p, "probability", "logit"), y, segments={"country": country}
    )
    S.record_score_kind(cal, "probability")
    frame = pd.DataFrame({"score": p, "label": y, "country": country})
    got = predict_frame(cal, frame, "probability")
    want = cal.predict(S.calibrator_input(p, "probability", "logit"), segments={"country": country})
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    for c in ("BR", "IN"):  # the per-segment map is what makes each market right
        m = country == c
        assert abs(got[m].sum() / y[m].sum() - 1) < 0.05
    with pytest.raises(ValueError, match="needs the column"):
        predict_frame(cal, frame.drop(columns="country"), "probability")
