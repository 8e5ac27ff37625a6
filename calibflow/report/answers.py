"""The index's opening: one answer block per dataset or source, from the select stage's ``card.json``.

Card shape: INTERFACES.md ("The chosen calibrator and its card"). A block says which calibrator to use,
what it gains over the uncalibrated model in log loss and ECE with the paired interval of the change,
the calibration ratio ``sum p / sum y`` before and after, and the card's one-line reason and rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from calibflow.report._format import fmt_interval, fmt_num
from calibflow.report.chrome import e
from calibflow.report.segments import segment_section

#: (card key, label, digits) of the rows with a paired change.
_DELTA_ROWS = (("log_loss", "log loss", 4), ("ece", "ECE", 4), ("brier", "Brier", 4))


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def verdict(delta: Any, ci: Any) -> tuple[str, str]:
    """(css class, word) for a change in a lower-is-better metric and its paired interval."""
    d = _num(delta)
    lo, hi = (_num(ci[0]), _num(ci[1])) if isinstance(ci, list | tuple) and len(ci) == 2 else (None, None)
    if d is None:
        return "", ""
    if lo is not None and hi is not None:
        if hi < 0:
            return "gain", "better"
        if lo > 0:
            return "loss", "worse"
        return "", "no clear change"
    return ("gain", "lower") if d < 0 else ("loss", "higher") if d > 0 else ("", "same")


def _delta_row(label: str, m: dict[str, Any], digits: int) -> str:
    cls, word = verdict(m.get("delta"), m.get("delta_ci"))
    iv = fmt_interval(m.get("delta_ci"), digits)
    delta = fmt_num(_num(m.get("delta")), digits)
    change = f'<span class="{cls}">{e(delta)}</span>' + (f" <small>{e(iv)}</small>" if iv else "")
    change += f"<br><small>{e(word)}</small>" if word else ""
    return (
        f'<tr><td class="l">{e(label)}</td><td>{e(fmt_num(_num(m.get("uncalibrated")), digits))}</td>'
        f"<td>{e(fmt_num(_num(m.get('calibrated')), digits))}</td><td>{change}</td></tr>"
    )


def _ratio_row(m: dict[str, Any]) -> str:
    iv = fmt_interval(m.get("ci"), 3)
    return (
        '<tr><td class="l">Σp / Σy <small>(1 = perfect)</small></td>'
        f"<td>{e(fmt_num(_num(m.get('uncalibrated')), 3))}</td>"
        f"<td>{e(fmt_num(_num(m.get('calibrated')), 3))}</td><td><small>{e(iv)}</small></td></tr>"
    )


def _data_line(card: dict[str, Any]) -> str:
    data = card.get("data") or {}
    split = data.get("split") or {}
    rows = split.get("rows") or {}
    parts = []
    if split.get("kind"):
        parts.append(f"{split['kind']} split")
    if rows:
        parts.append(", ".join(f"{k} {fmt_num(v)}" for k, v in rows.items()))
    if data.get("time_range"):
        parts.append(" to ".join(str(t) for t in data["time_range"]))
    return f'<p class="muted">{e(" · ".join(parts))}</p>' if parts else ""


def answer_block(card: dict[str, Any]) -> str:
    """One card as a block: the pick, the paired changes, the reason, the rule."""
    name, kind = card.get("name", "?"), card.get("kind", "")
    method = card.get("method") or "uncalibrated"
    metrics = card.get("metrics") or {}
    pick = "Keep the uncalibrated model" if method == "uncalibrated" else f"Use <code>{e(method)}</code>"
    rows = [
        _delta_row(label, metrics[k], d) for k, label, d in _DELTA_ROWS if isinstance(metrics.get(k), dict)
    ]
    if isinstance(metrics.get("calibration_ratio"), dict):
        rows.append(_ratio_row(metrics["calibration_ratio"]))
    head = (
        f'<tr><th class="l">test split</th><th>uncalibrated</th><th>{e(method)}</th>'
        "<th>change [paired CI]</th></tr>"
    )
    table = f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>" if rows else ""
    reason = f"<p>{e(card['reason'])}</p>" if card.get("reason") else ""
    rule = f'<p class="muted">rule: {e(card["rule"])}</p>' if card.get("rule") else ""
    if card.get("path"):  # issue 17: rows, or the bucket tables of the aggregate path
        rule += f'<p class="muted">computed from: {e(card["path"])}</p>'
    return (
        f'<div class="answer" data-card="{e(name)}"><h3>{e(name)} <small>{e(kind)}</small></h3>'
        f'<p class="pick">{pick}</p>{reason}<div class="wide">{table}</div>{rule}'
        f"{segment_section(card)}{_data_line(card)}</div>"
    )


def render_answers(cards: list[dict[str, Any]], evaluated: Iterable[str] = ()) -> str:
    """The opening section: every card, then a grey block for each evaluated dataset without one."""
    named = {str(c.get("name")) for c in cards}
    blocks = [answer_block(c) for c in cards]
    blocks += [
        f'<div class="answer none"><h3>{e(ds)} <small>dataset</small></h3><p>No recommendation yet: '
        f"<code>models/{e(ds)}/card.json</code> is missing (the <code>select</code> stage writes it). "
        "The detail below has every calibrator's metrics.</p></div>"
        for ds in evaluated
        if ds not in named
    ]
    intro = (
        "<p>Per dataset or source: the calibrator to use, its change in log loss and ECE against the "
        "uncalibrated model on the test split with a paired bootstrap interval (negative is better), "
        "and the calibration ratio Σp / Σy (1 is perfect).</p>"
    )
    if not blocks:
        return (
            '<section id="answers"><h2>Answers</h2><p class="muted">No recommendation: no '
            "<code>models/*/card.json</code> and no evaluation results.</p></section>"
        )
    return (
        f'<section id="answers"><h2>Answers</h2>{intro}<div class="answers">{"".join(blocks)}</div></section>'
    )
