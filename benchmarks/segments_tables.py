"""What fitting partial_pooling from the streaming pass's tables costs, against the row fit.

``nice -n 10 python -m benchmarks.segments_tables --rows 1e6`` prints one line per fit on the generated
table of ``benchmarks.segments`` (seed 0, 2e5 test rows): one segment column (campaign, 200 values: the
coarse grid's cost alone), then the three columns fitted on rows without and with column pairs and from the
marginal tables, then with the pairs from joint tables (``segment_fit.pair_table``, a second DuckDB pass
per pair): the marginal-table approximation and the intersections, separately. Columns:
fit seconds (the table fit includes the pass over a Parquet copy of the fit rows), test log loss,
worst-segment |sum p / sum y - 1| (``benchmarks.segments._worst``) and, for one column, the largest logit
difference to the row fit.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time

import numpy as np
import pandas as pd
from scipy.special import logit

from benchmarks.segments import _worst, generated
from calibflow import metrics as M
from calibflow.aggregate.segment_fit import add_pairs, pair_table, partial_pooling_from_tables
from calibflow.aggregate.tables import TableRows, aggregate_files
from calibflow.calibrators import make


def _line(label: str, secs: float, test: dict, p: np.ndarray, extra: str = "") -> None:
    worst = _worst(test["y"], p, test["segs"])[0]
    print(f"| {label} | {secs:.1f} | {M.log_loss(test['y'], p):.5f} | {worst:.4f} | {extra} |", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=float, default=1e6)
    ap.add_argument("--tables-only", action="store_true", help="skip the row fits (at 1e7 they take minutes)")
    args = ap.parse_args(argv)
    fit, test = generated(int(args.rows), 200_000, 0)
    print("| fit | seconds | test log loss | worst segment | max logit diff to the row fit |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/fit.parquet"
        pd.DataFrame({"z": fit["z"], "y": fit["y"], **fit["segs"]}).to_parquet(path)
        for cols in (["campaign"], ["device", "country", "campaign"]):
            segs = {c: fit["segs"][c] for c in cols}
            tsegs = {c: test["segs"][c] for c in cols}
            p_row = None
            for pairs in ((False, True) if len(cols) > 1 else (False,)) if not args.tables_only else ():
                t0 = time.perf_counter()
                row = make("partial_pooling", input="logit", intersections=pairs)
                row.fit(fit["z"], fit["y"], segments=segs)
                p = row.predict(test["z"], segments=tsegs)
                p_row = p if p_row is None else p_row
                _line(f"{'+'.join(cols)}, rows, pairs {pairs}", time.perf_counter() - t0, test, p)
            t0 = time.perf_counter()
            tabs = aggregate_files(path, TableRows("z", "y", "logit", cols))
            cal = partial_pooling_from_tables(tabs.fine, tabs.segments, "logit")
            secs = time.perf_counter() - t0
            p = cal.predict(test["z"], segments=tsegs)
            diff = f"{np.abs(logit(p) - logit(p_row)).max():.4f}" if p_row is not None else ""
            _line(f"{'+'.join(cols)}, tables", secs, test, p, diff)
            if len(cols) > 1:
                t0 = time.perf_counter()
                pairs = {(a, b): pair_table("read_parquet($p)", {"p": path}, "z", "y", a, b)
                         for a, b in itertools.combinations(cols, 2)}
                add_pairs(cal, pairs)
                p = cal.predict(test["z"], segments=tsegs)
                added = [t["columns"] for t in cal.pair_tests_ if t["included"]]
                _line(f"{'+'.join(cols)}, tables + pair tables", secs + time.perf_counter() - t0, test, p,
                      f"pairs added: {added}")


if __name__ == "__main__":
    main()
