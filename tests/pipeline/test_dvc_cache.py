"""An honest DVC cache: bytes flipped in a workspace file never reach the cache object.

The project's cache type (.dvc/config) is applied to a fresh DVC repo; a control with DVC's
``hardlink`` type shows the same edit corrupting the cache, so the test can fail.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def dvc(root: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def project_cache_type() -> str:
    return dvc(ROOT, "config", "--project", "cache.type").strip()


def flip_in_place(path: Path) -> None:
    """Open the existing file (same inode) and overwrite a byte, as an editor or a bug would."""
    path.chmod(0o644)  # root ignores read-only bits anyway; make the point for every user
    with path.open("r+b") as fh:
        fh.seek(10)
        b = fh.read(1)
        fh.seek(10)
        fh.write(bytes([b[0] ^ 0xFF]))


def cache_object(root: Path, md5: str) -> Path:
    return root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]


def flipped_repo(tmp_path: Path, cache_type: str) -> tuple[Path, Path, str]:
    root = tmp_path / cache_type.replace(",", "_")
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dvc(root, "init", "-q")
    dvc(root, "config", "cache.type", cache_type)
    data = root / "raw.csv"
    data.write_bytes(b"".join(b"%d,%d\n" % (i, i % 2) for i in range(2000)))
    md5 = hashlib.md5(data.read_bytes()).hexdigest()  # noqa: S324 (DVC's content address)
    dvc(root, "add", "-q", "raw.csv")
    obj = cache_object(root, md5)
    assert obj.exists()
    flip_in_place(data)
    return root, obj, md5


def test_project_cache_type_cannot_be_corrupted_through_the_workspace(tmp_path):
    cache_type = project_cache_type()
    assert "hardlink" not in cache_type and "symlink" not in cache_type, cache_type
    root, obj, md5 = flipped_repo(tmp_path, cache_type)
    assert hashlib.md5(obj.read_bytes()).hexdigest() == md5, "the cache object changed"  # noqa: S324
    status = dvc(root, "status")
    assert "modified" in status and "raw.csv" in status, status  # DVC sees the edit: status is honest
    dvc(root, "checkout", "--force", "raw.csv")
    assert hashlib.md5((root / "raw.csv").read_bytes()).hexdigest() == md5  # noqa: S324


@pytest.mark.parametrize("cache_type", ["hardlink"])
def test_control_hardlinks_let_the_workspace_corrupt_the_cache(tmp_path, cache_type):
    root, obj, md5 = flipped_repo(tmp_path, cache_type)
    assert hashlib.md5(obj.read_bytes()).hexdigest() != md5  # noqa: S324 (the failure mode we avoid)
