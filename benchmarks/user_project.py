"""Time from ``calibflow init`` to ``models/<name>/calibrator.json`` in a user project.

An 80k-row Parquet score source (tests/helpers/source_data.scores_frame: 30 days, a segment, a miscalibrated
probability) in an empty folder: ``git init``, then timed ``calibflow init ... --name ads`` and
``calibflow run -q`` until the calibrator exists. Wall time and the CPU time of every child process
(Prefect server, DVC, stage processes), and the load average, since the machine may be shared.

Peer, same run, same data: the same project with the benchmark's layout of the calibrate step (one DVC stage
per method, ``calibrate@<method>``, 15 stages) instead of the template's single ``calibrate`` stage.
Then a no-op ``calibflow run`` (nothing stale).

    python -m benchmarks.user_project [--rows 80000] [--no-peer]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PER_METHOD = """  calibrate:
    matrix:
      method: ${calibrate.methods}
    cmd: python -m calibflow.pipeline.calibrate ${item.method}
    deps:
      - .calibflow/code.json
      - data/predictions
    params:
      - scale
      - datasets
      - sources
      - calibrate
    outs:
      - data/calibrated/${item.method}:
          persist: true
"""


def _cli(folder: Path, *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "calibflow.flows.cli", *args], cwd=folder, capture_output=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"calibflow {args[0]} failed:\n{proc.stderr.decode()[-2000:]}")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _per_method(folder: Path) -> None:
    """The peer layout: replace the template's single calibrate stage by one stage per method."""
    text = (folder / "dvc.yaml").read_text()
    start = text.index("  calibrate:\n")
    end = text.index("\n  evaluate:\n")
    (folder / "dvc.yaml").write_text(text[:start] + PER_METHOD + text[end:])
    # DVC expands the matrix from params.yaml itself, so the (default) method list must be stated there
    from calibflow.pipeline.params_schema import DEFAULT_METHODS as methods
    params = (folder / "params.yaml").read_text()
    (folder / "params.yaml").write_text(
        params.replace("calibrate: {}", f"calibrate: {{methods: [{', '.join(methods)}]}}")
    )


def measure(data: Path, work: Path, layout: str) -> dict[str, float | str | int]:
    folder = work / layout
    folder.mkdir()
    (folder / "scores.parquet").symlink_to(data)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    load0 = os.getloadavg()[0]
    cpu0, t0 = _cpu(), time.time()
    _cli(
        folder,
        "init",
        "--data",
        "scores.parquet",
        "--label",
        "clicked",
        "--score",
        "p_model",
        "--time",
        "date",
        "--segments",
        "country",
        "--name",
        "ads",
    )
    t_init = time.time() - t0
    if layout == "per_method":
        _per_method(folder)
    _cli(folder, "run", "-q")
    seconds = (folder / "models/ads/calibrator.json").stat().st_mtime - t0
    cpu = _cpu() - cpu0
    t1 = time.time()
    _cli(folder, "run", "-q")
    stages = len(yaml.safe_load((folder / "dvc.lock").read_text())["stages"])
    return {
        "layout": layout,
        "init_s": round(t_init, 1),
        "init_to_calibrator_s": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "noop_rerun_s": round(time.time() - t1, 1),
        "load_avg_start": round(load0, 1),
        "load_avg_end": round(os.getloadavg()[0], 1),
        "stages": stages,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=80_000)
    parser.add_argument("--no-peer", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from helpers.source_data import scores_frame

    with tempfile.TemporaryDirectory(prefix="calibflow-user-project-") as tmp:
        work = Path(tmp)
        data = work / "scores.parquet"
        scores_frame(n=int(args.rows), days=30, seed=1).to_parquet(data, index=False)
        rows = []
        for layout in ("template",) if args.no_peer else ("template", "per_method"):
            rows.append(measure(data, work, layout))
            print(json.dumps(rows[-1]), flush=True)
        if len(rows) == 2:
            a, b = rows
            print(
                f"template / per-method: wall {a['init_to_calibrator_s'] / b['init_to_calibrator_s']:.2f}x, "
                f"CPU {a['cpu_s'] / b['cpu_s']:.2f}x"
            )


if __name__ == "__main__":
    main()
