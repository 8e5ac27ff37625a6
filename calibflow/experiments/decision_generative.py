"""The paper's data-generating model (Sec. 3, Fig. 2-3, App. E) as a full decision experiment.

Input space = ``n_regions`` discrete regions x (App. E.1). Per region:

- true positivity ``S_true ~ Beta(beta1_T, beta0_T)`` (global prior, xi = beta1_T / (beta1_T + beta0_T));
- training evidence ``N_train`` rows, log-uniform on ``[evidence_min, evidence_max]`` (regions differ in
  how much training data supports them: the source of epistemic uncertainty);
- training positives ``N1 ~ Bin(N_train, tau S / ((tau - 1) S + 1))`` (negatives kept at rate 1/tau);
- a PostNet-style posterior ``Beta(alpha1, alpha0)``, ``alpha_c = beta_c^P + N_c`` (Eq. 1, prior
  ``beta^P``, omega = beta1^P / (beta1^P + beta0^P)); model score ``s = alpha1 / (alpha1 + alpha0)`` and
  uncertainty = the Beta's differential entropy (footnote 3).

Deployment rows (hold-out and test, same distribution) pick a region with probability either equal per
region (``equal``) or proportional to its training evidence (``evidence``: deployment looks like
training), and a label ``y ~ Bernoulli(S_true)``. Theorem 3.1: at a fixed score, regions with less
evidence are shrunk towards omega and, with tau > 1, over-estimated differently, so test positivity
depends on the uncertainty at fixed score. Whether a 2-D boundary can use that depends on how many
deployment rows fall in low-evidence regions: that is what the two deployments contrast.

Two head-room columns at each method's own selection size: the oracle (top-n rows by the true
``S_true``, which no model can know) and the Bayes ranking (top-n rows by ``E[S_true | N_train, N1]``,
the best any function of (score, uncertainty) can do, since the PostNet pair determines (N_train, N1)).
"""

from __future__ import annotations

import numpy as np

from calibflow.experiments import _decision_eval as V
from calibflow.uncertainty import beta_entropy

DEPLOYMENTS = ("equal", "evidence")


def population(cfg: dict, tau: float, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Regions of the generative model: S_true, training evidence, PostNet score and entropy."""
    r = int(cfg.get("n_regions", 20_000))
    lo, hi = float(cfg.get("evidence_min", 1.0)), float(cfg.get("evidence_max", 1000.0))
    if r < 1 or not 0 < lo <= hi:
        raise ValueError("generative: need n_regions >= 1 and 0 < evidence_min <= evidence_max")
    b1t, b0t = float(cfg.get("beta1_true", 1.0)), float(cfg.get("beta0_true", 3.0))
    b1p, b0p = float(cfg.get("beta1_prior", 1.0)), float(cfg.get("beta0_prior", 1.0))
    s_true = rng.beta(b1t, b0t, r)
    n_train = np.floor(np.exp(rng.uniform(np.log(lo), np.log(hi + 1), r))).astype(np.int64)
    q = tau * s_true / ((tau - 1.0) * s_true + 1.0)
    n1 = rng.binomial(n_train, q)
    a1, a0 = b1p + n1, b0p + n_train - n1
    return {
        "s_true": s_true,
        "evidence": n_train.astype(float),
        "score": a1 / (a1 + a0),
        "uncertainty": beta_entropy(a1, a0),
        "bayes": bayes_positivity(n_train, n1, b1t, b0t, tau),
    }


def bayes_positivity(n, n1, beta1: float, beta0: float, tau: float, grid: int = 512) -> np.ndarray:
    """E[S_true | N_train, N1] under the true prior and undersampling (Theorem 3.1(a), numerically).

    The posterior is Beta(beta1, beta0)(r) * q(r)^N1 (1 - q(r))^(N - N1), q(r) = tau r / (1 + (tau - 1) r):
    the best any function of a region's (score, uncertainty) can know about its positivity, since the
    PostNet (score, entropy) pair determines (N, N1). Computed once per distinct (N, N1) pair.
    """
    pairs, inv = np.unique(np.stack([n, n1], axis=1), axis=0, return_inverse=True)
    r = (np.arange(grid) + 0.5) / grid
    q = tau * r / (1.0 + (tau - 1.0) * r)
    base = (beta1 - 1.0) * np.log(r) + (beta0 - 1.0) * np.log1p(-r)
    out = np.empty(pairs.shape[0])
    for lo in range(0, pairs.shape[0], 4096):  # chunks keep the pairs x grid table small
        nn, kk = pairs[lo : lo + 4096, 0:1], pairs[lo : lo + 4096, 1:2]
        logp = base + kk * np.log(q) + (nn - kk) * np.log1p(-q)
        w = np.exp(logp - logp.max(axis=1, keepdims=True))
        out[lo : lo + 4096] = (w * r).sum(1) / w.sum(1)
    return out[inv.ravel()]


def deploy(pop: dict, n_rows: int, weighting: str, rng: np.random.Generator):
    """(score, uncertainty, y, region id) of ``n_rows`` deployment rows drawn by ``weighting``."""
    if weighting not in DEPLOYMENTS:
        raise ValueError(f"deployment must be one of {DEPLOYMENTS}, got {weighting!r}")
    w = np.ones_like(pop["evidence"]) if weighting == "equal" else pop["evidence"]
    rid = rng.choice(w.size, size=int(n_rows), p=w / w.sum())
    y = (rng.random(rid.size) < pop["s_true"][rid]).astype(np.int8)
    return pop["score"][rid], pop["uncertainty"][rid], y, rid


def run_cell(cfg: dict, tau: float, weighting: str, precision: float, seed: int) -> dict[str, dict]:
    """One replication: fresh population, hold-out and test; every method scored by ``V.outcome``.

    Returns ``{(uncertainty source, method): outcome}`` with sources "posterior entropy" and
    ``V.RANDOM``, ST under source "*" (it ignores the uncertainty), plus ``("oracle", "st")`` for the
    head-room at ST's selection size.
    """
    rng = np.random.default_rng(seed)
    pop = population(cfg, tau, rng)
    n_hold, n_test = int(cfg.get("n_hold", 100_000)), int(cfg.get("n_test", 100_000))
    sh, uh, yh, _ = deploy(pop, n_hold, weighting, rng)
    st_, ut, yt, rid_t = deploy(pop, n_test, weighting, rng)
    k, ell = int(cfg.get("K", 3)), int(cfg.get("L", 100))
    methods = list(cfg.get("methods", ["st", "mist_samples", "ew_dpmt", "vw_dpmt", "ew_dpmt_eqw"]))
    ts = V.TestSet(st_, yt)
    out: dict = {}
    sources = {"posterior entropy": (uh, ut), V.RANDOM: (rng.random(uh.size), rng.random(ut.size))}
    for src, (u_h, u_t) in sources.items():
        cache: dict = {}
        for m in methods:
            if m == "st" and src != "posterior entropy":
                continue  # ST ignores the uncertainty
            htp, hpp, mask = V.select(m, (sh, u_h, yh), (st_, u_t), precision, k, ell, cache)
            res = V.outcome(mask, ts, precision)
            res["hold_recall"] = htp / yh.sum()
            out["*" if m == "st" else src, m] = res
    # Head-room at each method's own selection size n: TP of the top-n rows ranked by the Bayes
    # positivity / the true positivity, over TP of the score's top-n.
    cums = {
        name: np.r_[0.0, np.cumsum(yt[np.argsort(-pop[key][rid_t], kind="mergesort")])]
        for name, key in (("oracle", "s_true"), ("bayes", "bayes"))
    }
    for res in out.values():
        n, base = int(res["n"]), float(ts.cum_tp[int(res["n"])])
        for name, cum in cums.items():
            res[f"{name}_gain"] = cum[n] / base - 1.0 if base > 0 else float("nan")
    for name in cums:
        out[name, "st"] = {"gain": out["*", "st"][f"{name}_gain"]}
    return out
