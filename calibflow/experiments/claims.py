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
  whole experiment, so the interval carries the split-to-split and model-to-model spread), the predicted
  probability that a fresh seed shows it, and a verdict (the rule below).

The robustness rule (fixed before any held-out seed was looked at). "Held in K-1 of K" alone does not predict
a fresh seed: a claim with per-run power 80% holds in 4 of 5 seeds most of the time and still fails one
reviewer's seed in five. So each seed's test is put on one scale, its signed z-score
``z = sign * Phi^-1(1 - p/2)`` (sign +1 when the effect has the claimed sign; capped at ``Z_CAP``, since how
far beyond p ~ 1e-12 a seed lies does not change whether a fresh seed clears p < alpha; a seed missing the
claim counts as z = 0). A run is significant exactly when its z exceeds ``c = Phi^-1(1 - alpha/2)``. The K
z-scores are a normal sample (mean m, sd s, with s floored at 1, the sampling sd of any z-score, so that K
seeds agreeing by chance do not look certain); a fresh seed's z then has the Student-t predictive
distribution ``m + s * sqrt(1 + 1/K) * t_{K-1}``, and ``P_sig`` is its probability of exceeding c. Requiring
``P_sig >= PREDICT_LEVEL`` (0.99) is the same as requiring the one-sided 99% lower prediction bound of a
fresh seed's z to clear c: a lower bound, not the point estimate. Verdicts:

  - ``robust``: significant in at least K-1 of K seeds AND ``P_sig >= 0.99``;
  - ``not robust at this size``: significant in at least K-1 of K, but ``P_sig < 0.99`` (a fresh seed misses
    it too often; more replications per seed would fix it, ``replications_for_robust`` says how many);
  - ``pooled only``: significant in at most 1 of K, but the pooled interval lies on the claimed side of 0;
  - ``robust null``: significant in at most 1 of K AND ``1 - P_sig >= 0.99`` (a fresh seed shows it with
    probability below 1%; at alpha = 0.05 a true null is significant in the claimed direction 2.5% of the
    time, so this needs evidence against the claim, not just its absence);
  - ``no effect seen``: significant in at most 1 of K otherwise (a statement about these K seeds, not a
    prediction);
  - ``not robust``: anything between.

  Only ``robust`` and ``robust null`` are promises about a fresh seed, and only they are checked by
  ``check_against``.
- ``replications_for_power`` sizes the replications per cell: the n at which a paired t-test of the given
  effect and spread reaches the given power (noncentral t); ``replications_for_robust`` the replications per
  seed at which the rule above would call a claim robust (z grows with sqrt(n); the part of the seeds'
  spread beyond 1 is taken to be the effect's own seed-to-seed spread and grows with it).

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
UNDERPOWERED = "not robust at this size"  # held in >= K-1 of K, but a fresh seed would miss it too often
NO_EFFECT = "no effect seen"  # held in <= 1 of K; not a prediction that a fresh seed shows none
VERDICTS = (ROBUST, UNDERPOWERED, POOLED_ONLY, ROBUST_NULL, NO_EFFECT, NOT_ROBUST)
PREDICT_LEVEL = 0.99  # a robust claim must hold in a fresh seed with at least this predicted probability
Z_CAP = 7.0  # p ~ 2.6e-12: beyond it a seed's exact z does not change whether a fresh seed clears c
Z_SD_FLOOR = 1.0  # a z-score's own sampling sd: K seeds agreeing closely by chance must not look certain
RULE = (
    "robust: significant in at least K-1 of K seeds AND a predicted probability of at least "
    f"{PREDICT_LEVEL:g} that a fresh seed is significant (the one-sided 99% lower prediction bound of a "
    "fresh seed's z-score, "
    "from the K seeds' z-scores with their sd floored at 1 and a Student-t predictive, clears the "
    "significance threshold); not robust at this size: in at least K-1 of K but below that probability; "
    "pooled only: in at most 1, but the pooled interval lies on the claimed side of 0; robust null: in at "
    f"most 1 and a predicted probability of at least {PREDICT_LEVEL:g} that a fresh seed is NOT significant; "
    "no effect seen: in at most 1 otherwise; else not robust"
)


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


def z_score(p: float, effect: float, direction: int) -> float:
    """A seed's signed evidence for a claim: ``Phi^-1(1 - p/2)``, negative when the effect has the wrong
    sign, capped at ``Z_CAP``; 0 for a missing or undefined test. Significant exactly when > ``z_crit``."""
    if p is None or effect is None or not (np.isfinite(p) and np.isfinite(effect)) or effect == 0:
        return 0.0
    z = min(float(stats.norm.isf(max(float(p), 1e-300) / 2)), Z_CAP)
    return z if effect * direction > 0 else -z


def z_crit(alpha: float = ALPHA) -> float:
    """The z a seed must exceed to be significant at ``alpha`` in the claimed direction."""
    return float(stats.norm.isf(alpha / 2))


def predicted_significance(z: Sequence[float], alpha: float = ALPHA) -> float:
    """Predicted probability that a fresh seed's test is significant, from K seeds' z-scores.

    Student-t predictive of a fresh draw from a normal sample (sd floored at ``Z_SD_FLOOR``): ``P_sig >=
    q`` exactly when the one-sided level-q lower prediction bound of the fresh z clears ``z_crit(alpha)``.
    NaN with fewer than 2 seeds.
    """
    v = np.asarray(z, dtype=float)
    if v.size < 2:
        return float("nan")
    sd = max(float(v.std(ddof=1)), Z_SD_FLOOR)
    scale = sd * math.sqrt(1 + 1 / v.size)
    return float(stats.t.cdf((v.mean() - z_crit(alpha)) / scale, v.size - 1))


def replications_for_robust(
    z: Sequence[float], n: int, alpha: float = ALPHA, level: float = PREDICT_LEVEL, n_max: int = 100_000
) -> int | None:
    """Replications per seed at which ``predicted_significance`` would reach ``level`` (None: never).

    A seed's z grows with sqrt(n); of the seeds' sd, the part beyond the floor (sd^2 - 1) is taken to be
    the effect's own spread from seed to seed, which grows with sqrt(n) too, so some claims never get there.
    """
    v = np.asarray(z, dtype=float)
    if v.size < 2 or n < 1 or v.mean() <= 0:
        return None
    het = max(float(v.var(ddof=1)) - Z_SD_FLOOR**2, 0.0)
    q = float(stats.t.ppf(level, v.size - 1)) * math.sqrt(1 + 1 / v.size)

    def ok(m: int) -> bool:
        r = math.sqrt(m / n)
        return v.mean() * r - q * math.sqrt(Z_SD_FLOOR**2 + het * r * r) >= z_crit(alpha)

    if not ok(n_max):
        return None
    lo, hi = 1, n_max
    while lo < hi:  # the bound grows with n (its limit is reached from below): bisect
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if not ok(mid) else (lo, mid)
    return lo


def verdict(k: int, big_k: int, p_sig: float = 1.0, pooled_on_claimed_side: bool = False) -> str:
    """The rule of the module docstring from k of K and the predicted probability ``p_sig``."""
    if k >= big_k - 1 and big_k >= 2:
        return ROBUST if p_sig >= PREDICT_LEVEL else UNDERPOWERED
    if k <= 1 and big_k >= 3:
        if pooled_on_claimed_side:
            return POOLED_ONLY
        return ROBUST_NULL if 1 - p_sig >= PREDICT_LEVEL else NO_EFFECT
    return NOT_ROBUST


def _classify(row: dict[str, Any]) -> dict[str, Any]:
    """Fill a row's z-scores, predicted probability, replications needed and verdict from its per-seed
    effects and p-values (so a stored meta-run can be re-judged without re-running its seeds)."""
    alpha = float(row.get("alpha", ALPHA))
    z = [z_score(p, e, row["direction"]) for p, e in zip(row["p_values"], row["effects"], strict=True)]
    p_sig = predicted_significance(z, alpha)
    lo, hi = row["pooled_interval"]
    claimed_side = bool(lo > 0 if row["direction"] > 0 else hi < 0) if lo is not None else False
    row.update(
        alpha=alpha,
        z_scores=z,
        predicted_significance=p_sig,
        replications_for_robust=replications_for_robust(z, int(row["replications_per_seed"]), alpha),
        verdict=verdict(int(row["k_significant"]), int(row["K"]), p_sig, claimed_side),
    )
    return row


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
        sds = [c.sd for c in per.values() if np.isfinite(c.sd)]
        sd = float(np.sqrt(np.mean(np.square(sds)))) if sds else float("nan")
        row = {
            "id": cid,
            "text": first.text,
            "unit": first.unit,
            "direction": first.direction,
            "alpha": first.alpha,
            "K": len(seeds),
            "k_significant": int(k),
            "pooled_effect": mean,
            "pooled_interval": [lo, hi],
            "pooled_p": _ttest_1samp(np.asarray([e for e in effects if np.isfinite(e)]), "two-sided"),
            "replications_per_seed": int(np.median([c.n for c in per.values()])),
            "sd_per_replication": sd,
            # power for the claimed direction only: an effect pooled on the other side has none to detect
            "replications_for_80pct_power": (
                replications_for_power(mean, sd, first.alpha) if mean * first.direction > 0 else None
            ),
            "effects": effects,
            "p_values": [per[s].p if s in per else float("nan") for s in seeds],
            "missing_in": [s for s in seeds if s not in per],
        }
        rows.append(_classify(row))
    return rows


def verdict_counts(rows: Iterable[dict[str, Any]]) -> dict[str, int]:
    rows = list(rows)
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}


def reclassify(meta: dict[str, Any]) -> dict[str, Any]:
    """A stored meta-run re-judged by the current rule (same seeds and per-seed results)."""
    for row in meta["claims"]:
        _classify(row)
    meta["rule"] = RULE
    meta["predict_level"] = PREDICT_LEVEL
    meta["verdicts"] = verdict_counts(meta["claims"])
    return meta


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


def held_out_claims(check: dict[str, Any]) -> list[dict[str, Any]]:
    """The held-out run's claims stored in a check JSON (every claim; older checks kept only the rows
    checked then, rebuilt here as claims so a re-judged meta-run can be checked again)."""
    if "held_out" in check:
        return list(check["held_out"])
    out = []
    for r in check["claims"]:
        if r["held_out_significant"] is None:
            continue  # the held-out run did not reach the claim: absent, as it was then
        sig = bool(r["held_out_significant"])
        # effect and p stand in for the stored outcome, which is all that agreement needs
        out.append(
            {
                "id": r["id"],
                "text": r["id"],
                "effect": 1.0,
                "lo": None,
                "hi": None,
                "n": 0,
                "p": 0.0 if sig else 1.0,
                "direction": 1,
            }
        )
    return out


# Seeds chosen when the robust rule was written and looked at only after it: the clean held-out seeds. Any
# other checked seed (4242, the reviewer's) was seen under the earlier K-1-of-K rule, so it informed this one.
CLEAN_HELD_OUT_SEEDS = frozenset({31337})


def _held_out_status(seeds: Sequence[int]) -> str:
    """Which checked seeds are clean held-out seeds and which were seen before the rule was fixed."""
    clean = [str(s) for s in seeds if s in CLEAN_HELD_OUT_SEEDS]
    seen = [str(s) for s in seeds if s not in CLEAN_HELD_OUT_SEEDS]
    parts = ["not the project's"]
    if clean:
        parts.append(f"{' and '.join(clean)} used to choose nothing")
    if seen:
        parts.append(f"{' and '.join(seen)} seen under the earlier rule, before this one was written")
    return "; ".join(parts)


def agreement_line(meta: dict[str, Any], checks: Sequence[tuple[int, dict[str, Any]]]) -> str:
    """'held-out seeds A and B agree with k of n robust claims' (and which disagree) for a page."""
    if not checks:
        return "No held-out seed has been checked against this meta-run."
    parts, bad = [], []
    for seed, check in checks:
        rows = check_against(meta["claims"], held_out_claims(check))
        parts.append((seed, sum(r["agrees"] for r in rows), len(rows)))
        bad += [f"`{r['id']}` (seed {seed})" for r in rows if not r["agrees"]]
    seeds = " and ".join(str(s) for s, _, _ in parts)
    counts = "; ".join(f"{s}: {k} of {n}" for s, k, n in parts)
    line = f"Held-out seeds {seeds} ({_held_out_status([s for s, _, _ in parts])}) agree with the robust and "
    line += f"robust-null claims: {counts}."
    if bad:
        line += " Disagreements: " + ", ".join(bad) + "."
    weak = [r["id"] for r in meta["claims"] if r["verdict"] == UNDERPOWERED]
    if weak:  # not promised, but what a reviewer would see: how often they held anyway
        seen = []
        for seed, check in checks:
            held = {c["id"]: Claim.from_dict(c).significant for c in held_out_claims(check)}
            seen.append(f"{seed}: {sum(held.get(i, False) for i in weak)} of {len(weak)}")
        line += f" Claims {UNDERPOWERED} (not promised) significant at the held-out seeds: {'; '.join(seen)}."
    return line


def _num(v: float | None, digits: int = 3) -> str:
    if v is None or not np.isfinite(v):
        return "n/a"
    return f"{v:+.{digits}g}"


def _row_md(r: dict[str, Any]) -> str:
    lo, hi = r["pooled_interval"]
    eff = f"{_num(r['pooled_effect'])} [{_num(lo)}, {_num(hi)}] {r['unit']}".rstrip()
    p_sig = r.get("predicted_significance")
    p_txt = "n/a" if p_sig is None or not np.isfinite(p_sig) else f"{p_sig:.3f}"
    n_rob = r.get("replications_for_robust")
    n_txt = "-" if n_rob is None else f"{n_rob} (ran {r['replications_per_seed']})"
    if r["verdict"] == ROBUST:
        n_txt = f"(ran {r['replications_per_seed']})"
    cells = [r["text"], eff, f"{r['k_significant']} of {r['K']}", p_txt, r["verdict"], n_txt]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown(meta: dict[str, Any], ids: Sequence[str] | None = None) -> str:
    """The claims table of a page from a stored meta-run: statement, pooled effect and interval, k of K,
    the predicted probability that a fresh seed shows it, the verdict."""
    rows = [r for r in meta["claims"] if ids is None or r["id"] in ids]
    if ids is not None:
        rows.sort(key=lambda r: list(ids).index(r["id"]))
    head = [
        "| claim | pooled effect over seeds [95% interval] | holds (significant) in k of K seeds "
        "| predicted P(a fresh seed holds it) | verdict | replications per seed for robust |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join(head + [_row_md(r) for r in rows])


def group_counts(meta: dict[str, Any], ids_shown: Iterable[str]) -> str:
    """One line per claim group (the id up to its first dot) not shown in the table: verdict counts."""
    shown = set(ids_shown)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in meta["claims"]:
        if r["id"] not in shown:
            groups.setdefault(r["id"].split(".")[0], []).append(r)
    lines = []
    for g, rows in groups.items():
        c = verdict_counts(rows)
        lines.append(
            f"- `{g}.*`: {len(rows)} further claim(s): "
            + ", ".join(f"{n} {v}" for v, n in c.items() if n or v in (ROBUST, ROBUST_NULL))
        )
    return "\n".join(lines)


def page_section(
    meta: dict[str, Any],
    meta_path: str,
    show: Sequence[str],
    checks: Sequence[tuple[int, dict[str, Any]]] = (),
) -> str:
    """The generated block of a page: how the meta-run was made, the rule, the held-out seeds' agreement,
    the table, the other claims' counts."""
    import re

    pats = [re.compile(p) for p in show]
    ids = [r["id"] for r in meta["claims"] if any(p.search(r["id"]) for p in pats)]
    failed = meta.get("failed_seeds") or {}
    c = meta["verdicts"]
    lines = [
        f"Meta-run `{meta_path}`: profile `{meta['profile']}`, K = {meta['K']} master seeds derived from the "
        f"project seed {meta['project_seed']} ({', '.join(str(s) for s in meta['seeds'])}); every seed "
        "redraws the data splits, models and samples. A claim holds in a seed when its test there is "
        f"significant at {meta['alpha']:g} (or the level the page states) in the claimed direction. "
        f"Verdict: {meta['rule']}. Pooled effect: mean of the K per-seed effects, t interval over seeds. "
        "Replications per seed for robust: where the rule would call the claim robust (a seed's z grows with "
        "the square root of the replications; '-' where it never would, or the effect is on the wrong side).",
        "",
        f"**{c.get(ROBUST, 0)} robust claim(s), {c.get(ROBUST_NULL, 0)} robust null(s)** of "
        f"{len(meta['claims'])}. " + agreement_line(meta, checks),
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
    return {
        "key": key,
        "profile": profile,
        "project_seed": int(project_seed),
        "seeds": [int(s) for s in seeds],
        "K": len(seeds),
        "alpha": ALPHA,
        "predict_level": PREDICT_LEVEL,
        "rule": RULE,
        "verdicts": verdict_counts(rows),
        "claims": rows,
    }
