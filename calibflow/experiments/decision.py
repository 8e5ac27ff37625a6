"""Reproduction of Arora et al., "Leveraging Uncertainty Estimates to Improve Classifier Performance".

``run(config, seed)`` returns a ``Reproduction`` with:

- Sec. 3 / App. E: the data-generation model (Beta prior on true positivity, negatives undersampled by
  tau in training) simulated, and the empirical test positivity given train positivity beside Theorem
  3.1's prediction (closed form for tau = 1, numerical mean of Q(r) for tau > 1).
- Tables 1-3 analogues on real data (bank_marketing, adult): an XGBoost model trained with negatives
  undersampled (tau = 3, 5), uncertainty from its Posterior-Network analogue
  (``calibflow.uncertainty.xgb_posterior_entropy``), decision boundaries fitted on a hold-out set and
  Recall@PrecisionBound measured on the test set for ST, HR, GMT, MIST, EW-DPMT and VW-DPMT on
  equi-span and equi-weight grids; one-sided paired t-tests against ST across seeds.
- Table 5 analogue (``replicas >= 2``): the same with replica logit spread as the uncertainty
  (``calibflow.models.train_replicas`` + ``calibflow.uncertainty.replica_logit_std``), and a table of
  how strongly each uncertainty is rank-correlated with the score.
- Fig. 1(a) analogue: test positivity vs score per uncertainty level.
- Fig. 5 analogue: the (K, L) sweep of EW-DPMT.
- App. C.6: MIST vs IST calibration, ECE@j and cumulative ECE@j.

Choices where the paper is open (also in ``Reproduction.choices``):
- Model: XGBoost instead of SAM/FT-Transformer + normalising flow; uncertainty = entropy of the
  Beta built from tree-leaf hessian cover (see ``calibflow.uncertainty``).
- Data and model through ``calibflow.datasets.binary_task``, ``calibflow.splits.split_indices`` and
  ``calibflow.models.train_classifier``.
- Splits: 60/20/20 train/hold-out/test, stratified, per seed; negatives of the *training* part are
  kept with probability 1/tau; hold-out and test keep the original distribution (Sec. 6.1).
- ST is the grid algorithm on a K = 1 grid of K * L score bins of the same binning kind (score only, and
  the same bin size as the 2-D grids); MIST in the recall tables is Algorithm 3 on
  the grid; the sample-level MIST calibrator (isotonic per level on samples) is used for the ECE study.
- HR: see ``calibflow.decision.hr`` (threshold lowered by a fixed step per uncertainty level).
- obd_small is not used: 10,000 impressions per campaign with a 0.38-0.69% click rate give 40-70
  positives, too few for a K x L grid at any useful precision bound.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from calibflow import decision as D
from calibflow.results import Figure, Reproduction, Table, fmt_mean_se, paired_pvalue

PAPER = "Arora, Merugu, Saladi, Rastogi: Leveraging Uncertainty Estimates to Improve Classifier Performance"
USABLE = ("bank_marketing", "adult")
T5 = ("st", "mist", "ew_dpmt", "vw_dpmt")
# Paper Table 5 (MC-Dropout uncertainty), Criteo 90% / Avazu 70% / E-Com 70%, equi-weight, in %.
PAPER_T5 = {
    "st": "4.2 / 1.28 / 22.8",
    "mist": "4.3 / 1.8 / 23.1",
    "ew_dpmt": "4.3 / 1.9 / 23.7",
    "vw_dpmt": "-",
}
ALGOS = ("st", "hr", "gmt", "mist", "ew_dpmt", "vw_dpmt")
LABEL = {"st": "ST", "hr": "HR", "gmt": "GMT", "mist": "MIST", "ew_dpmt": "EW-DPMT", "vw_dpmt": "VW-DPMT"}
# Paper Table 1, Criteo (tau=3, Recall@90% precision), equi-span / equi-weight, in %.
PAPER_T1 = {
    "st": ("2.3", "2.2"),
    "hr": ("1.2", "0.8"),
    "gmt": ("2.4", "2.6"),
    "mist": ("2.5", "2.7"),
    "ew_dpmt": ("-", "2.7"),
    "vw_dpmt": ("2.7", "2.7"),
}
# Paper Table 2, Criteo tau=3, equi-weight, Recall@{60,70,80,90}% precision, in %.
PAPER_T2 = {
    "st": ("46.6", "27.7", "12.0", "2.2"),
    "gmt": ("46.8", "28.0", "12.5", "2.6"),
    "mist": ("46.7", "27.8", "12.4", "2.7"),
    "ew_dpmt": ("46.9", "28.2", "12.6", "2.7"),
}
# Paper Table 3, Criteo 90%: p-values vs ST, equi-span / equi-weight.
PAPER_T3 = {
    "hr": ("0.99", "0.98"),
    "gmt": ("0.08", "0.03"),
    "mist": ("0.05", "0.03"),
    "ew_dpmt": ("-", "0.03"),
    "vw_dpmt": ("0.03", "0.03"),
}


# ---------------------------------------------------------------------------------------------
# Sec. 3 / App. E: data-generation model and Theorem 3.1
# ---------------------------------------------------------------------------------------------
def simulate_regions(
    n_regions: int, n_train: int, n_test: int, beta1: float, beta0: float, tau: float, seed: int
) -> dict[str, np.ndarray]:
    """App. E.1: S_true ~ Beta(beta1, beta0) per region; test positives ~ Bin(n_test, S_true); train
    positives ~ Bin(n_train, tau S / ((tau - 1) S + 1)) (negatives kept at rate 1/tau)."""
    if n_regions < 1 or n_train < 1 or n_test < 1:
        raise ValueError("n_regions, n_train and n_test must be >= 1")
    if beta1 <= 0 or beta0 <= 0 or tau <= 0:
        raise ValueError("beta1, beta0 and tau must be > 0")
    rng = np.random.default_rng(seed)
    s_true = rng.beta(beta1, beta0, n_regions)
    q = tau * s_true / ((tau - 1.0) * s_true + 1.0)
    k = rng.binomial(n_train, q)
    t = rng.binomial(n_test, s_true)
    return {"s_true": s_true, "n1_train": k, "s_train": k / n_train, "s_test": t / n_test}


def theorem31_tau1(s_train, n: float, beta1: float, beta0: float):
    """Theorem 3.1(a), tau = 1: E[S_test | S_train] = (S_train + xi lambda) / (1 + lambda)."""
    xi = beta1 / (beta1 + beta0)
    lam = (beta1 + beta0) / n
    return (np.asarray(s_train, float) + xi * lam) / (1.0 + lam)


def theorem31_mean(s_train: float, n: int, beta1: float, beta0: float, tau: float, grid: int = 4001) -> float:
    """Theorem 3.1(a), any tau: the mean of Q(r) ~ Beta(beta1 + k, beta0 + n - k) / (1 + (tau - 1) r)^n."""
    from scipy.stats import beta as beta_dist

    k = s_train * n
    r = (np.arange(grid) + 0.5) / grid
    logq = beta_dist.logpdf(r, beta1 + k, beta0 + n - k) - n * np.log1p((tau - 1.0) * r)
    w = np.exp(logq - logq.max())
    return float((r * w).sum() / w.sum())


def _synthetic(cfg: dict, seed: int) -> Table:
    n, b1, b0 = int(cfg.get("n_train", 20)), float(cfg.get("beta1", 1.0)), float(cfg.get("beta0", 3.0))
    rows = []
    for tau in (1.0, 3.0):
        sim = simulate_regions(
            int(cfg.get("n_regions", 200_000)), n, int(cfg.get("n_test", 50)), b1, b0, tau, seed
        )
        for k in (2, 5, 10, 15):
            m = sim["n1_train"] == k
            emp = sim["s_test"][m].mean()
            th = theorem31_tau1(k / n, n, b1, b0) if tau == 1 else theorem31_mean(k / n, n, b1, b0, tau)
            rows.append([tau, f"{k / n:.2f}", int(m.sum()), round(float(emp), 4), round(float(th), 4)])
    return Table(
        "Sec. 3 / Theorem 3.1: test positivity given train positivity (simulation)",
        ["tau", "S_train", "regions", "empirical E[S_test]", "Theorem 3.1"],
        rows,
        f"Beta({b1}, {b0}) prior (xi = {b1 / (b1 + b0):.2f}), n_train = {n} per region. tau = 1 uses the "
        "closed "
        "form (S_train + xi lambda)/(1 + lambda); tau = 3 the numerical mean of Q(r). Undersampling "
        "(tau = 3) makes the train positivity overstate the test positivity.",
    )


# ---------------------------------------------------------------------------------------------
# Real data
# ---------------------------------------------------------------------------------------------
def _load(name: str):
    """(X, y) of a real dataset through ``calibflow.datasets`` (verified against its pinned sha256)."""
    from calibflow.datasets import binary_task

    if name not in USABLE:
        raise ValueError(f"dataset {name!r} is not used by the decision experiment; use one of {USABLE}")
    task = binary_task(name)
    return np.asarray(task.X, float), np.asarray(task.y, int)


def _model_outputs(X, y, tau: float, seed: int, cfg: dict):

    from calibflow.models import train_classifier
    from calibflow.splits import split_indices
    from calibflow.uncertainty import leaf_covers, xgb_posterior_entropy

    sp = split_indices(y.size, {"train": 0.6, "hold": 0.2, "test": 0.2}, seed, stratify=y)
    rng = np.random.default_rng(seed + 7)
    tr = sp["train"]
    keep = (y[tr] == 1) | (rng.random(tr.size) < 1.0 / tau)
    tr = tr[keep]
    params = {
        "n_estimators": int(cfg.get("n_estimators", 100)),
        "max_depth": int(cfg.get("max_depth", 5)),
        "learning_rate": float(cfg.get("eta", 0.1)),
        "subsample": 0.8,
        "min_child_weight": 1.0,
        "n_jobs": 1,
    }
    booster = train_classifier(X[tr], y[tr], params, seed)
    n_rep = int(cfg.get("replicas", 0))
    if n_rep >= 2:
        from calibflow.models import predict_margin, train_replicas
        from calibflow.uncertainty import replica_logit_std

        models = train_replicas(X[tr], y[tr], params, n_rep, scheme="seeds", seed=seed)
        rep_out = {}
        for part in ("hold", "test"):
            z = np.stack([predict_margin(m, X[sp[part]]) for m in models])
            rep_out[part] = (1.0 / (1.0 + np.exp(-z.mean(0))), replica_logit_std(z), y[sp[part]])
    out = {}
    covers = leaf_covers(booster)
    for part in ("hold", "test"):
        s, u = xgb_posterior_entropy(
            booster, X[sp[part]], n_train=int(tr.size), prior=float(cfg.get("prior", 2.0)), covers=covers
        )
        out[part] = (s, u, y[sp[part]])
    if n_rep >= 2:
        out["replicas"] = rep_out
    return out


def _recalls(
    data, precision: float, kind: str, k: int, ell: int, algos=ALGOS, grids: dict | None = None
) -> dict[str, tuple[float, float]]:
    """Fit each algorithm on the hold-out grid; return its (test recall, test precision).

    ``grids`` caches the fitted (binning, grid) per (kind, K, L) for one ``data``: the grid does not
    depend on the precision bound or the algorithm, so pass the same dict for every call on ``data``.
    """
    sh, uh, yh = data["hold"]
    st_, ut, yt = data["test"]
    grids = {} if grids is None else grids
    res = {}
    for name in algos:
        if name == "ew_dpmt" and kind != "equi_weight":
            continue
        # ST gets the same bin size as the 2-D grid: one level of K * L score bins.
        kk, ll = (1, k * ell) if name == "st" else (k, ell)
        if (kind, kk, ll) not in grids:
            b = D.Binning.fit(uh, sh, kk, ll, kind)
            grids[kind, kk, ll] = (b, b.grid(uh, sh, yh))
        b, grid = grids[kind, kk, ll]
        bd = D.ALGORITHMS[name](*grid, precision)
        pred = D.decide(b, bd, ut, st_)
        tp, pp = float(yt[pred].sum()), float(pred.sum())
        res[name] = (tp / yt.sum(), tp / pp if pp else float("nan"))
    return res


def _ece_study(data, k: int, bins: int):
    from calibflow.calibrators.isotonic import IsotonicCalibrator
    from calibflow.calibrators.mist import MistCalibrator

    sh, uh, yh = data["hold"]
    st_, ut, yt = data["test"]
    mist = MistCalibrator(n_levels=k).fit(sh, yh, uncertainty=uh)
    ist = IsotonicCalibrator().fit(sh, yh)
    b = D.Binning.fit(uh, sh, k, bins, "equi_weight")
    e_m = D.ece_at_j(b, ut, st_, yt, mist.predict(st_, uncertainty=ut))
    e_i = D.ece_at_j(b, ut, st_, yt, ist.predict(st_))
    return e_m, e_i


def run(config: dict[str, Any], seed: int) -> Reproduction:
    t0 = time.perf_counter()
    cfg = dict(config)
    datasets = list(cfg.get("datasets", ["bank_marketing", "adult"]))
    taus = [float(t) for t in cfg.get("taus", [3, 5])]
    n_seeds = int(cfg.get("n_seeds", 2))
    precisions = [float(p) for p in cfg.get("precisions", [0.8])]
    main_p = {d: float(v) for d, v in cfg.get("main_precision", {}).items()}
    k, ell = int(cfg.get("K", 3)), int(cfg.get("L", 100))
    kinds = list(cfg.get("binnings", ["equi_span", "equi_weight"]))
    sweep_k, sweep_l = list(cfg.get("sweep_K", [1, 3, 5])), list(cfg.get("sweep_L", [50, 100]))
    seeds = [seed + 1000 * r for r in range(n_seeds)]

    rec: dict[tuple, list[float]] = {}
    prec: dict[tuple, list[float]] = {}
    sweep: dict[tuple, list[float]] = {}
    ece: dict[tuple, list] = {}
    curves: dict[tuple, list] = {}
    rec5: dict[tuple, list[float]] = {}
    corr: dict[tuple, list] = {}
    for ds in datasets:
        X, y = _load(ds)
        for tau in taus:
            for sd in seeds:
                data = _model_outputs(X, y, tau, sd, cfg)
                grids: dict = {}
                for p in sorted(set(precisions) | {main_p.get(ds, precisions[-1])}):
                    for kind in kinds:
                        for name, (r, pr) in _recalls(data, p, kind, k, ell, grids=grids).items():
                            rec.setdefault((ds, tau, p, kind, name), []).append(r)
                            prec.setdefault((ds, tau, p, kind, name), []).append(pr)
                mp = main_p.get(ds, precisions[-1])
                for kk in sweep_k:
                    for ll in sweep_l:
                        if (kk, ll) == (k, ell) and "equi_weight" in kinds:
                            # The default cell was fitted above, for the same data and precision.
                            r = rec[(ds, tau, mp, "equi_weight", "ew_dpmt")][-1]
                        else:
                            cell = _recalls(data, mp, "equi_weight", kk, ll, algos=("ew_dpmt",), grids=grids)
                            r = cell["ew_dpmt"][0]
                        sweep.setdefault((ds, tau, kk, ll), []).append(r)
                if "replicas" in data:
                    for name, (r, _) in _recalls(
                        data["replicas"], mp, "equi_weight", k, ell, algos=T5
                    ).items():
                        rec5.setdefault((ds, tau, mp, name), []).append(r)
                ece.setdefault((ds, tau), []).append(_ece_study(data, k, int(cfg.get("ece_bins", 10))))
                curves.setdefault((ds, tau), []).append(_positivity_curves(data, k, 10))
                for src, part in (("posterior entropy", data), ("replica logit std", data.get("replicas"))):
                    if part is not None:
                        corr.setdefault((ds, tau, src), []).append(_score_corr(*part["hold"][:2]))

    tables = [_synthetic(cfg.get("synthetic", {}), seed)]
    tables.append(_table1(rec, prec, datasets, taus, kinds, main_p, precisions))
    tables.append(_table2(rec, datasets, taus, precisions))
    tables.append(_table3(rec, datasets, taus, kinds, main_p, precisions))
    tables.append(_table_sweep(sweep, datasets, taus, sweep_k, sweep_l, main_p, precisions))
    tables.append(_table_ece(ece))
    tables.append(_table_curves(curves))
    if rec5:
        tables.append(_table5(rec5, int(cfg.get("replicas", 0))))
    tables.append(_table_corr(corr))
    figures = [_fig_curves(curves), _fig_sweep(sweep, datasets, taus, sweep_k, sweep_l), _fig_ece(ece)]
    metrics = _headline(rec, datasets, taus, main_p, precisions)
    for (ds, tau, p5, name), v in rec5.items():
        if name == "ew_dpmt":
            base = float(np.mean(rec5[(ds, tau, p5, "st")]))
            metrics[f"{ds}_tau{tau:g}_replicas_ew_dpmt_gain"] = (
                float(np.mean(v)) / base - 1 if base > 0 else 0.0
            )
    return Reproduction(
        key="decision",
        paper=PAPER,
        profile=str(cfg.get("profile", "")),
        tables=tables,
        figures=figures,
        notes=_notes(metrics),
        choices=_choices(k, ell, n_seeds),
        metrics=metrics,
        elapsed_s=time.perf_counter() - t0,
    )


# ---------------------------------------------------------------------------------------------
# Tables and figures
# ---------------------------------------------------------------------------------------------
def _pct(v) -> str:
    v = 100 * np.asarray(v, float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "n/a"
    return fmt_mean_se(v, 2) if v.size > 1 else f"{v.mean():.2f}"


def _gain(a, b) -> str:
    ma, mb = float(np.mean(a)), float(np.mean(b))
    return f"{100 * (ma / mb - 1):+.1f}%" if mb > 0 else "n/a"


def _table1(rec, prec, datasets, taus, kinds, main_p, precisions) -> Table:
    rows = []
    for ds in datasets:
        p = main_p.get(ds, precisions[-1])
        for tau in taus:
            for kind in kinds:
                base = rec[(ds, tau, p, kind, "st")]
                for name in ALGOS:
                    key = (ds, tau, p, kind, name)
                    if key not in rec:
                        continue
                    paper = PAPER_T1[name][kinds.index(kind) if kind in ("equi_span", "equi_weight") else 1]
                    rows.append(
                        [
                            ds,
                            tau,
                            p,
                            kind,
                            LABEL[name],
                            _pct(rec[key]),
                            _pct(prec[key]),
                            _gain(rec[key], base),
                            paper,
                        ]
                    )
    return Table(
        "Table 1 analogue: test Recall@PrecisionBound (%)",
        [
            "dataset",
            "tau",
            "precision",
            "binning",
            "algorithm",
            "recall (ours)",
            "test precision (ours)",
            "gain vs ST",
            "paper Criteo 90%",
        ],
        rows,
        "Mean ± s.e. over seeds. Boundaries fitted on the hold-out grid, recall and precision measured on "
        "the test set "
        "(the precision bound holds on the hold-out, so test precision scatters around it). Paper column: "
        "Criteo, "
        "tau = 3, Recall@90% precision, K = 3, L = 500 (Table 1).",
    )


def _table2(rec, datasets, taus, precisions) -> Table:
    rows = []
    for ds in datasets:
        for tau in taus:
            for name in ("st", "gmt", "mist", "ew_dpmt", "vw_dpmt"):
                cells = []
                for p in precisions:
                    key = (ds, tau, p, "equi_weight", name)
                    cells.append(
                        _pct(rec[key]) + f" ({_gain(rec[key], rec[(ds, tau, p, 'equi_weight', 'st')])})"
                        if key in rec
                        else "-"
                    )
                rows.append([ds, tau, LABEL[name], *cells])
    rows.append(
        [
            "paper: Criteo",
            3,
            "ST / GMT / MIST / EW-DPMT",
            *[" / ".join(PAPER_T2[a][i] for a in ("st", "gmt", "mist", "ew_dpmt")) for i in range(4)],
        ][: 3 + len(precisions)]
    )
    return Table(
        "Table 2 analogue: Recall@ several precision bounds, equi-weight (%)",
        ["dataset", "tau", "algorithm", *[f"Recall@{int(100 * p)}%" for p in precisions]],
        rows,
        "Gain relative to ST in brackets. The paper's last row lists its Criteo values for bounds "
        "60/70/80/90% (in "
        "that order, as many as we have columns).",
    )


def _pv(a, b) -> str:
    """One-sided (H1: a > b) paired p-value over seeds; '-' where undefined (< 2 seeds, constant gap)."""
    p = paired_pvalue(a, b, alternative="greater")
    return f"{p:.2f}" if np.isfinite(p) else "-"


def _table3(rec, datasets, taus, kinds, main_p, precisions) -> Table:
    rows = []
    for ds in datasets:
        p = main_p.get(ds, precisions[-1])
        for tau in taus:
            for name in ALGOS[1:]:
                cells = []
                for kind in kinds:
                    key = (ds, tau, p, kind, name)
                    if key not in rec:
                        cells.append("-")
                        continue
                    cells.append(_pv(rec[key], rec[(ds, tau, p, kind, "st")]))
                rows.append(
                    [ds, tau, p, f"ST vs. {LABEL[name]}", *cells, " / ".join(PAPER_T3.get(name, ("-", "-")))]
                )
    return Table(
        "Table 3 analogue: one-sided paired t-test p-values (H1: algorithm recall > ST recall)",
        ["dataset", "tau", "precision", "comparison", *kinds, "paper Criteo (span / weight)"],
        rows,
        "Paired over seeds (each seed = a new split, model and hold-out). '-' where fewer than 2 seeds or "
        "no variation in the difference (the test is undefined), or where the algorithm does not apply.",
    )


def _score_corr(s, u) -> tuple[float, float]:
    """Spearman rank correlation of uncertainty with score: all hold-out items, and the top 20% scores."""
    from scipy.stats import spearmanr

    top = s > np.quantile(s, 0.8)
    return float(spearmanr(u, s)[0]), float(spearmanr(u[top], s[top])[0])


def _table_corr(corr) -> Table:
    rows = [
        [ds, tau, src, f"{np.mean([c[0] for c in v]):+.3f}", f"{np.mean([c[1] for c in v]):+.3f}"]
        for (ds, tau, src), v in corr.items()
    ]
    return Table(
        "How much of the uncertainty is the score? Spearman correlation on the hold-out set",
        ["dataset", "tau", "uncertainty", "rho(u, s) all", "rho(u, s) top 20% scores"],
        rows,
        "An uncertainty that is a function of the score only re-slices the score axis and cannot change the "
        "decision; mean over seeds.",
    )


def _table5(rec5, n_rep: int) -> Table:
    rows = []
    for (ds, tau, p, name), v in rec5.items():
        base = rec5[(ds, tau, p, "st")]
        pv = "-" if name == "st" else _pv(v, base)
        rows.append([ds, tau, p, LABEL[name], _pct(v), _gain(v, base), pv, PAPER_T5[name]])
    return Table(
        f"Table 5 analogue: replica uncertainty (logit std over {n_rep} seed replicas), equi-weight",
        [
            "dataset",
            "tau",
            "precision",
            "algorithm",
            "recall (ours, %)",
            "gain vs ST",
            "p vs ST",
            "paper MC-Dropout (Criteo / Avazu / E-Com)",
        ],
        rows,
        "Score = sigmoid of the mean replica logit, uncertainty = the std of the replica logits "
        "(calibflow.uncertainty.replica_logit_std), an epistemic spread like the paper's MC-Dropout.",
    )


def _table_sweep(sweep, datasets, taus, sk, sl, main_p, precisions) -> Table:
    rows = []
    for ds in datasets:
        for tau in taus:
            for kk in sk:
                rows.append([ds, tau, kk, *[_pct(sweep[(ds, tau, kk, ll)]) for ll in sl]])
    return Table(
        "Fig. 5 analogue: EW-DPMT test Recall@PrecisionBound (%) by number of uncertainty bins K and score "
        "bins L",
        ["dataset", "tau", "K", *[f"L={ll}" for ll in sl]],
        rows,
        "K = 1 is the score-only single threshold with L score bins. Bounds: "
        + ", ".join(f"{d} {main_p.get(d, precisions[-1])}" for d in datasets)
        + ". The paper finds a dataset-dependent sweet spot (Criteo K=3, L=500).",
    )


def _table_ece(ece) -> Table:
    rows = []
    for (ds, tau), runs in ece.items():
        em = np.array([r[0] for r in runs])
        ei = np.array([r[1] for r in runs])
        cm = np.array([D.cumulative_ece_at_j(e) for e in em])
        ci = np.array([D.cumulative_ece_at_j(e) for e in ei])
        top = em.shape[1] // 2
        rows.append(
            [
                ds,
                tau,
                f"{np.nanmean(em):.4f}",
                f"{np.nanmean(ei):.4f}",
                f"{np.nanmean(cm[:, top]):.4f}",
                f"{np.nanmean(ci[:, top]):.4f}",
                f"{np.nanmean(em[:, -1]):.4f}",
                f"{np.nanmean(ei[:, -1]):.4f}",
            ]
        )
    return Table(
        "App. C.6: MIST vs IST calibration on the test set",
        [
            "dataset",
            "tau",
            "mean ECE@j MIST",
            "mean ECE@j IST",
            "cum-ECE top half MIST",
            "cum-ECE top half IST",
            "ECE@top bin MIST",
            "ECE@top bin IST",
        ],
        rows,
        "ECE@j averages |mean(p - y)| over the K uncertainty levels of score bin j (equi-weight bins fitted "
        "on the "
        "hold-out, placed by model score). Paper (Fig. 8): MIST below IST, with the gap growing at high "
        "scores.",
    )


def _positivity_curves(data, k: int, bins: int):
    """Fig. 1(a) analogue: test positivity and mean score per (uncertainty level, score bin)."""
    sh, uh, _ = data["hold"]
    st_, ut, yt = data["test"]
    b = D.Binning.fit(uh, sh, k, bins, "equi_weight")
    lv, sb = b.assign(ut, st_)
    flat = lv * bins + sb
    cnt = np.bincount(flat, minlength=k * bins).reshape(k, bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        pos = np.bincount(flat, weights=yt, minlength=k * bins).reshape(k, bins) / cnt
        score = np.bincount(flat, weights=st_, minlength=k * bins).reshape(k, bins) / cnt
    return score, pos


def _table_curves(curves) -> Table:
    rows = []
    for (ds, tau), runs in curves.items():
        sc = np.nanmean([r[0] for r in runs], axis=0)
        po = np.nanmean([r[1] for r in runs], axis=0)
        for i in range(sc.shape[0]):
            rows.append(
                [ds, tau, i, f"{sc[i, -1]:.3f}", f"{po[i, -1]:.3f}", f"{sc[i, -2]:.3f}", f"{po[i, -2]:.3f}"]
            )
    return Table(
        "Fig. 1(a) analogue: does positivity at a given score depend on the uncertainty level?",
        [
            "dataset",
            "tau",
            "uncertainty level (0 = low)",
            "score top bin",
            "test positivity top bin",
            "score 2nd bin",
            "test positivity 2nd bin",
        ],
        rows,
        "Equi-weight bins (K levels x 10 score bins) fitted on the hold-out, counted on the test set; mean "
        "over "
        "seeds. The model score is the undersampled model's probability (it overstates the test positivity). "
        "Uncertainty helps a decision only where levels with similar scores have different positivity.",
    )


def _fig_curves(curves) -> Figure:
    from calibflow.plots import small_multiples, to_svg

    keys = list(curves)
    fig, axes = small_multiples(len(keys), ncols=4, size=2.2)
    for ax, key in zip(axes, keys, strict=True):
        sc = np.nanmean([r[0] for r in curves[key]], axis=0)
        po = np.nanmean([r[1] for r in curves[key]], axis=0)
        for i in range(sc.shape[0]):
            ax.plot(sc[i], po[i], marker="o", ms=2.5, label=f"level {i}")
        ax.plot([0, 1], [0, 1], color="0.7", lw=0.8, ls="--")
        ax.set_title(f"{key[0]}, tau={key[1]:g}")
        ax.set_xlabel("model score")
        ax.set_ylabel("test positivity")
    axes[0].legend(fontsize=6)
    return Figure(
        "Fig. 1(a) analogue: test positivity vs model score per uncertainty level",
        to_svg(fig),
        "Level 0 = lowest uncertainty. Mean over seeds.",
    )


def _fig_sweep(sweep, datasets, taus, sk, sl) -> Figure:
    from calibflow.plots import small_multiples, to_svg

    keys = [(d, t) for d in datasets for t in taus]
    fig, axes = small_multiples(len(keys), ncols=4, size=2.2)
    for ax, (ds, tau) in zip(axes, keys, strict=True):
        for ll in sl:
            ax.plot(
                sk, [100 * np.mean(sweep[(ds, tau, kk, ll)]) for kk in sk], marker="o", ms=3, label=f"L={ll}"
            )
        ax.set_title(f"{ds}, tau={tau:g}")
        ax.set_xlabel("uncertainty bins K")
        ax.set_ylabel("test recall (%)")
    axes[0].legend(fontsize=6)
    return Figure("Fig. 5 analogue: EW-DPMT recall vs (K, L)", to_svg(fig), "Mean over seeds, test set.")


def _fig_ece(ece) -> Figure:
    from calibflow.plots import small_multiples, to_svg

    keys = list(ece)
    fig, axes = small_multiples(len(keys), ncols=4, size=2.2)
    for ax, key in zip(axes, keys, strict=True):
        em = np.nanmean([D.cumulative_ece_at_j(r[0]) for r in ece[key]], axis=0)
        ei = np.nanmean([D.cumulative_ece_at_j(r[1]) for r in ece[key]], axis=0)
        j = np.arange(1, em.size + 1)
        ax.plot(j, em, marker="o", ms=2.5, label="MIST")
        ax.plot(j, ei, marker="s", ms=2.5, label="IST")
        ax.set_title(f"{key[0]}, tau={key[1]:g}")
        ax.set_xlabel("score bin j")
        ax.set_ylabel("cumulative ECE@j")
    axes[0].legend(fontsize=6)
    return Figure(
        "App. C.6 / Fig. 8 analogue: cumulative ECE@j, MIST vs IST", to_svg(fig), "Mean over seeds, test set."
    )


def _headline(rec, datasets, taus, main_p, precisions) -> dict[str, float]:
    out = {}
    for ds in datasets:
        p = main_p.get(ds, precisions[-1])
        for tau in taus:
            base = float(np.mean(rec[(ds, tau, p, "equi_weight", "st")]))
            for name in ALGOS:
                key = (ds, tau, p, "equi_weight", name)
                if key in rec:
                    out[f"{ds}_tau{tau:g}_{name}_recall"] = float(np.mean(rec[key]))
            out[f"{ds}_tau{tau:g}_ew_dpmt_gain"] = (
                out[f"{ds}_tau{tau:g}_ew_dpmt_recall"] / base - 1 if base > 0 else float("nan")
            )
    return out


def _notes(metrics: dict[str, float]) -> list[str]:
    gains = {
        k[: -len("_ew_dpmt_gain")]: v
        for k, v in metrics.items()
        if k.endswith("_ew_dpmt_gain") and "_replicas_" not in k
    }
    rep_gains = {k: v for k, v in metrics.items() if k.endswith("_replicas_ew_dpmt_gain")}
    helped = [k for k, v in gains.items() if np.isfinite(v) and v > 0.02]
    hurt = [k for k, v in gains.items() if np.isfinite(v) and v < -0.02]
    notes = [
        "Paper's datasets (Criteo, Avazu, proprietary E-Com) and model (Posterior Network) are not "
        "available; we use bank_marketing and adult with XGBoost and a tree-evidence Posterior-Network "
        "analogue. Numbers are "
        "therefore analogues, not reproductions of the paper's values.",
        "EW-DPMT gain over ST at the main bound (equi-weight): "
        + ", ".join(f"{k} {100 * v:+.1f}%" for k, v in gains.items())
        + ".",
    ]
    flat = [k for k in gains if k not in helped and k not in hurt]
    if hurt or flat:
        notes.append(
            "Where uncertainty does not help (EW-DPMT within 2% of ST or below it): "
            + ", ".join(hurt + flat)
            + ". The hold-out optimum over K x L thresholds partly fits hold-out noise, so its test gain "
            "shrinks; and the greedy variants (GMT, MIST, HR) lose to ST in most settings. The tree-evidence "
            "entropy is largely a function of the score itself (Beta entropy peaks at s = 1/2), so its "
            "levels "
            "mostly re-slice the score axis."
        )
    if rep_gains:
        notes.append(
            "With replica uncertainty (logit std over seed replicas, Table 5 analogue) EW-DPMT gains over "
            "its "
            "own ST: "
            + ", ".join(
                f"{k[: -len('_replicas_ew_dpmt_gain')]} {100 * v:+.1f}%" for k, v in rep_gains.items()
            )
            + ". Unlike the paper (where the Posterior Network beats MC-Dropout), the epistemic replica "
            "spread is the more useful uncertainty for XGBoost here: it is less tied to the score than the "
            "Beta entropy."
        )
    if helped:
        notes.append("Uncertainty helps (EW-DPMT > ST by more than 2%) in: " + ", ".join(helped) + ".")
    notes.append(
        "In the (K, L) sweep the K = 1 row has L score bins while a K-level grid has K * L bins, so part of "
        "the gain with K is finer score resolution; compare cells with equal K * L (e.g. K = 1, L = 500 "
        "against "
        "K = 5, L = 100 or K = 11, L = 50) for the effect of uncertainty alone."
    )
    notes.append(
        "The DP algorithms are exact on the hold-out grid (property-tested against exhaustive search); "
        "differences "
        "on the test set are generalisation, not optimisation."
    )
    return notes


def _choices(k: int, ell: int, n_seeds: int) -> list[str]:
    return [
        f"Grid K = {k} uncertainty levels x L = {ell} score bins (paper: K = 3, L = 500 on millions of "
        "rows; our hold-out "
        "sets have ~9-10k rows, so L is scaled down).",
        "Model: XGBoost (binary:logistic), one thread; uncertainty = differential entropy of Beta(s (n + "
        "2), (1 - s)(n + 2)) "
        "with n the geometric-mean share of training hessian cover in the leaves the item reaches "
        "(calibflow.uncertainty).",
        "Split 60/20/20 stratified per seed; training negatives kept with probability 1/tau; hold-out and "
        "test untouched.",
        "ST = the single-threshold algorithm on a K = 1 grid of K * L score bins of the same binning kind "
        "(same bin "
        "size as the 2-D grids, so ST is not handicapped by a coarser score resolution).",
        "HR: threshold lowered by a fixed number of score bins per uncertainty level, (c, step >= 1) fitted "
        "on the "
        "hold-out (our reading of Poceviciute et al. 2022 as described in Sec. 6.2).",
        "MIST in the recall tables is Algorithm 3 on the grid; the ECE study uses the sample-level MIST "
        "calibrator "
        "(isotonic regression on the samples of each uncertainty level, as App. G describes).",
        "EW-DPMT chooses the budget m by the actual predicted positives of each candidate boundary "
        "(identical to "
        "Algorithm 1 on exactly equi-weight grids, never violating the bound when ties make bins unequal).",
        f"{n_seeds} seeds; a seed changes the split, the undersampling and the model.",
        "obd_small not used: 40-70 positive clicks per campaign sample, too few for the grids.",
    ]
