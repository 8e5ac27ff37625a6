"""The monitor's morning (issue 35): ``calibflow monitor run`` on one new day for several sources.

A project folder with ``--sources`` score sources, each a folder of daily Parquet files of ``--rows`` rows
(the "stable" law of ``benchmarks.monitor_scale``: score ~ N(0, 1), P(y=1) = sigmoid(-2.5 + 1.2 score), a
string segment of two values) and a Platt champion per source. ``--history`` days are delivered and scored
by a first ``calibflow monitor run`` (timed, reported as the first run); then one more day arrives in every
source and the morning's ``calibflow monitor run`` is timed: wall seconds, the CPU seconds of every child
process (the temporary API server, the flow, its source workers), the peak resident memory of all of them
together (their RSS summed, sampled every 0.1 s from ``/proc``) and of the largest one, the load average
before and after.

    python -m benchmarks.monitor_morning --sources 5 --rows 100000 --history 7 --out /tmp/morning.json
    python -m benchmarks.monitor_morning --sources 1 --rows 10000000 --history 3     # a day of 1e7 rows

Peer, same run, same files: the previous code (``--peer-ref``, default ``main``: ``git archive`` of that ref
first on ``PYTHONPATH``, as ``benchmarks.user_project`` does) runs the same morning from a copy of the same
state (the first run is this code's; ``--no-peer`` skips it). The codes take turns (``--reps`` mornings
each, this code first), so a change of load hits both.

The real command as a team runs it (its own temporary Prefect server, no ``.dvc``: a monitor-only project
needs only ``params.yaml``); ``--no-commit`` keeps git out of the timing.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from benchmarks import monitor_scale
from benchmarks.user_project import compiled, peer_env, peer_tree


def write_day(folder: Path, d: int, rows: int, seed: int) -> None:
    """Day ``d``'s file (``benchmarks.monitor_scale``'s law), deterministic in ``seed`` and ``d``."""
    folder.mkdir(parents=True, exist_ok=True)
    monitor_scale.write_day(folder, d, rows, np.random.default_rng([seed, d]))


def write_project(root: Path, sources: int, rows: int, history: int) -> list[str]:
    """The project: ``history`` days per source, a Platt champion each, params.yaml; the source names."""
    names = [f"s{i}" for i in range(sources)]
    decl = {}
    for i, name in enumerate(names):
        for d in range(history):
            write_day(root / "data" / name, d, rows, seed=i)
        (root / "models" / name).mkdir(parents=True, exist_ok=True)
        (root / "models" / name / "calibrator.json").write_text(monitor_scale.platt_champion(i))
        decl[name] = {"path": f"data/{name}", "label": "label", "score": "score", "score_kind": "score",
                      "time": "time", "segments": ["segment"]}
    params = {"seed": 0, "sources": decl, "monitor": {"sources": names, "label_delay": "1D"}}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return names


ROOT = Path(__file__).resolve().parents[1]


def _tree_rss(pid: int) -> tuple[int, int]:
    """(sum, largest) resident kB of ``pid`` and its descendants now, from ``/proc``."""
    kids: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            kids.setdefault(int(fields[1]), []).append(int(d.name))
            rss[int(d.name)] = int(fields[21]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except (OSError, ValueError, IndexError):
            continue
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo += kids.get(p, [])
    mine = [rss.get(p, 0) for p in seen]
    return sum(mine), max(mine, default=0)


class PeakRss:
    """The peak of the summed RSS of a process tree, sampled in a thread every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.1) -> None:
        self.pid, self.every, self.total, self.largest = pid, every, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            total, largest = _tree_rss(self.pid)
            self.total, self.largest = max(self.total, total), max(self.largest, largest)
            self._stop.wait(self.every)

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return {"peak_mb_all": self.total // 1024, "peak_mb_largest": self.largest // 1024}


def timed_run(root: Path, now: pd.Timestamp, peer: Path | None = None) -> dict:
    """``calibflow monitor run --now <now> --no-commit`` in ``root``: rc, wall, children's CPU seconds,
    peak memory of all its processes, load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "calibflow.cli", "monitor", "run", "--now", now.isoformat(), "--no-commit"]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=peer_env(peer))
    peak = PeakRss(proc.pid)
    text, _ = proc.communicate()
    wall = time.perf_counter() - t
    mem = peak.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = {"rc": proc.returncode, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), **mem,
           "load": [round(load, 1), round(os.getloadavg()[0], 1)]}
    if proc.returncode != 0:
        out["tail"] = text[-1500:]
    return out


def main(argv: list[str] | None = None) -> None:
    from calibflow.experiments.monitoring import DAY0

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", type=int, default=5)
    ap.add_argument("--rows", type=float, default=100_000, help="rows per source per day (1e7 is fine)")
    ap.add_argument("--history", type=int, default=7, help="days scored by the first run")
    ap.add_argument("--reps", type=int, default=1, help="mornings per code, taking turns")
    ap.add_argument("--peer-ref", default="main", help="git ref of the previous code (the peer)")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--out", help="write the result as JSON here too")
    ap.add_argument("--keep", help="build the project in this folder (kept) instead of a temporary one")
    a = ap.parse_args(argv)
    compiled(Path(__import__("calibflow").__file__).parent)  # this code, as installed
    rows = int(a.rows)
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="calibflow-morning-"))
    shutil.rmtree(work, ignore_errors=True)
    base = work / "first"
    base.mkdir(parents=True)
    names = write_project(base, a.sources, rows, a.history)
    res = {"sources": a.sources, "rows_per_day": rows, "history_days": a.history,
           "revision": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                      text=True).stdout.strip()}
    # Labels of day d are complete at d + 1 + label_delay: the first run scores days 0..history-1.
    res["first_run"] = timed_run(base, DAY0 + pd.Timedelta(days=a.history + 1))
    print(json.dumps({"first_run": res["first_run"]}), flush=True)
    if res["first_run"]["rc"] != 0:
        raise SystemExit(f"the first run failed:\n{res['first_run']['tail']}")
    for i, name in enumerate(names):
        write_day(base / "data" / name, a.history, rows, seed=i)
    codes: list[tuple[str, Path | None]] = [("this", None)]
    if not a.no_peer:
        codes.append((a.peer_ref, peer_tree(a.peer_ref, work)))
    res["mornings"] = []
    written: dict[int, list[str]] = {}
    for rep in range(a.reps):
        for label, peer in codes:
            folder = work / f"morning-{label.replace('/', '_')}-{rep}"
            shutil.copytree(base, folder, symlinks=True)
            out = {"code": label, **timed_run(folder, DAY0 + pd.Timedelta(days=a.history + 2), peer)}
            if out["rc"] == 0:
                states = [(folder / "monitoring" / n / "state.json").read_text() for n in names]
                scored = [json.loads(text)["processed"] for text in states]
                out["windows_scored_per_source"] = sorted({len(p) for p in scored})
                # Every number the monitor wrote (state: scores, bands, alerts, gates), against this code's
                # first morning: the same bytes, or the codes disagree.
                first = written.setdefault(rep, states)
                if first is not states:
                    out["state_same_as_this"] = first == states
            res["mornings"].append(out)
            print(json.dumps(out), flush=True)
            shutil.rmtree(folder, ignore_errors=True)
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
