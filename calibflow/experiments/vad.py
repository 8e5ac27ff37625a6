"""Reproduction of Fan, Si & Zhang, "Calibration Matters: Tackling Maximization Bias in Large-scale
Advertising Recommendation Systems": the synthetic study of Sec. 6.1 (Tables 1, 4-7) and the
real-data protocol of Sec. 6.2 on datasets we have (bank_marketing, hillstrom) with XGBoost.

``run(config, seed)`` returns a ``calibflow.results.Reproduction``. ``config`` has two optional
sections, ``synthetic`` and ``real`` (defaults below); a section with ``replications: 0`` is skipped.

Choices where the paper is open (also listed in the Reproduction's ``choices``):

- Synthetic model: unpenalised maximum-likelihood logistic regression with an intercept
  (``calibflow.models.RidgeLogistic(l2=0, standardize=False)``, the shared Newton fitter).
  Theorem 4.1 assumes an MLE; the paper does not say whether its
  scikit-learn fit kept the default ridge penalty C=1; ``l2`` in the config adds a ridge penalty.
- Synthetic replicas: row 0 is the fit on the full training set, rows 1..S-1 bootstrap refits
  (``scheme="bootstrap"``, see ``calibflow.calibrators.vad`` for why line 6 of Algorithm 1 then
  uses deviations from row 0). We also run independent retrains on fresh training draws
  (``scheme="seeds"``) and line 6 exactly as printed applied to the bootstrap replicas, and report
  every replication's estimated lambda beside the oracle ``b_hat' Sigma b* / b_hat' Sigma b_hat`` and
  beside the plug-in target ``1 - tr(Sigma Cov(b_hat)) / b_hat' Sigma b_hat`` (Cov from the Fisher
  information of the training distribution), the per-replication quantity Algorithm 1 estimates.
- Bins: on synthetic data ECE and MCE (eq. 1-2) use M = 10 equal-mass bins of the selected set
  (``binning: quantile``). The paper says "M equi-spaced bins by their values"; equal-mass bins
  reproduce its ECE and MCE magnitudes closely (Tables 5-6), equal-width bins on [0, 1] do not
  (reported beside, for reference). On real data M = 50 as in the paper, equal-width on [0, 1]
  (``binning: uniform``): our selected sets hold only ~100-2,500 rows, and 50 equal-mass bins of them
  would hold 2-50 rows each, which measures label noise rather than calibration.
- Selection: every method is evaluated on the top-alpha set ranked by the served model's score
  (VAD is monotone, so the set is the same; for tied calibrated scores this avoids arbitrary order).
- Real data (Sec. 6.2 protocol, smaller data): rows are split into a shift-model part (25%), train
  (35%), validation-train (10%), validation-test pool (10%) and test pool (20%); the paper's Criteo
  split (85 / 1.5 / 1.5 / 12% of 15M rows, plus a second 85% for the shift model) does not fit data of
  45k-64k rows, so the test and validation pools are made relatively larger. A second XGBoost
  model trained on the shift-model part gives p(x); each validation-test and test row is kept with
  probability 1 - p(x) (the same covariate shift for both, as the paper requires val-test to share the
  test X-margin). Replicas: S XGBoost retrains with different seeds, shuffled row order and
  row/column subsampling (``scheme="seeds"``, as the paper recommends for non-convex models).
  Baselines are fitted on validation-train; VAD+ uses lambda_val-test / lambda_val-train; the
  Vanilla row's VAD+ is plain VAD (lambda_val-test), as in the paper's Table 2.
- Real covariate shift (``shift: segment``, the default in params.yaml): rows go at random to a
  source half (train 70%, validation-train 30%) and a target half (validation-test 40%, test 60%); the source
  keeps a segment's rows with probability ``minority`` (0.2), the target keeps the other rows with that
  probability. Segments: bank_marketing ``late_period`` (rows from November 2008 on; bank-full.csv is in time
  order, so this is a period shift with drift), hillstrom ``newbie`` (new customers). Replicas
  ``replica_scheme: bootstrap``: row 0 the model on all training rows, rows 1..S-1 bootstrap refits, which
  carry the GBDT's sampling variance (seed retrains on the same rows barely differ: lambda 0.97-0.99).
- Extra rows, not in the paper: "Vanilla, bootstrap replica" (row 1 a bootstrap refit, scheme
  "bootstrap") and, for hillstrom, "Vanilla, group-wise VAD" (lambda per treatment arm, Sec. 7).
- Paired tests: two-sided paired t-test over replications of |E|, ECE and MCE, original vs VAD+,
  "significant" when p < 0.01 and VAD+ is lower.
- Semi-synthetic control (``real.semisynthetic``, off in quick): the real features and the same
  segment shift, but labels drawn from a known logistic model (coefficients N(0, 1/d) on standardised
  features, scaled to a logit sd ``signal_sd``, intercept matching the data's positive rate). The true
  probabilities are known, so E on the selected set is measured against them (no label noise), and the
  oracle lambda is the slope of the true logit on the served logit over validation-test (the real-data
  analogue of the synthetic oracle). VAD's estimate is compared with the oracle and with fixed shrinks
  (lambda 0.5 and 0.8, the same anchor): a correct lambda and an arbitrary shrink then give different
  answers, which the plain real-data control (the same model without VAD) cannot show.
"""

from __future__ import annotations

import re
import time
import warnings
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit, logit

from calibflow import metrics as M
from calibflow.calibrators import available, make
from calibflow.calibrators.vad import VADWarning, estimate_lambda
from calibflow.experiments.claims import paired_claim
from calibflow.results import Figure, Reproduction, Table, fmt_mean_se, paired_pvalue

PAPER = "Fan, Si & Zhang (2022), Calibration Matters: Tackling Maximization Bias in Large-scale Advertising"
ALPHAS = [0.02, 0.03, 0.04, 0.05, 0.06, 0.07, 0.08, 0.09, 0.10]
SYN_METHODS = ["Vanilla", "VAD", "VAD(p)", "VAD (S=3)"]
BASELINES = ["histogram", "platt", "scaling_binning", "isotonic"]

SYN_DEFAULTS: dict[str, Any] = {
    "replications": 100,
    "d": 20,
    "beta": 1.0,
    "mu_train": 0.05,
    "mu_test": -0.05,
    "sd": 0.1,
    "n_train": 3000,
    "n_test": 30000,
    "n_val": 30000,
    "alphas": ALPHAS,
    "n_bins": 10,
    "binning": "quantile",
    "l2": 0.0,
    "fisher_mc": 200000,
    "per_replication_rows": 100,
}
REAL_DEFAULTS: dict[str, Any] = {
    "replications": 20,
    "datasets": ["bank_marketing", "hillstrom"],
    "targets": {"hillstrom": "visit"},
    "max_rows": None,
    "fractions": {"shift": 0.25, "train": 0.35, "val_train": 0.1, "val_test": 0.1, "test": 0.2},
    "n_replicas": 2,
    "xgb": {
        "max_depth": 4,
        "learning_rate": 0.1,
        "n_estimators": 200,
        "subsample": 0.8,
        "colsample_bytree": 0.8,
    },
    "alphas": ALPHAS,
    "n_bins": 50,
    "binning": "uniform",
    "bootstrap_check": True,
    "groupwise": True,
    "baselines": BASELINES,
    # "resample" = the Sec. 6.2 resampling (a shift model's p(x)); "segment" = a real covariate
    # shift: the train side under-represents a segment of the data, the selection side over-represents it
    "shift": "resample",
    "segments": {"bank_marketing": "late_period", "hillstrom": "newbie"},
    "minority": 0.2,  # share of the other side's rows each side keeps (segment shift)
    # "seeds": S retrains; "bootstrap": row 0 the full fit, rows 1.. bootstrap refits
    "replica_scheme": "seeds",
}
SEGMENTS = {  # name -> (dataset, description); the mask is computed in ``segment_mask``
    "late_period": "rows from November 2008 on (the last 40% of bank-full.csv, which is in time order)",
    "newbie": "new customers (newbie == 1)",
}

# ---- the paper's numbers (Appendix B.1, Tables 4-7; Table 1 repeats alpha = 2% and 10%) -----------
P_E = {  # Table 4: calibration error E, mean ± s.e. over 100 replications
    0.02: ["8.55% ± 0.68%", "0.06% ± 0.72%", "1.00% ± 0.70%", "-0.34% ± 0.63%"],
    0.03: ["8.05% ± 0.70%", "-0.95% ± 0.69%", "0.28% ± 0.68%", "-0.58% ± 0.64%"],
    0.04: ["8.09% ± 0.70%", "-0.60% ± 0.67%", "0.40% ± 0.65%", "-0.23% ± 0.67%"],
    0.05: ["8.13% ± 0.69%", "-0.13% ± 0.71%", "0.95% ± 0.69%", "-0.10% ± 0.66%"],
    0.06: ["8.09% ± 0.69%", "-0.26% ± 0.71%", "0.75% ± 0.71%", "-0.10% ± 0.67%"],
    0.07: ["7.85% ± 0.71%", "-0.08% ± 0.73%", "1.11% ± 0.71%", "-0.13% ± 0.70%"],
    0.08: ["7.69% ± 0.72%", "0.20% ± 0.66%", "1.12% ± 0.66%", "-0.24% ± 0.67%"],
    0.09: ["7.50% ± 0.74%", "-0.18% ± 0.71%", "0.94% ± 0.71%", "-0.10% ± 0.71%"],
    0.10: ["7.34% ± 0.75%", "-0.62% ± 0.73%", "0.60% ± 0.72%", "-0.08% ± 0.70%"],
}
P_ECE = {  # Table 5 (M = 10 bins)
    0.02: ["0.0656 ± 0.0019", "0.0572 ± 0.0013", "0.0566 ± 0.0013", "0.0555 ± 0.0013"],
    0.03: ["0.0566 ± 0.0020", "0.0478 ± 0.0013", "0.0474 ± 0.0013", "0.0463 ± 0.0013"],
    0.04: ["0.0526 ± 0.0021", "0.0414 ± 0.0014", "0.0409 ± 0.0013", "0.0416 ± 0.0012"],
    0.05: ["0.0510 ± 0.0020", "0.0414 ± 0.0013", "0.0410 ± 0.0013", "0.0404 ± 0.0012"],
    0.06: ["0.0472 ± 0.0021", "0.0385 ± 0.0014", "0.0384 ± 0.0013", "0.0369 ± 0.0013"],
    0.07: ["0.0459 ± 0.0021", "0.0367 ± 0.0014", "0.0363 ± 0.0014", "0.0358 ± 0.0013"],
    0.08: ["0.0451 ± 0.0020", "0.0340 ± 0.0012", "0.0341 ± 0.0013", "0.0339 ± 0.0013"],
    0.09: ["0.0437 ± 0.0021", "0.0338 ± 0.0014", "0.0338 ± 0.0014", "0.0338 ± 0.0014"],
    0.10: ["0.0425 ± 0.0021", "0.0334 ± 0.0015", "0.0331 ± 0.0014", "0.0326 ± 0.0013"],
}
P_MCE = {  # Table 6
    0.02: ["0.1502 ± 0.0041", "0.1333 ± 0.0035", "0.1327 ± 0.0035", "0.1300 ± 0.0034"],
    0.03: ["0.1274 ± 0.0041", "0.1130 ± 0.0031", "0.1118 ± 0.0032", "0.1119 ± 0.0031"],
    0.04: ["0.1098 ± 0.0033", "0.0955 ± 0.0028", "0.0944 ± 0.0028", "0.0965 ± 0.0028"],
    0.05: ["0.1080 ± 0.0033", "0.0926 ± 0.0026", "0.0915 ± 0.0026", "0.0916 ± 0.0025"],
    0.06: ["0.0972 ± 0.0030", "0.0815 ± 0.0025", "0.0818 ± 0.0024", "0.0810 ± 0.0024"],
    0.07: ["0.0927 ± 0.0029", "0.0789 ± 0.0025", "0.0784 ± 0.0024", "0.0793 ± 0.0024"],
    0.08: ["0.0883 ± 0.0028", "0.0733 ± 0.0023", "0.0731 ± 0.0023", "0.0743 ± 0.0024"],
    0.09: ["0.0839 ± 0.0030", "0.0706 ± 0.0023", "0.0699 ± 0.0024", "0.0698 ± 0.0023"],
    0.10: ["0.0836 ± 0.0027", "0.0704 ± 0.0022", "0.0698 ± 0.0022", "0.0690 ± 0.0021"],
}
P_LOGLOSS = {0.02: -0.45, 0.03: -0.42, 0.04: -0.42, 0.05: -0.37, 0.06: -0.35, 0.07: -0.33, 0.08: -0.37}
P_LOGLOSS.update({0.09: -0.32, 0.10: -0.30})  # Table 7, percent
P_T1 = {  # Table 1 (note: VAD at alpha = 10% is printed as +0.62% there, -0.62% in Table 4)
    ("Vanilla", 0.02): ("8.55% ± 0.68%", "0.0656 ± 0.0019"),
    ("VAD", 0.02): ("0.06% ± 0.72%", "0.0572 ± 0.0013"),
    ("Vanilla", 0.10): ("7.34% ± 0.75%", "0.0425 ± 0.0021"),
    ("VAD", 0.10): ("0.62% ± 0.73%", "0.0334 ± 0.0015"),
}
P_CRITEO_E = {  # Table 2 (Criteo, DLRM): alpha -> method -> (Original, VAD+); a different dataset and model
    0.02: {
        "Vanilla": ("3.23%", "-0.44%"),
        "histogram": ("2.18%", "1.44%"),
        "platt": ("1.60%", "0.86%"),
        "scaling_binning": ("2.30%", "1.56%"),
        "isotonic": ("1.62%", "0.87%"),
    },
    0.10: {
        "Vanilla": ("3.94%", "-0.47%"),
        "histogram": ("1.87%", "0.98%"),
        "platt": ("1.80%", "0.91%"),
        "scaling_binning": ("1.99%", "1.11%"),
        "isotonic": ("1.75%", "0.85%"),
    },
}


# ================================ synthetic (Sec. 6.1) ==========================================
def _logistic(X: NDArray, y: NDArray, l2: float) -> NDArray:
    """Logistic regression with intercept (returned last): ``calibflow.models.RidgeLogistic`` without
    standardisation, so ``l2 = 0`` is the plain maximum-likelihood fit of Theorem 4.1."""
    from calibflow.models import RidgeLogistic

    m = RidgeLogistic(l2=l2, standardize=False).fit(X, y)
    return np.r_[m.coef_, m.intercept_]


def _proba(theta: NDArray, X: NDArray) -> NDArray:
    return expit(X @ theta[:-1] + theta[-1])


def _draw(rng: np.random.Generator, n: int, cfg: dict, mu: float) -> NDArray:
    return mu + cfg["sd"] * rng.standard_normal((n, cfg["d"]))


def _labels(rng: np.random.Generator, X: NDArray, beta: NDArray) -> NDArray:
    return (rng.random(len(X)) < expit(X @ beta)).astype(float)


def fisher_covariance(cfg: dict, seed: int) -> NDArray:
    """Asymptotic Cov(b_hat) = I^{-1} / N_train of the slopes (Lemma A.1), by Monte Carlo on D_train."""
    rng = np.random.default_rng([seed, 999])
    X = _draw(rng, cfg["fisher_mc"], cfg, cfg["mu_train"])
    beta = np.full(cfg["d"], cfg["beta"])
    p = expit(X @ beta)
    A = np.column_stack([X, np.ones(len(X))])
    info = (A.T * (p * (1 - p))) @ A / len(X)
    return np.linalg.inv(info)[:-1, :-1] / cfg["n_train"]


def synthetic_replication(cfg: dict, seed: int, rep: int, cov_b: NDArray | None = None) -> dict[str, Any]:
    """One replication of Sec. 6.1: metrics per method and alpha, and every lambda (see module doc)."""
    rng = np.random.default_rng([seed, rep])
    d, n = cfg["d"], cfg["n_train"]
    beta = np.full(d, cfg["beta"])
    Xtr = _draw(rng, n, cfg, cfg["mu_train"])
    ytr = _labels(rng, Xtr, beta)
    Xte = _draw(rng, cfg["n_test"], cfg, cfg["mu_test"])
    yte = _labels(rng, Xte, beta)
    Xv = _draw(rng, cfg["n_val"], cfg, cfg["mu_test"])
    theta = _logistic(Xtr, ytr, cfg["l2"])
    boots = []
    for _ in range(2):  # rows 1, 2: bootstrap refits (S = 2 uses the first, S = 3 both)
        idx = rng.integers(0, n, n)
        boots.append(_logistic(Xtr[idx], ytr[idx], cfg["l2"]))
    Xi = _draw(rng, n, cfg, cfg["mu_train"])  # an independent training draw: an exchangeable retrain
    indep = _logistic(Xi, _labels(rng, Xi, beta), cfg["l2"])

    pv = [_proba(t, Xv) for t in (theta, *boots, indep)]
    R2, R3, Rs = np.stack(pv[:2]), np.stack(pv[:3]), np.stack([pv[0], pv[3]])
    Sigma = cfg["sd"] ** 2
    b = theta[:-1]
    lam = {
        "oracle": float(b @ beta / (b @ b)),  # Sigma = sd^2 I cancels
        "bootstrap S=2": estimate_lambda(R2, scheme="bootstrap")[0],
        "bootstrap S=3": estimate_lambda(R3, scheme="bootstrap")[0],
        "line 6 as printed on bootstrap S=2": estimate_lambda(R2, scheme="seeds")[0],
        "seeds (independent retrain) S=2": estimate_lambda(Rs, scheme="seeds")[0],
    }
    if cov_b is not None:
        lam["plug-in target"] = float(1.0 - Sigma * np.trace(cov_b) / (Sigma * b @ b))
    p = _proba(theta, Xte)
    preds = {
        "Vanilla": p,
        "VAD": make("vad", scheme="bootstrap").fit(R2).predict(p),
        "VAD(p)": make("vad", scheme="bootstrap", link="identity").fit(R2).predict(p),
        "VAD (S=3)": make("vad", scheme="bootstrap").fit(R3).predict(p),
        "VAD (indep. retrain)": make("vad", scheme="seeds").fit(Rs).predict(p),
    }
    return {
        "metrics": _selection_table(yte, preds, p, cfg["alphas"], cfg["n_bins"], cfg["binning"]),
        "lambda": lam,
    }


def _selection_table(y, preds: dict[str, NDArray], rank: NDArray, alphas, n_bins, binning: str) -> dict:
    """metric -> method -> alpha -> value on the top-alpha set by ``rank`` (eq. 1-2; one sort for all).

    ``ece``/``mce`` use ``binning`` ("uniform": M equal-width bins on [0, 1]; "quantile": M equal-mass
    bins of the selected set); ``ece_other``/``mce_other`` the other one, reported for comparison.
    """
    other = "uniform" if binning == "quantile" else "quantile"
    order = np.argsort(-rank, kind="mergesort")
    ys = y[order]
    out: dict[str, dict[str, dict[float, float]]] = {
        k: {} for k in ("E", "ece", "mce", "ece_other", "mce_other", "log_loss")
    }
    for name, q in preds.items():
        qs = q[order]
        for a in alphas:
            k = int(np.ceil(a * len(y)))  # the top ceil(alpha n) items, as calibflow.metrics.top_alpha_mask
            yy, pp = ys[:k], qs[:k]
            vals = {
                "E": M.calibration_error_e(yy, pp) if yy.sum() > 0 else float("nan"),
                "ece": M.ece(yy, pp, n_bins, binning),
                "mce": M.mce(yy, pp, n_bins, binning),
                "ece_other": M.ece(yy, pp, n_bins, other),
                "mce_other": M.mce(yy, pp, n_bins, other),
                "log_loss": M.log_loss(yy, pp),
            }
            for m, v in vals.items():
                out[m].setdefault(name, {})[a] = v
    return out


def run_synthetic(cfg: dict, seed: int) -> dict[str, Any]:
    cov_b = fisher_covariance(cfg, seed)
    reps = [synthetic_replication(cfg, seed, r, cov_b) for r in range(cfg["replications"])]
    return {"reps": reps, "cov_trace": float(np.trace(cov_b))}


def _arr(reps, metric, method, alpha) -> NDArray:
    return np.array([r["metrics"][metric][method][alpha] for r in reps])


def _pct(v: NDArray) -> str:
    return fmt_mean_se(100 * v, 2).replace(" ±", "% ±") + "%"


def _fmt(v: NDArray, metric: str) -> str:
    return _pct(v) if metric == "E" else fmt_mean_se(v, 4)


def synthetic_tables(res: dict, cfg: dict) -> tuple[list[Table], dict[str, float], list[str]]:
    reps, alphas = res["reps"], cfg["alphas"]
    R = len(reps)
    tables: list[Table] = []
    rows = []
    for meth in ("Vanilla", "VAD"):
        for a in (0.02, 0.10):
            if a not in alphas:
                continue
            pe, pc = P_T1[(meth, a)]
            rows.append([meth, f"{a:.0%}", _pct(_arr(reps, "E", meth, a)), pe])
            rows[-1] += [fmt_mean_se(_arr(reps, "ece", meth, a), 4), pc]
    tables.append(
        Table(
            "Table 1 (synthetic): calibration error E and ECE on the selected set",
            ["method", "alpha", "E (ours)", "E (paper)", "ECE (ours)", "ECE (paper)"],
            rows,
            f"mean ± s.e. over {R} replications (paper: 100); ECE with 10 bins.",
        )
    )
    for num, metric, paper in (("4", "E", P_E), ("5", "ece", P_ECE), ("6", "mce", P_MCE)):
        cols = ["alpha"] + [f"{m} ({w})" for m in SYN_METHODS for w in ("ours", "paper")]
        rows = []
        for a in alphas:
            row = [f"{a:.0%}"]
            for i, m in enumerate(SYN_METHODS):
                row += [_fmt(_arr(reps, metric, m, a), metric), paper.get(a, ["-"] * 4)[i]]
            rows.append(row)
        tables.append(
            Table(
                f"Table {num} (synthetic): {metric.upper() if metric != 'E' else 'E'} by alpha",
                cols,
                rows,
                "",
            )
        )
    rows = []
    for a in alphas:
        red = 100 * (_arr(reps, "log_loss", "VAD", a) / _arr(reps, "log_loss", "Vanilla", a) - 1)
        rows.append([f"{a:.0%}", fmt_mean_se(red, 3) + " %", f"{P_LOGLOSS.get(a, float('nan')):.2f} %"])
    tables.append(
        Table("Table 7 (synthetic): log-loss reduction by VAD", ["alpha", "ours", "paper"], rows, "")
    )
    rows = []
    for a in (alphas[0], alphas[-1]):
        for m in SYN_METHODS:
            rows.append(
                [f"{a:.0%}", m] + [fmt_mean_se(_arr(reps, k, m, a), 4) for k in ("ece_other", "mce_other")]
            )
    other = "uniform" if cfg["binning"] == "quantile" else "quantile"
    tables.append(
        Table(
            f"Synthetic: ECE and MCE with {other} bins instead (sensitivity to the binning)",
            ["alpha", "method", "ECE", "MCE"],
            rows,
            "The paper's 'M equi-spaced bins' is ambiguous; equal-mass bins reproduce its ECE/MCE "
            "magnitudes, "
            "equal-width bins on [0, 1] give a few sparse top bins and an MCE that does not fall with alpha.",
        )
    )
    lam = {k: np.array([r["lambda"][k] for r in reps]) for k in reps[0]["lambda"]}
    lam_tables, notes = _lambda_tables(lam, len(reps), cfg)
    tables += lam_tables
    tables.append(_extra_table(reps, alphas))
    tables.append(_synthetic_tests(reps, alphas))
    metrics = {
        "synthetic_E_vanilla_2pct": float(_arr(reps, "E", "Vanilla", alphas[0]).mean()),
        "synthetic_E_vad_2pct": float(_arr(reps, "E", "VAD", alphas[0]).mean()),
        "synthetic_E_vanilla_10pct": float(_arr(reps, "E", "Vanilla", alphas[-1]).mean()),
        "synthetic_E_vad_10pct": float(_arr(reps, "E", "VAD", alphas[-1]).mean()),
    }
    for k, v in lam.items():
        metrics["synthetic_lambda_" + re.sub(r"[^A-Za-z0-9]+", "_", k).strip("_")] = float(v.mean())
    return tables, metrics, notes


def _lambda_tables(lam: dict[str, NDArray], n_reps: int, cfg) -> tuple[list[Table], list[str]]:
    """Lambda summary and per-replication tables; ``lam`` maps each estimator to its replications."""
    keys = list(lam)
    rows = []
    for k in keys:
        d_or = lam[k] - lam["oracle"]
        row = [k, fmt_mean_se(lam[k], 4), fmt_mean_se(d_or, 4), f"{np.sqrt(np.mean(d_or**2)):.4f}"]
        if "plug-in target" in lam:
            d_pt = lam[k] - lam["plug-in target"]
            row += [fmt_mean_se(d_pt, 4), f"{np.sqrt(np.mean(d_pt**2)):.4f}"]
        rows.append(row)
    cols = ["lambda", "mean ± s.e.", "minus oracle", "RMS vs oracle"]
    if "plug-in target" in lam:
        cols += ["minus plug-in target", "RMS vs plug-in"]
    summary = Table(
        "Lambda (synthetic): estimates against the oracle b_hat' Sigma b* / b_hat' Sigma b_hat",
        cols,
        rows,
        "The oracle contains b*' Sigma (b_hat - b*), sampling noise no estimator can see from the "
        "served model, "
        "so single replications agree only on average; the plug-in target replaces the unknown b* by the "
        "expected conditional variance (eq. 7) that Algorithm 1 estimates.",
    )
    n = min(n_reps, int(cfg.get("per_replication_rows", 100)))
    per = Table(
        "Lambda per replication (synthetic)",
        ["replication"] + keys,
        [[i] + [round(float(lam[k][i]), 4) for k in keys] for i in range(n)],
        f"first {n} of {n_reps} replications",
    )
    half = lam["line 6 as printed on bootstrap S=2"] - lam["oracle"]
    notes = [
        f"Line 6 of Algorithm 1 as printed, applied to a full-data fit plus one bootstrap refit, "
        f"estimates half "
        f"the sampling variance: its lambda exceeds the oracle by {fmt_mean_se(half, 3)} (mean ± s.e.) "
        f"on average; the bootstrap formula (deviations from the "
        f"served fit) "
        f"and line 6 on exchangeable retrains both track the oracle on average."
    ]
    return [summary, per], notes


def _extra_table(reps, alphas) -> Table:
    rows = []
    for a in alphas:
        rows.append([f"{a:.0%}"] + [_fmt(_arr(reps, "E", "VAD (indep. retrain)", a), "E")])
    return Table(
        "Synthetic: VAD with an exchangeable retrain (scheme='seeds', fresh training draw), E by alpha",
        ["alpha", "E (ours)"],
        rows,
        "Not in the paper; checks that the seeds scheme debiases as well as the bootstrap scheme.",
    )


def _setting(cfg: dict, name: str) -> str:
    shift = (
        f"segment shift on {cfg['segments'][name]}" if cfg["shift"] == "segment" else "Sec. 6.2 resampling"
    )
    return f"{shift}, {cfg['n_replicas']} {cfg['replica_scheme']} replicas"


def _verdict(name: str, reps, methods, cfg) -> str:
    """Counts of (alpha, method) cells where VAD+ is significantly better / worse on |E| and ECE."""
    out = []
    for metric in ("E", "ece"):
        better = worse = 0
        for a in cfg["alphas"]:
            for m in methods:
                o, v = _arr(reps, metric, f"{m}|Original", a), _arr(reps, metric, f"{m}|VAD+", a)
                if metric == "E":
                    o, v = np.abs(o), np.abs(v)
                p = paired_pvalue(o, v)
                if np.isfinite(p) and p < 0.01:
                    better += int(v.mean() < o.mean())
                    worse += int(v.mean() > o.mean())
        n = len(cfg["alphas"]) * len(methods)
        label = "|E|" if metric == "E" else "ECE"
        out.append(f"{label}: VAD+ significantly better in {better} and worse in {worse} of {n} cells")
    return f"{name}: " + "; ".join(out) + " (paired t-test over replications, p < 1%)."


def _paired(orig: NDArray, new: NDArray) -> str:
    """Two-sided paired p-value, '*' where ``new`` is lower at the 1% level; '-' where undefined."""
    p = paired_pvalue(orig, new)
    if not np.isfinite(p):
        return "-"
    flag = (" *" if new.mean() < orig.mean() else " worse") if p < 0.01 else ""
    return f"{p:.2g}{flag}"


def _synthetic_tests(reps, alphas) -> Table:
    rows = []
    for a in alphas:
        row = [f"{a:.0%}"]
        for metric in ("E", "ece", "mce"):
            f = np.abs if metric == "E" else (lambda v: v)
            row.append(_paired(f(_arr(reps, metric, "Vanilla", a)), f(_arr(reps, metric, "VAD", a))))
        rows.append(row)
    return Table(
        "Synthetic: paired t-tests, Vanilla vs VAD (p-values; * = VAD lower at the 1% level)",
        ["alpha", "|E|", "ECE", "MCE"],
        rows,
        "",
    )


# ================================ real data (Sec. 6.2) ==========================================
def _train_xgb(X, y, params: dict, seed: int):
    """XGBoost through ``calibflow.models`` (scikit-learn-style params); returns ``Z -> P(y = 1 | Z)``."""
    from calibflow import models

    m = models.train_classifier(X, y, params, seed)
    return lambda Z: models.predict_proba(m, Z)


def _split(n: int, fractions: dict[str, float], rng: np.random.Generator) -> dict[str, NDArray]:
    perm = rng.permutation(n)
    cuts = np.cumsum([int(round(f * n)) for f in fractions.values()])
    return dict(zip(fractions, np.split(perm, cuts[:-1]), strict=True))


def segment_mask(name: str, segment: str, n: int) -> NDArray[np.bool_]:
    """Rows of dataset ``name`` in ``segment`` (see ``SEGMENTS``), in the loader's row order."""
    from calibflow import datasets

    if segment == "late_period":
        if name != "bank_marketing":
            raise ValueError("segment late_period needs bank_marketing (its rows are in time order)")
        return np.arange(n) >= int(0.6 * n)
    if segment == "newbie":
        if name != "hillstrom":
            raise ValueError("segment newbie needs hillstrom")
        return datasets.load("hillstrom")["newbie"].to_numpy() == 1
    raise ValueError(f"unknown segment {segment!r}; choose from {sorted(SEGMENTS)}")


def segment_parts(seg: NDArray[np.bool_], cfg: dict, rng: np.random.Generator) -> dict[str, NDArray]:
    """Segment shift: rows go at random to a source half (train 70%, val-train 30%) or a target half
    (val-test 40%, test 60%); the source keeps segment rows with probability ``minority``, the target keeps
    the other rows with that probability. P(y | x) is whatever the data has; only the mix of X changes."""
    perm = rng.permutation(seg.size)
    src, tgt = perm[: seg.size // 2], perm[seg.size // 2 :]
    m = float(cfg["minority"])
    src = np.sort(src[~seg[src] | (rng.random(src.size) < m)])
    tgt = np.sort(tgt[seg[tgt] | (rng.random(tgt.size) < m)])
    src, tgt = rng.permutation(src), rng.permutation(tgt)
    a, b = int(0.7 * src.size), int(0.4 * tgt.size)
    return {"train": src[:a], "val_train": src[a:], "val_test": tgt[:b], "test": tgt[b:]}


def _replica_models(X, y, tr, cfg: dict, base_seed: int, rng: np.random.Generator) -> list:
    """S replicas: retrains (``seeds``) or the full fit plus bootstrap refits (``bootstrap``)."""
    xgb_params = dict(cfg["xgb"])
    models = []
    for j in range(cfg["n_replicas"]):
        if cfg["replica_scheme"] == "bootstrap" and j > 0:  # a bootstrap refit carries the sampling variance
            rows = rng.choice(tr, tr.size, replace=True)
        else:  # retrains: new seed, new row order, row/column subsampling
            rows = rng.permutation(tr)
        models.append(_train_xgb(X[rows], y[rows], xgb_params, base_seed + 10 * j + 1))
    return models


def real_replication(
    X, y, cfg: dict, seed: int, rep: int, baselines: list[str], groups=None, seg=None
) -> dict[str, Any]:
    """One replication of the Sec. 6.2 protocol or of the segment shift (see the module docstring)."""
    rng = np.random.default_rng([seed, 7, rep])
    xgb_params = dict(cfg["xgb"])
    base_seed = seed + 1000 * rep
    if cfg["shift"] == "segment":
        parts = segment_parts(seg, cfg, rng)
        kept = {"val_test": parts["val_test"], "test": parts["test"]}
    else:
        parts = _split(len(y), cfg["fractions"], rng)
        shift = _train_xgb(X[parts["shift"]], y[parts["shift"]], {**xgb_params, "subsample": 1.0}, base_seed)
        kept = {}
        for k in ("val_test", "test"):  # keep each row with probability 1 - p(x): covariate shift only
            idx = parts[k]
            kept[k] = idx[rng.random(idx.size) < 1.0 - shift(X[idx])]
    tr = parts["train"]
    models = _replica_models(X, y, tr, cfg, base_seed, rng)
    scheme = cfg["replica_scheme"]
    vt, vtr, te = kept["val_test"], parts["val_train"], kept["test"]
    Rvt = np.stack([m(X[vt]) for m in models]).astype(float)
    Rvtr = np.stack([m(X[vtr]) for m in models]).astype(float)
    ytr_v = y[vtr].astype(float)
    p = models[0](X[te]).astype(float)
    yte = y[te].astype(float)
    preds: dict[str, NDArray] = {"Vanilla|Original": p}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", VADWarning)
        vad = make("vad", scheme=scheme).fit(Rvt)
        preds["Vanilla|VAD+"] = vad.predict(p)
        lam = {"val_test": vad.lambda_, "val_train": estimate_lambda(Rvtr, scheme=scheme)[0]}
        for b in baselines:
            preds[f"{b}|Original"] = make(b, input="probability").fit(Rvtr[0], ytr_v).predict(p)
            preds[f"{b}|VAD+"] = make("vad", base=b, scheme=scheme).fit(Rvt, Rvtr, ytr_v).predict(p)
        if (
            cfg.get("bootstrap_check") and scheme == "seeds"
        ):  # not in the paper: one bootstrap refit instead of a retrain
            boot = rng.choice(tr, tr.size, replace=True)
            mb = _train_xgb(X[boot], y[boot], xgb_params, base_seed + 1)
            Rb = np.stack([Rvt[0], mb(X[vt]).astype(float)])
            vb = make("vad", scheme="bootstrap").fit(Rb)
            preds["Vanilla, bootstrap replica|Original"] = p
            preds["Vanilla, bootstrap replica|VAD+"] = vb.predict(p)
            lam["val_test_bootstrap"] = vb.lambda_
        if groups is not None:  # group-wise VAD (Sec. 7) by the given segment column
            vg = make("vad", scheme=scheme).fit(Rvt, groups=groups[vt])
            preds["Vanilla, group-wise VAD|Original"] = p
            preds["Vanilla, group-wise VAD|VAD+"] = vg.predict(p, groups=groups[te])
            lam["group"] = dict(zip(vg.group_keys_, vg.group_lambda_, strict=True))
    out = _selection_table(yte, preds, p, cfg["alphas"], cfg["n_bins"], cfg["binning"])
    info = {"n_test": int(p.size), "n_val_test": int(Rvt.shape[1]), "test_rate": float(yte.mean())}
    info["train_rate"] = float(y[tr].mean())
    if seg is not None:
        info["segment_share_train"], info["segment_share_test"] = float(seg[tr].mean()), float(seg[te].mean())
    return {"metrics": out, "lambda": lam, "info": info, "clipped": [str(w.message) for w in caught]}


def run_real(cfg: dict, seed: int) -> tuple[dict[str, Any], list[str]]:
    """Every dataset in ``cfg['datasets']``; returns results and the baselines that were missing."""
    from calibflow import datasets

    have = set(available())
    baselines = [b for b in cfg["baselines"] if b in have]
    missing = [b for b in cfg["baselines"] if b not in have]
    out = {}
    for name in cfg["datasets"]:
        task = datasets.binary_task(name, target=cfg["targets"].get(name))
        X, y = np.asarray(task.X, float), np.asarray(task.y, float)
        g = getattr(task, "treatment", None) if cfg.get("groupwise") else None
        g = None if g is None else np.asarray(g).astype(str)
        seg = segment_mask(name, cfg["segments"][name], len(y)) if cfg["shift"] == "segment" else None
        if cfg.get("max_rows") and len(y) > cfg["max_rows"]:
            keep = np.sort(np.random.default_rng([seed, 3]).choice(len(y), cfg["max_rows"], replace=False))
            X, y, g = X[keep], y[keep], (None if g is None else g[keep])
            seg = None if seg is None else seg[keep]
        reps = cfg["replications"]
        out[name] = [real_replication(X, y, cfg, seed, r, baselines, g, seg) for r in range(reps)]
    return out, missing


def real_tables(res: dict, cfg: dict) -> tuple[list[Table], dict[str, float], list[str]]:
    tables, metrics, notes = [], {}, []
    for name, reps in res.items():
        methods = [m.split("|")[0] for m in reps[0]["metrics"]["E"] if m.endswith("|Original")]
        R = len(reps)
        for metric, label in (("E", "calibration error E"), ("ece", "ECE"), ("mce", "MCE")):
            rows = []
            for a in cfg["alphas"]:
                for m in methods:
                    o, v = _arr(reps, metric, f"{m}|Original", a), _arr(reps, metric, f"{m}|VAD+", a)
                    f = np.abs if metric == "E" else (lambda x: x)
                    row = [f"{a:.0%}", m, _fmt(o, metric), _fmt(v, metric), _paired(f(o), f(v))]
                    if metric == "E":
                        row.append(" / ".join(P_CRITEO_E.get(a, {}).get(m, ("-", "-"))))
                    rows.append(row)
            cols = ["alpha", "method", "Original", "VAD+", "paired p (|E|)" if metric == "E" else "paired p"]
            if metric == "E":
                cols.append("paper, Criteo (Orig / VAD+)")
            tables.append(
                Table(
                    f"Real data ({name}, XGBoost, {_setting(cfg, name)}): {label} on the selected set, "
                    "original vs VAD+",
                    cols,
                    rows,
                    f"mean ± s.e. over {R} replications, {cfg['n_bins']} {cfg['binning']} bins; "
                    "* = VAD+ lower, paired t-test p < 1%; 'worse' = VAD+ higher with p < 1%.",
                )
            )
        lt = np.array([r["lambda"]["val_test"] for r in reps])
        lv = np.array([r["lambda"]["val_train"] for r in reps])
        if "val_test_bootstrap" in reps[0]["lambda"]:
            lb = np.array([r["lambda"]["val_test_bootstrap"] for r in reps])
            notes.append(f"{name}: lambda_val-test with a bootstrap replica instead {fmt_mean_se(lb, 3)}.")
        if "group" in reps[0]["lambda"]:
            keys = sorted(reps[0]["lambda"]["group"])
            per = {k: fmt_mean_se([r["lambda"]["group"][k] for r in reps], 3) for k in keys}
            notes.append(f"{name}: group-wise lambda_val-test {per}.")
        info = reps[0]["info"]
        shares = ""
        if "segment_share_train" in info:
            shares = (
                f"; segment '{cfg['segments'][name]}' ({SEGMENTS[cfg['segments'][name]]}) is "
                f"{info['segment_share_train']:.0%} of train and {info['segment_share_test']:.0%} of test"
            )
        notes.append(
            f"{name} ({_setting(cfg, name)}): lambda_val-test {fmt_mean_se(lt, 3)}, lambda_val-train "
            f"{fmt_mean_se(lv, 3)}; test set ~{info['n_test']} rows after the shift (positive rate "
            f"{info['test_rate']:.1%} vs {info['train_rate']:.1%} in train){shares}; {R} replications."
        )
        notes.append(_verdict(name, reps, methods, cfg))
        for m in methods:
            for a in (cfg["alphas"][0], cfg["alphas"][-1]):
                key = re.sub(r"[^A-Za-z0-9]+", "_", f"{name}_E_{m}").strip("_")
                metrics[f"{key}_original_{a:g}"] = float(_arr(reps, "E", f"{m}|Original", a).mean())
                metrics[f"{key}_vadplus_{a:g}"] = float(_arr(reps, "E", f"{m}|VAD+", a).mean())
        n_clip = sum(len(r["clipped"]) for r in reps)
        if n_clip:
            notes.append(f"{name}: lambda clipped to [0, 1] {n_clip} time(s); e.g. {reps[0]['clipped'][:1]}")
    return tables, metrics, notes


# ================================ semi-synthetic control =============================
SEMI_DEFAULTS: dict[str, Any] = {"replications": 0, "signal_sd": 1.0, "shrinks": [0.5, 0.8]}


def known_model(X: NDArray, base_rate: float, signal_sd: float, rng: np.random.Generator) -> NDArray:
    """True P(y = 1 | x) of a logistic model on the standardised features, logit sd ``signal_sd``, mean
    probability about ``base_rate`` (intercept by bisection)."""
    sd = X.std(axis=0)
    Z = (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)
    eta = Z @ rng.normal(0.0, 1.0 / np.sqrt(Z.shape[1]), Z.shape[1])
    eta *= signal_sd / max(float(eta.std()), 1e-12)
    lo, hi = -20.0, 20.0
    for _ in range(60):  # mean(expit(eta + c)) is increasing in c
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expit(eta + mid).mean() < base_rate else (lo, mid)
    return expit(eta + (lo + hi) / 2)


def _shrink(p: NDArray, lam: float, anchor: float) -> NDArray:
    z = logit(np.clip(p, 1e-6, 1 - 1e-6))
    return expit(lam * z + (1.0 - lam) * anchor)


def semisynthetic_replication(X, p_true, seg, cfg: dict, semi: dict, seed: int, rep: int) -> dict[str, Any]:
    """One replication: fresh labels from ``p_true``, the segment shift, XGBoost replicas, VAD; E on the
    test's top-alpha set against the true probabilities, for VAD, the oracle lambda and fixed shrinks."""
    rng = np.random.default_rng([seed, 27, rep])
    y = (rng.random(p_true.size) < p_true).astype(float)
    parts = segment_parts(seg, cfg, rng)
    tr, vt, te = parts["train"], parts["val_test"], parts["test"]
    models = _replica_models(X, y, tr, cfg, seed + 1000 * rep, rng)
    Rvt = np.stack([m(X[vt]) for m in models]).astype(float)
    p = models[0](X[te]).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", VADWarning)
        vad = make("vad", scheme=cfg["replica_scheme"]).fit(Rvt)
    z_vt = logit(np.clip(Rvt[0], 1e-6, 1 - 1e-6))
    t_vt = logit(np.clip(p_true[vt], 1e-6, 1 - 1e-6))
    lam = {"VAD": float(vad.lambda_), "oracle": float(np.cov(z_vt, t_vt)[0, 1] / z_vt.var(ddof=1))}
    lam |= {f"shrink {s:g}": float(s) for s in semi["shrinks"]}
    preds = {"Original": p} | {k: _shrink(p, v, vad.anchor_) for k, v in lam.items()}
    order = np.argsort(-p, kind="mergesort")
    E: dict[str, dict[float, float]] = {}
    for name, q in preds.items():
        for a in cfg["alphas"]:
            top = order[: int(np.ceil(a * p.size))]
            E.setdefault(name, {})[a] = float(q[top].sum() / p_true[te][top].sum() - 1.0)
    return {"E_true": E, "lambda": lam}


def run_semisynthetic(cfg: dict, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Every dataset of ``cfg``: its real features and segment, labels from a known model."""
    from calibflow import datasets

    semi = {**SEMI_DEFAULTS, **(cfg.get("semisynthetic") or {})}
    out = {}
    for k, name in enumerate(cfg["datasets"]):
        task = datasets.binary_task(name, target=cfg["targets"].get(name))
        X, y = np.asarray(task.X, float), np.asarray(task.y, float)
        seg = segment_mask(name, cfg["segments"][name], len(y))
        if cfg.get("max_rows") and len(y) > cfg["max_rows"]:
            keep = np.sort(np.random.default_rng([seed, 3]).choice(len(y), cfg["max_rows"], replace=False))
            X, y, seg = X[keep], y[keep], seg[keep]
        p_true = known_model(
            X, float(y.mean()), float(semi["signal_sd"]), np.random.default_rng([seed, 28, k])
        )
        out[name] = [
            semisynthetic_replication(X, p_true, seg, cfg, semi, seed, r)
            for r in range(int(semi["replications"]))
        ]
    return out


def semisynthetic_tables(res: dict, cfg: dict) -> tuple[list[Table], list[dict[str, Any]]]:
    """E against the true probabilities per alpha and method, the lambdas, and the claims."""
    tables, claims = [], []
    for name, reps in res.items():
        methods = list(reps[0]["E_true"])
        rows = [
            [f"{a:.0%}"] + [_pct(np.array([r["E_true"][m][a] for r in reps])) for m in methods]
            for a in cfg["alphas"]
        ]
        lam_row = (
            ["lambda"] + ["1 (none)"] + [fmt_mean_se([r["lambda"][m] for r in reps], 3) for m in methods[1:]]
        )
        tables.append(
            Table(
                f"Semi-synthetic control ({name}: real features and segment shift, labels from a known "
                "logistic model): E on the selected set against the TRUE probabilities",
                ["alpha", *methods],
                [*rows, lam_row],
                f"mean ± s.e. over {len(reps)} replications (fresh labels, split and replicas each); "
                "E = sum(calibrated p) / sum(true p) - 1 over the top-alpha test rows by the served score. "
                "Oracle lambda: slope of the true logit on the served logit over validation-test. Shrinks: "
                "fixed lambda with VAD's anchor.",
            )
        )
        lv, lo = (np.array([r["lambda"][k] for r in reps]) for k in ("VAD", "oracle"))
        for a in cfg["alphas"]:
            e = {m: np.abs([r["E_true"][m][a] for r in reps]) for m in methods}
            for other in [m for m in methods if m not in ("VAD", "oracle")]:
                claims.append(
                    paired_claim(
                        f"semisynthetic.{name}.alpha{a:g}.VAD<{other.replace(' ', '')}",
                        f"semi-synthetic {name}, alpha = {a:.0%}: |E against the truth| lower with VAD than "
                        f"with {other}",
                        e["VAD"],
                        e[other],
                        direction=-1,
                        unit="|E| (VAD - other)",
                    ).to_dict()
                )
        claims.append(
            paired_claim(
                f"semisynthetic.{name}.lambda_VAD<oracle",
                f"semi-synthetic {name}: VAD's lambda is below the oracle lambda (it over-shrinks)",
                lv,
                lo,
                direction=-1,
                unit="lambda (VAD - oracle)",
            ).to_dict()
        )
    return tables, claims


# ================================ claims (seed meta-run) ========================================
def vad_claims(reps, alphas, pairs: list[tuple[str, str, str]], where: str) -> list[dict[str, Any]]:
    """|E| on the selected set lower after the correction than before, per alpha and (label, before, after)
    pair; paired over replications at the page's 1% level."""
    out = []
    for a in alphas:
        for label, before, after in pairs:
            o, v = np.abs(_arr(reps, "E", before, a)), np.abs(_arr(reps, "E", after, a))
            cid = re.sub(r"[^A-Za-z0-9_.|<+-]+", "_", f"{where}.{label}.alpha{a:g}.absE")
            out.append(
                paired_claim(
                    cid,
                    f"{where}, {label}, alpha = {a:.0%}: |E| lower after the correction",
                    v,
                    o,
                    direction=-1,
                    unit="|E| (after - before)",
                    alpha=0.01,
                ).to_dict()
            )
    return out


# ================================ figures =======================================================
def _curves(title: str, alphas, series: dict[str, dict[str, NDArray]]) -> Figure:
    """E, ECE, MCE against alpha; ``series[metric][label]`` = mean per alpha."""
    from calibflow.plots import small_multiples, to_svg

    fig, axes = small_multiples(3, ncols=3, size=2.6)
    x = 100 * np.asarray(alphas)
    for ax, metric in zip(axes, ("E", "ece", "mce"), strict=True):
        for label, y in series[metric].items():
            ax.plot(x, y, marker="o", ms=2, lw=1, label=label, ls="--" if "VAD" not in label else "-")
        ax.set_xlabel("alpha (%)")
        ax.set_title(metric.upper() if metric != "E" else "calibration error E")
        if metric == "E":
            ax.axhline(0, color="0.6", lw=0.6)
    axes[0].legend(fontsize=5)
    return Figure(title, to_svg(fig), "mean over replications")


def _syn_figure(reps, alphas) -> Figure:
    series = {
        m: {k: np.array([_arr(reps, m, k, a).mean() for a in alphas]) for k in SYN_METHODS}
        for m in ("E", "ece", "mce")
    }
    return _curves("Synthetic (Sec. 6.1): E, ECE, MCE vs alpha", alphas, series)


def _real_figure(name, reps, alphas) -> Figure:
    keys = list(reps[0]["metrics"]["E"])
    series = {
        m: {k: np.array([_arr(reps, m, k, a).mean() for a in alphas]) for k in keys}
        for m in ("E", "ece", "mce")
    }
    return _curves(f"{name} (Sec. 6.2 protocol): original vs VAD+", alphas, series)


# ================================ entry point ===================================================
def run(config: dict, seed: int) -> Reproduction:
    """Run the reproduction with ``config`` (the params.yaml profile section) and ``seed``."""
    t0 = time.perf_counter()
    config = dict(config or {})
    profile = str(config.pop("profile", "custom"))
    syn_cfg = {**SYN_DEFAULTS, **config.get("synthetic", {})}
    real_cfg = {**REAL_DEFAULTS, **config.get("real", {})}
    if real_cfg["shift"] not in ("resample", "segment"):
        raise ValueError(f"real.shift must be resample or segment, got {real_cfg['shift']!r}")
    if real_cfg["replica_scheme"] not in ("seeds", "bootstrap"):
        raise ValueError(
            f"real.replica_scheme must be seeds or bootstrap, got {real_cfg['replica_scheme']!r}"
        )
    rep = Reproduction(key="vad", paper=PAPER, profile=profile, choices=_choices())
    if syn_cfg["replications"] > 0:
        res = run_synthetic(syn_cfg, seed)
        tables, metrics, notes = synthetic_tables(res, syn_cfg)
        rep.tables += tables
        rep.metrics.update(metrics)
        rep.notes += notes
        rep.figures.append(_syn_figure(res["reps"], syn_cfg["alphas"]))
        rep.claims += vad_claims(res["reps"], syn_cfg["alphas"], [("VAD", "Vanilla", "VAD")], "synthetic")
    if real_cfg["replications"] > 0 and real_cfg["datasets"]:
        res, missing = run_real(real_cfg, seed)
        tables, metrics, notes = real_tables(res, real_cfg)
        rep.tables += tables
        rep.metrics.update(metrics)
        rep.notes += notes
        if missing:
            rep.notes.append(f"Baselines not registered at run time, left out: {', '.join(missing)}.")
        if (real_cfg.get("semisynthetic") or {}).get("replications", 0) > 0 and real_cfg[
            "shift"
        ] == "segment":
            tables, claims = semisynthetic_tables(run_semisynthetic(real_cfg, seed), real_cfg)
            rep.tables += tables
            rep.claims += claims
        for name, reps in res.items():
            rep.figures.append(_real_figure(name, reps, real_cfg["alphas"]))
            methods = [m.split("|")[0] for m in reps[0]["metrics"]["E"] if m.endswith("|Original")]
            pairs = [(f"{m} + VAD+", f"{m}|Original", f"{m}|VAD+") for m in methods]
            rep.claims += vad_claims(reps, real_cfg["alphas"], pairs, name)
    rep.elapsed_s = time.perf_counter() - t0
    return rep


def _choices() -> list[str]:
    doc = __doc__ or ""
    body = doc.split("Choices where the paper is open (also listed in the Reproduction's ``choices``):")[-1]
    return [" ".join(c.split()) for c in body.strip().split("\n- ") if c.strip()]
