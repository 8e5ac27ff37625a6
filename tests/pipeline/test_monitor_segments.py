"""Segment-aware challengers: after a shift in one segment, the monitor's segmented challenger (partial
pooling, served per segment) is promoted through the same gate and keeps the unshifted segment calibrated,
where global challengers pull it off (the control)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibflow import calibrators as C
from calibflow import monitor as mon
from calibflow.experiments.monitoring import run_stream, simulate_stream

SHIFT, DAYS = 14, 34


def _served_ratio(res: dict, segment: str, start: int) -> float:
    sums = np.array(res["segment_sums"][segment][start:], float)
    return float(sums[:, 0].sum() / sums[:, 1].sum())


@pytest.fixture(scope="module")
def shifted_runs() -> dict[str, dict]:
    """One stream, shift of segment A at day 14, run with and without the segmented challenger."""
    df = simulate_stream("segment_shift", 3, days=DAYS, rows=2000, warmup=14, shift_day=SHIFT)
    out = {}
    for name, seg in (("segmented", ("partial_pooling",)), ("global", ())):
        cfg = mon.MonitorConfig(n_bootstrap=100, label_delay="2D", segmented_methods=seg, seed=3)
        out[name] = run_stream(df, cfg, DAYS, 14, 2)
    return out


@pytest.mark.slow
def test_segmented_challenger_keeps_the_unshifted_segment_in_band(shifted_runs):
    seg = shifted_runs["segmented"]
    assert "partial_pooling" in seg["promoted_methods"]
    first = seg["promotions"][seg["promoted_methods"].index("partial_pooling")]
    assert SHIFT <= first <= SHIFT + 3  # promoted on the shift, through the paired test and min_gain
    settle = SHIFT + 7
    assert abs(_served_ratio(seg, "B", settle) - 1) < 0.05  # B stays calibrated after promotion
    assert not [w for w in seg["alerts_by_segment"]["segment=B"] if w >= SHIFT]  # and never alerts
    assert _served_ratio(seg, "A", settle) > _served_ratio(shifted_runs["global"], "A", settle)


@pytest.mark.slow
def test_global_challengers_pull_the_unshifted_segment_off(shifted_runs):
    """The control: without the segmented challenger, the same stream ends with B over-predicted."""
    glob = shifted_runs["global"]
    assert all(m not in ("partial_pooling", "multicalibration") for m in glob["promoted_methods"])
    assert _served_ratio(glob, "B", SHIFT + 7) > 1.1


def _frame(n: int = 4000, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    seg = np.where(rng.random(n) < 0.5, "A", "B")
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(-2 + x + (seg == "A"))))).astype(float)
    return pd.DataFrame({"score": x, "label": y, "segment": seg, "time": pd.Timestamp("2026-01-01")})


def test_segmented_candidates_only_with_declared_segments():
    df = _frame()
    champ = C.make("platt").fit(df["score"].to_numpy(), df["label"].to_numpy())
    cfg = mon.MonitorConfig(n_bootstrap=50)
    rng = np.random.default_rng(0)
    rec, _ = mon.challenge(champ, df.iloc[:3000], df.iloc[3000:], cfg, rng, "score", None, ("segment",))
    assert rec["challengers"]["partial_pooling"]["segmented"] is True
    assert rec["challengers"]["partial_pooling"]["monotone"] is True  # increasing inside each segment
    rec, _ = mon.challenge(champ, df.iloc[:3000], df.iloc[3000:], cfg, rng, "score")
    assert "partial_pooling" not in rec["challengers"]


def test_ranking_inside_segments():
    df = _frame()
    cal = mon.fit_challenger(
        "partial_pooling", "score", df["score"].to_numpy(), df["label"].to_numpy(), "score",
        {"segment": df["segment"].to_numpy(dtype=object)},
    )
    assert mon.keeps_ranking_within(cal, df, "score")
    assert not mon.keeps_ranking(cal, df["score"].to_numpy(), "score")  # across segments: not claimed


def test_segmented_methods_config_is_checked():
    with pytest.raises(ValueError, match="segmented_methods"):
        mon.MonitorConfig(segmented_methods=("platt",))
    with pytest.raises(ValueError, match="need segments"):
        mon.MonitorConfig(methods=("platt", "partial_pooling"))
    assert mon.MonitorConfig.from_params({"segmented_methods": []}).segmented_methods == ()


def test_practical_limit_pages_at_the_band_rate_not_a_95_interval():
    """Stable segments with ~100 positives: the old 95% rule paged on ~0.3% of (segment, window)s,
    the z-at-band-tail rule on ~0.05%, and a real 0.76 with 700 positives is still out."""
    cfg = mon.MonitorConfig()
    rng = np.random.default_rng(0)
    n, rate, reps = 1000, 0.1, 4000
    old = new = 0
    for _ in range(reps):
        p = np.full(n, rate)
        y = (rng.random(n) < p).astype(float)
        lo, hi = mon.bootstrap_ratio_ci(y, p, 100, 0.95, rng)
        r = float(p.sum() / y.sum())
        row = {"calibration_ratio": r, "ratio_low": lo, "ratio_high": hi, "ratio_se": mon.ratio_se(y, p)}
        old += mon.practically_off({**row, "ratio_se": None}, cfg)
        new += mon.practically_off(row, cfg, 3)
    assert old / reps > 0.0015  # the 95% rule: several times the band's per-segment rate
    assert new / reps < 0.001
    p = np.full(7000, 0.076)
    y = (rng.random(7000) < 0.1).astype(float)  # 700 positives, served at 0.76 of the truth
    r = float(p.sum() / y.sum())
    assert mon.practically_off({"calibration_ratio": r, "ratio_se": mon.ratio_se(y, p)}, cfg, 3)
