"""Significance claims of the paper reproductions, and whether they survive a change of seed.

A reproduction states claims such as "GAM-EM has a lower Brier score than GAM on Hillstrom (p = 0.018)". One
run at one master seed cannot tell a robust effect from a lucky draw, so a meta-run repeats the whole
reproduction with K independent master seeds (``master_seeds``: data splits, models and samples all change)
and, for every claim, counts the seeds in which it is significant and pools the effect over seeds.

- A ``Claim`` is one test in one run: a stable ``id``, the statement, the signed effect (``direction`` says
  which sign the claim asserts), its 95% interval, the p-value, the replications behind it and the standard
  deviation of the paired differences (for sizing). It is *significant* when p < alpha and the effect has
  the claimed sign.
- ``summarise`` turns K runs' claims into one row per claim: significant in k of K seeds, the pooled effect
  (mean of the K per-seed effects) with a t interval over seeds (each seed is one independent replicate of the
  whole experiment, so the interval carries the split-to-split and model-to-model spread), and a verdict:
  ``robust`` (significant in at least K - 1 of K), ``pooled only`` (in at most 1 of K, but the pooled
  interval lies on the claimed side of 0: an effect too small for one run to show), ``robust null`` (in at
  most 1 of K otherwise: the page may say "no effect seen") or ``not robust`` (anything between: the page must
  not state it either way).
- ``replications_for_power`` sizes the replications per cell: the n at which a paired t-test of the given
  effect and spread reaches the given power (noncentral t).

Nothing here knows a paper; the experiments build their claims with ``paired_claim`` / ``summary_claim`` /
``joint_claim`` and put them in ``Reproduction.claims``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

ALPHA = 0.05
ROBUST, ROBUST_NULL, NOT_ROBUST = "robust", "robust null", "not robust"
POOLED_ONLY = "pooled only"  # rarely significant per seed, but the pooled interval is on the claimed side


@dataclass
class Claim:
    """One significance test in one run (see the module docstring)."""

    id: str
    text: str
    effect: float
    lo: float
    hi: float
    p: float
    n: int
    direction: int = 1  # the sign of ``effect`` that the claim asserts
    unit: str = ""
    sd: float = float("nan")  # sd of one replication's paired difference, in ``unit``
    alpha: float = ALPHA

    @property
    def significant(self) -> bool:
        return bool(np.isfinite(self.p) and self.p < self.alpha and self.effect * self.direction > 0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["significant"] = self.significant
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Claim:
        keep = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k in ("effect", "lo", "hi", "p", "sd"):
            keep[k] = float("nan") if keep.get(k) is None else float(keep[k])
        return cls(**keep)


def t_interval(x: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and t interval of ``x`` (NaN bounds with fewer than 2 finite values)."""
    v = np.asarray(x, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(v.mean())
    if v.size < 2:
        return m, float("nan"), float("nan")
    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, m - half, m + half


def _ttest_1samp(d: np.ndarray, alternative: str) -> float:
    """p-value of mean(d) against 0; NaN for fewer than 2 values or no variance (scipy warns there)."""
    if d.size < 2 or np.allclose(d, d[0]):
        return float("nan")
    return float(stats.ttest_1samp(d, 0.0, alternative=alternative).pvalue)


def paired_claim(
    id: str,
    text: str,
    a: Sequence[float],
    b: Sequence[float] | None = None,
    *,
    direction: int = 1,
    scale: float = 1.0,
    unit: str = "",
    one_sided: bool = False,
    alpha: float = ALPHA,
) -> Claim:
    """Claim on mean(a - b) (``b`` = 0 when omitted) from paired replications.

    ``scale`` converts the difference to the reported unit (e.g. 100 / mean(base) for percent). The test is
    a paired t-test, two-sided unless ``one_sided`` (then in the claimed ``direction``); pairs with a
    non-finite value are dropped.
    """
    x = np.asarray(a, dtype=float)
    y = np.zeros_like(x) if b is None else np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"claim {id}: paired samples differ in shape, {x.shape} vs {y.shape}")
    d = (x - y)[np.isfinite(x) & np.isfinite(y)] * scale
    alt = ("greater" if direction > 0 else "less") if one_sided else "two-sided"
    mean, lo, hi = t_interval(d)
    sd = float(d.std(ddof=1)) if d.size > 1 else float("nan")
    return Claim(id, text, mean, lo, hi, _ttest_1samp(d, alt), int(d.size), direction, unit, sd, alpha)


def summary_claim(
    id: str,
    text: str,
    effect: float,
    interval: Sequence[float],
    p: float,
    n: int,
    *,
    direction: int = 1,
    unit: str = "",
    alpha: float = ALPHA,
) -> Claim:
    """Claim from a test an experiment already ran (effect, 95% t interval, p over n replications).

    The sd of one replication's difference is recovered from the interval's half-width.
    """
    lo, hi = (float(v) for v in interval)
    sd = float("nan")
    if n > 1 and math.isfinite(lo) and math.isfinite(hi):
        sd = (hi - lo) / 2 / float(stats.t.ppf(0.975, n - 1)) * math.sqrt(n)
    return Claim(id, text, float(effect), lo, hi, float(p), int(n), direction, unit, sd, alpha)


def joint_claim(id: str, text: str, parts: Sequence[Claim]) -> Claim:
    """A claim that needs every part to hold (an intersection-union test: p = the largest part's p).

    Its effect, interval and sd are the first part's; it is significant only where all parts are.
    """
    if not parts:
        raise ValueError(f"claim {id}: a joint claim needs at least one part")
    first = parts[0]
    ps = [c.p for c in parts]
    p = float("nan") if not all(np.isfinite(ps)) else float(max(ps))
    if not all(c.effect * c.direction > 0 for c in parts):
        p = 1.0  # a part with the wrong sign can never hold
    return Claim(
        id,
        text,
        first.effect,
        first.lo,
        first.hi,
        p,
        first.n,
        first.direction,
        first.unit,
        first.sd,
        first.alpha,
    )


def master_seeds(project_seed: int, k: int) -> list[int]:
    """K independent master seeds derived from the project seed (``SeedSequence.spawn``; deterministic).

    Each is a 31-bit integer, so experiments that offset a seed by replication stay in range; none equals
    the project seed.
    """
    if k < 1:
        raise ValueError(f"--seeds must be at least 1, got {k}")
    out: list[int] = []
    for child in np.random.SeedSequence(int(project_seed)).spawn(k + 1):
        s = int(child.generate_state(1)[0] % (2**31 - 2**24))
        if s != project_seed and s not in out:
            out.append(s)
    return out[:k]


def replications_for_power(
    effect: float,
    sd: float,
    alpha: float = ALPHA,
    power: float = 0.8,
    two_sided: bool = True,
    n_max: int = 100_000,
) -> int | None:
    """Smallest n at which a paired t-test of mean difference ``effect`` (sd ``sd``) has ``power``.

    None when the effect is zero or not finite, or more than ``n_max`` replications would be needed.
    """
    if not (np.isfinite(effect) and np.isfinite(sd)) or effect == 0 or sd <= 0:
        return None
    delta = abs(effect) / sd
    a = alpha / 2 if two_sided else alpha

    def pw(n: int) -> float:
        crit = stats.t.ppf(1 - a, n - 1)
        return float(stats.nct.sf(crit, n - 1, delta * math.sqrt(n)))

    lo, hi = 2, 2
    while pw(hi) < power:
        lo, hi = hi, hi * 2
        if hi > n_max:
            return None
    while lo < hi:  # power grows with n: bisect for the first n that reaches it
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if pw(mid) < power else (lo, mid)
    return lo


def verdict(k: int, big_k: int) -> str:
    """``robust`` (significant in >= K-1 of K), ``robust null`` (<= 1 of K; K >= 3) or ``not robust``."""
    if k >= big_k - 1 and big_k >= 2:
        return ROBUST
    if k <= 1 and big_k >= 3:
        return ROBUST_NULL
    return NOT_ROBUST


def summarise(runs: Sequence[Iterable[dict[str, Any]]], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """One row per claim id over K runs (``runs[i]`` = the claims of the run at ``seeds[i]``).

    A claim missing from a run (that run did not reach it) counts as not significant there and is named in
    ``missing_in``.
    """
    by_id: dict[str, dict[int, Claim]] = {}
    for seed, claims in zip(seeds, runs, strict=True):
        for d in claims:
            by_id.setdefault(d["id"], {})[seed] = Claim.from_dict(d)
    rows = []
    for cid, per in by_id.items():
        first = next(iter(per.values()))
        effects = [per[s].effect if s in per else float("nan") for s in seeds]
        k = sum(per[s].significant for s in seeds if s in per)
        mean, lo, hi = t_interval(effects)
        v = verdict(int(k), len(seeds))
        # not a null: an effect in the claimed direction too small for one seed, seen when pooled
        if v == ROBUST_NULL and (lo > 0 if first.direction > 0 else hi < 0):
            v = POOLED_ONLY
        sds = [c.sd for c in per.values() if np.isfinite(c.sd)]
        sd = float(np.sqrt(np.mean(np.square(sds)))) if sds else float("nan")
        n_rep = int(np.median([c.n for c in per.values()]))
        rows.append(
            {
                "id": cid,
                "text": first.text,
                "unit": first.unit,
                "direction": first.direction,
                "K": len(seeds),
                "k_significant": int(k),
                "verdict": v,
                "pooled_effect": mean,
                "pooled_interval": [lo, hi],
                "pooled_p": _ttest_1samp(np.asarray([e for e in effects if np.isfinite(e)]), "two-sided"),
                "replications_per_seed": n_rep,
                "sd_per_replication": sd,
                # power for the claimed direction only: an effect pooled on the other side has none to detect
                "replications_for_80pct_power": (
                    replications_for_power(mean, sd, first.alpha) if mean * first.direction > 0 else None
                ),
                "effects": effects,
                "p_values": [per[s].p if s in per else float("nan") for s in seeds],
                "missing_in": [s for s in seeds if s not in per],
            }
        )
    return rows


def check_against(
    meta_claims: Sequence[dict[str, Any]], claims: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A held-out run against a meta-run: for every claim the meta-run calls robust (or robust null), does
    the held-out run agree (significant, or not, as the verdict says)?"""
    held = {d["id"]: Claim.from_dict(d) for d in claims}
    out = []
    for row in meta_claims:
        if row["verdict"] not in (ROBUST, ROBUST_NULL):
            continue
        c = held.get(row["id"])
        expected = row["verdict"] == ROBUST
        got = None if c is None else c.significant
        out.append(
            {
                "id": row["id"],
                "verdict": row["verdict"],
                "held_out_significant": got,
                "held_out_p": None if c is None else c.p,
                "held_out_effect": None if c is None else c.effect,
                "agrees": got is not None and got == expected,
            }
        )
    return out


def _num(v: float | None, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{v:+.{digits}g}"


def _row_md(r: dict[str, Any]) -> str:
    lo, hi = r["pooled_interval"]
    eff = f"{_num(r['pooled_effect'])} [{_num(lo)}, {_num(hi)}] {r['unit']}".rstrip()
    n80 = r["replications_for_80pct_power"]
    n80_txt = "-" if n80 is None else f"{n80} (ran {r['replications_per_seed']})"
    cells = [r["text"], eff, f"{r['k_significant']} of {r['K']}", r["verdict"], n80_txt]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown(meta: dict[str, Any], ids: Sequence[str] | None = None) -> str:
    """The claims table of a page from a stored meta-run: statement, pooled effect and interval, k of K."""
    rows = [r for r in meta["claims"] if ids is None or r["id"] in ids]
    if ids is not None:
        rows.sort(key=lambda r: list(ids).index(r["id"]))
    head = [
        "| claim | pooled effect over seeds [95% interval] | holds (significant) in k of K seeds | verdict "
        "| n for 80% power (per seed) |",
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + [_row_md(r) for r in rows])


def group_counts(meta: dict[str, Any], ids_shown: Iterable[str]) -> str:
    """One line per claim group (the id up to its first dot) not shown in the table: verdict counts."""
    shown = set(ids_shown)
    groups: dict[str, dict[str, int]] = {}
    for r in meta["claims"]:
        if r["id"] in shown:
            continue
        g = groups.setdefault(
            r["id"].split(".")[0], {ROBUST: 0, ROBUST_NULL: 0, NOT_ROBUST: 0, POOLED_ONLY: 0}
        )
        g[r["verdict"]] += 1
    return "\n".join(
        f"- `{g}.*`: {sum(c.values())} further claim(s): {c[ROBUST]} robust, {c[ROBUST_NULL]} robust null, "
        f"{c[NOT_ROBUST]} not robust" + (f", {c[POOLED_ONLY]} pooled only" if c[POOLED_ONLY] else "")
        for g, c in groups.items()
    )


def page_section(meta: dict[str, Any], meta_path: str, show: Sequence[str]) -> str:
    """The generated block of a page: how the meta-run was made, the table, the other claims' counts."""
    import re

    pats = [re.compile(p) for p in show]
    ids = [r["id"] for r in meta["claims"] if any(p.search(r["id"]) for p in pats)]
    failed = meta.get("failed_seeds") or {}
    lines = [
        f"Meta-run `{meta_path}`: profile `{meta['profile']}`, K = {meta['K']} master seeds derived from the "
        f"project seed {meta['project_seed']} ({', '.join(str(s) for s in meta['seeds'])}); every seed "
        "redraws the data splits, models and samples. A claim holds in a seed when its test there is "
        f"significant at {meta['alpha']:g} (or the level the page states) in the claimed direction. "
        f"Verdict: {meta['rule']}. Pooled effect: mean of the K per-seed effects, t interval over seeds. "
        "n for 80% power: replications per seed a paired t-test needs to detect the pooled effect with the "
        "per-replication spread seen (noncentral t).",
    ]
    if failed:
        lines.append(f"Seeds that failed (their claims count as not holding): {failed}.")
    lines += ["", markdown(meta, ids)]
    rest = group_counts(meta, ids)
    if rest:
        lines += ["", "Other claims recorded by the same meta-run (in its JSON):", "", rest]
    return "\n".join(lines)


def meta_result(
    key: str, profile: str, project_seed: int, seeds: Sequence[int], runs: Sequence[Sequence[dict[str, Any]]]
) -> dict[str, Any]:
    """The stored meta-run: which seeds, and one ``summarise`` row per claim."""
    rows = summarise(runs, seeds)
    counts = {v: sum(r["verdict"] == v for r in rows) for v in (ROBUST, ROBUST_NULL, NOT_ROBUST, POOLED_ONLY)}
    return {
        "key": key,
        "profile": profile,
        "project_seed": int(project_seed),
        "seeds": [int(s) for s in seeds],
        "K": len(seeds),
        "alpha": ALPHA,
        "rule": "robust: significant in at least K-1 of K seeds; pooled only: in at most 1, but the pooled "
        "interval lies on the claimed side of 0; robust null: in at most 1 otherwise; else not robust",
        "verdicts": counts,
        "claims": rows,
    }
