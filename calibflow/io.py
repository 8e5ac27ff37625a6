"""Atomic file output: a failed run never leaves a half-written artifact over the last good one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # our pid in the name: ``remove_stale_temps`` keeps a live writer's temporary and removes a dead one's
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    # mkstemp creates 0600; give the artifact the mode an ordinary open() would (0666 less umask).
    os.chmod(tmp, 0o666 & ~_umask())
    try:
        yield Path(tmp)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one we may not signal still counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(target: str | os.PathLike[str]) -> list[Path]:
    """Remove leftovers of a killed writer of ``target``: ``.<name>.*.tmp`` / ``.<name>.*.old`` beside it.

    A SIGKILL between ``mkdtemp`` and the swap leaves such a folder (or a ``calibflow.io`` temporary
    file) inside an output folder that DVC hashes and git may commit. Entries named with a live pid
    (``.<name>.<pid>.*``, a writer still running) are kept; anything else of that pattern is stale.
    """
    dst = Path(target)
    removed: list[Path] = []
    if not dst.parent.is_dir():
        return removed
    for entry in dst.parent.glob(f".{dst.name}.*"):
        if entry.suffix not in (".tmp", ".old"):
            continue
        middle = entry.name[len(dst.name) + 2 :].split(".", 1)[0]
        if middle.isdigit() and int(middle) != os.getpid() and pid_alive(int(middle)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write JSON atomically; numpy scalars and arrays are converted to plain Python."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


#: Size limits of the files calibflow reads from the user or its own state, checked before a byte is
#: parsed (a params.yaml is kilobytes; a 50 MB comment took 74 s to validate).
MAX_PARAMS_BYTES = 4 * 2**20
MAX_STATE_BYTES = 256 * 2**20
#: Nesting of ``[``/``{`` in one file: deeper ones are hostile and would exhaust the parser's recursion.
MAX_NESTING = 100


def read_bounded(
    path: str | os.PathLike[str], max_bytes: int, what: str, max_depth: int = MAX_NESTING
) -> str:
    """The text of ``path`` once its size (before reading) and its bracket nesting (before parsing) are
    within bounds; a ``ValueError`` of one line naming the file, the size and the fix otherwise."""
    p = Path(path)
    size = p.stat().st_size
    if size > max_bytes:
        raise ValueError(
            f"{p}: {what} is {size / 2**20:.1f} MB, more than the {max_bytes / 2**20:g} MB allowed; "
            "is it the right file?"
        )
    with p.open("rb") as fh:
        data = fh.read(max_bytes + 1)  # the file may grow after the stat
    if len(data) > max_bytes:
        raise ValueError(f"{p}: {what} grew past {max_bytes / 2**20:g} MB while read")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{p}: {what} is not UTF-8 text (byte {exc.start})") from None
    depth = nesting_depth(text)
    if depth > max_depth:
        raise ValueError(f"{p}: {what} is nested {depth} deep in [ or {{, more than the {max_depth} allowed")
    return text


def nesting_depth(text: str) -> int:
    """Deepest nesting of ``[``/``{`` in ``text`` (brackets inside strings count too: an upper bound)."""
    import re

    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", text):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def machine_memory() -> int:
    """Bytes of memory this process may use: the physical memory, or a smaller cgroup limit; 0 if unknown."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = 0
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = int(Path(f).read_text().strip())
        except (OSError, ValueError):
            continue
        if 0 < limit < (total or limit + 1):
            total = limit
    return int(total)


def _jsonable(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")
