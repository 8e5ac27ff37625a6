"""Reproduction of Li & Sur, angular calibration (seed 003): Sec. 7.1, App. H.1 and Sec. 7.2 (Table 2).

Choices where the paper is open (also in ``Reproduction.choices``):

- eq. (11)'s ``gamma_hat`` is read as ``Tr(XHX'D)/Tr(D - DXHX'D)`` (the printed ``Tr(XHX'D)`` is a
  misprint; ``shared/notes/angle-estimator.md``).
- Test sets and Platt holdouts need only the two projections ``(w_hat'x, w*'x)``: we draw the design's
  i.i.d. entries ``W`` and compute ``W (L' w)`` with ``Sigma = L L'`` (Cholesky), so they are exact draws
  of the design at O(m d) cost. Non-Gaussian designs are ``W L'`` (the paper writes ``W Sigma^1/2``; any
  square root gives covariance Sigma, we use the Cholesky factor).
- The sign-error rate uses the exact joint Gaussian law of ``(w_hat'x, w*'x)`` (Gaussian design), so
  thousands of n_ho = 100 holdouts cost nothing.
- Platt is compared with eq. (9) in the true-link family ``sigma(A u + B) = sigmoid(3(A u + B) + 1)``:
  a plain logistic fit ``sigmoid(a u + b)`` is the same MLE, rewritten as ``A = a/3, B = (b - 1)/3``.
- Semi-real (Sec. 7.2): features standardised with the whole file's mean/sd, constant columns dropped,
  divided by sqrt(d) (so Sigma ~ Sigma_bar/d as in Sec. 7.1); "true" Sigma = covariance of all rows;
  w* ~ N(0, I) scaled to ||w*||_Sigma = 1; labels ~ Bern(sigmoid(3 w*'x + 1)); the estimated angle uses
  Sigma from the unlabeled pool (Ledoit-Wolf when the pool has < 10 d rows) and a 100-row sign holdout;
  Platt/isotonic holdouts and the sign holdout are drawn from the pool rows with fresh simulated labels
  (splice has too few rows for disjoint ones at the paper's sizes).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
from scipy.linalg import cholesky, toeplitz
from scipy.special import expit

from calibflow import metrics as M
from calibflow.calibrators import make
from calibflow.calibrators.angular import (
    angular_probability,
    clipped_linear,
    platt_limit,
    probit_coefficients,
)
from calibflow.experiments.claims import paired_claim
from calibflow.results import Figure, Reproduction, Table, fmt_mean_se

PAPER = (
    "Li & Sur, Optimal and provable calibration in high-dimensional binary classification: "
    "angular calibration and Platt scaling (seed 003)"
)
LINK_SPECS = {  # name -> (calibrator link, scale, shift)
    "sigmoid(3u+1)": ("logistic", 3.0, 1.0),
    "clip(3u+0.5)": ("clipped_relu", 3.0, 0.5),
}
PAPER_71 = {
    "true": 0.4526,
    "est": 0.4356,
    "A*": 0.2991,
    "B*": -0.1597,
    "A_platt": 0.3396,
    "B_platt": -0.1521,
    "sign_err": 0.0089,
}
PAPER_T2 = {  # Uncal, Angular, Platt100, Iso100, Platt500, Iso500
    "communities_crime": (0.1700, 0.0296, 0.0620, 0.0661, 0.0262, 0.0436),
    "splice": (0.1262, 0.0208, 0.0568, 0.1041, 0.0556, 0.0879),
    "madelon": (0.1473, 0.0267, 0.0721, 0.0719, 0.0299, 0.0624),
}


# ---------------------------------------------------------------------------------------------
# simulation helpers


def _link(name: str):
    base, a, b = LINK_SPECS[name]
    return (lambda t: expit(a * t + b)) if base == "logistic" else (lambda t: clipped_linear(a * t + b))


def _entries(rng: np.random.Generator, shape: tuple[int, int], design: str) -> np.ndarray:
    """I.i.d. zero-mean unit-variance entries: Gaussian, Rademacher or uniform on [-sqrt3, sqrt3]."""
    if design == "gaussian":
        return rng.standard_normal(shape)
    if design == "rademacher":
        return rng.integers(0, 2, shape) * 2.0 - 1.0
    if design == "uniform":
        return rng.uniform(-math.sqrt(3.0), math.sqrt(3.0), shape)
    raise ValueError(f"unknown design {design!r}")


def _projections(rng, m: int, L: np.ndarray, vecs: np.ndarray, design: str, block: int = 4000) -> np.ndarray:
    """``X V`` for ``m`` fresh rows ``X = W L'`` without forming X: ``W (L' V)``, in blocks."""
    P = L.T @ vecs
    out = [_entries(rng, (min(block, m - i), L.shape[0]), design) @ P for i in range(0, m, block)]
    return np.vstack(out)


class Sim:
    """One Sec. 7.1 draw: Sigma = Sigma_bar/d, w* with ||w*||_Sigma = 1, a training set and a fit."""

    def __init__(self, cfg: dict[str, Any], seed: int, design: str = "gaussian", link: str = "sigmoid(3u+1)"):
        n, d = int(cfg["n"]), int(cfg["d"])
        self.rng = np.random.default_rng(seed)
        self.design, self.link_name, self.link = design, link, _link(link)
        self.sigma = toeplitz(float(cfg["rho"]) ** np.arange(d)) / d
        self.L = cholesky(self.sigma, lower=True)
        ws = self.rng.standard_normal(d)
        self.w_star = ws / np.linalg.norm(self.L.T @ ws)
        X = _entries(self.rng, (n, d), design) @ self.L.T
        y = self._labels(X @ self.w_star)
        hold = _projections(self.rng, int(cfg.get("n_sign", 100)), self.L, np.eye(d), design)
        base, a, b = LINK_SPECS[link]
        self.cal = make("angular", lam=float(cfg["lam"]), link=base, link_scale=a, link_shift=b)
        self.cal.fit_linear(X, y, hold, self._labels(hold @ self.w_star), self.sigma)
        w = self.cal.w_
        self.true_ip = float(w @ self.sigma @ self.w_star)
        self.cos_true = self.true_ip / self.cal.w_norm_

    def _labels(self, t: np.ndarray) -> np.ndarray:
        return (self.rng.random(t.shape) < self.link(t)).astype(float)

    def draw(self, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """m fresh rows: raw logits u = w_hat'x, true probabilities, labels."""
        uv = _projections(self.rng, m, self.L, np.column_stack([self.cal.w_, self.w_star]), self.design)
        p = self.link(uv[:, 1])
        return uv[:, 0], p, (self.rng.random(m) < p).astype(float)

    def angular(self, u: np.ndarray, cos: float | None = None) -> np.ndarray:
        c = self.cal.cos_theta_ if cos is None else cos
        base, a, b = LINK_SPECS[self.link_name]
        return angular_probability(u / self.cal.w_norm_, c, base, a, b)[0]


def _ece_true(p_true: np.ndarray, p: np.ndarray, n_bins: int = 15) -> float:
    """ECE against the true probabilities (no label noise): sum_m |B_m|/n |mean(p_true) - mean(p)|."""
    idx = M.bin_index(p, n_bins)
    return float(np.abs(np.bincount(idx, p_true - p, minlength=n_bins)).sum() / p.size)


def _platt(u: np.ndarray, y: np.ndarray):
    return make("platt", input="logit").fit(u, y)


def _in_link_family(platt, link: str) -> tuple[float, float]:
    """A plain fit sigmoid(a u + b) rewritten in the family sigma(A u + B) = sigmoid(s(Au + B) + t)."""
    _, s, t = LINK_SPECS[link]
    return platt.coef_ / s, (platt.intercept_ - t) / s


def sign_error_rate(sim: Sim, n_ho: int, trials: int, rng: np.random.Generator) -> float:
    """P(eq. (12) gets the sign wrong) over ``trials`` holdouts, from the exact law of (w_hat'x, w*'x)."""
    nw, a = sim.cal.w_norm_, sim.true_ip
    cov = np.array([[nw * nw, a], [a, 1.0]])
    ch = np.linalg.cholesky(cov)
    wrong = 0
    for i in range(0, trials, 1000):
        k = min(1000, trials - i)
        z = rng.standard_normal((k, n_ho, 2)) @ ch.T
        y = rng.random((k, n_ho)) < sim.link(z[..., 1])
        wrong += int((np.sign((z[..., 0] * y).sum(1)) != np.sign(a)).sum())
    return wrong / trials


# ---------------------------------------------------------------------------------------------
# Sec. 7.1


def sec71(cfg: dict[str, Any], seed: int) -> tuple[list[Table], list[Figure], dict[str, float], list[str]]:
    sim = Sim(cfg, seed)
    cal, notes = sim.cal, []
    n_test = int(cfg["n_test"])
    u_te, p_te, y_te = sim.draw(n_test)
    platts = {m: _platt(*sim.draw(m)[::2]) for m in cfg["platt_sizes"]}
    A_hat, B_hat = cal.platt_limit()
    a, b = probit_coefficients("logistic", 3.0, 1.0)
    A_true, B_true = platt_limit(math.acos(sim.cos_true), cal.w_norm_, a, b)
    big = max(cfg["platt_sizes"])
    A_p, B_p = _in_link_family(platts[big], sim.link_name)
    err = sign_error_rate(sim, 100, int(cfg["sign_trials"]), np.random.default_rng([seed, 7]))
    rows = [
        ["<w*, w_hat>_Sigma, true", sim.true_ip, PAPER_71["true"]],
        ["<w*, w_hat>_Sigma, estimated (eqs. 11-12)", cal.inner_product_, PAPER_71["est"]],
        ["theta*, true (deg)", math.degrees(math.acos(sim.cos_true)), ""],
        ["theta_hat (deg)", math.degrees(cal.theta_), ""],
        ["A* (eq. 9, theta_hat)", A_hat, PAPER_71["A*"]],
        ["B* (eq. 9, theta_hat)", B_hat, PAPER_71["B*"]],
        ["A* (eq. 9, true theta*)", A_true, ""],
        ["B* (eq. 9, true theta*)", B_true, ""],
        [f"Platt A (n_ho={big}, family sigmoid(3(Au+B)+1))", A_p, PAPER_71["A_platt"]],
        [f"Platt B (n_ho={big})", B_p, PAPER_71["B_platt"]],
        [f"P(wrong sign), n_ho=100, {cfg['sign_trials']} trials", err, PAPER_71["sign_err"]],
    ]
    t1 = Table(
        "Sec. 7.1: angle estimate, Platt limit, sign error",
        ["quantity", "ours", "paper"],
        rows,
        f"One draw, n={cfg['n']}, d={cfg['d']}, lambda={cfg['lam']}, rho={cfg['rho']}, seed {seed}.",
    )
    preds = {
        "uncalibrated sigmoid(w_hat'x)": expit(u_te),
        "angular, theta_hat": sim.angular(u_te),
        "angular, true theta*": sim.angular(u_te, sim.cos_true),
    }
    preds |= {f"Platt, n_ho={m}": platts[m].predict(u_te) for m in cfg["platt_sizes"]}
    ece_rows = [[k, M.ece(y_te, p), _ece_true(p_te, p)] for k, p in preds.items()]
    t2 = Table(
        "Sec. 7.1: ECE on a fresh test set (Fig. 2's predictors)",
        ["predictor", "ECE (labels)", "ECE (true probabilities)"],
        ece_rows,
        f"n_test={n_test}, 15 equal-width bins. The paper shows these only as reliability plots.",
    )
    figs = [_fig2(sim, u_te, y_te, preds, cfg), _fig1(sim, platts)]
    metrics = {
        "ip_true": sim.true_ip,
        "ip_est": cal.inner_product_,
        "A_star": A_hat,
        "B_star": B_hat,
        "platt_A": A_p,
        "platt_B": B_p,
        "sign_error": err,
        "ece_uncal": ece_rows[0][1],
        "ece_angular": ece_rows[1][1],
    }
    if cal.flags_:
        notes.append(f"Sec. 7.1 draw flagged: {cal.flags_}")
    return [t1, t2], figs, metrics, notes


def _fig2(sim, u_te, y_te, preds, cfg) -> Figure:
    from calibflow.plots import reliability_axes, small_multiples, to_svg

    sizes = [m for m in cfg["platt_sizes"] if m in (100, 2000)] or list(cfg["platt_sizes"])[:2]
    fig, axes = small_multiples(len(sizes), ncols=len(sizes), size=3.0)
    for ax, m in zip(axes, sizes, strict=True):
        for key, col in (
            ("uncalibrated sigmoid(w_hat'x)", "C0"),
            ("angular, theta_hat", "C2"),
            (f"Platt, n_ho={m}", "C1"),
        ):
            reliability_axes(ax, M.reliability(y_te, preds[key]), label=key.split(",")[0], color=col)
        ax.set_title(f"Platt with n_ho={m}")
        ax.legend(loc="upper left", fontsize=6)
    return Figure(
        "Fig. 2: reliability of uncalibrated, angular and Platt",
        to_svg(fig),
        f"Test set of {len(u_te)}, n={cfg['n']}, d={cfg['d']}.",
    )


def _fig1(sim, platts) -> Figure:
    from calibflow.plots import plt, to_svg

    sd = sim.cal.w_norm_
    u = np.linspace(-3 * sd, 3 * sd, 301)
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot(u, sim.angular(u), color="C3", lw=2, label="angular (theta_hat)")
    ax.plot(u, sim.angular(u, sim.cos_true), color="k", lw=1, label="angular (true theta*)")
    for m, p in platts.items():
        ax.plot(u, p.predict(u), ls="--", lw=1, label=f"Platt n_ho={m}")
    ax.set_xlabel("w_hat'x")
    ax.set_ylabel("P(y=1)")
    ax.legend(fontsize=6)
    return Figure("Fig. 1: Platt scaling converges to the angular predictor", to_svg(fig), "")


def replications(cfg: dict[str, Any], seed: int) -> tuple[Table, dict[str, float]]:
    """Estimator accuracy over fresh draws (the paper reports one draw)."""
    rows, errs = [], []
    for r in range(int(cfg["reps"])):
        sim = Sim(cfg, seed + 1000 + r)
        err = sim.cal.inner_product_ - sim.true_ip
        errs.append(err)
        rows.append(
            [
                r,
                sim.true_ip,
                sim.cal.inner_product_,
                err,
                math.degrees(math.acos(sim.cos_true)),
                math.degrees(sim.cal.theta_),
                "; ".join(sim.cal.flags_) or "-",
            ]
        )
    e = np.asarray(errs)
    rows.append(["MAE", "", "", float(np.abs(e).mean()), "", "", f"mean signed error {fmt_mean_se(e)}"])
    t = Table(
        "Sec. 7.1: estimator (11)-(12) over draws",
        ["draw", "true <w*,w_hat>", "estimate", "error", "theta* (deg)", "theta_hat (deg)", "flags"],
        rows,
        f"n={cfg['n']}, d={cfg['d']}; the error is O(n^-1/2) (Bellec's bound, App. D).",
    )
    return t, {"est_mae": float(np.abs(e).mean())}


def universality(cfg: dict[str, Any], seed: int) -> Table:
    """App. H.1: Rademacher and uniform designs, and the clipped-ReLU link."""
    rows = []
    for k, (design, link) in enumerate(cfg["h1_cases"]):
        sim = Sim(cfg, seed + 2000 + k, design=design, link=link)
        u, p, y = sim.draw(int(cfg["n_test"]))
        row = [
            design,
            link,
            sim.true_ip,
            sim.cal.inner_product_,
            M.ece(y, expit(u)),
            M.ece(y, sim.angular(u)),
            M.ece(y, sim.angular(u, sim.cos_true)),
        ]
        row += [M.ece(y, _platt(*sim.draw(m)[::2]).predict(u)) for m in (100, 2000)]
        rows.append(row + ["; ".join(sim.cal.flags_) or "-"])
    return Table(
        "App. H.1: non-Gaussian designs and the clipped-ReLU link",
        [
            "design",
            "link",
            "true <w*,w_hat>",
            "estimate",
            "ECE uncal",
            "ECE angular (theta_hat)",
            "ECE angular (theta*)",
            "ECE Platt 100",
            "ECE Platt 2000",
            "flags",
        ],
        rows,
        f"n={cfg['n']}, d={cfg['d']}, test set {cfg['n_test']}, ECE against labels, 15 bins. The paper "
        "shows these as plots only (Figs. 3-4).",
    )


# ---------------------------------------------------------------------------------------------
# Sec. 7.2 semi-real


def _covariates(name: str) -> np.ndarray:
    """Real covariates from ``calibflow.datasets.binary_task`` (labels are simulated, so unused).

    To match the paper's d (Sec. 7.2): communities_crime keeps the 100 attributes without missing values
    (the 22 mostly-missing police columns, median-imputed by ``binary_task``, are dropped); splice keeps the
    A/C/G indicators of its 60 positions (d = 180: T is the reference level, the rare ambiguity codes are
    dropped), which also removes the exact collinearity of a full one-hot block.
    """
    from calibflow.datasets import binary_task, load

    task = binary_task(name)
    X, names = np.asarray(task.X, dtype=np.float64), list(task.feature_names)
    if name == "communities_crime":
        missing = load(name).isna().mean()
        return X[:, [i for i, f in enumerate(names) if missing.get(f, 0.0) <= 0.01]]
    if name == "splice":
        return X[:, [i for i, f in enumerate(names) if f[-2:] in ("=A", "=C", "=G")]]
    return X


def prepare(X: np.ndarray) -> np.ndarray:
    """Standardise, drop constant columns, divide by sqrt(d) (so Sigma ~ Sigma_bar/d as in Sec. 7.1)."""
    sd = X.std(0)
    keep = sd > 1e-12
    Z = (X[:, keep] - X[:, keep].mean(0)) / sd[keep]
    return Z / math.sqrt(Z.shape[1])


def semireal_rep(Z, sizes: dict[str, int], lam: float, rng) -> dict[str, Any]:
    n, n_cov, n_test = sizes["n"], sizes["n_cov"], sizes["n_test"]
    N, d = Z.shape
    sigma = np.cov(Z, rowvar=False)  # the finite population's covariance plays the true Sigma
    ws = rng.standard_normal(d)
    ws /= math.sqrt(ws @ sigma @ ws)
    perm = rng.permutation(N)
    tr, pool, te = perm[:n], perm[n : n + n_cov], perm[n + n_cov : n + n_cov + n_test]
    link = _link("sigmoid(3u+1)")

    def lab(idx):
        return (rng.random(idx.size) < link(Z[idx] @ ws)).astype(float)

    sign_idx = rng.choice(pool, 100, replace=False)
    cal = make("angular", lam=lam, link="logistic", link_scale=3.0, link_shift=1.0)
    cal.fit_linear(Z[tr], lab(tr), Z[sign_idx], lab(sign_idx), X_pool=Z[pool])
    u_te, y_te = Z[te] @ cal.w_, lab(te)
    nw = math.sqrt(cal.w_ @ sigma @ cal.w_)
    cos_true = float(cal.w_ @ sigma @ ws) / nw
    ang_true = angular_probability(u_te / nw, cos_true, "logistic", 3.0, 1.0)[0]
    out = {
        "Uncal.": M.ece(y_te, expit(u_te)),
        "Angular (true theta)": M.ece(y_te, ang_true),
        "Angular (theta_hat)": M.ece(y_te, cal.predict(u_te)),
    }
    for m in (100, 500):
        ho = rng.choice(pool, m, replace=False)
        u_ho, y_ho = Z[ho] @ cal.w_, lab(ho)
        out[f"Platt {m}"] = M.ece(y_te, _platt(u_ho, y_ho).predict(u_te))
        out[f"Iso {m}"] = M.ece(y_te, make("isotonic", input="logit").fit(u_ho, y_ho).predict(u_te))
    out |= {
        "ip_true": float(cal.w_ @ sigma @ ws),
        "ip_est": cal.inner_product_,
        "flagged": bool(cal.flags_),
        "sigma_method": cal.sigma_info_["method"],
        "theta_true": math.degrees(math.acos(np.clip(cos_true, -1, 1))),
        "theta_hat": math.degrees(cal.theta_),
    }
    return out


def semireal(
    cfg: dict[str, Any], seed: int, claims: list[dict[str, Any]] | None = None
) -> tuple[Table, Table]:
    """Sec. 7.2 tables; with ``claims`` (a list) it also appends the per-dataset ECE claims to it."""
    cols = [
        "Uncal.",
        "Angular (true theta)",
        "Angular (theta_hat)",
        "Platt 100",
        "Iso 100",
        "Platt 500",
        "Iso 500",
    ]
    rows, est_rows = [], []
    for k, (name, sizes) in enumerate(cfg["semireal"].items()):
        Z = prepare(_covariates(name))
        reps = [
            semireal_rep(Z, sizes, float(cfg["lam"]), np.random.default_rng([seed, 3000 + k, r]))
            for r in range(int(cfg["semireal_reps"]))
        ]
        if claims is not None:
            claims += semireal_claims(name, reps)
        dims = f"{sizes['n']}x{Z.shape[1]}, n_cov={sizes['n_cov']}, n_test={sizes['n_test']}"
        rows.append([name, dims, "ours"] + [fmt_mean_se([r[c] for r in reps]) for c in cols])
        if name in PAPER_T2:
            p = PAPER_T2[name]
            rows.append([name, "", "paper"] + [p[0], p[1], "", p[2], p[3], p[4], p[5]])
        e = np.array([r["ip_est"] - r["ip_true"] for r in reps])
        est_rows.append(
            [
                name,
                fmt_mean_se([r["ip_true"] for r in reps]),
                fmt_mean_se([r["ip_est"] for r in reps]),
                float(np.median(np.abs(e))),
                fmt_mean_se([r["theta_true"] for r in reps], 1),
                fmt_mean_se([r["theta_hat"] for r in reps], 1),
                sum(r["flagged"] for r in reps),
                ", ".join(sorted({r["sigma_method"] for r in reps})),
            ]
        )
    t = Table(
        "Sec. 7.2 / Table 2: ECE with real covariates and simulated labels",
        ["dataset", "n x d", "source"] + cols,
        rows,
        f"mean ± s.e. over {cfg['semireal_reps']} draws of w*, splits and labels; the "
        "paper's 'Angular' uses the true angle.",
    )
    t2 = Table(
        "Sec. 7.2: the angle estimator on real covariates",
        [
            "dataset",
            "true <w*,w_hat>",
            "estimate",
            "median |error|",
            "theta* (deg)",
            "theta_hat (deg)",
            "draws clipped/flagged",
            "Sigma estimate",
        ],
        est_rows,
        "Sigma for the estimate: from the unlabeled pool, the sample covariance if it has >= 10 d rows "
        "and is "
        "well conditioned, else Ledoit-Wolf.",
    )
    return t, t2


# ---------------------------------------------------------------------------------------------


def run(config: dict[str, Any], seed: int) -> Reproduction:
    """Sec. 7.1 (one draw + replications), App. H.1 and Sec. 7.2; sizes from ``config`` (params.yaml)."""
    t0 = time.perf_counter()
    cfg = dict(config)
    tables, figs, metrics, notes = sec71(cfg, seed)
    t_rep, m_rep = replications(cfg, seed)
    tables += [t_rep, universality(cfg, seed)]
    metrics |= m_rep
    claims: list[dict[str, Any]] = []
    if cfg.get("semireal"):
        tables += list(semireal(cfg, seed, claims))
    rep = Reproduction(
        key="angular",
        paper=PAPER,
        profile=str(cfg.get("profile", "")),
        tables=tables,
        figures=figs,
        notes=notes + NOTES,
        choices=CHOICES,
        metrics=metrics,
        claims=claims,
    )
    rep.elapsed_s = time.perf_counter() - t0
    return rep


def semireal_claims(name: str, reps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Angular calibration (estimated angle) below the uncalibrated and the 100-row Platt ECE, paired over
    draws (what the page's "works on 2 of 4 datasets" rests on)."""
    return [
        paired_claim(
            f"semireal.{name}.angular_hat<{other.replace(' ', '')}",
            f"{name}: angular (theta_hat) has a lower test ECE than {other}",
            [r["Angular (theta_hat)"] for r in reps],
            [r[other] for r in reps],
            direction=-1,
            unit="ECE (angular - other)",
        ).to_dict()
        for other in ("Uncal.", "Platt 100")
    ]


CHOICES = [
    "eq. (11): gamma_hat = Tr(XHX'D)/Tr(D - DXHX'D), not the printed Tr(XHX'D) (misprint: not scale-free;"
    " shared/notes/angle-estimator.md).",
    "The angular predictor and eq. (9) use the TRUE link sigmoid(3u+1) written for ||w*||_Sigma = 1; "
    "Platt's (A, B) are reported in the family sigmoid(3(Au+B)+1), the only reading that matches the "
    "paper's B < 0.",
    "Def. 3.1's expectation by Gauss-Hermite quadrature (nodes doubled until two rules agree to 1e-12; "
    "closed forms for probit and clipped-linear links) instead of App. G's Monte Carlo.",
    "Sign holdout (eq. 12): 100 fresh rows, separate from the n training rows (the paper reserves a "
    "fraction).",
    "Test sets and Platt holdouts are exact draws of (w_hat'x, w*'x) via W (L'w); non-Gaussian designs "
    "are W L'.",
    "Sec. 7.2: standardised real covariates / sqrt(d); Sigma_true = covariance of all rows; estimated-"
    "angle runs use Ledoit-Wolf from the pool; Platt/isotonic/sign holdouts come from pool rows with "
    "fresh labels.",
    "Sec. 7.2 covariates from calibflow.datasets.binary_task; communities_crime keeps the 100 attributes "
    "without (more than 1%) missing values and splice the A/C/G indicators (d = 180), matching the "
    "paper's d; adult (d = 105 one-hot) is our addition.",
]
NOTES = [
    "Sec. 7.2: the paper reports that eq. (11) is unstable on real covariates and uses the true angle; we"
    " show both. It works on madelon and on splice with the paper's d = 180, is often clipped on "
    "communities_crime (n = 200 > d = 100, not the proportional regime) and fails on adult (collinear "
    "one-hot blocks: singular covariance, heavy-tailed indicators), where theta_hat is clipped to 0.",
    "Platt's (A, B) are compared with eq. (9) in the true-link family; at the true angle eq. (9) matches "
    "the fitted Platt A closely, at theta_hat it inherits the angle's O(n^-1/2) error.",
]
