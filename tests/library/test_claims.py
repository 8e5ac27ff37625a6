"""Claims across seeds: the claim logic in calibflow.experiments.claims and the reproduce stage's
--seed / --seeds / --check, run for real on a small CalEM configuration."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from calibflow.experiments import claims as CL
from calibflow.experiments.decision import _verdict
from calibflow.pipeline import reproduce
from calibflow.pipeline._common import StageError


def test_master_seeds_are_deterministic_distinct_and_never_the_project_seed():
    a, b = CL.master_seeds(20261122, 5), CL.master_seeds(20261122, 5)
    assert a == b and len(set(a)) == 5 and 20261122 not in a
    assert CL.master_seeds(4242, 5) != a
    assert CL.master_seeds(20261122, 3) == a[:3]  # growing K keeps the seeds already run
    assert all(0 <= s < 2**31 for s in a)


def test_paired_claim_is_significant_only_in_the_claimed_direction():
    rng = np.random.default_rng(0)
    base = rng.normal(1.0, 0.1, 30)
    better = base - 0.05 + rng.normal(0, 0.01, 30)  # consistently lower
    lower = CL.paired_claim("x", "lower", better, base, direction=-1)
    higher = CL.paired_claim("x", "higher", better, base, direction=+1)
    assert lower.significant and not higher.significant
    assert lower.effect == pytest.approx(-0.05, abs=0.01) and lower.lo < lower.effect < lower.hi < 0
    with_nan = CL.paired_claim("x", "", np.r_[better, np.nan], np.r_[base, 1.0], direction=-1)
    assert with_nan.n == 30  # the pair with a missing value is dropped, not counted


def test_joint_claim_needs_every_part():
    rng = np.random.default_rng(1)
    strong = CL.paired_claim("a", "", rng.normal(1, 0.1, 20), one_sided=True)
    weak = CL.paired_claim("b", "", rng.normal(0.0, 1.0, 20), one_sided=True)
    wrong = CL.paired_claim("c", "", rng.normal(-1, 0.1, 20), one_sided=False)  # significant, wrong sign
    assert strong.significant and not weak.significant
    assert CL.joint_claim("ab", "", [strong, strong]).significant
    assert not CL.joint_claim("ab", "", [strong, weak]).significant
    assert CL.joint_claim("ac", "", [strong, wrong]).p == 1.0


def test_replications_for_power_matches_the_textbook_value_and_a_simulation():
    # Cohen's d = 0.5, two-sided 5%, 80% power: 34 pairs (noncentral t).
    assert CL.replications_for_power(0.5, 1.0) == 34
    assert CL.replications_for_power(1.0, 1.0) < 34 < CL.replications_for_power(0.3, 1.0)
    assert CL.replications_for_power(0.0, 1.0) is None
    rng = np.random.default_rng(2)
    hits = [CL.paired_claim("p", "", rng.normal(0.5, 1.0, 34)).significant for _ in range(2000)]
    assert 0.76 < np.mean(hits) < 0.84


def _run(cid: str, sig: bool, effect: float = 1.0, p: float | None = None) -> dict:
    p = (1e-13 if sig else 0.4) if p is None else p
    return CL.Claim(cid, cid, effect, effect - 0.5, effect + 0.5, p, 10, sd=1.0).to_dict()


def test_summarise_counts_seeds_and_gives_the_verdicts():
    seeds = [1, 2, 3, 4, 5]
    pattern = {"robust": [1, 1, 1, 1, 1], "mixed": [1, 1, 0, 0, 0], "null": [0, 0, 0, 1, 0]}
    centre = {"robust": 3.0, "mixed": 3.0, "null": 0.0}  # the null's effects straddle 0
    runs = [[_run(c, bool(v[i]), effect=centre[c] - 2.0 + i) for c, v in pattern.items()] for i in range(5)]
    runs[4] = [r for r in runs[4] if r["id"] != "mixed"]  # the last seed never reached this claim
    rows = {r["id"]: r for r in CL.summarise(runs, seeds)}
    assert rows["robust"]["k_significant"] == 5 and rows["robust"]["verdict"] == CL.ROBUST
    assert rows["robust"]["predicted_significance"] > 0.99 and rows["mixed"]["missing_in"] == [5]
    assert rows["mixed"]["verdict"] == CL.NOT_ROBUST and rows["null"]["verdict"] == CL.NO_EFFECT
    assert rows["mixed"]["pooled_effect"] == pytest.approx(2.5)  # mean of 1..4
    tiny = [[_run("tiny", i == 0, effect=0.1 + 0.001 * i)] for i in range(5)]  # consistent, never significant
    assert CL.summarise(tiny, seeds)[0]["verdict"] == CL.POOLED_ONLY
    # Significant in every seed at p = 0.001 (z = 3.3): a fresh seed misses it about one time in 10.
    weak = CL.summarise([[_run("w", True, p=0.001)] for _ in seeds], seeds)[0]
    assert weak["k_significant"] == 5 and weak["verdict"] == CL.UNDERPOWERED
    assert 0.8 < weak["predicted_significance"] < 0.99
    # Robust null needs evidence against the claim: the effect clearly on the other side in every seed.
    against = CL.summarise([[_run("a", False, effect=-1.0, p=1e-13)] for _ in seeds], seeds)[0]
    assert against["verdict"] == CL.ROBUST_NULL
    lo, hi = rows["mixed"]["pooled_interval"]
    assert lo < 2.5 < hi
    meta = CL.meta_result("k", "seeds", 7, seeds, runs)
    agree = {r["id"]: r["agrees"] for r in CL.check_against(meta["claims"], [_run("robust", False)])}
    assert agree == {"robust": False}  # only robust / robust-null claims are checked
    assert "| mixed |" in CL.markdown(meta) and "2 of 5" in CL.markdown(meta, ["mixed"])


def _z_sample(rng: np.random.Generator, mu: float, k: int) -> tuple[list[float], float]:
    """K seeds' two-sided p-values of a test whose z is N(mu, 1), and a fresh seed's z."""
    from scipy import stats

    z = rng.normal(mu, 1.0, k + 1)  # mu >= 0 and the p-values two-sided: a negative z is the wrong sign
    return [float(2 * stats.norm.sf(v)) if v > 0 else 1.0 for v in z[:k]], float(z[k])


def test_robust_claims_hold_in_a_fresh_seed_with_the_promised_probability():
    # Claims spread over per-run strengths (power from about 17% to 100%); a claim marked robust must be
    # significant in a fresh seed at least 99% of the time. The old rule (K-1 of K) is the control.
    rng = np.random.default_rng(11)
    new_hits, old_hits = [], []
    for mu in rng.uniform(1.0, 9.0, 3000):
        ps, fresh = _z_sample(rng, mu, 5)
        k = sum(p < CL.ALPHA for p in ps)  # every effect here has the claimed sign
        z = [CL.z_score(p, 1.0, 1) for p in ps]
        held = fresh > CL.z_crit()
        if CL.verdict(k, 5, CL.predicted_significance(z)) == CL.ROBUST:
            new_hits.append(held)
        if k >= 4:
            old_hits.append(held)
    assert len(new_hits) > 700 and np.mean(new_hits) >= 0.99
    assert np.mean(old_hits) < 0.98  # what the reviewer saw: K-1 of K alone over-promises


def test_replications_for_robust_is_where_the_rule_flips():
    z = [3.3, 3.0, 3.6, 3.1, 3.4]  # significant everywhere, not robust at 10 replications per seed
    n = CL.replications_for_robust(z, 10)
    assert n is not None and n > 10
    for m, expect in ((n, True), (n - 1, False)):
        scaled = [v * np.sqrt(m / 10) for v in z]
        assert (CL.predicted_significance(scaled) >= CL.PREDICT_LEVEL) is expect
    assert CL.replications_for_robust([-1.0, 0.5, -0.2], 10) is None  # on the wrong side: never
    assert CL.replications_for_robust([6.0, 0.2, 6.0, 0.1, 6.0], 10) is None  # seed-to-seed spread: never


def test_stored_meta_run_is_rejudged_and_checked_against_old_and_new_check_files():
    seeds = [1, 2, 3, 4, 5]
    runs = [[_run("strong", True), _run("weak", True, p=0.01)] for _ in seeds]
    meta = CL.meta_result("k", "seeds", 7, seeds, runs)
    for r in meta["claims"]:  # as stored before the rule: verdicts from k of K alone
        r["verdict"] = CL.ROBUST
    meta = CL.reclassify(meta)
    assert {r["id"]: r["verdict"] for r in meta["claims"]} == {"strong": CL.ROBUST, "weak": CL.UNDERPOWERED}
    old_check = {
        "seed": 9,
        "claims": [
            {"id": "strong", "held_out_significant": True, "held_out_p": 1e-9, "held_out_effect": 1.0},
            {"id": "weak", "held_out_significant": False, "held_out_p": 0.2, "held_out_effect": 1.0},
        ],
    }
    new_check = {"seed": 10, "claims": [], "held_out": [_run("strong", False), _run("weak", True)]}
    line = CL.agreement_line(meta, [(9, old_check), (10, new_check)])
    assert "9: 1 of 1; 10: 0 of 1" in line and "`strong` (seed 10)" in line


def test_decision_uses_uncertainty_only_above_both_the_score_and_the_random_control():
    # The reviewer's case: +0.06% over the score (noise), far above a control that happens to lose.
    gain = np.array([0.003, -0.002, 0.001, -0.001, 0.002])
    control = np.array([-0.02, -0.03, -0.025, -0.02, -0.03])
    assert _verdict(gain, control) == "no (not above score)"
    strong = np.array([0.02, 0.025, 0.018, 0.022, 0.03])
    assert _verdict(strong, control) == "uses uncertainty"
    assert _verdict(strong, strong + 0.001 * np.arange(5)) == "no (not above control)"


@pytest.fixture
def small_calem_params(tmp_path: Path) -> Path:
    """params.yaml with a CalEM 'seeds' profile small enough for a test (one cell, no Hillstrom)."""
    from calibflow.pipeline.params_schema import with_paper_profiles

    params = with_paper_profiles(yaml.safe_load(Path("params.yaml").read_text()), Path("params.yaml"))
    params["reproduce"]["calem"]["seeds"] = {
        "profile": "seeds",
        "figure": False,
        "simulation": {
            "n": 2000,
            "replications": 3,
            "shares": [0.1],
            "p_y": [0.3],
            "g": ["g1"],
            "h": ["h1"],
            "literal": False,
            "max_iter": 20,
        },
        "hillstrom": None,
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_meta_run_runs_k_derived_seeds_resumes_and_refuses_a_used_seed_as_held_out(
    tmp_path: Path, small_calem_params: Path
):
    params = yaml.safe_load(small_calem_params.read_text())
    out = tmp_path / "meta.json"
    meta = reproduce.meta_run("calem", params, 3, tmp_path, "seeds", out)
    assert json.loads(out.read_text()) == json.loads(json.dumps(meta))
    assert meta["seeds"] == CL.master_seeds(params["seed"], 3) and meta["K"] == 3
    ids = {r["id"] for r in meta["claims"]}
    assert {"sim.g1/h1.py0.3.share0.1.improvement", "sim.g1/h1.py0.3.share0.1.improvement_sq"} <= ids
    for r in meta["claims"]:
        assert 0 <= r["k_significant"] <= 3 and len(r["effects"]) == 3 and r["missing_in"] == []
    runs = sorted((tmp_path / "reports" / "seeds").glob("calem-seeds-*-*.json"))
    assert len(runs) == 3
    assert not (tmp_path / "reports" / "reproductions" / "calem.json").exists()  # DVC output untouched
    stamps = [p.stat().st_mtime_ns for p in runs]
    again = reproduce.meta_run("calem", params, 3, tmp_path, "seeds", out)  # resumes: nothing re-run
    assert [p.stat().st_mtime_ns for p in runs] == stamps and again["claims"] == meta["claims"]
    with pytest.raises(StageError, match="not held out"):
        reproduce.check_seed("calem", params, meta["seeds"][0], out, str(tmp_path))
    rows = reproduce.check_seed("calem", params, 4242, out, str(tmp_path))
    checked = {r["id"] for r in meta["claims"] if r["verdict"] in (CL.ROBUST, CL.ROBUST_NULL)}
    assert {r["id"] for r in rows} == checked
    stored = json.loads((tmp_path / "reports" / "seeds" / "calem-check-4242.json").read_text())
    assert {c["id"] for c in stored["held_out"]} == ids  # every held-out claim kept for a later re-judging


def test_stage_cli_rejects_seed_and_seeds_together(small_calem_params: Path):
    with pytest.raises(SystemExit) as exc:
        reproduce.main(["calem", "--seed", "1", "--seeds", "3", "--params", str(small_calem_params)])
    assert exc.value.code == 2


def test_ranking_random_held_out_varies_the_split_with_the_seed_and_keeps_the_counts():
    from calibflow.experiments import ranking as R

    coat = R.load_coat()  # real data; raises when the mirror is absent
    last = R.released_split(coat, num_neg=4, seed=1)
    a = R.released_split(coat, num_neg=4, seed=1, held_out="random")
    b = R.released_split(coat, num_neg=4, seed=2, held_out="random")
    again = R.released_split(coat, num_neg=4, seed=1, held_out="random")
    assert (a.cal == again.cal).all()  # deterministic per seed
    assert not (a.cal == b.cal).all() and not (a.cal == last.cal).all()  # the seed moves the split
    np.testing.assert_array_equal(a.cal.sum(axis=1), last.cal.sum(axis=1))  # same count per user
    assert not (a.cal & (a.Y == 0)).any()  # only positives are held out
    with pytest.raises(ValueError, match="held_out"):
        R._check_config({**R.DEFAULTS, "held_out": "first"})


def test_vad_semisynthetic_control_knows_the_truth():
    from scipy.special import logit

    from calibflow.experiments import vad as V

    rng = np.random.default_rng(3)
    X = rng.normal(size=(4000, 6)) * [1, 2, 3, 1, 1, 5]
    p = V.known_model(X, 0.12, 1.5, rng)
    assert abs(p.mean() - 0.12) < 1e-3 and np.std(logit(p)) == pytest.approx(1.5, rel=1e-6)
    q = rng.uniform(0.01, 0.99, 50)
    np.testing.assert_allclose(V._shrink(q, 1.0, 0.3), q, rtol=1e-9)  # lambda 1: no shrink
    np.testing.assert_allclose(V._shrink(q, 0.0, 0.3), np.full(50, 1 / (1 + np.exp(-0.3))))

    config = {
        "profile": "test",
        "synthetic": {"replications": 0},
        "real": {
            "replications": 1,
            "datasets": ["bank_marketing"],
            "max_rows": 6000,
            "shift": "segment",
            "replica_scheme": "bootstrap",
            "n_replicas": 2,
            "alphas": [0.05, 0.1],
            "baselines": ["platt"],
            "xgb": {"n_estimators": 30, "max_depth": 3},
            "semisynthetic": {"replications": 2, "shrinks": [0.5]},
        },
    }
    rep = V.run(config, 5)  # real data: raises when the mirror is absent
    table = next(t for t in rep.tables if t.title.startswith("Semi-synthetic control (bank_marketing"))
    assert table.columns == ["alpha", "Original", "VAD", "oracle", "shrink 0.5"]
    assert table.rows[-1][0] == "lambda" and table.rows[-1][-1].startswith("0.500")
    ids = {c["id"] for c in rep.claims}
    assert {
        "semisynthetic.bank_marketing.alpha0.05.VAD<Original",
        "semisynthetic.bank_marketing.alpha0.1.VAD<shrink0.5",
        "semisynthetic.bank_marketing.lambda_VAD<oracle",
    } <= ids
    assert all(c["n"] == 2 for c in rep.claims if c["id"].startswith("semisynthetic."))


def test_page_blocks_are_generated_from_the_stored_jsons_and_replaced_in_place(tmp_path: Path, monkeypatch):
    from calibflow.experiments import pages
    from calibflow.results import Reproduction, Table

    monkeypatch.chdir(tmp_path)
    seeds = [1, 2, 3, 4, 5]
    runs = [[_run("a.x", True), _run("b.y", i < 2)] for i in range(5)]
    Path("k_check_4242.json").write_text(
        json.dumps({"meta": "k_seeds.json", "seed": 4242, "claims": [], "held_out": [_run("a.x", True)]})
    )
    Path("k_seeds.json").write_text(json.dumps(CL.meta_result("k", "seeds", 7, seeds, runs)))
    rep = Reproduction("k", "paper", "full", tables=[Table("Gen table", ["m", "gain"], [["VW", 0.0123456]])])
    rep.save("k_full.json")
    page = Path("k.md")
    page.write_text(
        "# Page\n\nProse the generator must keep.\n\n"
        "<!-- generated: claims k_seeds.json ^a\\. -->\nstale\n<!-- /generated -->\n\nMore prose.\n\n"
        "<!-- generated: table k_full.json Gen -->\n<!-- /generated -->\n"
    )
    assert pages.main([str(page)]) == 0
    first = page.read_text()
    assert first.startswith("# Page\n\nProse the generator must keep.\n") and "More prose." in first
    assert "stale" not in first and "| a.x | " in first and "| 5 of 5 | 0.995 | robust |" in first
    assert "`b.*`: 1 further claim(s): 0 robust, 0 robust null, 1 not robust" in first
    assert "Held-out seeds 4242 " in first and "4242: 1 of 1." in first
    assert "#### Gen table" in first and "| VW | 0.01235 |" in first and "profile `full`" in first
    assert pages.main([str(page)]) == 0
    assert page.read_text() == first  # idempotent: blocks are replaced, never appended
    page.write_text("<!-- generated: table k_full.json Missing -->\n<!-- /generated -->\n")
    with pytest.raises(ValueError, match="no table whose title starts with 'Missing'"):
        pages.main([str(page)])


def test_stored_pages_match_their_stored_meta_runs_and_checks():
    # The committed pages are what their generated blocks render from the committed JSONs today.
    from calibflow.experiments import pages

    docs = sorted(Path("docs/reproductions").glob("*.md"))
    assert len(docs) == 5
    for page in docs:
        text = page.read_text()
        assert "<!-- generated: claims" in text, page
        assert pages.regenerate(text) == text, (
            f"{page} is stale: python -m calibflow.experiments.pages {page}"
        )
    for meta in Path("docs/reproductions").glob("*_seeds.json"):
        m = json.loads(meta.read_text())
        assert m["rule"] == CL.RULE and m["verdicts"] == CL.verdict_counts(m["claims"])
        assert m["verdicts"] == CL.reclassify(json.loads(meta.read_text()))["verdicts"]  # judged by this rule


def test_summary_headlines_quote_only_figures_their_pages_state(tmp_path: Path):
    # docs/reproductions.md's summary table drifted from its pages once (60 vs 74 of 80 cells): every figure
    # a headline quotes must be one its page states.
    from calibflow.experiments import pages

    assert pages.unsupported_figures("docs/reproductions.md") == {}
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "reproductions" / "k.md").write_text("GAM-EM is better in 74 of 80 cells, mean +4.8%.\n")
    (tmp_path / "index.md").write_text(
        "| `k` | paper | `k` | [k.md](reproductions/k.md) | in 60 of 80 cells (mean +4.8%, 0.049-0.051) |\n"
    )
    missing = {"reproductions/k.md": ["60 of 80", "0.049-0.051"]}
    assert pages.unsupported_figures(tmp_path / "index.md") == missing


def test_held_out_wording_names_the_one_clean_seed():
    assert CL._held_out_status([4242, 31337]) == (
        "not the project's; 31337 used to choose nothing; "
        "4242 seen under the earlier rule, before this one was written"
    )
