"""`calibflow run` end to end on a large score source (issue 25): every stage streams.

    python -m benchmarks.scale_pipeline --rows 100000000 --parts 20
    python -m benchmarks.scale_pipeline --rows 1000000 --parts 2 --row-threshold 1e5   # a quick check
    python -m benchmarks.scale_pipeline --data /tmp/parts1e9                            # parts written before

Data (``benchmarks.scale_segments.generate``, DuckDB ``COPY`` in a child process, under --work, deleted
afterwards unless --keep): float64 ``score``, int8 ``label``, a 200-value string ``country`` with about 1 in
1,000 values null, an int8 ``seg7`` (7 values). A fresh project (``calibflow init --data ... --score score
--score-kind probability --segments country,seg7``, defaults otherwise: 7 methods, 32 replicates, a 50/50
random split), then ``calibflow run`` under ``/usr/bin/time -v``: wall time and peak RSS (the largest
process of the run, Prefect's server included), and each stage's seconds from DVC's own lines. In the same
run, as the floor: a plain DuckDB read of the same four columns (``sum``/``max`` each, 2 threads), and
``calibflow fit`` on the same files (calib = first half of the parts, test = the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.scale_segments import generate

ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "DVC_NO_ANALYTICS": "1",
       "GX_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING"}


def plain_read(files: list[str]) -> float:
    import duckdb

    con = duckdb.connect(config={"threads": 2})
    t0 = time.perf_counter()
    con.execute(
        "SELECT sum(score), max(label), max(seg7), max(country) FROM read_parquet($f)", {"f": files}
    ).fetchall()
    return time.perf_counter() - t0


def _timed(cmd: list[str], cwd: Path) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; wall, CPU, peak RSS and its output."""
    env = {**os.environ, **ENV}
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], cwd=cwd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0

    def field(name: str) -> float:
        m = re.search(rf"{re.escape(name)}: ([0-9.]+)", p.stderr)
        return float(m.group(1)) if m else float("nan")

    return {
        "ok": p.returncode == 0,
        "wall_s": round(wall, 2),
        "cpu_s": round(field("User time (seconds)") + field("System time (seconds)"), 2),
        "peak_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024, 1),
        "out": p.stdout,
        "err": p.stderr,
    }


def stage_seconds(project: Path) -> dict[str, float]:
    """Each stage's seconds from the run's log (``[k/n] <stage> ... done in X s``, DVC included)."""
    out: dict[str, float] = {}
    for log in sorted((project / ".calibflow" / "logs").glob("run-*.log")):
        for m in re.finditer(r"\[\d+/\d+\] (\S+) \.\.\. done in ([0-9.]+) s", log.read_text(errors="ignore")):
            out[m.group(1)] = float(m.group(2))
    return out


def _set_scale(project: Path, **values: int | None) -> None:
    """Set ``scale`` keys in the project's params.yaml (those not None)."""
    values = {k: int(v) for k, v in values.items() if v is not None}
    if not values:
        return
    import yaml

    pfile = project / "params.yaml"
    params = yaml.safe_load(pfile.read_text())
    params["scale"] = {**(params.get("scale") or {}), **values}
    pfile.write_text(yaml.safe_dump(params, sort_keys=False))


def _fit(cli: list[str], work: Path, files: list[str], project: Path) -> dict:
    """``calibflow fit`` on the same files: calib = the first half of the parts, test = the rest."""
    half = len(files) // 2
    calib, test = work / "calib", work / "test"
    for d, fs in ((calib, files[:half]), (test, files[half:])):
        d.mkdir()
        for f in fs:
            os.link(f, d / Path(f).name)
    fit = _timed([*cli, "fit", "--calib", str(calib), "--test", str(test), "--score", "score", "--label",
                  "label", "--segment", "country", "--segment", "seg7", "--out", str(work / "fit")], project)
    res = {k: v for k, v in fit.items() if k not in ("out", "err")}
    if not fit["ok"]:
        res["tail"] = fit["err"].strip().splitlines()[-5:]
    return res


def _linked(source: str, data: Path) -> list[str]:
    """The parts of an earlier ``generate`` (a 1e9-row folder takes minutes to write), hard-linked into the
    project so deleting the project leaves them."""
    out = []
    for f in sorted(Path(source).glob("*.parquet")):
        os.link(f, data / f.name)
        out.append(str(data / f.name))
    if not out:
        raise SystemExit(f"--data {source}: no .parquet parts there")
    return out


def _summary(project: Path) -> dict:
    res: dict = {}
    card = project / "models" / "big" / "card.json"
    if card.is_file():
        got = json.loads(card.read_text())
        res["card"] = {"path": got.get("path"), "method": got.get("method"), "reason": got.get("reason")}
    raw = project / "reports" / "validation" / "raw.json"
    if raw.is_file():
        res["gx_raw"] = [{"name": s["name"], "success": s["success"], "evaluated": s["evaluated"]}
                         for s in json.loads(raw.read_text())["suites"]]
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=float, default=1e8)
    ap.add_argument("--parts", type=int, default=20)
    ap.add_argument("--work", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true", help="keep the data and the project")
    ap.add_argument("--data", default=None,
                    help="existing Parquet parts from benchmarks.scale_segments.generate (hard-linked, kept)")
    ap.add_argument("--no-fit", dest="fit", action="store_false", help="skip `calibflow fit`")
    ap.add_argument("--row-threshold", type=float, default=None,
                    help="scale.row_threshold (default: calibflow's, 5e6); lower it for a small check")
    ap.add_argument("--distinct-max", type=float, default=None,
                    help="scale.distinct_max (default 2^20): at 1e6 random scores the distinct-score "
                    "estimate falls on either side of 2^20 from run to run; 1e5 keeps the fine grid "
                    "(as at 1e8)")
    a = ap.parse_args(argv)
    rows = int(a.rows)
    work = Path(tempfile.mkdtemp(prefix="scale_pipeline_", dir=a.work))
    try:
        project = work / "project"
        data = project / "scores"
        data.mkdir(parents=True)
        t0 = time.perf_counter()
        if a.data:
            files = _linked(a.data, data)
        else:
            files = generate(str(data), rows, a.parts, 200, 0, 2, null_every=1000)
        gen = time.perf_counter() - t0
        cli = [sys.executable, "-m", "calibflow.cli"]
        init = subprocess.run(
            [*cli, "init", "--data", "scores", "--label", "label", "--score", "score", "--score-kind",
             "probability", "--segments", "country,seg7", "--name", "big"],
            cwd=project, capture_output=True, text=True, env={**os.environ, **ENV},
        )
        if init.returncode:
            raise SystemExit(f"calibflow init failed: {(init.stdout + init.stderr).strip()[-800:]}")
        _set_scale(project, row_threshold=a.row_threshold, distinct_max=a.distinct_max)
        load_before = [round(x, 1) for x in os.getloadavg()]
        read = [plain_read(files) for _ in range(2)]
        run = _timed([*cli, "run"], project)
        res: dict = {
            "rows": rows if not a.data else "from --data",
            "parts": len(files),
            "generate_s": round(gen, 1),
            "plain_read_s": [round(x, 2) for x in read],
            "run": {k: v for k, v in run.items() if k not in ("out", "err")},
            "run_over_read": round(run["wall_s"] / min(read), 1),
            "run_cpu_over_read": round(run["cpu_s"] / min(read), 1),
            "stage_s": stage_seconds(project),
            # prepare stores tables, not rows: what DVC caches for the prepared stage
            "prepared_mb": round(sum(f.stat().st_size for f in (project / "data" / "prepared").rglob("*")
                                     if f.is_file()) / 2**20, 2),
        }
        if not run["ok"]:
            text = run["out"] + run["err"].split("\tCommand being timed")[0]  # not /usr/bin/time's block
            res["run"]["tail"] = text.strip().splitlines()[-15:]
        res.update(_summary(project))
        if a.fit:
            res["fit"] = _fit(cli, work, files, project)
        res["load_avg_before"] = load_before
        res["load_avg"] = [round(x, 1) for x in os.getloadavg()]
        print(json.dumps(res, indent=2))
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
