"""calibflow.flows.gitops on a real temporary git repository: the checkout, index and work tree stay
untouched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from calibflow.flows.gitops import GitOpsError, commit_paths


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "t@example.invalid")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "params.yaml").write_text("seed: 1\n")
    (tmp_path / "README").write_text("hello\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "init")
    return tmp_path


def snapshot(root: Path) -> tuple[str, str, str, str]:
    """HEAD, the symbolic branch, the real index's content and the porcelain status."""
    return (
        git(root, "rev-parse", "HEAD"),
        git(root, "symbolic-ref", "HEAD"),
        git(root, "ls-files", "--stage"),
        git(root, "status", "--porcelain", "--untracked-files=all"),
    )


def test_commit_goes_to_the_runs_branch_only(repo):
    (repo / "dvc.lock").write_text("schema: '2.0'\n")
    (repo / "metrics").mkdir()
    (repo / "metrics" / "a.json").write_text('{"x": 1}\n')
    (repo / "notes.txt").write_text("user's own unstaged work\n")
    git(repo, "add", "README")  # something staged by the user: must stay staged, not committed
    (repo / "README").write_text("edited by the user\n")
    before = snapshot(repo)

    rev = commit_paths(repo, ["dvc.lock", "metrics"], "run 1")

    assert rev is not None
    assert snapshot(repo) == before
    assert git(repo, "rev-parse", "calibflow/runs") == rev
    files = set(git(repo, "ls-tree", "-r", "--name-only", rev).splitlines())
    assert files == {"params.yaml", "README", "dvc.lock", "metrics/a.json"}
    # The branch starts from HEAD and carries the committed README, not the user's edit.
    assert git(repo, "show", f"{rev}:README") == "hello"
    assert git(repo, "rev-parse", f"{rev}^") == before[0]


def test_second_commit_chains_removes_deleted_files_and_skips_no_change(repo):
    (repo / "metrics").mkdir()
    (repo / "metrics" / "a.json").write_text("1\n")
    (repo / "metrics" / "b.json").write_text("2\n")
    first = commit_paths(repo, ["metrics"], "run 1", branch="runs/x")
    assert commit_paths(repo, ["metrics"], "run 2 (same files)", branch="runs/x") is None

    (repo / "metrics" / "b.json").unlink()
    (repo / "metrics" / "a.json").write_text("3\n")
    second = commit_paths(repo, ["metrics"], "run 3", branch="runs/x")

    assert git(repo, "rev-parse", f"{second}^") == first
    assert set(git(repo, "ls-tree", "-r", "--name-only", second, "metrics").splitlines()) == {
        "metrics/a.json"
    }
    assert git(repo, "show", f"{second}:metrics/a.json") == "3"
    assert git(repo, "log", "--format=%s", "runs/x") == "run 3\nrun 1\ninit"


def test_no_branch_means_no_commit(repo):
    (repo / "dvc.lock").write_text("x\n")
    refs = git(repo, "for-each-ref")
    assert commit_paths(repo, ["dvc.lock"], "run", branch=None) is None
    assert commit_paths(repo, ["dvc.lock"], "run", branch="") is None
    assert git(repo, "for-each-ref") == refs


def test_bad_branch_name_and_outside_path_are_errors(repo, tmp_path_factory):
    with pytest.raises(GitOpsError, match="check-ref-format"):
        commit_paths(repo, ["README"], "run", branch="bad..name")
    outside = tmp_path_factory.mktemp("elsewhere") / "f"
    outside.write_text("x")
    with pytest.raises(GitOpsError, match="outside the repository"):
        commit_paths(repo, [str(outside)], "run")


def test_works_without_a_configured_identity(repo, monkeypatch):
    git(repo, "config", "--unset", "user.email")
    git(repo, "config", "--unset", "user.name")
    monkeypatch.setenv("HOME", str(repo))  # no global identity either
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    (repo / "dvc.lock").write_text("x\n")
    rev = commit_paths(repo, ["dvc.lock"], "run")
    assert git(repo, "log", "-1", "--format=%an <%ae>", rev) == "calibflow <calibflow@localhost>"
