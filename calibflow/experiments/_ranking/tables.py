"""Tables and figures of the reproduction, computed from the replications ``run_seed`` returns."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import ttest_rel

from calibflow import calibrators as C
from calibflow import metrics as M
from calibflow.experiments._ranking.data import load_obd_clicks
from calibflow.experiments._ranking.paper import (
    PAPER_COAT,
    PAPER_MODELS,
    PAPER_TABLE3_COAT,
    PAPER_TABLE3_YAHOO,
    PAPER_YAHOO,
)
from calibflow.experiments._ranking.protocol import METHODS, MODEL_LABELS, SWEEP_METHODS
from calibflow.experiments.claims import paired_claim
from calibflow.results import Figure, Table, fmt_mean_se


def _cell(vals) -> str:
    return fmt_mean_se(vals) if len(vals) > 1 else f"{vals[0]:.4f}"


def _method_label(name: str, loss: str) -> str:
    return f"{name} ({loss})" if loss else name


def _mean(runs, model, key, metric, field="methods") -> float:
    return float(np.mean([r["models"][model][field][key][metric] for r in runs]))


def metric_table(runs, cfg, metric: str, title: str, caption: str) -> Table:
    models = cfg["base_models"]
    cols = (
        ["type", "method"]
        + [f"{MODEL_LABELS[m]} (ours)" for m in models]
        + [f"paper {m}" for m in PAPER_MODELS]
    )
    rows = []
    for kind, name, loss in METHODS:
        if name not in C.available():
            cells = ["not registered"] * len(models)
        else:
            cells = [_cell([r["models"][m]["methods"][(name, loss)][metric] for r in runs]) for m in models]
        paper = (PAPER_YAHOO if cfg["dataset"] == "yahoo_r3" else PAPER_COAT)[metric]
        rows.append([kind, _method_label(name, loss), *cells, *paper[(name, loss)]])
    return Table(title, cols, rows, caption)


def ranking_table(runs, cfg) -> Table:
    keys = ["ndcg@1", "ndcg@3", "ndcg@5", "recall@1", "recall@3", "recall@5"]
    rows = []
    for m in cfg["base_models"]:
        rows.append(
            [
                f"{MODEL_LABELS[m]} (ours)",
                *[_cell([r["models"][m]["ranking"][k] for r in runs]) for k in keys],
            ]
        )
    rand = runs[0]["random"]
    rows.append(["random scores (ours)", *[f"{rand[k]:.4f}" for k in keys]])
    paper = PAPER_TABLE3_YAHOO if cfg["dataset"] == "yahoo_r3" else PAPER_TABLE3_COAT
    for name, vals in paper.items():
        rows.append([f"paper {name}", *vals])
    return Table(
        f"Ranking quality on {cfg['dataset']}'s random test ratings (Table 3)",
        ["model", *keys],
        rows,
        "Per-user ranking of each user's random test items; users without a liked test item are skipped.",
    )


def propensity_table(runs, cfg) -> Table:
    models = cfg["base_models"]
    kinds = [
        k
        for k in ("uniform", "popularity", "supplied")
        if ("platt", k) in runs[0]["models"][models[0]]["propensity"]
    ]
    rows = []
    for name in ("platt", "gaussian", "gamma"):
        for k in kinds:
            rows.append(
                [
                    name,
                    k,
                    *[_cell([r["models"][m]["propensity"][(name, k)]["ece"] for r in runs]) for m in models],
                ]
            )
    return Table(
        "ECE of UERM fits by propensity estimate (Fig. 5 analogue)",
        ["method", "propensity", *[f"{MODEL_LABELS[m]} ECE" for m in models]],
        rows,
        "uniform = naive loss; popularity clipped at 0.1 (paper); supplied = Coat's learned P(rated), "
        "clipped at "
        f"{cfg['supplied_floor']}.",
    )


def max_p_table(runs, cfg) -> Table:
    rows = []
    for kind, name, loss in METHODS:
        if name not in C.available():
            continue
        rows.append(
            [
                kind,
                _method_label(name, loss),
                *[
                    f"{max(r['models'][m]['methods'][(name, loss)]['max_p'] for r in runs):.3f}"
                    for m in cfg["base_models"]
                ],
            ]
        )
    return Table(
        "Largest predicted probability on the test pairs",
        ["type", "method", *[MODEL_LABELS[m] for m in cfg["base_models"]]],
        rows,
        "The paper's Fig. 1 claim: non-parametric methods stay below about 0.6.",
    )


def rated_table(runs, cfg) -> Table:
    models = cfg["base_models"]
    rows = []
    for name in ("platt", "gaussian", "gamma"):
        for loss in ("naive", "uerm"):
            rows.append(
                [name, loss, *[_cell([r["models"][m]["rated"][(name, loss)] for r in runs]) for m in models]]
            )
    return Table(
        "Sensitivity: calibration on held-out rated pairs only (not the paper's stated protocol)",
        ["method", "loss", *[f"{MODEL_LABELS[m]} ECE" for m in models]],
        rows,
        "Labels: rating >= 4 among the rated held-out pairs (about 27% positive); UERM with popularity "
        "propensities. Same rankers and test set as above.",
    )


def _nanmean(vals) -> float:
    """Mean of the finite values; NaN (no warning) when an eq. 17 fit failed in every seed."""
    v = np.asarray(vals, float)
    return float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else float("nan")


def _sweep_cell(vals) -> str:
    """Mean (± s.e. over seeds) of the finite ECEs; '[k/n]' marks seeds whose eq. 17 fit had no optimum."""
    v = np.asarray(vals, float)
    ok = v[np.isfinite(v)]
    if ok.size == 0:
        return "nan"
    cell = fmt_mean_se(ok) if ok.size > 1 else f"{ok[0]:.4f}"
    return cell if ok.size == v.size else f"{cell} [{ok.size}/{v.size}]"


def _paired_gain(naive, uerm) -> str:
    """ECE(naive) - ECE(UERM) averaged over seeds, with the two-sided paired t-test p (>= 2 seeds)."""
    a, b = np.asarray(naive, float), np.asarray(uerm, float)
    ok = np.isfinite(a) & np.isfinite(b)
    if not ok.any():
        return "nan"
    gain = float((a[ok] - b[ok]).mean())
    if ok.sum() < 2:
        return f"{gain:+.4f}"
    p = float(ttest_rel(a[ok], b[ok]).pvalue)
    return f"{gain:+.4f} (p = {p:.2g})"


def sweep_table(runs, cfg, data) -> Table:
    """Which of the paper's rows each ``num_neg`` reproduces (Gaussian naive and UERM, Table 1)."""
    paper = (PAPER_YAHOO if cfg["dataset"] == "yahoo_r3" else PAPER_COAT)["ece"]
    lo_n, hi_n = min(paper[("gaussian", "naive")]), max(paper[("gaussian", "naive")])
    lo_u, hi_u = min(paper[("gaussian", "uerm")]), max(paper[("gaussian", "uerm")])
    rows = []
    for k in cfg["num_neg_sweep"]:
        for m in cfg["base_models"]:
            vals = [[r["models"][m]["sweep"][(int(k), *key)] for r in runs] for key in SWEEP_METHODS]
            cells = [_nanmean(v) for v in vals]
            hits = []
            if lo_n <= cells[0] <= hi_n:
                hits.append("naive")
            if lo_u <= cells[1] <= hi_u:
                hits.append("UERM (released w)")
            if lo_u <= cells[2] <= hi_u:
                hits.append("UERM (eq. 17)")
            rows.append(
                [
                    k,
                    f"{1 / (1 + k):.3f}",
                    MODEL_LABELS[m],
                    *[_sweep_cell(v) for v in vals],
                    _paired_gain(vals[0], vals[1]),
                    ", ".join(hits) or "-",
                ]
            )
    return Table(
        f"num_neg sweep on {data.name}: test ECE of Gaussian calibration (released split)",
        [
            "num_neg",
            "cal positive share",
            "base model",
            "naive",
            "UERM released w",
            "UERM eq. 17",
            "naive - UERM released (paired p)",
            "in paper's range",
        ],
        rows,
        f"Mean{' ± s.e.' if len(runs) > 1 else ''} over {len(runs)} seed(s) (eq. 17 cells: over the seeds "
        "with a finite fit, '[k/n]' when some had none); the paired column is the mean ECE gain of UERM "
        "(released weights) over naive and its two-sided paired t-test p over seeds; the range check "
        "uses the means. Same rankers and held-out positives for every num_neg. "
        "'in paper's range': the ECE lies within the paper's Gaussian row over its five base models "
        f"(naive {lo_n:.4f}-{hi_n:.4f}, UERM {lo_u:.4f}-{hi_u:.4f}). The release uses num_neg = 57. Test "
        f"preference rate {float(np.mean([r['test_r'].mean() for r in runs])):.4f}; ECE >= |mean y - mean p| "
        "on the test set, and a naive fit matches its mean prediction to the calibration positive share "
        "1/(1 + num_neg).",
    )


def seed_claims(runs, cfg) -> list[dict[str, Any]]:
    """Per base model and parametric method: ECE(UERM) < ECE(naive), paired over the replications (the
    paper's first claim, as a test the seed meta-run can count)."""
    out = []
    for m in cfg["base_models"]:
        meth = runs[0]["models"][m]["methods"]
        for n in ("platt", "beta", "gaussian", "gamma"):
            if (n, "uerm") not in meth or (n, "naive") not in meth:
                continue
            out.append(
                paired_claim(
                    f"{m}.{n}.ece_uerm<naive",
                    f"{MODEL_LABELS[m]}, {n}: UERM has a lower test ECE than naive",
                    [r["models"][m]["methods"][(n, "uerm")]["ece"] for r in runs],
                    [r["models"][m]["methods"][(n, "naive")]["ece"] for r in runs],
                    direction=-1,
                    unit="ECE (UERM - naive)",
                ).to_dict()
            )
    return out


def claims(runs, cfg) -> tuple[Table, dict[str, float]]:
    """The paper's three claims, checked per base model on the mean over seeds."""
    rows, summary = [], {}
    for m in cfg["base_models"]:
        meth = runs[0]["models"][m]["methods"]
        par = [n for n in ("platt", "beta", "gaussian", "gamma") if (n, "uerm") in meth]
        gains = {n: _mean(runs, m, (n, "naive"), "ece") - _mean(runs, m, (n, "uerm"), "ece") for n in par}
        ok = all(g > 0 for g in gains.values())
        rows.append(
            [
                MODEL_LABELS[m],
                "every parametric method: ECE(UERM) < ECE(naive)",
                "yes" if ok else "no",
                ", ".join(f"{n} {g:+.4f}" for n, g in gains.items()),
            ]
        )
        ece_all = {k: _mean(runs, m, k, "ece") for k in meth}
        best = min(ece_all, key=ece_all.get)
        ours = min(ece_all[("gaussian", "uerm")], ece_all[("gamma", "uerm")])
        tie = ours <= ece_all[best] + 0.002
        rows.append(
            [
                MODEL_LABELS[m],
                "Gaussian/Gamma with UERM best or tied (within 0.002 ECE)",
                "yes" if tie else "no",
                f"best {_method_label(*best)} {ece_all[best]:.4f}; ours {ours:.4f}",
            ]
        )
        prop = runs[0]["models"][m]["propensity"]
        if ("gaussian", "supplied") in prop:
            sup = {
                n: _mean(runs, m, (n, "supplied"), "ece", "propensity")
                for n in ("platt", "gaussian", "gamma")
            }
            ok = min(sup["gaussian"], sup["gamma"]) <= sup["platt"] + 0.002
            rows.append(
                [
                    MODEL_LABELS[m],
                    "same, UERM with the dataset's learned propensities: Gaussian/Gamma <= Platt (+0.002)",
                    "yes" if ok else "no",
                    ", ".join(f"{n} {v:.4f}" for n, v in sup.items()),
                ]
            )
        nonpar = [k for k in meth if k[0] in ("histogram", "isotonic", "bbq")]
        mx = {k[0]: max(r["models"][m]["methods"][k]["max_p"] for r in runs) for k in nonpar}
        rows.append(
            [
                MODEL_LABELS[m],
                "non-parametric methods never predict above ~0.6",
                "yes" if all(v <= 0.65 for v in mx.values()) else "no",
                ", ".join(f"{k} max {v:.3f}" for k, v in mx.items()),
            ]
        )
        summary[f"{m}_gaussian_uerm_ece"] = ece_all[("gaussian", "uerm")]
        summary[f"{m}_gamma_uerm_ece"] = ece_all[("gamma", "uerm")]
        summary[f"{m}_platt_naive_ece"] = ece_all[("platt", "naive")]
    return Table(
        f"Claims of the paper, checked on {cfg['dataset']}",
        ["base model", "claim", "holds", "evidence"],
        rows,
    ), summary


def obd_check(n_boot: int = 200, seed: int = 0) -> tuple[Table, str]:
    """Can the Open Bandit sample (random policy = unbiased test, BTS = biased log) say anything here?

    Counts the clicks and measures the noise floor of ECE on the random-policy log: the bootstrap s.d. of the
    ECE of the *ideal* constant predictor (the test click rate itself). Any method difference smaller than
    that is invisible.
    """
    rng = np.random.default_rng(seed)
    rows, floors = [], []
    for campaign in ("all", "men", "women"):
        yr, _, _ = load_obd_clicks("random", campaign)
        yb, pb, _ = load_obd_clicks("bts", campaign)
        rate = yr.mean()
        boot = [
            M.ece(yr[idx], np.full(idx.size, rate), 15) for idx in rng.integers(0, yr.size, (n_boot, yr.size))
        ]
        floors.append((np.mean(boot), rate))
        rows.append(
            [
                campaign,
                int(yr.sum()),
                yr.size,
                f"{rate:.4f}",
                int(yb.sum()),
                yb.size,
                f"{yb.mean():.4f}",
                f"{pb.min():.2g}-{pb.max():.2g}",
                f"{np.mean(boot):.4f} ± {np.std(boot):.4f}",
            ]
        )
    table = Table(
        "Open Bandit small sample: are there enough positives?",
        [
            "campaign",
            "random clicks",
            "random n",
            "random CTR",
            "BTS clicks",
            "BTS n",
            "BTS CTR",
            "BTS propensity range",
            "ECE noise floor (random log)",
        ],
        rows,
        "Noise floor: bootstrap mean ± s.d. of the ECE (M=15) of a perfect constant predictor on the "
        "random log.",
    )
    note = (
        "Open Bandit: the 10,000-impression samples hold only "
        f"{', '.join(str(r[1]) for r in rows)} clicks under the random policy (all/men/women). The ECE of a "
        f"perfect constant predictor is already {floors[0][0]:.4f} on average (CTR {floors[0][1]:.4f}), i.e. "
        f"{floors[0][0] / floors[0][1]:.0%} of the click rate from sampling noise alone, and a ranker "
        "trained on "
        "about 40-70 BTS clicks has almost no signal to calibrate. The effects the paper reports are "
        "5-25% of ECE, "
        "so the sample cannot separate the methods: we report the counts and do not run the calibration "
        "comparison on it. The logged BTS propensities are action probabilities of a policy, not the "
        "observation "
        "propensities P(O=1) of eq. 15, so UERM would also need a different estimand there."
    )
    return table, note


def reliability_figure(run, model: str, n_bins: int) -> Figure:
    from calibflow.plots import reliability_axes, small_multiples

    res = run["models"][model]
    panels = [(_method_label(*k), c) for k, c in res["fitted"].items()]
    if ("gaussian", "supplied") in res["fitted_prop"]:
        panels.append(("gaussian (uerm, supplied w)", res["fitted_prop"][("gaussian", "supplied")]))
    fig, axes = small_multiples(len(panels), ncols=5, size=2.0)
    fig.subplots_adjust(hspace=0.6, wspace=0.3)
    for ax, (label, cal) in zip(axes, panels, strict=True):
        p = cal.predict(res["scores"]["test"])
        rel = M.reliability(run["test_r"], p, n_bins=n_bins)
        reliability_axes(ax, rel)
        ok = rel.count > 0
        ax.bar(
            (np.arange(n_bins) + 0.5)[ok] / n_bins,
            rel.count[ok] / rel.count.sum(),
            width=1 / n_bins,
            color="0.85",
            zorder=0,
        )
        ax.set_title(f"{label}\nECE {M.ece(run['test_r'], p, 15):.3f}", fontsize=7)
        ax.set_xlabel("")
        ax.set_ylabel("")
    from calibflow.plots import to_svg

    return Figure(
        f"Reliability diagrams, {MODEL_LABELS[model]} (Fig. 1)",
        to_svg(fig),
        f"{n_bins} equal-width bins on the random test ratings; grey bars: share of test pairs per bin.",
    )


def curves_figure(run, models) -> Figure:
    import matplotlib.pyplot as plt

    from calibflow.plots import to_svg

    fig, axes = plt.subplots(1, len(models), figsize=(3.4 * len(models), 2.6), squeeze=False)
    for ax, model in zip(axes[0], models, strict=True):
        res = run["models"][model]
        s, y = res["scores"]["cal"], res["scores"]["ycal"]
        grid = np.linspace(s.min(), s.max(), 300)
        hx = ax.twinx()
        bins = np.linspace(s.min(), s.max(), 40)
        hx.hist(s[y == 0], bins=bins, density=True, alpha=0.25, color="tab:blue", label="Y=0")
        hx.hist(s[y == 1], bins=bins, density=True, alpha=0.25, color="tab:red", label="Y=1")
        hx.set_yticks([])
        for name in ("platt", "gaussian", "gamma"):
            if (name, "uerm") in res["fitted"]:
                ax.plot(grid, res["fitted"][(name, "uerm")].predict(grid), lw=1.2, label=f"{name} UERM")
        ax.plot(
            grid,
            res["fitted"][("gaussian", "naive")].predict(grid),
            lw=1,
            ls=":",
            color="k",
            label="gaussian naive",
        )
        if ("gaussian", "supplied") in res["fitted_prop"]:
            g = res["fitted_prop"][("gaussian", "supplied")].predict(grid)
            ax.plot(grid, g, lw=1, ls="--", color="k", label="gaussian UERM, supplied w")
        ax.set_zorder(hx.get_zorder() + 1)
        ax.patch.set_visible(False)
        ax.set_ylim(0, 1)
        ax.set_xlabel("ranking score")
        ax.set_ylabel("g(s)")
        ax.set_title(MODEL_LABELS[model])
        ax.legend(fontsize=6, loc="upper left")
    return Figure(
        "Fitted calibration curves (Fig. 3, with Fig. 2's score histograms)",
        to_svg(fig),
        "Curves fitted on the calibration pairs; shaded: class-conditional score densities there.",
    )
