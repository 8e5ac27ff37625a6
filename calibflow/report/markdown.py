"""``reports/summary.md``: a short markdown digest of the report for a pull-request comment."""

from __future__ import annotations

from calibflow.report._format import fmt_num, fmt_sig
from calibflow.report.answers import card_verdict
from calibflow.report.data import METRICS, ReportData, best_methods, method_order, split_baselines

#: The columns a PR comment shows; the HTML page has all of them with intervals.
SUMMARY_METRICS = ("ece", "brier", "log_loss", "ks", "auc")


def _validation_line(data: ReportData) -> str:
    if not data.validation:
        return "- Validation: no results."
    parts = []
    for phase in data.validation:
        suites = phase.get("suites", [])
        bad = [s.get("name", "?") for s in suites if not s.get("success")]
        state = "passed" if not bad else f"FAILED ({', '.join(bad)})"
        parts.append(f"{phase.get('phase', '?')}: {len(suites)} suites {state}")
    return "- Validation: " + "; ".join(parts) + "."


def _dataset_table(rows: dict[str, dict]) -> list[str]:
    rows, _ = split_baselines(rows)  # sigmoid/minmax: the ranking paper's baselines, not calibrators
    specs = [s for s in METRICS if s.key in SUMMARY_METRICS]
    best = {s.key: best_methods(rows, s) for s in specs}
    lines = ["| method | " + " | ".join(s.label for s in specs) + " |", "|---" * (len(specs) + 1) + "|"]
    for m in method_order(list(rows)):
        cells = []
        for s in specs:
            v = fmt_num(rows[m].get(s.key))
            cells.append(f"**{v}**" if m in best[s.key] else v)
        lines.append(f"| `{m}` | " + " | ".join(cells) + " |")
    return lines


def render_summary(data: ReportData) -> str:
    """Markdown: revision, validation status, a compact metric table per dataset, the papers' headlines."""
    md = data.metadata
    rev = (md.get("git_revision") or "unknown")[:10] + (" (dirty)" if md.get("git_dirty") else "")
    seed = data.params.get("seed", "?")
    out = ["## calibflow report", "", f"- Revision: `{rev}`, seed {seed}.", _validation_line(data)]
    for c in data.cards:
        m = c.get("metrics", {}).get("log_loss", {})
        note = (c.get("ranking") or {}).get("statement") if isinstance(c.get("ranking"), dict) else None
        if note:  # said first: the model barely ranks
            out.append(f"- **{c.get('name')}**: {note}")
        ci = m.get("delta_ci") or [None, None]
        if card_verdict(c) == "keep":  # the reason line names the calibrator turned down and the margin
            out.append(f"- **{c.get('name')}**: keep your scores. {c.get('reason', '')}")
            continue
        delta = fmt_sig(m.get("delta"), signed=True)
        out.append(
            f"- **{c.get('name')}**: use `{c.get('method')}` (log loss {delta} "
            f"[{fmt_sig(ci[0], signed=True)}, {fmt_sig(ci[1], signed=True)}] vs uncalibrated). "
            f"{c.get('reason', '')}"
        )
    for ds, rows in data.evaluation.items():
        n = next(iter(rows.values())).get("n_test", "?")
        out += ["", f"### {ds} (test rows: {n})", "", *_dataset_table(rows)]
    if data.reproductions or data.missing_reproductions:
        out += ["", "### Paper reproductions", ""]
        for r in data.reproductions:
            head = ", ".join(f"{k} = {fmt_num(v)}" for k, v in list(r.metrics.items())[:6])
            line = f"- **{r.key}** ({r.profile} profile): {r.paper}"
            out.append(line + (f". {head}" if head else ""))
        out += [f"- **{k}**: no result file." for k in data.missing_reproductions]
    out += ["", "Best value per metric in bold; intervals, figures and notes in `reports/index.html`.", ""]
    return "\n".join(out)
