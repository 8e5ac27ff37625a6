"""The reviewer's three streams through the README's path, day by day (issue "The daily monitor on real
deliveries").

In a new folder (a user project): the history days of each stream, ``calibflow init --data ... --score
p_model --time ts --segments country --name <stream> --monitor`` per stream (plus a fourth source,
``broken``, a stable stream whose day ``bad_day`` arrives with labels outside {0, 1} and is re-delivered
fixed 3 days later), ``calibflow run``, then every day: the day's files, ``calibflow monitor run --now
<next morning> --start <day 0>``. Day ``late_day`` of ``stable`` and ``fr_shift`` is delivered 4 days late.
After each run the champion in office (``monitoring/<source>/calibrator.json``) is what serves the next day;
its ``sum p / sum y`` on that day's rows is recorded. The checks (``facts``) are the issue's "Done means".

    python -m benchmarks.monitor_streams [--days 60] [--rows 40000] [--out docs/monitoring/streams.json]
    python -m benchmarks.monitor_streams --table docs/monitoring/streams.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from calibflow.experiments import monitor_streams as M


@dataclass(frozen=True)
class Plan:
    days: int = 60
    rows: int = 40_000
    history: int = 21
    shift_day: int = 30
    late_day: int = 20
    bad_day: int = 12
    seed: int = 0
    calib_windows: int | None = None  # monitor.calib_windows (None: the default)


def free_port() -> int:
    """A port nothing listens on now: two runs on one machine must not share the server's port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(root: Path, *args: str, api_port: int | None = None) -> subprocess.CompletedProcess:
    """The CLI in the project; ``api_port``: report to the project's server there (``PREFECT_API_URL``,
    as the CLI documents), else no API is set and each command finds its own."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PREFECT_HOME": str(root / ".prefect")}
    env.pop("PREFECT_API_URL", None)
    if api_port is not None:
        env["PREFECT_API_URL"] = f"http://127.0.0.1:{api_port}/api"
    return subprocess.run(
        [sys.executable, "-m", "calibflow.cli", *args],
        cwd=root, env=env, capture_output=True, text=True,
    )


def _ok(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        raise RuntimeError(f"{what} failed (rc {proc.returncode}):\n{tail}")


def _deliver_bad(folder: Path, day: int, plan: Plan) -> None:
    path = M.deliver(folder, "stable", day, plan.rows, plan.seed + 1)
    df = pd.read_parquet(path)
    df.loc[df.index[:7], "clicked"] = 2  # seven rows with a label the source does not allow
    df.to_parquet(path, index=False)


def setup(root: Path, plan: Plan, port: int) -> None:
    """The project: history days, one ``init --monitor`` per source, ``calibflow run``; the project's
    server on ``port`` (a free one: the default 4200 may be another run's)."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    for name in (*M.STREAMS, "broken"):
        stream, seed = ("stable", plan.seed + 1) if name == "broken" else (name, plan.seed)
        for d in range(-plan.history, 0):
            M.deliver(root / "userdata" / name, stream, d, plan.rows, seed, shift_day=plan.shift_day)
        _ok(
            _cli(root, "init", "--data", f"userdata/{name}", "--label", "clicked", "--score", "p_model",
                 "--time", "ts", "--segments", "country", "--name", name, "--monitor"),
            f"init {name}",
        )
    if plan.calib_windows is not None:
        params = yaml.safe_load((root / "params.yaml").read_text())
        params["monitor"]["calib_windows"] = plan.calib_windows
        (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-qm", "project"], cwd=root, check=True)
    # One project server for the whole run (README: `calibflow server start`): every daily command
    # talks to it instead of starting a temporary one.
    _ok(_cli(root, "server", "start", "--port", str(port), "--no-ui"), "calibflow server start")
    _ok(_cli(root, "run", "--quiet", "--port", str(port)), "calibflow run")


def teardown(root: Path) -> None:
    """Stop the project's server."""
    _cli(root, "server", "stop")


def deliveries(plan: Plan, d: int) -> list[tuple[str, int, bool]]:
    """(source, day, bad) files delivered on the evening of day ``d``."""
    out = []
    for name in (*M.STREAMS, "broken"):
        if name in ("stable", "fr_shift") and d == plan.late_day:
            continue  # held back ...
        out.append((name, d, name == "broken" and d == plan.bad_day))
        if name in ("stable", "fr_shift") and d == plan.late_day + 4:
            out.append((name, plan.late_day, False))  # ... and delivered after later days
        if name == "broken" and d == plan.bad_day + 3:
            out.append((name, plan.bad_day, False))  # the fixed file replaces the bad one
    return out


def _in_process(root: Path, now: str, start: str) -> subprocess.CompletedProcess:
    """The day's monitor as a library call (``calibflow.pipeline.monitor.main``: the stage the command
    runs, without the Prefect flow around it), its exit code and printed lines kept as the command's."""
    import contextlib
    import io
    import logging

    from calibflow.pipeline import monitor as stage

    out, err = io.StringIO(), io.StringIO()
    argv = ["--root", str(root), "--params", str(root / "params.yaml"), "--now", now, "--start", start]
    quiet = logging.getLogger("calibflow.pipeline.monitor")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # the per-window progress lines: the command logs them to Prefect
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = stage.main(argv)
    finally:
        quiet.setLevel(level)
    return subprocess.CompletedProcess(argv, rc, out.getvalue(), err.getvalue())


def run_days(root: Path, plan: Plan, port: int, cli_days: set[int] | None = None) -> dict[str, Any]:
    """Deliver and monitor every day (each run reports to the project's server on ``port``); the served
    champion's ratio on each next day. ``cli_days``: the days run through the real ``calibflow monitor
    run`` command (None: every day); the others call the stage in process (``_in_process``), which is
    what the tests do where the command itself is not under test."""
    served: dict[str, dict[int, dict[str, float]]] = {n: {} for n in (*M.STREAMS, "broken")}
    runs = []
    first = {n: (root / "models" / n / "calibrator.json").read_text() for n in served}
    for name, text in first.items():
        served[name][0] = _serve(name, text, 0, plan)
    for d in range(plan.days):
        for name, day, bad in deliveries(plan, d):
            if bad:
                _deliver_bad(root / "userdata" / name, day, plan)
            else:
                stream, seed = ("stable", plan.seed + 1) if name == "broken" else (name, plan.seed)
                M.deliver(root / "userdata" / name, stream, day, plan.rows, seed, shift_day=plan.shift_day)
        now = (M.START + pd.Timedelta(days=d + 1, hours=6)).isoformat()
        t0 = time.perf_counter()
        start = M.START.date().isoformat()
        if cli_days is None or d in cli_days:
            proc = _cli(root, "monitor", "run", "--now", now, "--start", start, "--no-commit", api_port=port)
        else:
            proc = _in_process(root, now, start)
        runs.append(
            {"day": d, "rc": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
             "output": (proc.stdout + proc.stderr)[-4000:], "stderr_lines": len(proc.stderr.splitlines())}
        )
        for name in served:
            champ = root / "monitoring" / name / "calibrator.json"
            if champ.exists() and d + 1 < plan.days:
                served[name][d + 1] = _serve(name, champ.read_text(), d + 1, plan)
        print(f"day {d}: rc {proc.returncode}, {runs[-1]['seconds']} s", flush=True)
    return {"served": served, "runs": runs}


def _serve(name: str, text: str, day: int, plan: Plan) -> dict[str, float]:
    stream, seed = ("stable", plan.seed + 1) if name == "broken" else (name, plan.seed)
    frame = M.day_frame(stream, day, plan.rows, seed, shift_day=plan.shift_day)
    return M.served_ratio(text, frame)


def collect(root: Path, plan: Plan, res: dict[str, Any]) -> dict[str, Any]:
    """The checks (``calibflow.experiments.monitor_streams.facts``) on the project's saved states."""
    from calibflow.pipeline.monitor import config

    states = {n: json.loads((root / "monitoring" / n / "state.json").read_text()) for n in res["served"]}
    cfg = config(yaml.safe_load((root / "params.yaml").read_text()))
    return M.facts(states, cfg, plan.__dict__, res)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=int, default=60)
    ap.add_argument("--rows", type=int, default=40_000)
    ap.add_argument("--shift-day", type=int, default=30)
    ap.add_argument("--calib-windows", type=int)
    ap.add_argument("--folder", help="the project folder (default: a new temporary one)")
    ap.add_argument("--out", default="reports/monitor-streams.json")
    ap.add_argument("--port", type=int, help="the project server's port (default: a free one)")
    ap.add_argument("--table", help="print the docs table of an existing JSON and exit")
    a = ap.parse_args(argv)
    if a.table:
        print(M.markdown(json.loads(Path(a.table).read_text())))
        return
    plan = Plan(days=a.days, rows=a.rows, shift_day=a.shift_day, calib_windows=a.calib_windows)
    root = Path(a.folder) if a.folder else Path(tempfile.mkdtemp(prefix="calibflow-streams-")) / "project"
    port = a.port or free_port()
    try:
        setup(root, plan, port)
        res = run_days(root, plan, port)
    finally:
        teardown(root)
    f = collect(root, plan, res)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(f, indent=1, default=str))
    print(M.markdown(f))


if __name__ == "__main__":
    main()
