"""calibflow.sources and calibflow.timesplit on generated CSV, Parquet and a folder of daily Parquet files."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from helpers.source_data import scores_frame, write

from calibflow import sources, timesplit

KINDS = ("csv", "parquet", "folder")


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return scores_frame(n=3000, days=30, seed=1)


def _spec(path, **kw):
    decl = {"path": str(path), "label": "clicked", "score": "p_model", "time": "date", "segments": "country"}
    decl.update(kw)
    return sources.parse_source("ads", decl)


@pytest.mark.parametrize("kind", KINDS)
def test_scan_projects_and_filters(tmp_path, frame, kind):
    spec = _spec(write(frame, kind, tmp_path))
    tab = sources.scan(spec, ["p_model", "clicked"])
    assert tab.column_names == ["p_model", "clicked"]
    assert tab.num_rows == len(frame)
    np.testing.assert_allclose(tab["p_model"].to_numpy(), frame["p_model"].to_numpy())
    cut = sources.scan(spec, ["clicked"], where="p_model > 0.5")
    assert cut.num_rows == int((frame["p_model"] > 0.5).sum())
    assert cut["clicked"].to_numpy().sum() == frame.loc[frame["p_model"] > 0.5, "clicked"].sum()


@pytest.mark.parametrize("kind", KINDS)
def test_batches_are_bounded_and_complete(tmp_path, frame, kind):
    spec = _spec(write(frame, kind, tmp_path))
    parts = list(sources.batches(spec, ["p_model", "clicked"], batch_rows=500))
    assert all(isinstance(b, pa.RecordBatch) and b.num_rows <= 500 for b in parts)
    got = np.concatenate([b.column(0).to_numpy() for b in parts])
    np.testing.assert_allclose(got, frame["p_model"].to_numpy())


def test_glob_source(tmp_path, frame):
    folder = write(frame, "folder", tmp_path)
    spec = _spec(os.path.join(folder, "2026-09-1*.parquet"))
    tab = sources.scan(spec, ["date"])
    days = pd.to_datetime(pd.Series(tab["date"].to_pylist()))
    assert days.dt.day.between(10, 19).all() and tab.num_rows == int(
        pd.to_datetime(frame["date"]).dt.day.between(10, 19).sum()
    )


def test_path_with_quote_is_a_parameter_not_sql(tmp_path, frame):
    odd = tmp_path / "it's a 'dir'; drop"
    spec = _spec(write(frame, "parquet", odd))
    assert sources.scan(spec, ["clicked"]).num_rows == len(frame)


def test_missing_column_says_did_you_mean(tmp_path, frame):
    spec = _spec(write(frame, "parquet", tmp_path), label="clickd")
    with pytest.raises(
        ValueError, match=r"source 'ads': column 'clickd' not found .*did you mean 'clicked'\?"
    ):
        sources.scan(spec, spec.role_columns())


def test_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="source 'ads'.*no such file"):
        sources.scan(_spec(tmp_path / "nope.parquet"), ["clicked"])


@pytest.mark.parametrize(
    ("decl", "pattern"),
    [
        (
            {"score_kind": "prob"},
            r"sources\.ads\.score_kind: 'prob' is not one of .*did you mean 'probability'",
        ),
        ({"labl": "x"}, r"sources\.ads\.labl: unknown key; did you mean 'label'"),
        ({"features": "all"}, r"declare exactly one of `score` and `features`"),
        (
            {"split": {"kind": "time", "test_last": "seven days"}},
            r"sources\.ads\.split: test_last: .*not a duration",
        ),
        ({"split": {"kind": "tim"}}, r"split\.kind: 'tim' .*did you mean 'time'"),
        ({"time": None, "split": "time"}, r"a time split needs a time column"),
        ({"weight": "clicked"}, r"given two roles"),
    ],
)
def test_bad_declarations_are_one_line(tmp_path, decl, pattern):
    with pytest.raises(ValueError, match=pattern) as err:
        _spec(tmp_path / "x.parquet", **decl)
    assert "\n" not in str(err.value)


def test_defaults():
    s = _spec("x.parquet")
    assert s.kind == "score" and s.score_kind == "probability" and s.segments == ("country",)
    assert s.split == {"kind": "time"}
    f = sources.parse_source("f", {"path": "x.csv", "label": "y", "features": "all"})
    assert f.kind == "features" and f.split == {"kind": "random"}
    assert sources.parse_sources(None) == {} and sources.parse_sources({}) == {}


def test_feature_columns_all_excludes_roles(tmp_path, frame):
    spec = sources.parse_source(
        "f", {"path": "x", "label": "clicked", "features": "all", "time": "date", "weight": "weight"}
    )
    cols = sources.feature_columns(spec, list(frame.columns))
    assert "clicked" not in cols and "date" not in cols and "weight" not in cols and "x1" in cols


@pytest.mark.parametrize("kind", KINDS)
def test_fingerprint_sha256_and_stat(tmp_path, frame, kind):
    path = write(frame, kind, tmp_path)
    spec = _spec(path)
    fp = sources.fingerprint(spec)
    assert fp["method"] == "sha256" and len(fp["files"]) == (30 if kind == "folder" else 1)
    assert all(not os.path.isabs(f["path"]) for f in fp["files"])
    assert sources.fingerprint(spec) == fp  # stable
    stat = sources.fingerprint(spec, max_bytes=10)
    assert stat["method"] == "stat" and all("mtime" in f and "sha256" not in f for f in stat["files"])
    # change one byte-level value of one file: its sha256 changes, the others do not
    target = sorted(p for p in (path.rglob("*") if path.is_dir() else [path]) if p.is_file())[-1]
    part = pd.read_parquet(target) if target.suffix == ".parquet" else pd.read_csv(target)
    part.loc[part.index[0], "clicked"] = 1 - part.loc[part.index[0], "clicked"]
    if target.suffix == ".parquet":
        part.to_parquet(target, index=False)
    else:
        part.to_csv(target, index=False)
    fp2 = sources.fingerprint(spec)
    changed = [a["path"] for a, b in zip(fp["files"], fp2["files"], strict=True) if a != b]
    assert changed == [os.path.relpath(target, sources._anchor(str(path)))]


# ------------------------------------------------------------------------------------------ time splits


def test_relative_windows_are_past_to_future(frame):
    t = timesplit.to_datetime(frame["date"])
    w = timesplit.time_windows(t.min(), t.max(), {"test_last": "7d", "calib_last": "14d"})
    assert w.test_end == pd.Timestamp("2026-10-01") and w.test_start == pd.Timestamp("2026-09-24")
    assert w.calib_start == pd.Timestamp("2026-09-10")
    split = timesplit.assign_splits(frame["date"], w)
    assert set(split) == {"train", "calib", "test"}
    assert t[split == "calib"].max() < t[split == "test"].min()
    assert t[split == "train"].max() < t[split == "calib"].min()
    assert t[split == "test"].nunique() == 7 and t[split == "calib"].nunique() == 14


def test_explicit_windows_and_rows_after_end(frame):
    t = timesplit.to_datetime(frame["date"])
    cfg = {"calib_start": "2026-09-05", "test_start": "2026-09-20", "test_end": "2026-09-25"}
    w = timesplit.time_windows(t.min(), t.max(), cfg)
    split = timesplit.assign_splits(frame["date"], w)
    assert (split[(t >= "2026-09-25").to_numpy()] == "").all()
    assert (split[((t >= "2026-09-20") & (t < "2026-09-25")).to_numpy()] == "test").all()
    assert w.as_dict() == {
        "calib": ["2026-09-05T00:00:00", "2026-09-20T00:00:00"],
        "test": ["2026-09-20T00:00:00", "2026-09-25T00:00:00"],
    }


def test_timezone_aware_times():
    t = pd.Series(pd.date_range("2026-09-01", periods=24 * 20, freq="h", tz="Europe/Paris"))
    w = timesplit.time_windows(t.min(), t.max(), {"test_last": "2d", "calib_last": "3d"})
    split = timesplit.assign_splits(t, w)
    assert (split == "test").sum() == 48 and (split == "calib").sum() == 72
    w2 = timesplit.time_windows(t.min(), t.max(), {"test_start": "2026-09-18", "calib_last": "1d"})
    assert timesplit.assign_splits(t, w2).tolist().count("calib") == 24


def test_bad_windows():
    with pytest.raises(ValueError, match="outside the data"):
        timesplit.time_windows("2026-09-01", "2026-09-03", {"test_last": "10d"})
    with pytest.raises(ValueError, match="not both"):
        timesplit.check_time_split({"test_last": "1d", "test_start": "2026-01-01"})
    with pytest.raises(ValueError, match="not a date"):
        timesplit.check_time_split({"test_start": "yesterday-ish"})
