"""The monitor's morning (issue 35): ``calibflow monitor run`` on one new day for several sources.

A project folder with ``--sources`` score sources, each a folder of daily Parquet files of ``--rows`` rows
(the "stable" law of ``benchmarks.monitor_scale``: score ~ N(0, 1), P(y=1) = sigmoid(-2.5 + 1.2 score), a
string segment of two values) and a Platt champion per source. ``--history`` days are delivered and scored
by a first ``calibflow monitor run`` (timed, reported as the first run); then one more day arrives in every
source and the morning's ``calibflow monitor run`` is timed: wall seconds, the CPU seconds of every child
process (the temporary API server and the flow), the load average before and after.

    python -m benchmarks.monitor_morning --sources 5 --rows 100000 --history 7 --out /tmp/morning.json

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
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from benchmarks import monitor_scale


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


def timed_run(root: Path, now: pd.Timestamp) -> dict:
    """``calibflow monitor run --now <now> --no-commit`` in ``root``: rc, wall and children's CPU seconds."""
    exe = Path(sys.executable).with_name("calibflow")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    t = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.run([str(exe), "monitor", "run", "--now", now.isoformat(), "--no-commit"], cwd=root,
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = {"rc": proc.returncode, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
           "load": [round(load, 1), round(os.getloadavg()[0], 1)]}
    if proc.returncode != 0:
        out["tail"] = (proc.stdout + proc.stderr)[-1500:]
    return out


def main(argv: list[str] | None = None) -> None:
    from calibflow.experiments.monitoring import DAY0

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", type=int, default=5)
    ap.add_argument("--rows", type=int, default=100_000, help="rows per source per day")
    ap.add_argument("--history", type=int, default=7, help="days scored by the first run")
    ap.add_argument("--out", help="write the result as JSON here too")
    ap.add_argument("--keep", help="build the project in this folder (kept) instead of a temporary one")
    a = ap.parse_args(argv)
    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="calibflow-morning-"))
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    names = write_project(root, a.sources, a.rows, a.history)
    res = {"sources": a.sources, "rows_per_day": a.rows, "history_days": a.history}
    # Labels of day d are complete at d + 1 + label_delay: the first run scores days 0..history-1.
    res["first_run"] = timed_run(root, DAY0 + pd.Timedelta(days=a.history + 1))
    for i, name in enumerate(names):
        write_day(root / "data" / name, a.history, a.rows, seed=i)
    res["morning"] = timed_run(root, DAY0 + pd.Timedelta(days=a.history + 2))
    scored = [json.loads((root / "monitoring" / n / "state.json").read_text())["processed"] for n in names]
    res["windows_scored_per_source"] = sorted({len(p) for p in scored})
    print(json.dumps(res, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    if not a.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
