"""CalEM reproduction (Sec. 5.1 simulation, Sec. 5.2 Hillstrom) at a tiny size: shape and sanity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibflow.experiments import calem as E

pytestmark = pytest.mark.usefixtures("one_blas_thread")


def test_beta_params_and_simulation_design():
    assert E.beta_params(0.5) == (1.0, 1.0)  # P(Y) = 0.5 is the uniform draw
    a, b = E.beta_params(0.2)
    assert a / (a + b) == pytest.approx(0.2) and a + b == pytest.approx(2.0)
    with pytest.raises(ValueError):
        E.beta_params(1.0)
    d = E.simulate(40_000, 0.3, "g1", "h2", 0.2, np.random.default_rng(0))
    assert d["clean"].sum() == 8000
    # the oracle is P(y = 1 | s): labels agree with it on average, and z >= y (treatment only adds)
    assert d["y"].mean() == pytest.approx(d["oracle"].mean(), abs=0.01)
    assert np.all(d["z"] >= d["y"])
    # g1's score is sigmoid(20 (p~ - 0.5)), so the oracle inverts it exactly
    np.testing.assert_allclose(0.5 + np.log(d["s"] / (1 - d["s"])) / 20, d["oracle"], atol=1e-9)


def test_run_tiny_profile():
    config = {
        "simulation": {
            "n": 3000,
            "replications": 2,
            "shares": [0.1],
            "p_y": [0.3],
            "g": ["g2"],
            "h": ["h1"],
            "max_iter": 30,
        },
        "hillstrom": {"targets": ["visit"], "reruns": 2, "max_iter": 5, "xgb": {"n_estimators": 20}},
        "profile": "test",
    }
    rep = E.run(config, seed=3)
    t1, t2 = rep.tables[0], rep.tables[-1]
    # clipped and literal Algorithm 3, RMS and squared L2: four Table-1 variants, the per-cell table, Table 2
    assert len(rep.tables) == 6 and "literal" in rep.tables[2].title and "squared" in rep.tables[1].title
    detail = rep.tables[4]
    assert "per cell" in detail.title and detail.columns[2:6] == list(E.TABLE1_VARIANTS_SHORT.values())
    assert detail.rows[0][:2] == ["g2/h1, P(Y)=0.3, 10% clean", "+46.96%"]
    assert all(", p = " in c and c.count("[") == 1 for c in detail.rows[0][2:6])
    assert t1.rows[0][:2] == ["h1", "10%"]
    cell = t1.rows[0][t1.columns.index("g2, P(Y)=0.3")]
    assert cell.endswith("(paper +46.96%*)") and cell != "not run (paper +46.96%*)"
    assert [r[0] for r in t2.rows] == ["XGBoost, uncalibrated", "GAM", "IR", "BC", "GAM-EM", "BC-EM"]
    assert t2.rows[1][2] == 0.016997 and t2.rows[5][6] == 0.324489  # the paper's Hillstrom row
    # our Brier on visit sits near the control base rate's p(1 - p) ~ 0.095, like the paper's 0.092
    assert 0.07 < rep.metrics["hillstrom_visit_GAM_brier"] < 0.11
    assert rep.metrics["sim_cells"] == 1 and len(rep.figures) == 1 and rep.figures[0].svg.startswith("<svg")
    json.dumps(rep.to_dict())  # strict JSON
    assert rep.to_dict()["tables"] == E.run(config, seed=3).to_dict()["tables"]  # deterministic


def test_concentration_sweep_and_squared_l2():
    config = {
        "simulation": {
            "n": 2000,
            "replications": 2,
            "shares": [0.1],
            "p_y": [0.3],
            "g": ["g2"],
            "h": ["h1"],
            "max_iter": 15,
            "literal": False,
            "concentration_sweep": {
                "concentrations": [2, 10],
                "replications": 2,
                "cells": [["g2", "h1", 0.3, 0.1]],
            },
        },
        "hillstrom": None,
        "figure": False,
    }
    rep = E.run(config, seed=5)
    # clipped RMS, clipped squared, per-cell, sweep, sweep per cell (literal off)
    assert len(rep.tables) == 5 and "per cell" in rep.tables[-1].title
    assert [r[0] for r in rep.tables[-1].rows] == [
        f"alpha + beta = {c}: g2/h1, P(Y)=0.3, 10% clean" for c in (2, 10)
    ]
    sweep = rep.tables[-2]
    assert [r[0] for r in sweep.rows] == ["2", "10"] and "paper +46.96%" in sweep.columns[1]
    assert rep.metrics["sweep_best_concentration"] in (2.0, 10.0)
    assert any("Concentration sweep" in n for n in rep.notes)
    # squared-L2 improvement from the same replications: (G^2 - E^2) / G^2 for one replication
    cell = E.summarise_cell(
        [{"l2_gam": 2.0, "l2_em": 1.0, "n_iter": 1, "converged": True, "clipped_frac": 0.0}]
    )
    assert cell["improvement"] == pytest.approx(50.0) and cell["improvement_sq"] == pytest.approx(75.0)


def test_cell_interval_is_the_paired_t_interval_in_percent():
    """The per-cell interval: paired t interval of mean(GAM - EM) over mean(GAM); it excludes 0 exactly
    when the paired t-test is significant at 5%, and is NaN with one replication."""
    from scipy import stats

    gam = np.array([1.0, 1.2, 0.9, 1.1, 1.0])
    em = np.array([0.8, 1.0, 0.85, 0.9, 0.7])
    lo, hi = E._improvement_ci(gam, em)
    d = gam - em
    half = stats.t.ppf(0.975, 4) * d.std(ddof=1) / np.sqrt(5)
    assert (lo, hi) == pytest.approx(((d.mean() - half) * 100 / 1.04, (d.mean() + half) * 100 / 1.04))
    imp, p = E._improvement(gam, em)
    assert lo < imp < hi and lo > 0 and p < 0.05
    noisy = np.array([1.1, 0.8, 1.2, 0.9, 1.0])
    lo2, hi2 = E._improvement_ci(gam, noisy)
    assert lo2 < 0 < hi2 and E._improvement(gam, noisy)[1] > 0.05
    assert np.isnan(E._improvement_ci(gam[:1], em[:1])[0])
    cell = E.summarise_cell(
        [
            {"l2_gam": g, "l2_em": e, "l2_lit": e, "n_iter": 3, "converged": True, "clipped_frac": 0.1}
            for g, e in zip(gam, em, strict=True)
        ]
    )
    assert E._fmt_detail(cell, "improvement").startswith(f"{imp:+.2f}% [{lo:+.1f}, {hi:+.1f}], p = ")
    assert cell["ci_lit"] == pytest.approx(cell["ci"]) and cell["n_reps"] == 5
