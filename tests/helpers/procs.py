"""The process table as Linux's /proc shows it: who is whose child, and under what name."""

from __future__ import annotations

from pathlib import Path


def table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, process name) of every process visible now."""
    out = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:  # it just ended
                continue
            head, tail = stat.rsplit(")", 1)
            out[int(d.name)] = (int(tail.split()[1]), head.split("(", 1)[1])
    return out


def children(pid: int) -> list[int]:
    return [child for child, (parent, _) in table().items() if parent == pid]


def descendants(pid: int) -> dict[int, str]:
    """pid -> process name of every process under ``pid``."""
    procs = table()
    out: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (up, name) in procs.items():
            if up == parent and child not in out:
                out[child] = name
                todo.append(child)
    return out
