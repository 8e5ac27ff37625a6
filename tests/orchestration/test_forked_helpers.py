"""A run's helpers (the DVC worker, the stage host, the temporary Prefect server) are forked from the run
(``calibflow.flows.forking``) and change nothing it computes: a real ``calibflow run`` of a real project
with forked helpers writes the same bytes as one whose helpers are new interpreters (``CALIBFLOW_NO_FORK``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from helpers.procs import descendants

from calibflow.flows import forking

NAMES = {forking.SERVER_NAME, forking.HOST_NAME, forking.DVC_NAME}
#: What a run computes: the calibrator, the metrics, the validation results, every method's fit.
OUTPUTS = ("models", "metrics", "reports/validation", "data/calibrated", "data/predictions")


def _project(folder: Path) -> None:
    folder.mkdir()
    rng = np.random.default_rng(3)
    p = rng.uniform(0.002, 0.05, 6000)
    seg = rng.choice(["a", "b", "c"], 6000)
    frame = pd.DataFrame({"p": p, "y": (rng.random(6000) < p * 1.3).astype(int), "site": seg})
    frame.to_parquet(folder / "s.parquet")
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    init = [sys.executable, "-m", "calibflow.cli", "init", "--data", "s.parquet", "--label", "y"]
    init += ["--score", "p", "--segments", "site", "--name", "ads"]
    subprocess.run(init, cwd=folder, check=True, capture_output=True)


def _forks(pid: int) -> set[str]:
    """The names of the helpers under ``pid`` that are forks of it: a helper's name, the run's command line
    (a new interpreter's command line names its own module)."""
    cli = Path(f"/proc/{pid}/cmdline").read_bytes()
    found = set()
    for child, name in descendants(pid).items():
        try:
            same = Path(f"/proc/{child}/cmdline").read_bytes() == cli
        except OSError:
            continue
        if name in NAMES and same:
            found.add(name)
    return found


def _run(folder: Path, home: Path, fork: bool) -> set[str]:
    """``calibflow run`` in ``folder``; the names of the helpers seen forked from it while it ran."""
    env = {**os.environ, "PREFECT_HOME": str(home), forking.OFF_ENV: "0" if fork else "1"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "calibflow.cli", "run", "-q", "--port", "1"], cwd=folder,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[str] = set()
    while proc.poll() is None:
        with contextlib.suppress(OSError):  # it just ended
            seen |= _forks(proc.pid)
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    return seen


def _bytes(folder: Path) -> dict[str, bytes]:
    files = [f for o in OUTPUTS for f in sorted((folder / o).rglob("*")) if f.is_file()]
    return {str(f.relative_to(folder)): f.read_bytes() for f in files}


def test_forked_helpers_write_the_same_bytes_as_new_interpreters(tmp_path):
    _project(tmp_path / "forked")
    shutil.copytree(tmp_path / "forked", tmp_path / "spawned", symlinks=True)
    forked = _run(tmp_path / "forked", tmp_path / "home1", fork=True)
    spawned = _run(tmp_path / "spawned", tmp_path / "home2", fork=False)
    assert forked == NAMES  # all three were forks
    assert spawned == set()  # the control: none was
    a, b = _bytes(tmp_path / "forked"), _bytes(tmp_path / "spawned")
    assert len(a) > 20 and a.keys() == b.keys()
    assert [k for k in a if a[k] != b[k]] == []
