"""One line per calibration method and where it comes from: the report's glossary."""

from __future__ import annotations

from calibflow.report.chrome import e

#: method -> (what it does, in one line; the reference)
METHODS: dict[str, tuple[str, str]] = {
    "identity": ("Your scores unchanged: the answer \u201ckeep your scores\u201d.", "\u2013"),
    "temperature": ("p = \u03c3(s / T): one number rescales the logit.", "Guo et al., ICML 2017"),
    "platt": ("p = \u03c3(a s + b): a logistic regression on the logit.", "Platt, 1999"),
    "beta": (
        "p = \u03c3(a ln q \u2212 b ln(1 \u2212 q) + c) of the probability q: bends each end apart.",
        "Kull, Silva Filho & Flach, AISTATS 2017",
    ),
    "isotonic": (
        "The best non-decreasing step map (pool adjacent violators); ties scores within a step.",
        "Zadrozny & Elkan, KDD 2002",
    ),
    "centered_isotonic": (
        "Isotonic, with each step's value placed at its centre and joined by lines: no ties.",
        "Oron & Flournoy, Stat. Biopharm. Res. 2017",
    ),
    "histogram": ("Equal-mass bins, each mapped to its observed rate.", "Zadrozny & Elkan, ICML 2001"),
    "bbq": ("A Bayesian average of many histogram binnings.", "Naeini, Cooper & Hauskrecht, AAAI 2015"),
    "scaling_binning": (
        "Platt, then binned to a few values (its calibration error can be measured).",
        "Kumar, Liang & Ma, NeurIPS 2019",
    ),
    "spline": ("A monotone penalised spline of the logit (a GAM).", "as in Sergazinov et al. (CalEM)"),
    "venn_abers": (
        "Two isotonic fits give an interval [p0, p1]; the probability is their log-loss merge.",
        "Vovk & Petej, UAI 2014; Vovk, Petej & Fedorova, NeurIPS 2015",
    ),
    "quadratic": (
        "p = \u03c3(a z\u00b2 + b z + c) of the logit z, kept monotone.",
        "CalArena (Berta et al. 2025); the Gaussian family of Kweon et al. 2022",
    ),
    "gaussian": (
        "Posterior of two Gaussian score densities: \u03c3(a s\u00b2 + b s + c), monotone on the data.",
        "Kweon, Kang & Yu, AAAI 2022",
    ),
    "gamma": (
        "Posterior of two Gamma score densities: \u03c3(a ln s + b s + c), monotone on the data.",
        "Kweon, Kang & Yu, AAAI 2022",
    ),
    "sigmoid": ("\u03c3(s) of the raw score: a ranking-paper baseline.", "Kweon et al. 2022"),
    "minmax": ("(s \u2212 min) / (max \u2212 min): a ranking-paper baseline.", "Kweon et al. 2022"),
}


def render_glossary(methods: list[str]) -> str:
    """The glossary section: every method the page mentions (and identity), one line each."""
    names = ["identity", *[m for m in methods if m != "identity"]]
    rows = "".join(
        f'<tr><td class="l"><code>{e(m)}</code></td><td class="l">{e(METHODS[m][0])}</td>'
        f'<td class="l"><small>{e(METHODS[m][1])}</small></td></tr>'
        for m in names
        if m in METHODS
    )
    return (
        '<section id="glossary"><h2>Methods</h2><div class="wide"><table><thead><tr><th class="l">method</th>'
        '<th class="l">what it does</th><th class="l">reference</th></tr></thead>'
        f"<tbody>{rows}</tbody></table></div></section>"
    )
