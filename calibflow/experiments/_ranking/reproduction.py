"""``run``: the whole reproduction (data, replications, tables, figures, notes) as a ``Reproduction``."""

from __future__ import annotations

import time

from calibflow.experiments._ranking.data import load_coat, load_yahoo_r3
from calibflow.experiments._ranking.notes import CHOICES, _protocol, notes_for
from calibflow.experiments._ranking.paper import PAPER
from calibflow.experiments._ranking.protocol import DEFAULTS, _check_config, _rated, random_baseline, run_seed
from calibflow.experiments._ranking.tables import (
    claims,
    curves_figure,
    max_p_table,
    metric_table,
    obd_check,
    propensity_table,
    ranking_table,
    rated_table,
    reliability_figure,
    seed_claims,
    sweep_table,
)
from calibflow.results import Reproduction


def run(config: dict, seed: int) -> Reproduction:
    """Run the reproduction with ``config`` (see ``DEFAULTS`` and params.yaml ``reproduce: ranking``)."""
    t0 = time.perf_counter()
    cfg = DEFAULTS | dict(config or {})
    cfg["xgb"] = DEFAULTS["xgb"] | dict(cfg.get("xgb") or {})
    cfg["bpr"] = DEFAULTS["bpr"] | dict(cfg.get("bpr") or {})
    _check_config(cfg)
    data = load_yahoo_r3(cfg["yahoo_path"]) if cfg["dataset"] == "yahoo_r3" else load_coat()
    seeds = [int(seed) + 1000 * k for k in range(int(cfg["n_seeds"]))]
    runs = []
    for s in seeds:
        r = run_seed(data, cfg, s)
        r["random"] = random_baseline(data, cfg, s)
        runs.append(r)
    tables = [ranking_table(runs, cfg)]
    for metric, tnum, label in (("ece", 1, "ECE"), ("mce", 4, "MCE"), ("nll", 5, "NLL")):
        tables.append(
            metric_table(
                runs,
                cfg,
                metric,
                f"{label} (M={cfg['n_bins']}) on {data.name} (Table {tnum})",
                f"Ours: mean{' ± s.e.' if len(runs) > 1 else ''} over {len(runs)} seed(s); "
                f"{_protocol(cfg)}; UERM with {cfg['propensity']} propensities and {cfg['uerm_weights']} "
                f"weights. Paper: its {data.name} columns.",
            )
        )
    claim_table, summary = claims(runs, cfg)
    tables += [claim_table, propensity_table(runs, cfg), max_p_table(runs, cfg)]
    if _rated(cfg):
        tables.append(rated_table(runs, cfg))
    if cfg["split"] == "released" and cfg["num_neg_sweep"]:
        tables.append(sweep_table(runs, cfg, data))
    figures = [reliability_figure(runs[0], m, cfg["reliability_bins"]) for m in cfg["base_models"]]
    figures.append(curves_figure(runs[0], cfg["base_models"]))
    notes = notes_for(runs, cfg, data)
    if cfg.get("obd"):
        obd_table, obd_note = obd_check()
        tables.append(obd_table)
        notes.append(obd_note)
    return Reproduction(
        key="ranking",
        paper=PAPER,
        profile=str(cfg.get("profile", "")),
        tables=tables,
        figures=figures,
        notes=notes,
        choices=CHOICES,
        metrics=summary,
        elapsed_s=time.perf_counter() - t0,
        claims=seed_claims(runs, cfg),
    )
