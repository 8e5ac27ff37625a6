"""A migrated, empty Prefect database to start a project's first temporary server from.

A temporary server on a new ``PREFECT_HOME`` spends most of its start creating its SQLite database
(Prefect's migrations, one by one, and its block types): 13-15 s on the 2-core machine against 5 s on an
existing database, which is most of ``calibflow run``'s fixed cost on a new project. So the first database a
server of this Prefect version creates (no flow run in it yet) is copied once to the user's cache, and a
new project's database starts as a copy of it. Keyed by Prefect's version, so an upgrade never gets an
older schema than its migrations expect (Prefect migrates a copy as it would any database of its own).
Only the default SQLite database under ``PREFECT_HOME`` is seeded; ``CALIBFLOW_PREFECT_SEED=0`` turns it off.

A database once prepared needs no second preparation: every temporary server still checked its migrations
(Alembic's scripts loaded to find nothing to do) and hashed Prefect's block registry, 0.6 s of CPU each, on
every run. ``prepared`` says that the database under ``PREFECT_HOME`` was migrated and given its block types
by a server of the installed Prefect (a marker beside it names that version, written once a server that did
both answered, or when the template was copied in); the run's temporary server then skips both. Another
Prefect version, a missing marker or a missing database: the server prepares it as before.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


def enabled() -> bool:
    """Seeding applies: not switched off, and Prefect uses its default database under PREFECT_HOME."""
    if os.environ.get("CALIBFLOW_PREFECT_SEED", "1") == "0":
        return False
    return not os.environ.get("PREFECT_API_DATABASE_CONNECTION_URL") and not os.environ.get(
        "PREFECT_SERVER_DATABASE_CONNECTION_URL"
    )


def template_path() -> Path | None:
    """``$XDG_CACHE_HOME/calibflow/prefect-<version>.db`` (``~/.cache`` by default); None without prefect."""
    try:
        ver = version("prefect")
    except PackageNotFoundError:
        return None
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "calibflow" / f"prefect-{ver}.db"


#: Beside the database: the Prefect version whose server migrated it and registered its block types.
MARK = "calibflow-prepared"


def database(home: Path) -> Path:
    return home / "prefect.db"


def _version() -> str | None:
    try:
        return version("prefect")
    except PackageNotFoundError:
        return None


def prepared(home: Path) -> bool:
    """``home``'s database was migrated and given its block types by a server of the installed Prefect."""
    ver = _version()
    if not enabled() or ver is None or not database(home).is_file():
        return False
    try:
        return (home / MARK).read_text().strip() == ver
    except OSError:
        return False


def mark_prepared(home: Path) -> None:
    """Record that a server of the installed Prefect prepared ``home``'s database (it answered)."""
    ver = _version()
    if not enabled() or ver is None or not database(home).is_file() or prepared(home):
        return
    with contextlib.suppress(OSError):  # a read-only home only costs the next run the check
        from calibflow.io import write_text

        write_text(home / MARK, ver + "\n")


def seed(home: Path) -> bool:
    """Copy the template to ``home``'s database when that does not exist yet; True when copied."""
    db, tpl = database(home), template_path()
    if not enabled() or tpl is None or db.exists() or not tpl.is_file():
        return False
    home.mkdir(parents=True, exist_ok=True)
    _copy(tpl, db)
    mark_prepared(home)  # the template is what a server of this version prepared
    return True


def save(home: Path) -> bool:
    """Keep ``home``'s just-created database as the template (once per Prefect version); True when saved.

    Called right after the server that created it answers: migrated, block types registered, no run yet.
    SQLite's online backup gives a consistent copy while the server holds the database open.
    """
    db, tpl = database(home), template_path()
    if not enabled() or tpl is None or tpl.exists() or not db.is_file():
        return False
    try:
        tpl.parent.mkdir(parents=True, exist_ok=True)
        _copy(db, tpl)
    except (OSError, sqlite3.Error):  # a read-only or full cache only costs the next project its start
        return False
    return True


def _copy(src: Path, dst: Path) -> None:
    """A consistent copy of database ``src`` at ``dst``, written to a temporary name and renamed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", dir=dst.parent)
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True)) as s, contextlib.closing(
            sqlite3.connect(tmp)
        ) as d:
            s.backup(d)
            # one self-contained file (reading a WAL database leaves -wal/-shm files beside it); Prefect
            # switches each connection back to WAL
            d.execute("PRAGMA journal_mode=DELETE")
        os.replace(tmp, dst)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
