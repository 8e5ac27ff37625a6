"""The index's opening: one answer block per dataset or source, from the select stage's ``card.json``.

Card shape: docs/card.md ("The chosen calibrator and its card"). A block says which calibrator to use,
what it gains over the uncalibrated model in log loss and ECE with the paired interval of the change,
the calibration ratio ``sum p / sum y`` before and after, and the card's one-line reason and rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from calibflow.report._format import fmt_num, fmt_sig
from calibflow.report.chrome import e, stacked
from calibflow.report.segments import segment_section

#: (card key, label) of the rows with a paired change.
_DELTA_ROWS = (("log_loss", "log loss"), ("ece", "ECE"), ("brier", "Brier"))
#: The card's colour (a CSS class) by the select stage's verdict.
VERDICT_CLASS = {"calibrate": "calibrate", "keep": "keep"}


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


def _iv(ci: Any, signed: bool = False) -> str:
    """``[low, high]`` in the report's one number format; empty when absent."""
    if not (isinstance(ci, list | tuple) and len(ci) == 2):
        return ""
    return f"[{fmt_sig(_num(ci[0]), signed=signed)}, {fmt_sig(_num(ci[1]), signed=signed)}]"


def _delta_row(label: str, m: dict[str, Any]) -> str:
    cls, word = verdict(m.get("delta"), m.get("delta_ci"))
    iv = _iv(m.get("delta_ci"), signed=True)
    delta = fmt_sig(_num(m.get("delta")), signed=True)
    change = f'<span class="{cls}">{e(delta)}</span>' + (f" <small>{e(iv)}</small>" if iv else "")
    change += f"<br><small>{e(word)}</small>" if word else ""
    return (
        f'<tr><td class="l">{e(label)}</td><td>{e(fmt_sig(_num(m.get("uncalibrated"))))}</td>'
        f"<td>{e(fmt_sig(_num(m.get('calibrated'))))}</td><td>{change}</td></tr>"
    )


def _ratio_row(m: dict[str, Any], kept: bool = False) -> str:
    """Σp / Σy before and after (``kept``: the scores are kept, so only before, with its interval)."""
    after = "" if kept else e(fmt_sig(_num(m.get("calibrated"))))
    iv = _iv(m.get("ci"))
    # The last column is headed "change [paired CI]"; this row's bracket is the ratio's own interval (of the
    # scores served), not a change: it says so, which matters most where the table stacks at 390 px.
    which = "uncalibrated" if kept else "calibrated"
    said = f"{which} Σp / Σy: {iv}" if iv else ""
    return (
        '<tr><td class="l">Σp / Σy <small>(1 = perfect)</small></td>'
        f"<td>{e(fmt_sig(_num(m.get('uncalibrated'))))}</td>"
        f"<td>{after}</td><td><small>{e(said)}</small></td></tr>"
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


def card_verdict(card: dict[str, Any]) -> str:
    """``calibrate``, ``keep`` or ``unsure``: the card's own verdict, else read from its log-loss interval
    (cards written before the select rule had one)."""
    v = card.get("verdict")
    if v in VERDICT_CLASS:
        return str(v)
    if card.get("method") in ("uncalibrated", "identity"):
        return "keep"
    ci = ((card.get("metrics") or {}).get("log_loss") or {}).get("delta_ci")
    hi = _num(ci[1]) if isinstance(ci, list | tuple) and len(ci) == 2 else None
    return "calibrate" if hi is not None and hi < 0 else "unsure"


def _runner_up(card: dict[str, Any]) -> tuple[str, list[str]] | None:
    """(column title, rows) of the best calibrator a "keep" card turned down: its log-loss change and the
    margin it had to clear (the card's own metrics compare the scores with themselves)."""
    sel = card.get("selection") or {}
    name = sel.get("runner_up")
    c = (sel.get("comparisons") or {}).get(name) if name else None
    ll = _num(sel.get("log_loss_uncalibrated"))
    if not isinstance(c, dict) or ll is None:
        return None
    delta = _num(c.get("delta"))
    m = {"uncalibrated": ll, "calibrated": ll + delta if delta is not None else None, "delta": delta,
         "delta_ci": [c.get("low"), c.get("high")]}
    margin = f"−{fmt_sig(_num(sel.get('margin')))}"
    rows = [
        _delta_row("log loss", m),
        f'<tr><td class="l">margin to clear</td><td></td><td></td><td>{e(margin)}</td></tr>',
    ]
    return f"{name} (not used)", rows


def _pick(card: dict[str, Any], verdict_: str) -> str:
    method = card.get("method") or "uncalibrated"
    if verdict_ == "keep":
        return "Keep your scores"
    word = "Use" if verdict_ == "calibrate" else "Named in select.rule:"
    return f"{word} <code>{e(method)}</code>"


def answer_block(card: dict[str, Any], figure: str = "", solo: bool = False) -> str:
    """One card as a block: the verdict (its colour), the paired changes, the reason, the rule, and the
    before-vs-chosen reliability diagram (``figure``, already rendered)."""
    name, kind = card.get("name", "?"), card.get("kind", "")
    method = card.get("method") or "uncalibrated"
    metrics = card.get("metrics") or {}
    v = card_verdict(card)
    runner = _runner_up(card) if v == "keep" else None
    if runner:  # keeping: the table shows what the best calibrator would have changed, and why not
        method, rows = runner
    else:
        rows = [_delta_row(label, metrics[k]) for k, label in _DELTA_ROWS if isinstance(metrics.get(k), dict)]
    if isinstance(metrics.get("calibration_ratio"), dict):
        rows.append(_ratio_row(metrics["calibration_ratio"], kept=runner is not None))
    head = (
        f'<tr><th class="l">test split</th><th>uncalibrated</th><th>{e(method)}</th>'
        "<th>change [paired CI]</th></tr>"
    )
    table = stacked(f"<table><thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>") if rows else ""
    reason = f"<p>{e(card['reason'])}</p>" if card.get("reason") else ""
    ranking = card.get("ranking") if isinstance(card.get("ranking"), dict) else {}
    if ranking.get("statement"):  # said first: the model barely ranks, whatever the table below shows
        reason = f'<p class="loss"><b>{e(ranking["statement"])}</b></p>{reason}'
    if card.get("platt_targets"):
        reason += f'<p class="muted">{e(card["platt_targets"])}.</p>'
    rule = f'<p class="muted">rule: {e(card["rule"])}</p>' if card.get("rule") else ""
    if card.get("path"):  # rows, or the bucket tables of the aggregate path
        rule += f'<p class="muted">computed from: {e(card["path"])}</p>'
    return (
        f'<div class="answer {v}{" solo" if solo else ""}" data-card="{e(name)}" data-verdict="{v}">'
        f'<h3>{e(name)} <small>{e(kind)}</small></h3><p class="pick">{_pick(card, v)}</p>{reason}'
        f'<div class="wide">{table}</div>{figure}{rule}'
        f"{segment_section(card)}{_data_line(card)}</div>"
    )


def render_answers(
    cards: list[dict[str, Any]], evaluated: Iterable[str] = (), figures: dict[str, str] | None = None
) -> str:
    """The opening section: every card (with its figure from ``figures``, by name), then a grey block for
    each evaluated dataset without one."""
    named = {str(c.get("name")) for c in cards}
    solo = len(cards) == 1 and not [ds for ds in evaluated if ds not in named]  # the only card: full row
    blocks = [answer_block(c, (figures or {}).get(str(c.get("name")), ""), solo) for c in cards]
    blocks += [
        f'<div class="answer none"><h3>{e(ds)} <small>dataset</small></h3><p>No recommendation yet: '
        f"<code>models/{e(ds)}/card.json</code> is missing (the <code>select</code> stage writes it). "
        "The detail below has every calibrator's metrics.</p></div>"
        for ds in evaluated
        if ds not in named
    ]
    intro = (
        "<p>Per dataset or source: <b>keep your scores</b> (blue) or the calibrator to use (green), its "
        "change in log loss, ECE and Brier against the uncalibrated model on the test split with a paired "
        "interval (negative is better; log loss: normal interval on per-row differences, the one the verdict "
        "uses; ECE and Brier: bootstrap), and the calibration ratio Σp / Σy (1 is perfect). A calibrator is "
        "named only when its whole log-loss interval lies below minus the margin; the methods are explained "
        'under <a href="#glossary">Methods</a>.</p>'
    )
    if not blocks:
        return (
            '<section id="answers"><h2>Answers</h2><p class="muted">No recommendation: no '
            "<code>models/*/card.json</code> and no evaluation results.</p></section>"
        )
    return (
        f'<section id="answers"><h2>Answers</h2>{intro}<div class="answers{" solo" if solo else ""}">'
        f'{"".join(blocks)}</div></section>'
    )
