"""Git plumbing for run records: commit files to a side branch without touching the checkout.

A scheduled or ``--commit`` run records its outputs (``dvc.lock``, git-tracked metrics, the summary)
as a commit on a dedicated branch, ``calibflow/runs`` by default. It must never move the user's
checked-out branch, stage anything in their index or rewrite their work tree (they may be editing
while a nightly run finishes). So the commit is built with plumbing only:

1. a temporary index (``GIT_INDEX_FILE``) seeded from the target branch (or from ``HEAD`` when the
   branch does not exist yet, so the branch starts as "the project plus its runs");
2. ``git update-index --add --remove --stdin`` with the given files as they are in the work tree;
3. ``git write-tree`` then ``git commit-tree`` with the branch tip as parent;
4. ``git update-ref`` with the old tip as the expected value (a compare-and-swap: two writers cannot
   lose each other's commits).

``branch=None`` (or ``""``) means "no commit". Paths may be files or folders (expanded to their files;
files deleted from a folder are removed from the branch too).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

DEFAULT_BRANCH = "calibflow/runs"
_ZERO = "0" * 40
#: Identity used when the repository has none configured (CI clones, containers).
_FALLBACK_IDENTITY = {
    "GIT_AUTHOR_NAME": "calibflow",
    "GIT_AUTHOR_EMAIL": "calibflow@localhost",
    "GIT_COMMITTER_NAME": "calibflow",
    "GIT_COMMITTER_EMAIL": "calibflow@localhost",
}


class GitOpsError(RuntimeError):
    """A git plumbing step failed; the message names the step and git's own words."""


def _git(root: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=root, env=env, input=stdin, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise GitOpsError(f"git {args[0]} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout.strip()


def _rev(root: Path, ref: str) -> str | None:
    proc = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or None


def _identity_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    has_email = subprocess.run(["git", "config", "user.email"], cwd=root, capture_output=True).returncode == 0
    if not has_email:
        for key, value in _FALLBACK_IDENTITY.items():
            env.setdefault(key, value)
    return env


def _expand(root: Path, paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Files under ``paths``, relative to ``root`` (folders expanded; missing paths kept for removal)."""
    out: list[str] = []
    for p in paths:
        full = (root / p).resolve()
        if not full.is_relative_to(root):
            raise GitOpsError(f"path {str(p)!r} is outside the repository {root}")
        if full.is_dir():
            out.extend(str(f.relative_to(root)) for f in sorted(full.rglob("*")) if f.is_file())
        else:
            out.append(str(full.relative_to(root)))
    return out


def commit_paths(
    root: str | os.PathLike[str],
    paths: Iterable[str | os.PathLike[str]],
    message: str,
    branch: str | None = DEFAULT_BRANCH,
) -> str | None:
    """Commit ``paths`` (as they are in the work tree) to ``branch``; return the new commit or None.

    None when ``branch`` is empty/None or when nothing changed against the branch tip. The checked-out
    branch, the real index and the work tree are left exactly as they were.
    """
    if not branch:
        return None
    base = Path(root).resolve()
    top = Path(_git(base, "rev-parse", "--show-toplevel")).resolve()
    ref = f"refs/heads/{branch}"
    _git(top, "check-ref-format", ref)
    tip = _rev(top, ref)
    seed = tip or _rev(top, "HEAD")
    files = _expand(top, [base / p for p in paths])
    with tempfile.TemporaryDirectory(prefix="calibflow-index-") as tmp:
        env = {**_identity_env(top), "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if seed:
            _git(top, "read-tree", seed, env=env)
        # Files once in a committed folder but deleted since: listed so --remove drops them.
        folders = [str(Path(p).relative_to(top)) for p in ((base / q).resolve() for q in paths) if p.is_dir()]
        if folders:
            tracked = _git(top, "ls-files", "--", *folders, env=env).splitlines()
            files = sorted(set(files) | set(tracked))
        if files:
            _git(top, "update-index", "--add", "--remove", "--stdin", env=env, stdin="\n".join(files) + "\n")
        tree = _git(top, "write-tree", env=env)
        if seed and _git(top, "rev-parse", f"{seed}^{{tree}}") == tree and tip:
            return None
        parents = ["-p", tip] if tip else (["-p", seed] if seed else [])
        commit = _git(top, "commit-tree", tree, *parents, "-m", message, env=env)
    _git(top, "update-ref", "-m", f"calibflow: {message.splitlines()[0]}", ref, commit, tip or _ZERO)
    return commit


@contextlib.contextmanager
def index_kept(root: str | os.PathLike[str]) -> Iterator[None]:
    """Put the user's git index back byte for byte after the block.

    ``core.autostage = true`` (.dvc/config) makes ``dvc repro`` ``git add`` ``dvc.lock`` and the
    ``.gitignore`` files it writes: a ``--commit`` run, which records those on its own branch, would
    otherwise leave them staged in the user's index. Outside a git repository this does nothing.
    """
    from calibflow.io import write_bytes

    base = Path(root)
    try:
        path = base / _git(base, "rev-parse", "--git-path", "index")
    except (GitOpsError, OSError):
        yield
        return
    before = path.read_bytes() if path.is_file() else None
    try:
        yield
    finally:
        now = path.read_bytes() if path.is_file() else None
        if now != before:
            if before is None:
                path.unlink(missing_ok=True)
            else:
                write_bytes(path, before)
