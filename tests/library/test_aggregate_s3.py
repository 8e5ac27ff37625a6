"""Issue 25: sources on object storage (``s3://``) read by both engines, against a real S3-compatible
server (moto's server mode, on a free local port, started here), not a mock of the reader.

DuckDB cannot load its httpfs extension offline (``INSTALL httpfs`` downloads it), so both engines read
through fsspec's s3fs (``calibflow.sources.register_stores``); the Dask engine's worker processes do the
same on their side. The tables must equal the ones built from the same files on the local disk.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibflow.aggregate.run import fit_files, tables_for

BUCKET = "logs"
SUMS = ("sum_z", "sum_q", "sum_ll", "sum_q2")


@pytest.fixture(scope="module")
def server():
    from moto.server import ThreadedMotoServer

    srv = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    yield f"http://{host}:{port}"
    srv.stop()


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """Three Parquet parts (score, label, a 5-value segment) on the local disk."""
    rng = np.random.default_rng(21)
    folder = tmp_path_factory.mktemp("local")
    for i in range(3):
        n = 4000
        z = rng.normal(-1, 1.5, n)
        pd.DataFrame(
            {
                "score": 1 / (1 + np.exp(-z)),
                "label": (rng.random(n) < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int8),
                "seg": rng.choice(np.array(["a", "b", "c", "d", "e"]), n),
            }
        ).to_parquet(folder / f"part-{i}.parquet", index=False)
    return folder


@pytest.fixture
def store(server, local, monkeypatch):
    """The bucket holding the same parts under ``day=1/``; AWS settings point boto3 and s3fs at the server
    (the environment is restored after each test, so each test sets it)."""
    import boto3
    import fsspec

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": server}.items():
        monkeypatch.setenv(k, v)
    fsspec.filesystem("s3").clear_instance_cache()  # an instance made under other settings is not reused
    s3 = boto3.client("s3")
    if BUCKET not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
        s3.create_bucket(Bucket=BUCKET)
        for f in sorted(local.glob("*.parquet")):
            s3.upload_file(str(f), BUCKET, f"day=1/{f.name}")
    return f"s3://{BUCKET}/day=1/"


def _same(a, b) -> None:
    """Equal keys and counts; float sums to 1e-12 (the same parts, summed in the same order)."""
    keys = [c for c in a.columns if c not in SUMS]
    assert list(a.columns) == list(b.columns) and len(a) == len(b) > 0
    assert (a[keys].to_numpy() == b[keys].to_numpy()).all()
    for c in SUMS:
        np.testing.assert_allclose(a[c], b[c], rtol=1e-12)


@pytest.mark.parametrize("engine", ["duckdb", "dask"])
def test_engine_reads_s3_like_the_disk(store, local, engine):
    opts = {"segments": ["seg"], "replicates": 8, "seed": 1, "distinct_max": 0}
    remote = tables_for(store, "score", "label", engine, **opts)
    disk = tables_for(str(local), "score", "label", "duckdb", **opts)
    assert remote.fine["n"].sum() == 12_000
    _same(remote.fine, disk.fine)
    _same(remote.segments["seg"], disk.segments["seg"])


def test_fit_files_on_s3(store, local, tmp_path):
    """``calibflow fit``'s code path on s3:// calib and test sources: the same calibrators as from disk."""
    rec = fit_files(store + "part-0.parquet", store + "part-[12].parquet", "score", "label",
                    tmp_path / "s3", ["platt", "isotonic"], replicates=8)
    disk = fit_files(str(local / "part-0.parquet"), str(local / "part-[12].parquet"), "score", "label",
                     tmp_path / "disk", ["platt", "isotonic"], replicates=8)
    assert rec["calib"]["rows"] == 4000 and rec["test"]["rows"] == 8000
    for m in ("platt", "isotonic"):
        assert (tmp_path / "s3" / f"{m}.json").read_text() == (tmp_path / "disk" / f"{m}.json").read_text()
        assert rec["methods"][m]["log_loss"] == pytest.approx(disk["methods"][m]["log_loss"], rel=1e-12)


def test_missing_prefix_is_one_line(store):
    with pytest.raises(ValueError, match="no Parquet files at 's3://logs/nothing/'"):
        tables_for(f"s3://{BUCKET}/nothing/", "score", "label")
