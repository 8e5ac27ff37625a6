"""User sources at scale: ``calibflow apply`` throughput and memory, and a 1e7-row score source end to end.

1. ``apply``: a Parquet file of N generated rows (score, label, day, segment) streamed through a fitted Platt
   calibrator by ``calibflow.apply.apply_file`` (DuckDB -> Arrow batches -> Parquet writer), in a
   child process whose peak RSS is read from ``getrusage``. Peer, same run: pandas reads the whole file,
   predicts and writes it (the obvious script), under ``ulimit -v`` of ``--peer-limit-gb``.
   Where it fails, we say so.
2. End to end: a 1e7-row score source (60 daily files' worth of rows in one Parquet file, time split
   ``{test_last: 7d, calib_last: 14d}``) through the pipeline stages in-process (fingerprint, fetch,
   validate@raw, prepare, validate@prepared, train, calibrate@*, validate@calibrated, evaluate, select,
   report), beside the same fit with the data loaded by pandas (read every column, split by date, fit the
   same calibrators, test metrics; no validation, no bootstrap, no report).

Generated data goes under a temporary folder in /tmp and is deleted afterwards.

    python -m benchmarks sources                       # apply at 1e7 and 1e8, end to end at 1e7
    python -m benchmarks.sources --apply-rows 1e7 --e2e-rows 1e6
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 5_000_000
DAYS = 60


def generate(path: Path, n: int, seed: int = 0) -> None:
    """``n`` rows in chunks (bounded memory): day, country, p_model (miscalibrated), clicked."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from scipy.special import expit

    rng = np.random.default_rng(seed)
    start = np.datetime64("2026-07-01")
    writer = None
    done = 0
    countries = pa.array(["FR", "DE", "US", "UK"])
    try:
        while done < n:
            m = min(CHUNK, n - done)
            z = rng.normal(-1.5, 1.3, size=m)
            p_true = expit(z)
            y = (rng.random(m) < p_true).astype(np.int8)
            day = start + (np.arange(done, done + m) * DAYS // n).astype("timedelta64[D]")
            seg = countries.take(pa.array(rng.integers(0, 4, size=m)))
            tab = pa.table(
                {
                    "day": pa.array(day.astype("datetime64[D]")),
                    "country": seg,
                    "p_model": expit(1.8 * z + 0.7),
                    "clicked": y,
                }
            )
            writer = writer or pq.ParquetWriter(path, tab.schema)
            writer.write_table(tab, row_group_size=1_000_000)
            done += m
    finally:
        if writer is not None:
            writer.close()


def _child(code: str, env_extra: dict[str, str] | None = None, limit_gb: float | None = None):
    """Run ``code`` in a fresh interpreter; (seconds, peak RSS MB, ok, stderr tail).

    The child prints ``SECS`` (the work, imports excluded) and ``PEAK_RSS_KB`` (its own peak RSS); a child
    that dies (e.g. over its memory limit) is timed by wall clock and reported as failed.
    """
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **(env_extra or {})}
    pre = None
    if limit_gb:
        lim = int(limit_gb * 2**30)
        pre = lambda: resource.setrlimit(resource.RLIMIT_AS, (lim, lim))  # noqa: E731
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, preexec_fn=pre
    )
    secs = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    rss = None
    for line in proc.stdout.splitlines():  # the child's own figures, imports excluded from the time
        if line.startswith("PEAK_RSS_KB "):
            rss = int(line.split()[1]) / 1024
        if line.startswith("SECS "):
            secs = float(line.split()[1])
    if rss is None:
        rss = max(peak, before) / 1024
    return secs, rss, proc.returncode == 0, proc.stderr.strip().splitlines()[-1:] if proc.returncode else []


PEAK = "import resource; print('PEAK_RSS_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"


def fit_calibrator(work: Path) -> Path:
    from scipy.special import expit, logit

    from calibflow.calibrators import make

    rng = np.random.default_rng(1)
    z = rng.normal(-1.5, 1.3, size=100_000)
    y = (rng.random(z.size) < expit(z)).astype(float)
    cal = make("platt", input="logit").fit(logit(expit(1.8 * z + 0.7)), y)
    path = work / "calibrator.json"
    path.write_text(cal.to_json())
    (work / "card.json").write_text(json.dumps({"input": {"score_kind": "probability"}}))
    return path


def bench_apply(work: Path, n: int, peer_limit_gb: float, peer_max_rows: float = float("inf")) -> dict:
    data = work / f"scores_{n}.parquet"
    t0 = time.perf_counter()
    generate(data, n)
    gen = time.perf_counter() - t0
    cal = fit_calibrator(work)
    out = work / "scored.parquet"
    ours = (
        "import time; from pathlib import Path; from calibflow.apply import apply_file; "
        "t0 = time.perf_counter(); "
        f"apply_file(Path({str(cal)!r}), {str(data)!r}, 'p_model', Path({str(out)!r})); "
        "print('SECS', time.perf_counter() - t0); " + PEAK
    )
    secs, rss, ok, err = _child(ours)
    size_out = out.stat().st_size if out.exists() else 0
    out.unlink(missing_ok=True)
    peer = (
        "import time; import pandas as pd; from pathlib import Path; "
        "from calibflow.calibrators import from_json; "
        "from calibflow.sources import calibrator_input; t0 = time.perf_counter(); "
        f"df = pd.read_parquet({str(data)!r}); c = from_json(Path({str(cal)!r}).read_text()); "
        "df['calibrated'] = c.predict(calibrator_input(df['p_model'].to_numpy(), 'probability', 'logit')); "
        f"df.to_parquet({str(out)!r}, index=False); print('SECS', time.perf_counter() - t0); " + PEAK
    )
    if n > peer_max_rows:  # not run: say so rather than extrapolate
        return _done(
            data, n, gen, secs, rss, ok, err, size_out, (None, None, None, ["not run (--peer-max-rows)"])
        )
    psecs, prss, pok, perr = _child(peer, limit_gb=peer_limit_gb)
    out.unlink(missing_ok=True)
    return _done(data, n, gen, secs, rss, ok, err, size_out, (psecs, prss, pok, perr))


def _done(data: Path, n: int, gen, secs, rss, ok, err, size_out, peer) -> dict:
    psecs, prss, pok, perr = peer
    res = {
        "rows": n,
        "input_mb": data.stat().st_size / 2**20,
        "generate_s": gen,
        "apply_s": secs,
        "apply_rows_per_s": n / secs if ok else None,
        "apply_peak_mb": rss,
        "apply_ok": ok,
        "apply_err": err,
        "output_mb": size_out / 2**20,
        "pandas_s": psecs,
        "pandas_peak_mb": prss,
        "pandas_ok": pok,
        "pandas_err": perr,
    }
    data.unlink()
    return res


def _e2e_params(path: str, methods: list[str], n_boot: int) -> dict:
    import yaml

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["datasets"]["names"] = []
    params["papers"] = []
    params["calibrate"]["methods"] = methods
    params["evaluate"]["n_bootstrap"] = n_boot
    params["sources"] = {
        "big": {"path": path, "label": "clicked", "score": "p_model", "time": "day", "segments": ["country"]}
    }
    return params


E2E = """
import json, sys, time, yaml
from pathlib import Path
from calibflow.pipeline import (fingerprint, fetch, validate, prepare, train, calibrate, evaluate,
                                select, report)
root = Path({root!r}); params = yaml.safe_load(Path({pfile!r}).read_text())
t = {{}}
def step(k, f):
    t0 = time.perf_counter(); f(); t[k] = time.perf_counter() - t0
step("fingerprint", lambda: fingerprint.run("big", params, root))
step("fetch", lambda: fetch.run(params, root))
step("validate@raw", lambda: validate.run("raw", params, root))
step("prepare", lambda: prepare.run(params, root))
step("validate@prepared", lambda: validate.run("prepared", params, root))
step("train", lambda: train.run(params, root))
step("calibrate@*", lambda: [calibrate.run(m, params, root) for m in params["calibrate"]["methods"]])
step("validate@calibrated", lambda: validate.run("calibrated", params, root))
step("evaluate", lambda: evaluate.run(params, root))
step("select", lambda: select.run(params, root))
step("report", lambda: report.run(params, root))
print("STEPS " + json.dumps(t))
"""

PANDAS_FIT = """
import json, time
import numpy as np, pandas as pd
from calibflow import metrics
from calibflow.calibrators import make
from calibflow.sources import to_margin
t = {{}}
t0 = time.perf_counter(); df = pd.read_parquet({path!r})
t["read (pandas, all columns)"] = time.perf_counter() - t0
t0 = time.perf_counter()
day = pd.to_datetime(df["day"]); end = day.max().floor("D") + pd.Timedelta(days=1)
test = (day >= end - pd.Timedelta(days=7)).to_numpy()
calib = ((day >= end - pd.Timedelta(days=21)) & ~test).to_numpy()
m, _ = to_margin(df["p_model"].to_numpy(), "probability"); y = df["clicked"].to_numpy(float)
t["split"] = time.perf_counter() - t0
t0 = time.perf_counter()
for name in {methods!r}:
    c = make(name, input="logit").fit(m[calib], y[calib]); p = c.predict(m[test]); metrics.summary(y[test], p)
t["fit + test metrics"] = time.perf_counter() - t0
print("STEPS " + json.dumps(t))
"""


def bench_e2e(work: Path, n: int, methods: list[str], n_boot: int) -> dict:
    import yaml

    root = work / "e2e"
    root.mkdir()
    data = root / "big.parquet"
    generate(data, n, seed=2)
    pfile = root / "params.yaml"
    pfile.write_text(yaml.safe_dump(_e2e_params("big.parquet", methods, n_boot)))
    out = {}
    for label, code in (
        ("pipeline", E2E.format(root=str(root), pfile=str(pfile))),
        ("pandas", PANDAS_FIT.format(path=str(data), methods=methods)),
    ):
        proc_code = code + "\n" + PEAK
        env = {"CALIBFLOW_DATA_MIRROR": os.environ.get("CALIBFLOW_DATA_MIRROR", "")}
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", proc_code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **env},
        )
        secs = time.perf_counter() - t0
        steps, rss = {}, None
        for line in proc.stdout.splitlines():
            if line.startswith("STEPS "):
                steps = json.loads(line[6:])
            if line.startswith("PEAK_RSS_KB "):
                rss = int(line.split()[1]) / 1024
        out[label] = {
            "seconds": secs,
            "steps": steps,
            "peak_mb": rss,
            "ok": proc.returncode == 0,
            "err": proc.stderr.strip().splitlines()[-3:] if proc.returncode else [],
        }
    card = root / "models/big/card.json"
    got = json.loads(card.read_text()) if card.exists() else {}
    out["card_reason"], out["card_path"] = got.get("reason"), got.get("path")  # path: rows | aggregate
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apply-rows", default="1e7,1e8", help="comma-separated row counts for apply")
    ap.add_argument("--e2e-rows", type=float, default=1e7, help="rows of the end-to-end source (0: skip)")
    ap.add_argument(
        "--methods", default="platt,isotonic,beta", help="calibrate.methods of the end-to-end run"
    )
    ap.add_argument("--n-bootstrap", type=int, default=100, help="evaluate.n_bootstrap of the end-to-end run")
    ap.add_argument("--peer-limit-gb", type=float, default=6.0, help="ulimit -v of the pandas peer")
    ap.add_argument(
        "--peer-max-rows", type=float, default=float("inf"), help="skip the pandas peer above this"
    )
    args = ap.parse_args(argv)
    # A `timeout` (SIGTERM) still deletes the generated data: turn it into SystemExit so `finally` runs.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="calibflow-bench-sources-", dir="/tmp"))
    try:
        for n in [int(float(x)) for x in args.apply_rows.split(",") if x]:
            r = bench_apply(work, n, args.peer_limit_gb, args.peer_max_rows)
            ratio = f"{r['pandas_s'] / r['apply_s']:.2f}x" if r["pandas_ok"] else "pandas failed"
            print(
                f"apply {n:.0e} rows ({r['input_mb']:.0f} MB Parquet): {r['apply_s']:.1f} s, "
                f"{(r['apply_rows_per_s'] or 0) / 1e6:.2f} M rows/s, peak {r['apply_peak_mb']:.0f} MB | "
                f"pandas {r['pandas_s']:.1f} s, peak {r['pandas_peak_mb']:.0f} MB, ok={r['pandas_ok']} "
                f"{r['pandas_err']} | pandas/ours time {ratio}",
                flush=True,
            )
            print("  " + json.dumps(r), flush=True)
        if args.e2e_rows:
            r = bench_e2e(work, int(args.e2e_rows), args.methods.split(","), args.n_bootstrap)
            for k in ("pipeline", "pandas"):
                v = r[k]
                print(f"e2e {k}: {v['seconds']:.1f} s, peak {v['peak_mb']} MB, ok={v['ok']} {v['err']}")
                print("  " + json.dumps({s: round(x, 2) for s, x in v["steps"].items()}))
            print(f"  card ({r['card_path']} path): {r['card_reason']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
