"""Time from ``calibflow init`` to ``models/<name>/calibrator.json`` in a user project, with its breakdown.

A score source in the shape real logs have (``frame``: 30 days, a 200-value string segment ``site`` with a few
null values, float64 scores of a miscalibrated model, a base rate near 1%), written as Parquet into an empty
folder: ``git init``, then timed ``calibflow init ... --name ads`` and ``calibflow run`` until the calibrator
exists. Wall time and the CPU time of every child process (Prefect server, DVC, stage processes), and the load
average, since the machine may be shared. Then a no-op ``calibflow run`` (nothing stale) and a run after a
change of ``evaluate``'s params (which stages rerun).

Breakdown (``--breakdown``): each stage's wall time as the flow reports it ("[k/N] stage ... done in X s"),
beside what a stage process pays before its work: the interpreter's start and the import of its stage module
(a fresh ``python -c "import calibflow.pipeline.<stage>"``, minus a bare interpreter), and Great Expectations'
import, which validation pays inside its work. The rest of a run (Prefect's start and flow, DVC's plan) is the
run's wall minus the stages'.

Peer, same run, same data: the previous code (``--peer-ref``, default ``main``: ``git archive`` of that ref
put first on ``PYTHONPATH``, so the same interpreter and packages run the old calibflow).

    python -m benchmarks.user_project [--rows 1e5 1e6] [--no-peer] [--peer-ref main] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from calibflow.flows import forking

ROOT = Path(__file__).resolve().parents[1]
_DONE = re.compile(r"\] (\S+) \.\.\. (?:done|up to date) in ([0-9.]+) s")
#: Stage modules whose import the breakdown measures (the template's stage commands).
STAGE_MODULES = (
    "fingerprint",
    "fetch",
    "validate",
    "prepare",
    "train",
    "calibrate",
    "calibrate_segments",
    "evaluate",
    "select",
    "report",
)


def frame(n: int, seed: int = 1, days: int = 30, sites: int = 200, nulls: float = 0.001) -> pd.DataFrame:
    """``n`` rows of a click log: ``date``, ``site`` (``sites`` string values, Zipf-like shares, a share
    ``nulls`` of them null), ``p_model`` (float64, overconfident), ``clicked`` (0/1, base rate about 1%)."""
    rng = np.random.default_rng(seed)
    names = np.array([f"site_{k:03d}" for k in range(sites)], dtype=object)
    share = 1.0 / np.arange(1, sites + 1) ** 0.8
    site = names[rng.choice(sites, size=n, p=share / share.sum())]
    site[rng.random(n) < nulls] = None
    effect = rng.normal(0.0, 0.3, size=sites)
    idx = np.searchsorted(names, np.where(site == None, names[0], site).astype(str))  # noqa: E711
    z = rng.normal(-4.6, 0.9, size=n) + effect[idx]
    p_true = 1.0 / (1.0 + np.exp(-z))
    y = (rng.random(n) < p_true).astype(np.int64)
    p_model = 1.0 / (1.0 + np.exp(-(1.4 * z + 2.2)))
    day = pd.Timestamp("2026-01-01") + pd.to_timedelta(np.sort(rng.integers(0, days, size=n)), unit="D")
    return pd.DataFrame({"date": day.date, "site": site, "p_model": p_model.astype(np.float64), "clicked": y})


def peer_env(peer: Path | None) -> dict[str, str]:
    """This environment with the peer's ``calibflow/`` first on PYTHONPATH (no server or root of ours)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("CALIBFLOW_ROOT", "PREFECT_API_URL", "PREFECT_HOME")
    }
    if peer is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(peer), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _cli(folder: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "calibflow.cli", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise SystemExit(f"calibflow {args[0]} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout + proc.stderr


class ProcessCpu:
    """The CPU time of every process under this one while a command runs, by role, sampled every
    ``every`` s with psutil (a process's last sample: what it used up to its last ``every`` s).

    ``RUSAGE_CHILDREN`` misses a process its parent never waits for: the temporary Prefect server ends
    by its parent-death signal when ``calibflow run`` exits, so its CPU was never in the totals.
    """

    ROLES = (
        ("uvicorn", "Prefect server"),
        ("calibflow.flows.dvc_worker", "DVC worker"),
        ("calibflow.flows.stage_host", "stage host (imports)"),
        ("noshell.run()", "launchers"),
        ("calibflow.flows.noshell", "launchers"),  # the previous code's launcher (a peer)
        ("calibflow.cli", "calibflow run (Prefect flow)"),
    )

    def __init__(self, every: float = 0.1):
        import threading

        self.every = every
        self.seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ProcessCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.wait(self.every):
            for proc in me.children(recursive=True):
                try:
                    with proc.oneshot():
                        t = proc.cpu_times()
                        role = self.role(proc)
                except psutil.Error:
                    continue
                known = self.seen.get(proc.pid)
                if known and role.startswith("other") and not known[0].startswith("other"):
                    role = known[0]  # an exiting process shows no command line: keep the role it had
                self.seen[proc.pid] = (role, t.user + t.system)

    @classmethod
    def role(cls, proc) -> str:
        name = proc.name()
        if name == forking.SERVER_NAME:  # the run's temporary server, forked from the run
            return "Prefect server"
        if name == forking.HOST_NAME:  # the stage host, forked from the run
            return "stage host (imports)"
        if name == forking.DVC_NAME:  # the DVC worker, forked from the run
            return "DVC worker"
        if name.startswith("cf:"):  # a stage forked by the stage host (calibflow.flows.stage_host._name)
            return "stage " + name[3:]
        cmd = " ".join(proc.cmdline())
        if "calibflow.pipeline." in cmd and "noshell" not in cmd:  # a stage, its own process
            return "stage " + cmd.split("calibflow.pipeline.")[1].split()[0] + " (own process)"
        other = "other: " + " ".join(cmd.split()[:3])[-60:]
        return next((role for key, role in cls.ROLES if key in cmd), other)

    def by_role(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for role, cpu in self.seen.values():
            out[role] = round(out.get(role, 0.0) + cpu, 2)
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _stages(output: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in _DONE.finditer(output)}


def measure(data: Path, work: Path, layout: str, peer: Path | None) -> dict[str, object]:
    folder = work / layout
    folder.mkdir()
    (folder / "scores.parquet").symlink_to(data)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    env = peer_env(peer)
    load0 = os.getloadavg()[0]
    cpu0, t0 = _cpu(), time.time()
    init = ["init", "--data", "scores.parquet", "--label", "clicked", "--score", "p_model"]
    _cli(folder, env, *init, "--time", "date", "--segments", "site", "--name", "ads")
    t_init = time.time() - t0
    cpu_init = _cpu() - cpu0  # init's processes are all waited for: RUSAGE_CHILDREN has them whole
    with ProcessCpu() as per_process:
        out = _cli(folder, env, "run")
    seconds = (folder / "models/ads/calibrator.json").stat().st_mtime - t0
    cpu = _cpu() - cpu0
    run_s = time.time() - t0 - t_init
    t1 = time.time()
    _cli(folder, env, "run", "-q")
    noop = time.time() - t1
    params = yaml.safe_load((folder / "params.yaml").read_text())
    params["evaluate"] = {**(params.get("evaluate") or {}), "n_bins": 12}
    (folder / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    t2 = time.time()
    rerun = _stages(_cli(folder, env, "run"))
    stage_s = _stages(out)
    return {
        "layout": layout,
        "init_s": round(t_init, 1),
        "init_to_calibrator_s": round(seconds, 1),
        "cpu_s": round(cpu, 1),
        "cpu_all_processes_s": round(sum(per_process.by_role().values()), 1),
        "init_cpu_s": round(cpu_init, 2),
        # the target's measure (init -> calibrator.json): init's CPU and every process of the run
        "cpu_init_and_run_s": round(cpu_init + sum(per_process.by_role().values()), 1),
        "cpu_by_process": per_process.by_role(),
        "stages": len(stage_s),
        "stage_s": stage_s,
        "outside_stages_s": round(run_s - sum(stage_s.values()), 1),
        "noop_rerun_s": round(noop, 2),
        "evaluate_change_reran": sorted(k for k in rerun),
        "evaluate_change_s": round(time.time() - t2, 1),
        "load_avg_start": round(load0, 1),
        "load_avg_end": round(os.getloadavg()[0], 1),
    }


def _wall(argv: list[str], env: dict[str, str], reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True, capture_output=True)
        best = min(best, time.perf_counter() - t0)
    return best


def import_costs(peer: Path | None) -> dict[str, float]:
    """Best-of-3 wall of a fresh interpreter importing each stage module (minus a bare start), and GX."""
    env = peer_env(peer)
    bare = _wall([sys.executable, "-c", "pass"], env)
    out = {"interpreter": round(bare, 3)}
    for mod in STAGE_MODULES:
        code = f"import calibflow.pipeline.{mod}"
        out[mod] = round(_wall([sys.executable, "-c", code], env) - bare, 3)
    out["great_expectations"] = round(
        _wall([sys.executable, "-c", "import great_expectations"], env) - bare, 3
    )
    out["prefect+dvc (the flow)"] = round(
        _wall([sys.executable, "-c", "import calibflow.flows.pipeline, dvc.repo.reproduce"], env) - bare, 3
    )
    return out


def peer_tree(ref: str, work: Path) -> Path:
    dst = work / f"peer-{ref.replace('/', '_')}"
    dst.mkdir()
    archive = subprocess.run(["git", "archive", ref, "calibflow"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dst)], input=archive.stdout, check=True)
    return compiled(dst / "calibflow").parent


def compiled(package: Path) -> Path:
    """``package`` with its bytecode written, as ``pip install`` leaves an installed package: under
    ``PYTHONDONTWRITEBYTECODE`` (set on this machine) a tree without it is compiled again in every process
    of every run, which a user never pays (0.5-1 s of CPU a run for the whole of calibflow)."""
    import compileall

    compileall.compile_dir(str(package), quiet=1)
    return package


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, nargs="+", default=[1e5])
    parser.add_argument("--no-peer", action="store_true")
    parser.add_argument("--peer-ref", default="main", help="git ref of the previous code (the peer)")
    parser.add_argument("--ref", default=None, help="git ref of this code (default: the installed calibflow)")
    parser.add_argument("--breakdown", action="store_true", help="also time each stage module's import")
    args = parser.parse_args(argv)

    compiled(Path(__import__("calibflow").__file__).parent)  # this code, as installed
    with tempfile.TemporaryDirectory(prefix="calibflow-user-project-") as tmp:
        work = Path(tmp)
        peer = None if args.no_peer else peer_tree(args.peer_ref, work)
        this = None if args.ref is None else peer_tree(args.ref, work)
        codes = (("this", this), *(() if peer is None else ((args.peer_ref, peer),)))
        if args.breakdown:
            for who, tree in codes:
                print(json.dumps({"imports": who, **import_costs(tree)}), flush=True)
        for rows in args.rows:
            n = int(rows)
            data = work / f"scores-{n}.parquet"
            frame(n).to_parquet(data, index=False)
            results = []
            for who, tree in codes:
                results.append({"rows": n, "code": who, **measure(data, work, f"{who}-{n}", tree)})
                print(json.dumps(results[-1]), flush=True)
            if len(results) == 2:
                a, b = results
                print(
                    f"{n} rows, this / {args.peer_ref}: "
                    f"wall {a['init_to_calibrator_s'] / b['init_to_calibrator_s']:.2f}x, "
                    f"CPU {a['cpu_s'] / b['cpu_s']:.2f}x, no-op {a['noop_rerun_s'] / b['noop_rerun_s']:.2f}x",
                    flush=True,
                )


if __name__ == "__main__":
    main()
