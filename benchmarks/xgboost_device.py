"""XGBoost base-model training and prediction on CPU vs GPU (CUDA), and whether calibration cares.

Run: ``PYTHONPATH=. python -m benchmarks.xgboost_device`` (``--sizes 1e6`` for the small pass only,
``--repeats N``, ``--no-bank`` to skip the real-data row, ``--bank-npz FILE`` for a carried copy of the
bank_marketing design matrix, ``--json FILE`` for all numbers). Never required by the tests.

Models are ``calibflow.models.train_classifier``-equivalent: the native params come from
``calibflow.models.xgb_params`` (``binary:logistic``, ``tree_method="hist"``, n_estimators 200, max_depth 6,
learning_rate 0.1) with only ``device`` and ``nthread`` (all cores) added, since ``train_classifier`` has no
``device`` param; the fit is ``DMatrix`` + ``xgb.train`` exactly as there, and prediction is
``Booster.predict(DMatrix(X), output_margin=True)`` as in ``calibflow.models.predict_margin``.

Data: (a) synthetic imbalanced, 12 Gaussian features with a non-linear logit and about 8% positives, at
1e6 and 1e7 training rows, with separate 2e5-row calibration and test sets drawn from the same law; (b)
bank_marketing (``calibflow.datasets.binary_task``), split 60/20/20 (train/calibration/test) and the train
part replicated ``--bank-replicate`` times so the fit is large enough to time (the held-out rows are never
replicated). Timed: fit (DMatrix build + 200 rounds) and predict (margins for the training rows), the
median of ``--repeats`` runs after one untimed warm-up fit on small data per device (so CUDA context
creation is not counted). Checks: test AUC of the CPU and GPU models agree within 0.002; Platt and
isotonic (``calibflow.calibrators``) fitted on each model's calibration-set margins give test ECEs whose
CPU-GPU difference is compared with a bootstrap standard error of the ECE (noise scale).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xgboost as xgb
from numpy.typing import NDArray

from calibflow import calibrators
from calibflow.metrics import auc, ece
from calibflow.models import xgb_params

PARAMS: dict[str, Any] = {"n_estimators": 200, "max_depth": 6, "learning_rate": 0.1, "tree_method": "hist"}
AUC_TOL = 0.002
N_HOLDOUT = 200_000
N_FEATURES = 12
SEED = 0
N_BOOT = 20
LARGE = 5_000_000  # synthetic sizes from here on get --repeats-large timed runs


@dataclass
class Data:
    name: str
    X: NDArray[np.float64]
    y: NDArray[np.int64]
    X_cal: NDArray[np.float64]
    y_cal: NDArray[np.int64]
    X_test: NDArray[np.float64]
    y_test: NDArray[np.int64]


@dataclass
class Row:
    data: str
    rows: int
    features: int
    device: str
    fit_s: float
    predict_s: float
    auc: float
    auc_se: float
    ece: dict[str, float] = field(default_factory=dict)
    ece_se: dict[str, float] = field(default_factory=dict)
    fit_all: list[float] = field(default_factory=list)
    predict_all: list[float] = field(default_factory=list)


def synthetic(n: int, seed: int) -> tuple[NDArray[np.float64], NDArray[np.int64]]:
    """12 N(0,1) features; the logit mixes linear, interaction and threshold terms; ~8% positives."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, N_FEATURES))
    z = (
        0.8 * X[:, 0]
        - 0.6 * X[:, 1]
        + 0.5 * X[:, 2] * X[:, 3]
        + 0.7 * (X[:, 4] > 0.5)
        + 0.4 * np.sin(2 * X[:, 5])
        + 0.3 * X[:, 6] ** 2
        - 3.6
    )
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-z))).astype(np.int64)
    return X, y


def synthetic_data(n: int) -> Data:
    X, y = synthetic(n, SEED)
    Xc, yc = synthetic(N_HOLDOUT, SEED + 1)
    Xt, yt = synthetic(N_HOLDOUT, SEED + 2)
    return Data(f"synthetic {n:.0e}", X, y, Xc, yc, Xt, yt)


def bank_data(npz: str | None, replicate: int, seed: int = SEED) -> Data:
    """bank_marketing split 60/20/20, train part tiled ``replicate`` times (timing size only)."""
    if npz:
        with np.load(npz) as f:
            X, y = f["X"].astype(np.float64), f["y"].astype(np.int64)
    else:
        from calibflow.datasets import binary_task

        task = binary_task("bank_marketing")
        X, y = task.X.astype(np.float64), task.y.astype(np.int64)
    from calibflow.splits import split_indices

    parts = split_indices(len(y), {"train": 0.6, "cal": 0.2, "test": 0.2}, seed=seed, stratify=y)
    tr, ca, te = (np.asarray(parts[k]) for k in ("train", "cal", "test"))
    Xtr, ytr = np.tile(X[tr], (replicate, 1)), np.tile(y[tr], replicate)
    return Data(f"bank_marketing x{replicate}", Xtr, ytr, X[ca], y[ca], X[te], y[te])


def native_params(device: str, seed: int = SEED) -> tuple[dict[str, Any], int]:
    native, rounds = xgb_params({**PARAMS, "n_jobs": os.cpu_count() or 1}, seed, "binary:logistic")
    native["device"] = device
    return native, rounds


def fit(X: NDArray[np.float64], y: NDArray[np.int64], device: str, seed: int = SEED) -> xgb.Booster:
    native, rounds = native_params(device, seed)
    return xgb.train(native, xgb.DMatrix(X, label=y), num_boost_round=rounds)


def margin(model: xgb.Booster, X: NDArray[np.float64]) -> NDArray[np.float64]:
    return model.predict(xgb.DMatrix(X), output_margin=True).astype(np.float64)


def cuda_status() -> str | None:
    """None when CUDA training works, else the reason it does not (printed as the skip line)."""
    if not xgb.build_info().get("USE_CUDA", False):
        return f"this xgboost build ({xgb.__version__}) has no CUDA support (e.g. the xgboost-cpu wheel)"
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((256, 4)), rng.integers(0, 2, 256)
    with warnings.catch_warnings(record=True) as caught:  # XGBoost warns and falls back when no GPU is seen
        warnings.simplefilter("always")
        try:
            booster = xgb.train({"device": "cuda", "tree_method": "hist"}, xgb.DMatrix(X, label=y), 2)
        except xgb.core.XGBoostError as exc:
            return f"no usable CUDA device ({str(exc).splitlines()[0][:150]})"
    used = json.loads(booster.save_config())["learner"]["generic_param"].get("device", "")
    if used.startswith("cuda"):
        return None
    said = f": {str(caught[0].message).strip()[:150]}" if caught else ""
    return f"xgboost fell back to {used!r}{said}"


def timed(f: Callable[[], Any], repeats: int) -> tuple[Any, list[float]]:
    out, ts = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        ts.append(time.perf_counter() - t0)
    return out, ts


def calibration_eces(d: Data, model: xgb.Booster) -> dict[str, NDArray[np.float64]]:
    """Test probabilities of the raw model and of Platt / isotonic fitted on the calibration-set margins."""
    s_cal, s_test = margin(model, d.X_cal), margin(model, d.X_test)
    probs = {"raw": 1.0 / (1.0 + np.exp(-s_test))}
    for name in ("platt", "isotonic"):
        probs[name] = calibrators.make(name, input="logit").fit(s_cal, d.y_cal).predict(s_test)
    return probs


def ece_se(y: NDArray[np.int64], p: NDArray[np.float64]) -> float:
    """Bootstrap standard error of the test ECE (resampling test rows): the scale 'within noise' means."""
    rng = np.random.default_rng(SEED)
    vals = [ece(y[i], p[i]) for i in (rng.integers(0, len(y), len(y)) for _ in range(N_BOOT))]
    return float(np.std(vals, ddof=1))


def auc_se(y: NDArray[np.int64], a: float) -> float:
    """Hanley & McNeil (1982) standard error of an AUC ``a`` on labels ``y``: the AUC's own sampling noise."""
    n1, n0 = float(y.sum()), float(len(y) - y.sum())
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    return float(np.sqrt((a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n0 - 1) * (q2 - a * a)) / (n1 * n0)))


def run_device(d: Data, device: str, repeats: int) -> Row:
    model, fit_ts = timed(lambda: fit(d.X, d.y, device), repeats)
    s, pred_ts = timed(lambda: margin(model, d.X), repeats)
    if not np.all(np.isfinite(s)):
        raise RuntimeError(f"{device} model predicted non-finite margins on {d.name}")
    probs = calibration_eces(d, model)
    return Row(
        data=d.name,
        rows=len(d.y),
        features=d.X.shape[1],
        device=device,
        fit_s=float(np.median(fit_ts)),
        predict_s=float(np.median(pred_ts)),
        auc=auc(d.y_test, probs["raw"]),
        auc_se=auc_se(d.y_test, auc(d.y_test, probs["raw"])),
        ece={k: ece(d.y_test, p) for k, p in probs.items()},
        ece_se={k: ece_se(d.y_test, p) for k, p in probs.items()},
        fit_all=fit_ts,
        predict_all=pred_ts,
    )


def warm_up(devices: list[str]) -> None:
    """One small fit + predict per device, untimed: CUDA context and kernel loading stay out of the times."""
    X, y = synthetic(20_000, 99)
    for dev in devices:
        margin(fit(X, y, dev), X)


def run(
    datasets: list[Callable[[], Data]],
    devices: list[str],
    repeats: Callable[[int], int],
    json_path: str | None = None,
) -> list[Row]:
    """Time every dataset on every device; the JSON (if asked) is rewritten after each row."""
    warm_up(devices)
    rows: list[Row] = []
    for make in datasets:
        d = make()
        print(f"[{d.name}: {len(d.y)} x {d.X.shape[1]}, positives {d.y.mean():.2%}]", flush=True)
        for dev in devices:
            r = run_device(d, dev, repeats(len(d.y)))
            fits = ", ".join(f"{t:.2f}" for t in r.fit_all)
            preds = ", ".join(f"{t:.2f}" for t in r.predict_all)
            print(f"  {dev}: fit [{fits}] s, predict [{preds}] s, test AUC {r.auc:.5f}", flush=True)
            rows.append(r)
            if json_path:
                Path(json_path).write_text(json.dumps([asdict(x) for x in rows], indent=1))
    return rows


def _pairs(rows: list[Row]) -> list[tuple[Row, Row | None]]:
    cpu = [r for r in rows if r.device == "cpu"]
    gpu = {r.data: r for r in rows if r.device == "cuda"}
    return [(c, gpu.get(c.data)) for c in cpu]


def print_tables(rows: list[Row]) -> bool:
    """The timing table, the AUC agreement and the ECE table; returns whether every AUC check passed."""
    print(
        f"\nfit = DMatrix + {PARAMS['n_estimators']} rounds; predict = margins of the training rows; "
        f"median of repeats; ratio = cpu / gpu"
    )
    print(
        f"{'data':<22} {'rows':>9} {'device':>6} {'fit s':>8} {'predict s':>10} {'fit ratio':>10} "
        f"{'pred ratio':>10}"
    )
    for c, g in _pairs(rows):
        for r in (c, g):
            if r is None:
                continue
            fr = f"{c.fit_s / g.fit_s:.1f}x" if g and r is g else ""
            pr = f"{c.predict_s / g.predict_s:.1f}x" if g and r is g else ""
            print(
                f"{r.data:<22} {r.rows:>9} {r.device:>6} {r.fit_s:>8.2f} {r.predict_s:>10.2f}",
                f"{fr:>10} {pr:>10}",
            )
    ok = True
    print(f"\ntest AUC, cpu vs cuda (check: agree within {AUC_TOL}; se = Hanley-McNeil SE of the cpu AUC)")
    for c, g in _pairs(rows):
        se = f"se {c.auc_se:.5f}"
        if g is None:
            print(f"{c.data:<22} cpu {c.auc:.5f}  cuda -        {se}")
            continue
        diff = abs(c.auc - g.auc)
        ok &= diff <= AUC_TOL
        verdict = "OK" if diff <= AUC_TOL else "FAIL"
        print(f"{c.data:<22} cpu {c.auc:.5f}  cuda {g.auc:.5f}  |diff| {diff:.5f}  {se}  {verdict}")
    print(
        "\ntest ECE (15 equal-width bins) of raw / Platt / isotonic on each model's calibration-set margins;"
        "\nse = bootstrap standard error of the cpu model's ECE (the noise scale)"
    )
    print(f"{'data':<22} {'calibrator':<9} {'cpu':>8} {'cuda':>8} {'|diff|':>8} {'se':>8} {'|diff|/se':>9}")
    for c, g in _pairs(rows):
        for k in c.ece:
            gv = f"{g.ece[k]:8.5f}" if g else f"{'-':>8}"
            dv = f"{abs(c.ece[k] - g.ece[k]):8.5f}" if g else f"{'-':>8}"
            zv = f"{abs(c.ece[k] - g.ece[k]) / c.ece_se[k]:9.2f}" if g else f"{'-':>9}"
            print(f"{c.data:<22} {k:<9} {c.ece[k]:8.5f} {gv} {dv} {c.ece_se[k]:8.5f} {zv}")
    return ok


def bank_gap_over_seeds(npz: str | None, n_seeds: int, replicates: tuple[int, ...] = (1, 20)) -> None:
    """Is the bank_marketing cpu-vs-cuda AUC gap noise? The signed gap over ``n_seeds`` split seeds."""
    print(f"\n{'seed':>4} {'rep':>4} {'auc cpu':>8} {'auc cuda':>8} {'cuda-cpu':>9} {'auc se':>8}")
    for rep in replicates:
        gaps = []
        for seed in range(n_seeds):
            d = bank_data(npz, rep, seed)
            a = {dev: auc(d.y_test, margin(fit(d.X, d.y, dev, seed), d.X_test)) for dev in ("cpu", "cuda")}
            gaps.append(a["cuda"] - a["cpu"])
            se = auc_se(d.y_test, a["cpu"])
            print(
                f"{seed:>4} {rep:>4} {a['cpu']:8.5f} {a['cuda']:8.5f} {gaps[-1]:+9.5f} {se:8.5f}", flush=True
            )
        print(f"replicate {rep}: mean gap {np.mean(gaps):+.5f}, mean |gap| {np.mean(np.abs(gaps)):.5f}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e6,1e7", help="synthetic training-row counts, comma separated")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats for sizes below 5e6")
    ap.add_argument("--repeats-large", type=int, default=1, help="timed repeats for sizes of 5e6 and up")
    ap.add_argument("--no-bank", action="store_true", help="skip the bank_marketing row")
    ap.add_argument(
        "--bank-npz", default=None, help="npz with X, y (else calibflow.datasets; needs the mirror)"
    )
    ap.add_argument("--bank-replicate", type=int, default=20)
    ap.add_argument("--cpu-only", action="store_true", help="do not try CUDA")
    ap.add_argument("--json", default=None, help="write every number here")
    ap.add_argument("--bank-seeds", type=int, default=0, help="also: bank AUC gap over this many split seeds")
    ap.add_argument("--strict", action="store_true", help="exit 1 when an AUC check fails")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"xgboost {xgb.__version__}, {os.cpu_count()} CPU cores (nthread), params {PARAMS}")
    devices = ["cpu"]
    reason = "--cpu-only given" if args.cpu_only else cuda_status()
    if reason is None:
        devices.append("cuda")
        print("cuda: available, timing cpu and cuda")
    else:
        print(f"SKIPPING the cuda rows: {reason}")
    sizes = sorted(int(float(s)) for s in args.sizes.split(",") if s.strip())
    # the real-data row runs before the large synthetic ones, so a run cut short still has it
    small = [lambda n=n: synthetic_data(n) for n in sizes if n < LARGE]
    large = [lambda n=n: synthetic_data(n) for n in sizes if n >= LARGE]
    bank: list[Callable[[], Data]] = []
    if args.no_bank:
        print("bank_marketing row skipped (--no-bank)")
    elif args.bank_npz or os.environ.get("CALIBFLOW_DATA_MIRROR"):
        bank.append(lambda: bank_data(args.bank_npz, args.bank_replicate))
    else:
        print("bank_marketing row skipped: no --bank-npz and CALIBFLOW_DATA_MIRROR is unset")
    repeats = lambda n: args.repeats if n < LARGE else args.repeats_large  # noqa: E731
    rows = run(small + bank + large, devices, repeats, args.json)
    ok = print_tables(rows)
    if args.bank_seeds and "cuda" in devices and bank:
        bank_gap_over_seeds(args.bank_npz, args.bank_seeds)
    if not ok:
        msg = f"AUC of the cpu and cuda models differ by more than {AUC_TOL} on some data (see the se column)"
        if args.strict:
            raise SystemExit(msg)
        print(f"WARNING: {msg}")


if __name__ == "__main__":
    main()
