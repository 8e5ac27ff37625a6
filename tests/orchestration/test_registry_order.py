"""GTO orders stage assignments by tag time (whole seconds): quick promotions and rollbacks keep their order
without the registry sleeping between them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from calibflow.flows import registry

GTO = str(Path(sys.executable).with_name("gto"))


def _git(root, *args) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


def _commit(root, name: str) -> str:
    (root / name).write_text(name)
    _git(root, "add", name)
    _git(root, "commit", "-qm", name)
    return _git(root, "rev-parse", "HEAD")


def test_assignments_within_one_second_keep_their_order(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "config", "user.email", "t@example.invalid")
    _git(tmp_path, "config", "user.name", "t")
    shas = [_commit(tmp_path, f"v{k}") for k in (1, 2, 3)]
    for version, sha in zip((1, 2, 3), shas, strict=True):
        registry.promote(tmp_path, "ads", version, sha, f"v{version}")
        assert registry.prod_version(tmp_path, "ads") == version
    for version in (1, 3, 2):  # rollbacks, back and forth
        registry.rollback(tmp_path, "ads", version)
        assert registry.prod_version(tmp_path, "ads") == version
    fmt = "--format=%(taggerdate:unix)"
    times = _git(tmp_path, "for-each-ref", fmt, "refs/tags/ads-calibrator#*").split()
    assert len(times) == 6 and len(set(times)) == 6  # every assignment has its own second
    # the GTO command line agrees (its own ordering, by tag time)
    prod = subprocess.run([GTO, "show", "ads-calibrator#prod"], cwd=tmp_path, capture_output=True, text=True)
    assert prod.returncode == 0, prod.stderr
    assert "v2.0.0" in prod.stdout and "v1.0.0" not in prod.stdout and "v3.0.0" not in prod.stdout
    assert registry.registered(tmp_path, "ads") == {1, 2, 3}
