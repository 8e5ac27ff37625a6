"""Aggregate-path diagnostics vs the row path: KS, Kuiper p, smooth ECE, the log-loss
miscalibration term, equal-mass reliability bins and the selection-set metrics, each from the bucket
table (``calibflow.aggregate.diagnostics``) and from the rows (``calibflow.metrics`` /
``calibflow.diagnostics``), on the same generated Parquet rows.

    python -m benchmarks scale_metrics                    # 1e6 rows, defaults below
    python -m benchmarks.scale_metrics --rows 1000000 --coarse 4096

Data: the scale benchmark's generator (float32 score = sigmoid(z), z ~ N(-1, 1.5^2), labels from
sigmoid(0.8 z - 0.3): miscalibrated), seeded numpy. Tables: one group per distinct score
(``distinct``), the default 65,536-cell logit grid (``grid``), a coarse grid (``--coarse`` cells), and
isotonic predictions (tied in blocks) on the distinct table. Prints, per table and metric, the table's
value, the row path's, |difference|, the stated bound where there is one, and the seconds of each.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np


def _data(rows: int, folder: str) -> tuple[str, np.ndarray, dict[str, np.ndarray]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(17)
    z = rng.normal(-1.0, 1.5, rows)
    u = rng.random(rows)
    y = (u < 1 / (1 + np.exp(-(0.8 * z - 0.3)))).astype(np.int8)
    s = (1 / (1 + np.exp(-z))).astype(np.float32)
    # A second label drawn from the score itself (calibrated): the Kuiper p-value is then not 0 on both paths.
    y_cal = (u < s).astype(np.int8)
    path = os.path.join(folder, "scores.parquet")
    pq.write_table(pa.table({"score": s, "label": y, "label_cal": y_cal}), path)
    return path, s.astype(np.float64), {"label": y.astype(np.float64), "label_cal": y_cal.astype(np.float64)}


def _timed(fn, *args, **kw):
    t = time.perf_counter()
    out = fn(*args, **kw)
    return out, time.perf_counter() - t


def _row_values(y: np.ndarray, p: np.ndarray, n_bins: int, alpha: float) -> dict:
    from calibflow import diagnostics as D
    from calibflow import metrics as M

    out, sec = {}, {}
    out["ks"], sec["ks"] = _timed(M.ks_error, y, p)
    tests, sec["kuiper_pvalue"] = _timed(D.cumulative_tests, y, p)
    out["kuiper_pvalue"] = tests.kuiper_pvalue
    out["smooth_ece"], sec["smooth_ece"] = _timed(D.smooth_ece, y, p)
    dec, sec["log_loss_miscalibration"] = _timed(D.decomposition, y, p, "log_loss")
    out["log_loss_miscalibration"] = dec.miscalibration
    rel, sec["reliability_quantile"] = _timed(M.reliability, y, p, n_bins, "quantile")
    out["reliability_quantile"] = rel.count
    out["reliability_observed"] = rel.observed
    sel, sec["selection"] = _timed(M.selection_metrics, y, p, alpha=alpha, n_bins=10)
    out["selection_E"], out["selection_log_loss"] = sel["E"], sel["log_loss"]
    return {"values": out, "seconds": sec}


def _table_values(table, n_bins: int, alpha: float) -> dict:
    from calibflow.aggregate import diagnostics as AD

    out, sec = {}, {}
    cum, sec["ks"] = _timed(AD.cumulative_from_table, table)
    sec["kuiper_pvalue"] = sec["ks"]
    out.update({k: cum[k] for k in ("ks", "ks_bound", "kuiper_pvalue", "kuiper_pvalue_low")})
    out["smooth_ece"], sec["smooth_ece"] = _timed(AD.smooth_ece_from_table, table)
    out["log_loss_miscalibration"], sec["log_loss_miscalibration"] = _timed(
        AD.log_loss_miscalibration_from_table, table
    )
    rel, sec["reliability_quantile"] = _timed(AD.reliability_bins, table, n_bins, "quantile")
    out["reliability_quantile"], out["reliability_observed"] = rel["count"], rel["observed"]
    sel, sec["selection"] = _timed(AD.selection_from_table, table, alpha)
    out["selection_E"], out["selection_log_loss"] = sel["E"], sel["log_loss"]
    return {"values": out, "seconds": sec}


def compare(table, y: np.ndarray, p: np.ndarray, n_bins: int, alpha: float) -> dict:
    rv, tv = _row_values(y, p, n_bins, alpha), _table_values(table, n_bins, alpha)
    r, t = rv["values"], tv["values"]
    res = {"groups": len(table)}
    for k in ("ks", "kuiper_pvalue", "smooth_ece", "log_loss_miscalibration", "selection_E",
              "selection_log_loss"):
        res[k] = {"table": t[k], "rows": r[k], "abs_diff": abs(t[k] - r[k])}
    res["ks"]["bound"] = t["ks_bound"]
    res["ks"]["rows_within_bound"] = bool(t["ks"] - 1e-12 <= r["ks"] <= t["ks"] + t["ks_bound"] + 1e-12)
    res["kuiper_pvalue"]["low"] = t["kuiper_pvalue_low"]
    res["reliability_quantile"] = {
        "rows_in_other_bin": float(np.abs(t["reliability_quantile"] - r["reliability_quantile"]).sum() / 2),
        "max_abs_diff_observed": float(
            np.nanmax(np.abs(t["reliability_observed"] - r["reliability_observed"]))
        ),
    }
    res["seconds_table"] = {k: round(v, 3) for k, v in tv["seconds"].items()}
    res["seconds_rows"] = {k: round(v, 3) for k, v in rv["seconds"].items()}
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--coarse", type=int, default=4096, help="cells of the coarse logit grid")
    ap.add_argument("--n-bins", type=int, default=15)
    ap.add_argument("--alpha", type=float, default=0.1)
    ap.add_argument("--json", action="store_true", help="print the full result as JSON")
    a = ap.parse_args(argv)
    import duckdb

    from calibflow.aggregate import fit_from_table
    from calibflow.aggregate.metrics import calibrated_table
    from calibflow.aggregate.options import PassOptions, TableRows
    from calibflow.aggregate.table import BucketGrid
    from tests.helpers.table_reference import aggregate_duckdb  # the first builder: the reference table

    with tempfile.TemporaryDirectory(prefix="calibflow_scale_metrics_", dir="/tmp") as folder:
        path, s, labels = _data(a.rows, folder)
        con = duckdb.connect()
        con.execute("SET threads TO 2")
        out = {"rows": a.rows, "n_bins": a.n_bins, "alpha": a.alpha}
        for label, y in labels.items():
            rows = TableRows("score", label)
            tables = {
                "distinct": aggregate_duckdb(path, rows, PassOptions(distinct_max=10 * a.rows), con=con),
                "grid": aggregate_duckdb(path, rows, con=con),
                f"grid_{a.coarse}": aggregate_duckdb(path, rows, PassOptions(BucketGrid(a.coarse)), con=con),
            }
            for name, table in tables.items():
                out[f"{label}/{name}"] = compare(table, y, s, a.n_bins, a.alpha)
            iso = fit_from_table(tables["distinct"], "isotonic", kind="probability")
            out[f"{label}/isotonic_on_distinct"] = compare(
                calibrated_table(tables["distinct"], iso), y, iso.predict(s), a.n_bins, a.alpha
            )
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        print(markdown(out))


def markdown(out: dict) -> str:
    """One line per table and metric: table value, rows value, |difference|, bound."""
    lines = ["| table | metric | table | rows | abs diff | bound | s table | s rows |", "|---" * 8 + "|"]
    for name, res in out.items():
        if not isinstance(res, dict):
            continue
        for k in ("ks", "kuiper_pvalue", "smooth_ece", "log_loss_miscalibration", "selection_E",
                  "selection_log_loss"):
            r = res[k]
            bound = f"{r['bound']:.2e}" if "bound" in r else (f"p >= {r['low']:.3g}" if "low" in r else "")
            sk = k.split("_")[0] if k.startswith("selection") else k
            st, sr = res["seconds_table"].get(sk, ""), res["seconds_rows"].get(sk, "")
            lines.append(f"| {name} ({res['groups']} groups) | {k} | {r['table']:.6g} | {r['rows']:.6g} |"
                         f" {r['abs_diff']:.1e} | {bound} | {st} | {sr} |")
        q = res["reliability_quantile"]
        lines.append(f"| {name} | equal-mass bins | rows in another bin: {q['rows_in_other_bin']:.0f} |"
                     f" | max diff observed {q['max_abs_diff_observed']:.1e} | |"
                     f" {res['seconds_table']['reliability_quantile']} |"
                     f" {res['seconds_rows']['reliability_quantile']} |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
