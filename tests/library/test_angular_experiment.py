"""The Li & Sur reproduction end to end at a tiny size (real madelon covariates: fails if data is missing)."""

from __future__ import annotations

import math

from calibflow.experiments.angular import run

TINY = {
    "profile": "test",
    "n": 200,
    "d": 300,
    "lam": 0.5,
    "rho": 0.5,
    "n_test": 4000,
    "n_sign": 100,
    "platt_sizes": [100, 2000],
    "sign_trials": 300,
    "reps": 2,
    "h1_cases": [["rademacher", "clip(3u+0.5)"]],
    "semireal": {"madelon": {"n": 300, "n_cov": 900, "n_test": 900}},
    "semireal_reps": 1,
}


def test_run_tiny_reproduction():
    rep = run(TINY, 7)
    titles = [t.title for t in rep.tables]
    assert any("Sec. 7.1" in t for t in titles) and any("H.1" in t for t in titles)
    assert any("Table 2" in t for t in titles)
    assert len(rep.figures) == 2 and all(f.svg.startswith("<svg") for f in rep.figures)
    assert all(math.isfinite(v) for v in rep.metrics.values())
    assert rep.metrics["ece_angular"] < rep.metrics["ece_uncal"]
    # the estimate is close to the truth even at this size (O(n^-1/2); n = 200 -> errors of ~0.1)
    assert abs(rep.metrics["ip_est"] - rep.metrics["ip_true"]) < 0.2
    table2 = next(t for t in rep.tables if "Table 2" in t.title)
    ours = next(r for r in table2.rows if r[0] == "madelon" and r[2] == "ours")
    uncal, angular_true = (float(c.split(" ")[0]) for c in ours[3:5])
    assert angular_true < uncal
    assert rep.to_dict()["key"] == "angular"
