"""Calibration per segment: partial pooling and multicalibration against MCGrad and global Platt.

``nice -n 10 python -m benchmarks.segments --sizes 1e5 1e6 [--real]`` prints markdown tables
(docs/benchmarks/segments.md holds a run).

Generated tables (known truth): three segment fields, ``device`` (5 values), ``country`` (40) and
``campaign`` (200), Zipf-like frequencies; the true logit is ``0.9 z * m[device] + o_device + o_country
+ o_campaign + i[country, device] + 0.2`` with ``z`` the base model's logit, per-value offsets ``o`` ~
N(0, 0.35),
per-device slope multipliers ``m`` = exp(N(0, 0.15)) and a country x device intersection bias on a fifth of
the cells (N(0, 0.5)). Effects are drawn from ``--seed``; fit and test rows are independent draws (test:
``--test-rows``, 2e5 by default).

Real data with natural segments: adult by (sex, race) and bank_marketing by job, the XGBoost base model
trained *without* the segment columns (a model that misses the segment effect), seeded
60/20/20 split; every calibrator fits on the calibration split and is scored on the test split.

Reported per method: test log loss, worst-segment |sum p / sum y - 1| over field values and pairwise
intersections with >= 200 test positives, MCGrad's own multicalibration error (``mcgrad.metrics.
MulticalibrationError`` on the segment fields, its defaults: ``mce`` absolute and its sigma), fit time and
predict time. Every method gets the base logit and the same segment columns.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import time
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy.special import expit

from calibflow import calibrators as C
from calibflow import metrics as M

FIELDS = {"device": 5, "country": 40, "campaign": 200}
MIN_POS = 200


def generated(n: int, n_test: int, seed: int) -> tuple[dict, dict]:
    """Fit and test tables with known per-field, slope and intersection biases (see the module docstring)."""
    rng = np.random.default_rng(seed)
    probs = {f: rng.dirichlet(np.full(k, 0.7)) for f, k in FIELDS.items()}
    offs = {f: rng.normal(0, 0.35, k) for f, k in FIELDS.items()}
    mult = np.exp(rng.normal(0, 0.15, FIELDS["device"]))
    inter = rng.normal(0, 0.5, (FIELDS["country"], FIELDS["device"]))
    inter *= rng.random(inter.shape) < 0.2

    def draw(m: int, s: int) -> dict:
        r = np.random.default_rng(s)
        codes = {f: r.choice(k, m, p=probs[f]) for f, k in FIELDS.items()}
        z = r.normal(-2.5, 1.4, m)
        eta = 0.9 * z * mult[codes["device"]] + 0.2 + inter[codes["country"], codes["device"]]
        eta += sum(offs[f][codes[f]] for f in FIELDS)
        y = (r.random(m) < expit(eta)).astype(np.float64)
        segs = {f: np.char.add(f[0], codes[f].astype(str)).astype(object) for f in FIELDS}
        return {"z": z, "y": y, "segs": segs}

    return draw(n, seed + 1), draw(n_test, seed + 2)


def real(name: str, fields: list[str], seed: int = 20261122) -> tuple[dict, dict]:
    """A real dataset split 60/20/20; XGBoost without the segment columns; calib and test tables."""
    from calibflow import datasets, models, splits

    raw = datasets.load(name)
    task = datasets.binary_task(name)
    keep = [i for i, f in enumerate(task.feature_names) if not any(f.startswith(s) for s in fields)]
    X = task.X[:, keep]
    idx = splits.split_indices(len(task.y), {"train": 0.6, "calib": 0.2, "test": 0.2}, seed=seed,
                               stratify=task.y)
    params = {"n_estimators": 200, "max_depth": 6, "learning_rate": 0.1, "subsample": 0.8,
              "colsample_bytree": 0.8, "tree_method": "hist", "n_jobs": 2}
    model = models.train_classifier(X[idx["train"]], task.y[idx["train"]], params, seed=seed)

    def part(k: str) -> dict:
        ii = idx[k]
        return {"z": models.predict_margin(model, X[ii]), "y": task.y[ii].astype(np.float64),
                "segs": {f: raw[f].to_numpy(dtype=object)[ii] for f in fields}}

    return part("calib"), part("test")


def _worst(y: np.ndarray, p: np.ndarray, segs: dict) -> tuple[float, int]:
    """Largest |sum p / sum y - 1| over field values and pairwise intersections with >= MIN_POS positives."""
    worst, count = 0.0, 0
    keys = [(f,) for f in segs] + list(itertools.combinations(segs, 2))
    for combo in keys:
        frame = pd.DataFrame({"y": y, "p": p, **{f: segs[f] for f in combo}})
        g = frame.groupby(list(combo), observed=True)[["y", "p"]].sum()
        g = g[g["y"] >= MIN_POS]
        count += len(g)
        if len(g):
            worst = max(worst, float(np.abs(g["p"] / g["y"] - 1).max()))
    return worst, count


def _mce(y: np.ndarray, p: np.ndarray, segs: dict) -> tuple[float, float]:
    from mcgrad.metrics import MulticalibrationError

    df = pd.DataFrame({"y": y, "p": p, **{f: np.asarray(v).astype(str) for f, v in segs.items()}})
    m = MulticalibrationError(df, "y", "p", categorical_segment_columns=list(segs))
    return float(m.mce), float(m.mce_sigma)


def _ours(name: str) -> Callable:
    def fit_predict(fit: dict, test: dict) -> tuple[float, float, np.ndarray]:
        cal = C.make(name, input="logit")
        t0 = time.perf_counter()
        if name == "platt":
            cal.fit(fit["z"], fit["y"])
            t1 = time.perf_counter()
            return t1 - t0, time.perf_counter() - t1, cal.predict(test["z"])
        cal.fit(fit["z"], fit["y"], segments=fit["segs"])
        t1 = time.perf_counter()
        p = cal.predict(test["z"], segments=test["segs"])
        return t1 - t0, time.perf_counter() - t1, p

    return fit_predict


def _mcgrad(fit: dict, test: dict) -> tuple[float, float, np.ndarray]:
    from mcgrad.methods import MCGrad

    cats = list(fit["segs"])

    def frame(d: dict) -> pd.DataFrame:
        return pd.DataFrame({"p": expit(d["z"]), "y": d["y"], **{f: d["segs"][f].astype(str) for f in cats}})

    train, tst = frame(fit), frame(test)
    t0 = time.perf_counter()
    model = MCGrad().fit(train, "p", "y", categorical_feature_column_names=cats)
    t1 = time.perf_counter()
    p = np.asarray(model.predict(tst, "p", categorical_feature_column_names=cats), dtype=np.float64)
    return t1 - t0, time.perf_counter() - t1, p


def _ours_tables(fit: dict, test: dict) -> tuple[float, float, np.ndarray]:
    """partial_pooling as the aggregate path fits it: the fit rows written to Parquet (not timed), then
    timed together as the fit: the pass (DuckDB, both cores), the table fit, one joint table per column
    pair (a second DuckDB pass each) and the pairs' tests and offsets."""
    import tempfile

    from calibflow.aggregate.segment_fit import add_pairs, pair_table, partial_pooling_from_tables
    from calibflow.aggregate.tables import TableRows, aggregate_files

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/fit.parquet"
        pd.DataFrame({"z": fit["z"], "y": fit["y"], **fit["segs"]}).to_parquet(path, row_group_size=1 << 20)
        t0 = time.perf_counter()
        tabs = aggregate_files(path, TableRows("z", "y", "logit", list(fit["segs"])))
        t_pass = time.perf_counter() - t0
        cal = partial_pooling_from_tables(tabs.fine, tabs.segments, "logit")
        t_fit = time.perf_counter() - t0 - t_pass
        pairs = {(a, b): pair_table("read_parquet($p)", {"p": path}, "z", "y", a, b)
                 for a, b in itertools.combinations(fit["segs"], 2)}
        add_pairs(cal, pairs)
        t1 = time.perf_counter()
    print(f"    (tables: pass {t_pass:.2f}s, table fit {t_fit:.2f}s, pair tables and pairs "
          f"{t1 - t0 - t_pass - t_fit:.2f}s)", flush=True)
    return t1 - t0, time.perf_counter() - t1, cal.predict(test["z"], segments=test["segs"])


def _mcgrad_sub(fit: dict, test: dict) -> tuple[float, float, np.ndarray]:
    """MCGrad on a seeded subsample of MCGRAD_ROWS fit rows: its best affordable fit at 1e7."""
    n = len(fit["y"])
    if n <= MCGRAD_ROWS:
        return _mcgrad(fit, test)
    idx = np.sort(np.random.default_rng(0).choice(n, MCGRAD_ROWS, replace=False))
    sub = {"z": fit["z"][idx], "y": fit["y"][idx], "segs": {f: v[idx] for f, v in fit["segs"].items()}}
    return _mcgrad(sub, test)


MCGRAD_ROWS = 1_000_000

METHODS: dict[str, Callable] = {
    "platt (global)": _ours("platt"),
    "partial_pooling": _ours("partial_pooling"),
    "partial_pooling (from tables)": _ours_tables,
    "multicalibration": _ours("multicalibration"),
    "mcgrad 0.1.5 (defaults)": _mcgrad,
    "mcgrad 0.1.5 (defaults, 1e6-row subsample)": _mcgrad_sub,
}


def table(label: str, fit: dict, test: dict, skip: tuple[str, ...] = ()) -> list[str]:
    rows = []
    for name, fn in METHODS.items():
        if name in skip:
            continue
        if name.endswith("subsample)") and len(fit["y"]) <= MCGRAD_ROWS:
            continue  # the full MCGrad row is this fit already
        t_fit, t_pred, p = fn(fit, test)
        worst, nseg = _worst(test["y"], p, test["segs"])
        mce, sigma = _mce(test["y"], p, test["segs"])
        rows.append((name, t_fit, t_pred, M.log_loss(test["y"], p), worst, nseg, mce, sigma))
        print(f"  [{label}] {name}: fit {t_fit:.2f}s", flush=True)
    ref = {r[0]: r for r in rows}
    mc = ref.get("mcgrad 0.1.5 (defaults)") or ref.get("mcgrad 0.1.5 (defaults, 1e6-row subsample)")
    out = [
        f"**{label}** (fit rows {len(fit['y']):,}, test rows {len(test['y']):,}, "
        f"segments with >= {MIN_POS} test positives: {rows[0][5]})",
        "",
        "| method | fit (s) | predict (s) | test log loss | worst segment abs(sum p / sum y - 1) "
        "| MCGrad MCE (sigma) | fit time vs MCGrad |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, t_fit, t_pred, ll, worst, _, mce, sigma in rows:
        speed = f"{mc[1] / t_fit:.1f}x faster" if mc and t_fit > 0 else "-"
        out.append(
            f"| {name} | {t_fit:.2f} | {t_pred:.2f} | {ll:.5f} | {worst:.4f} | {mce:.5f} ({sigma:.2f}) "
            f"| {speed} |"
        )
    return out + [""]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="*", type=float, default=[1e5, 1e6])
    ap.add_argument("--test-rows", type=float, default=2e5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--real", action="store_true", help="also adult (sex, race) and bank_marketing (job)")
    ap.add_argument("--skip", nargs="*", default=[], help="method labels to leave out")
    args = ap.parse_args(argv)
    logging.getLogger("mcgrad").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    lines = []
    for n in (int(x) for x in args.sizes):
        fit, test = generated(n, int(args.test_rows), args.seed)
        lines += table(f"generated, {n:.0e} rows", fit, test, tuple(args.skip))
    if args.real:
        lines += table("adult by sex and race", *real("adult", ["sex", "race"]), tuple(args.skip))
        lines += table("bank_marketing by job", *real("bank_marketing", ["job"]), tuple(args.skip))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
