"""The calibrator registry: GTO (DVC's artifact registry), versions and the ``prod`` stage as git tags.

Monitor version k of source ``ads`` is GTO artifact ``ads-calibrator`` version ``vk.0.0`` (tag
``ads-calibrator@vk.0.0`` on a commit that holds ``monitoring/ads/versions/vk.json``); the version in office
carries the ``prod`` stage (tag ``ads-calibrator#prod#N``). Query with ``gto show`` and
``gto history ads-calibrator``. GTO allows one version per commit: version 1 (the select stage's
calibrator) is registered at the checked-out commit that holds it, and each run registers its newest
promotion at the run's commit; a version promoted and superseded within one run (a backfill) stays in
the monitor state and ``monitoring/<source>/versions/`` but not in GTO.

Roll back with ``calibflow monitor rollback --source ads --to-version 1`` (that is
``gto assign ads-calibrator --version v1.0.0 --stage prod --force``): the next monitor run reads the
``prod`` stage and puts that version back in office. Tags are local until ``git push --tags``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

STAGE = "prod"
_NAME = re.compile(r"[^a-z0-9-/]+")
_ARTIFACT = re.compile(r"[#@]")  # a GTO tag: <artifact>@<version> or <artifact>#<stage>#<n>


def artifact_name(source: str) -> str:
    """GTO names allow ``[a-z0-9-/]`` only: ``bank_marketing`` -> ``bank-marketing-calibrator``."""
    return _NAME.sub("-", source.lower()).strip("-") + "-calibrator"


def semver(version: int) -> str:
    return f"v{int(version)}.0.0"


def _number(semver_text: str) -> int:
    return int(semver_text.lstrip("v").split(".")[0])


def prod_version(repo: str | Path, source: str) -> int | None:
    """The monitor version the registry's ``prod`` stage points at (None when nothing is registered)."""
    import gto.api
    from gto.exceptions import ArtifactNotFound

    try:
        found = gto.api.find_versions_in_stage(str(repo), artifact_name(source), STAGE, versions_per_stage=-1)
    except ArtifactNotFound:  # nothing registered yet: the monitor keeps its own champion
        return None
    if not found:
        return None
    found = found if isinstance(found, list) else [found]
    # Several versions can hold `prod` (GTO never unassigns); the one assigned last is in office, which is
    # what `gto show` prints (its default order is by timestamp; find_versions_in_stage's is by SemVer).
    return _number(max(found, key=lambda vs: vs.activated_at).version)


def registered(repo: str | Path, source: str) -> set[int]:
    import gto.api
    from gto.exceptions import ArtifactNotFound

    try:
        shown = gto.api.show(str(repo), artifact_name(source))
    except ArtifactNotFound:
        return set()
    return {_number(row["version"]) for row in shown if row.get("version")}


def promote(repo: str | Path, source: str, version: int, ref: str, message: str = "") -> None:
    """Register ``version`` at commit ``ref`` (if new) and give it the ``prod`` stage."""
    import gto.api

    name = artifact_name(source)
    if version not in registered(repo, source):
        gto.api.register(str(repo), name, ref, version=semver(version), message=message or None)
    _assign(repo, name, version, message)


def rollback(repo: str | Path, source: str, version: int) -> None:
    """Put an earlier registered version back in ``prod`` (the next monitor run honours it)."""
    if version not in registered(repo, source):
        raise ValueError(f"{artifact_name(source)} has no registered version {semver(version)}")
    _assign(repo, artifact_name(source), version, f"rollback to {semver(version)}")


def _assign(repo: str | Path, name: str, version: int, message: str) -> None:
    import gto.api

    with _ordered_tags(repo) as scm:
        gto.api.assign(scm, name, STAGE, version=semver(version), message=message or None, force=True)


def _ordered_tags(repo: str | Path):
    """The repository as a ``scmrepo`` Git whose new annotated tags are dated after every existing one.

    GTO orders a stage's assignments by tag time, which git keeps in whole seconds: two assignments
    within one second would make ``gto show`` and ``find_versions_in_stage`` disagree on the version in
    office. The tag time is therefore set explicitly to the later of now and the newest tag's time plus
    one second (a rollback right after a promotion is at most a few seconds ahead), instead of waiting.
    """
    from dulwich.porcelain import tag_create
    from scmrepo.git import Git

    class _OrderedTagsGit(Git):
        def tag(
            self, tag: str, target: str | None = None, annotated: bool = False, message: str | None = None
        ) -> None:
            artifact = _ARTIFACT.split(tag, maxsplit=1)[0]
            same = [n for n in self.list_tags() if _ARTIFACT.split(n, maxsplit=1)[0] == artifact]
            times = [t.tag_time for t in map(self.get_tag, same) if hasattr(t, "tag_time")]
            when = max([int(time.time()), *(t + 1 for t in times)])
            tag_create(
                self.root_dir,
                tag,
                message=message,
                annotated=annotated,
                objectish=target or "HEAD",
                tag_time=when if annotated else None,
            )

    return _OrderedTagsGit(str(repo))
