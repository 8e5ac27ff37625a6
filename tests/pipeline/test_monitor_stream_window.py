"""Large windows through the real stage without pandas holding their rows.

The stage decides rows-vs-tables from the inventory's row count; the threshold is set low here
(``table_rows``) so that a 3,000-row day counts as large. The reference is the row path on a copy of the
same project: the streamed run must never call ``deliveries.load``, must say which path scored each
window, and must give the row path's counts, ratios, standard errors, log losses and Brier scores (to
summation order), ECE within the grid's 1e-3, the ECE noise level and calibration slope (fitted on the
cells) within a small share of their standard errors, the same alerts, the same challengers' losses and
gate decisions when the gate's sample is every row, and the same refusals for a broken file.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from helpers.monitor_data import make_project

from calibflow.experiments.monitoring import DAY0
from calibflow.monitor import deliveries as D
from calibflow.pipeline import monitor as tm

NOW = DAY0 + pd.Timedelta(days=12)  # days 0..9 have matured (label_delay 2D)
EXACT = ("calibration_ratio", "ratio_se", "log_loss", "brier")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream") / "base"
    root.mkdir()
    make_project(root, "base_rate", days=10, rows=3000, shift_day=5)
    return root


def _copy(project, tmp_path, name: str):
    dst = tmp_path / name
    shutil.copytree(project, dst)
    return dst


def _run(root, **kw) -> dict:
    return tm.run(root, tm.load_params(root / "params.yaml"), "ads", now=NOW, render=False, **kw)


def _state(root) -> dict:
    return json.loads((root / "monitoring/ads/state.json").read_text())


@pytest.fixture
def loads(monkeypatch):
    """Every time range ``deliveries.load`` reads into pandas (the real function still runs)."""
    calls: list[tuple[pd.Timestamp, pd.Timestamp]] = []
    real = D.load

    def spy(spec, inv, lo, hi, cfg):
        calls.append((lo, hi))
        return real(spec, inv, lo, hi, cfg)

    monkeypatch.setattr(D, "load", spy)
    return calls


def test_large_windows_stream_and_score_as_the_rows_do(project, tmp_path, loads):
    rows, tables = _copy(project, tmp_path, "rows"), _copy(project, tmp_path, "tables")
    _run(rows)
    assert loads, "the row path reads the rows in pandas"
    loads.clear()
    res = _run(tables, table_rows=1000, gate_rows=10**9)
    assert loads == [], "a large window is read by DuckDB only"
    a, b = _state(rows), _state(tables)
    assert len(res["windows"]) == 10 and a["processed"] == b["processed"]
    assert all(b["windows"][k]["scored_from"] == "tables" for k in b["processed"])
    assert all("scored_from" not in a["windows"][k] for k in a["processed"])
    assert all(b["windows"][k]["rows"] == a["windows"][k]["rows"] for k in b["processed"])
    keys = [(r["window"], r["segment"]) for r in a["history"]]
    assert keys == [(r["window"], r["segment"]) for r in b["history"]]
    for ra, rb in zip(a["history"], b["history"], strict=True):
        assert (ra["n"], ra["positives"], ra["skipped"]) == (rb["n"], rb["positives"], rb["skipped"])
        if ra["skipped"]:
            continue
        for k in EXACT:
            assert rb[k] == pytest.approx(ra[k], rel=1e-12), (ra["window"], ra["segment"], k)
        assert abs(rb["ece"] - ra["ece"]) < 1e-3
        assert rb["ratio_low"] < rb["calibration_ratio"] < rb["ratio_high"]
        # The ECE noise level and the calibration slope from the cells (measured: the overall slope within
        # 4e-8 of its se, a segment's coarse cells within 0.007 se), so both paths raise the same alerts.
        assert rb["ece_null"] == pytest.approx(ra["ece_null"], rel=1e-3)
        assert abs(rb["calibration_slope"] - ra["calibration_slope"]) < 0.02 * ra["slope_se"]
        assert rb["slope_se"] == pytest.approx(ra["slope_se"], rel=1e-3)
        assert rb["drifted"] == ra["drifted"] and rb["alert"] == ra["alert"]
    # The gate saw every row (gate_rows above the day): the same fits, losses and decisions; only the
    # paired bootstrap's draws differ (the row path's scoring drew from the window's generator first).
    gated = [(ga, gb) for ga, gb in zip(a["gates"], b["gates"], strict=True) if "challengers" in ga]
    assert gated, "the gate ran on some window"
    for ga, gb in zip(a["gates"], b["gates"], strict=True):
        assert ga["promoted"] == gb["promoted"] and ga.get("best") == gb.get("best")
        if "challengers" in ga:
            assert ga["challengers"] == gb["challengers"] and ga["delta"] == gb["delta"]
            assert "sample" in gb and "sample" not in ga
    assert [v["method"] for v in a["versions"]] == [v["method"] for v in b["versions"]]


def test_the_gate_of_a_large_window_sees_a_bounded_seeded_sample(project, tmp_path, loads):
    one, two = _copy(project, tmp_path, "one"), _copy(project, tmp_path, "two")
    _run(one, table_rows=1000, gate_rows=400)
    _run(two, table_rows=1000, gate_rows=400)
    assert loads == []
    a = _state(one)
    state = "monitoring/ads/state.json"
    assert (one / state).read_bytes() == (two / state).read_bytes()
    for k in a["processed"]:
        s = a["windows"][k]["gate_sample"]
        assert 0 < s["window"] <= 600 and s["window"] < a["windows"][k]["rows"]  # Bernoulli(400/3000)
        assert s["calib"] <= 600 and (s["calib_rows"] == 0 or s["calib"] < s["calib_rows"])
    assert any("of" in g.get("sample", "") for g in a["gates"])
    full = [r["n"] for r in a["history"] if r["segment"] == "all"]
    assert full == [a["windows"][k]["rows"] for k in a["processed"]]  # scores from every row, not the sample


def test_a_broken_file_in_a_large_window_is_refused_as_the_rows_refuse_it(project, tmp_path, loads):
    rows, tables = _copy(project, tmp_path, "rows"), _copy(project, tmp_path, "tables")
    for root in (rows, tables):
        path = root / "data" / "stream" / "day=004.parquet"
        df = pd.read_parquet(path)
        df.loc[df.index[:3], "label"] = 2
        df.loc[df.index[3:5], "label"] = None
        df.to_parquet(path, index=False)
    ra = _run(rows)
    loads.clear()
    rb = _run(tables, table_rows=1000, gate_rows=10**9)
    assert loads == []
    assert rb["refused"] == ra["refused"] and len(rb["refused"]) == 1
    assert "'label' has 3 label value(s) outside {0, 1}" in rb["refused"][0]
    assert rb["windows"] == ra["windows"] and (DAY0 + pd.Timedelta(days=4)).isoformat() not in rb["windows"]


def test_a_text_time_column_keeps_the_row_path_with_a_note(project, tmp_path, loads):
    root = _copy(project, tmp_path, "text")
    for path in sorted((root / "data" / "stream").glob("*.parquet")):
        df = pd.read_parquet(path)
        df["time"] = df["time"].dt.strftime("%Y-%m-%dT%H:%M:%S")
        df.to_parquet(path, index=False)
    _run(root, table_rows=1000)
    s = _state(root)
    assert loads and len(s["processed"]) == 10
    assert any("read as rows" in n and "time column" in n for n in s["notes"])
    assert all("scored_from" not in s["windows"][k] for k in s["processed"])


@pytest.mark.parametrize("kind", ["epoch_ms", "zoned"])
def test_epoch_and_zoned_times_stream_into_the_row_paths_windows(project, tmp_path, loads, kind):
    """DuckDB's time filter places every row where the inventory (pandas) does: epoch milliseconds (the
    unit from the file's magnitude) and a zoned timestamp (converted to UTC)."""
    rows, tables = _copy(project, tmp_path, "rows"), _copy(project, tmp_path, "tables")
    for root in (rows, tables):
        for path in sorted((root / "data" / "stream").glob("*.parquet")):
            df = pd.read_parquet(path)
            t = df["time"].astype("datetime64[ns]")
            if kind == "epoch_ms":
                df["time"] = t.astype("int64") // 10**6
            else:
                df["time"] = t.dt.tz_localize("UTC").dt.tz_convert("America/New_York")
            df.to_parquet(path, index=False)
    _run(rows)
    loads.clear()
    _run(tables, table_rows=1000, gate_rows=10**9)
    assert loads == []
    a, b = _state(rows), _state(tables)
    assert a["processed"] == b["processed"] and len(b["processed"]) == 10
    assert all(b["windows"][k]["scored_from"] == "tables" for k in b["processed"])
    assert [(r["segment"], r["n"], r["positives"]) for r in a["history"]] == [
        (r["segment"], r["n"], r["positives"]) for r in b["history"]]
