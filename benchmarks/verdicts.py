"""How often the select stage's verdict flips with the bootstrap: the old rule against the deterministic one.

Run: ``PYTHONPATH=. python -m benchmarks.verdicts [--datasets adult bank_marketing] [--seeds 20]``.

The real stages run in a temporary project at the default params (``params.yaml``; papers off, no evaluate:
select does not read it): fetch, validate@raw, prepare, validate@prepared, train, calibrate@<every method>.
Then, on the same test split and fitted calibrators:

- **before**: the old rule (lowest test log loss among monotone methods; verdict from the paired percentile
  bootstrap of the log-loss change: "better" if its interval is below 0, "worse" above, else "not
  distinguishable"), for ``--seeds`` bootstrap seeds x n_bootstrap 100, 200, 1000;
- **after**: the select stage itself (``calibflow.selection``: CLT interval, margin, preference order) run
  with the same seeds and counts (only its bootstrap seed changes: the split and the models are fitted once).

A flip is a (dataset, n_bootstrap) whose verdict is not the same for every seed, or a dataset whose verdict
differs between counts. Prints the verdict counts and the flips per dataset, and the answer each dataset
gets at the default params.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

from calibflow import metrics
from calibflow.calibrators import get_class
from calibflow.pipeline import _common, calibrate, fetch, prepare, select, train, validate
from tests.helpers import row_reference  # the old rule's row bootstrap (select's before issue 35)

COUNTS = (100, 200, 1000)
REPO = Path(__file__).resolve().parents[1]


def _old_word(ci: list[float] | None) -> str:
    if ci is None:
        return "no interval"
    if ci[1] < 0:
        return "better"
    if ci[0] > 0:
        return "worse"
    return "not distinguishable"


def _project(names: list[str], root: Path) -> dict:
    # the repository's params as the stages see them (schema defaults filled in), as a mapping to edit
    params = _common.load_params(REPO / "params.yaml").model_dump(by_alias=True)
    params["datasets"]["names"] = names
    params["papers"], params["sources"] = [], {}
    fetch.run(params, root)
    validate.run("raw", params, root)
    prepare.run(params, root)
    validate.run("prepared", params, root)
    train.run(params, root)
    for m in _common.methods(params):
        calibrate.run(m, params, root)
    return params


def _before(params: dict, root: Path, name: str, seeds: int) -> dict[int, list[str]]:
    lay = _common.Layout(root)
    test = row_reference._test_frame(lay, name)
    y, p_unc = test["y"].to_numpy(np.float64), test["prob"].to_numpy(np.float64)
    probs = {}
    for m in _common.methods(params):
        c = pd.read_parquet(lay.calibrated_method(m) / f"{name}.parquet", columns=["row", "prob"])
        probs[m] = c.sort_values("row")["prob"].to_numpy(np.float64)
    mono = [m for m in probs if get_class(m).monotone]
    best = min(mono, key=lambda m: (metrics.log_loss(y, probs[m]), m))
    out: dict[int, list[str]] = {}
    for n_boot in COUNTS:
        words = []
        cfg = _common.as_params(params).evaluate.model_copy(update={"n_bootstrap": n_boot})
        for s in range(seeds):  # the old select.compare's log-loss interval: the paired row bootstrap
            ci = row_reference.compare(y, p_unc, probs[best], cfg, params["seed"] + s)["log_loss"]["delta_ci"]
            words.append(_old_word(ci))
        out[n_boot] = words
    print(f"  before ({name}): old rule picks {best}")
    return out


def _after(params: dict, root: Path, seeds: int) -> dict[str, dict[int, list[str]]]:
    out: dict[str, dict[int, list[str]]] = {}
    for n_boot in COUNTS:
        for s in range(seeds):
            p = copy.deepcopy(params)
            p["evaluate"]["n_bootstrap"], p["seed"] = n_boot, params["seed"] + s
            for name, card in select.run(p, root).items():
                out.setdefault(name, {}).setdefault(n_boot, []).append(f"{card['verdict']}:{card['method']}")
    return out


def _flips(runs: dict[int, list[str]]) -> tuple[int, bool]:
    """(counts whose verdict changes with the seed, whether the majority verdict changes with the count)."""
    per_count = sum(len(set(v)) > 1 for v in runs.values())
    majority = {Counter(v).most_common(1)[0][0] for v in runs.values()}
    return per_count, len(majority) > 1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["adult", "bank_marketing", "hillstrom"])
    ap.add_argument("--seeds", type=int, default=20)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verdicts-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        params = _project(args.datasets, root)
        print(f"stages fetch..calibrate: {time.perf_counter() - t0:.0f} s")
        before = {n: _before(params, root, n, args.seeds) for n in args.datasets}
        t0 = time.perf_counter()
        after = _after(params, root, args.seeds)
        print(f"select x {len(COUNTS) * args.seeds}: {time.perf_counter() - t0:.0f} s")
        print(f"\n{'dataset':16s} {'rule':7s} {'n_boot':>6s}  verdicts over {args.seeds} seeds")
        for name in args.datasets:
            for label, runs in (("before", before[name]), ("after", after[name])):
                for n_boot, words in runs.items():
                    counts = ", ".join(f"{w} x{k}" for w, k in Counter(words).most_common())
                    print(f"{name:16s} {label:7s} {n_boot:6d}  {counts}")
                per_count, across = _flips(runs)
                print(
                    f"{name:16s} {label:7s} flips: {per_count} of {len(COUNTS)} counts change with the seed; "
                    f"majority verdict changes with the count: {across}"
                )
        default = select.run(params, root)
        print("\nThe answer at the default params:")
        for name, card in default.items():
            print(f"  {name}: {card['reason']}")


if __name__ == "__main__":
    main()
