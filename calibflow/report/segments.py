"""The answer card's per-segment part, shown first and open: a collapsed table hid whole markets.

From a card written by the select stage: the one line on the segmented-vs-global choice
(``segment_reason``), every segment whose ``sum p / sum y`` interval after calibration excludes 1 (flagged,
worst first, each on its own line), the reliability diagrams of the worst segments, then the full table: per
segment value rows, positives, the ratio before and after with intervals (nulls are their own level; each
column's rows add up to the test rows, and the section says so or says by how much they do not).
"""

from __future__ import annotations

from typing import Any

from calibflow.report._format import fmt_interval, fmt_num
from calibflow.report.chrome import e, stacked
from calibflow.segments import NULL_LEVEL, OTHER_LEVEL, WORST_MIN_POSITIVES, tested_intervals


def _ratio(v: Any, ci: Any) -> str:
    num = fmt_num(float(v), 3) if isinstance(v, int | float) and not isinstance(v, bool) else "n/a"
    iv = fmt_interval(ci, 3) if ci else ""
    return f"{e(num)} <small>{e(iv)}</small>" if iv else e(num)


def _row(s: dict[str, Any]) -> str:
    mark = ' class="loss"' if s.get("flagged") else ""
    return (
        f'<tr{mark}><td class="l">{e(s.get("column"))} = {e(s.get("value"))}</td>'
        f"<td>{e(fmt_num(s.get('n')))}</td><td>{e(fmt_num(s.get('positives')))}</td>"
        f"<td>{_ratio(s.get('ratio_uncalibrated'), s.get('ratio_uncalibrated_ci'))}</td>"
        f"<td>{_ratio(s.get('ratio'), s.get('ratio_ci'))}{_mark(s)}</td></tr>"
    )


def _mark(s: dict[str, Any]) -> str:
    if s.get("flagged"):
        return " flagged"
    pooled = str(s.get("value", "")).startswith(OTHER_LEVEL)  # a sum of values, each marked on its own
    return " <small>too few positives</small>" if s.get("too_few") and not pooled else ""


def _reliability_figure(card: dict[str, Any]) -> str:
    """The worst segments' reliability diagrams (``segment_reliability`` in the card), or ""."""
    panels = [p for p in card.get("segment_reliability") or [] if isinstance(p, dict) and p.get("bins")]
    if not panels:
        return ""
    from calibflow.plots import segment_reliability_svg

    # The choice's rule whole: a value with 10 positives and a larger |Σp/Σy − 1| than the one drawn is
    # in the table below, and "the worst" alone would say it is not.
    cap = (f"Reliability of the {len(panels)} worst segment(s) after calibration among the values with at "
           f"least {WORST_MIN_POSITIVES} positives (flagged first, then the largest |Σp/Σy − 1|; equal-mass "
           "bins with 95% intervals; dashed: perfect calibration).")
    return (f'<figure class="segment-reliability">{segment_reliability_svg(panels, ncols=2)}'
            f"<figcaption>{e(cap)}</figcaption></figure>")


def _row_totals(card: dict[str, Any], segs: list[dict[str, Any]]) -> str:
    """One line: each column's segment rows against the test rows (nulls and pooled values included)."""
    total = card.get("segment_test_rows")
    by_col: dict[str, int] = {}
    for s in segs:
        by_col[str(s.get("column"))] = by_col.get(str(s.get("column")), 0) + int(s.get("n") or 0)
    nulls = {str(s.get("column")): int(s.get("n") or 0) for s in segs if s.get("value") == NULL_LEVEL}
    cols = ", ".join(f"{c} {fmt_num(n)}" + (f" ({fmt_num(nulls[c])} null)" if c in nulls else "")
                     for c, n in by_col.items())
    if not isinstance(total, int):
        return f'<p class="muted">Rows per column: {e(cols)}.</p>'
    bad = [c for c, n in by_col.items() if n != total]
    if bad:
        return f'<p class="loss">Rows per column: {e(cols)}; the test split has {e(fmt_num(total))}: ' \
               f'{e(", ".join(bad))} do not add up.</p>'
    n = e(fmt_num(total))
    of = _sampled_of(card)
    return f'<p class="muted">Rows per column: {e(cols)}: each adds up to the {n} test rows{of}.</p>'


def _sampled_of(card: dict[str, Any]) -> str:
    """" compared, a seeded sample of M" when select's pass scored a sample of the test rows, else ""."""
    seg = card.get("segmented") if isinstance(card.get("segmented"), dict) else {}
    if not seg.get("test_rows_sample") or not isinstance(seg.get("test_rows"), int):
        return ""
    return f" compared (a seeded sample of the {e(fmt_num(seg['test_rows']))}, scale.compare_rows)"


def segment_section(card: dict[str, Any]) -> str:
    """HTML of the card's segment part ("" when the card has no segments)."""
    segs = [s for s in card.get("segments") or [] if isinstance(s, dict)]
    if not segs:
        return ""
    parts = []
    # a deployed per-segment calibrator's line is already the card's reason, shown above this section
    if card.get("segment_reason") and card["segment_reason"] not in str(card.get("reason") or ""):
        parts.append(f"<p>{e(card['segment_reason'])}</p>")
    flags = [str(f) for f in card.get("segment_flags") or []]
    if flags:
        items = "".join(f"<li>{e(f)}</li>" for f in flags)
        parts.append(
            f'<p class="loss"><b>{len(flags)} segment(s) still off after calibration</b> '
            f"(the interval of sum p / sum y excludes 1):</p><ul>{items}</ul>"
        )
        chance = card.get("segment_flags_by_chance")
        if isinstance(chance, int | float):
            parts.append(
                f'<p class="muted">A calibrated model would see about {chance:.1f} of the '
                f"{tested_intervals(segs)} intervals tested exclude 1 by chance.</p>"
            )
    else:
        parts.append(
            '<p class="gain">Every segment tested (enough positives) has a sum p / sum y interval that '
            "covers 1 after calibration.</p>"
            if tested_intervals(segs)
            else ""
        )
    if card.get("segment_too_few"):  # listed, never flagged, never hidden
        parts.append(f'<p class="muted">{e(card["segment_too_few"])}</p>')
    if card.get("segment_interval"):  # not the row bootstrap (a calibrator scored by select's pass)
        parts.append(f'<p class="muted">Intervals after calibration: {e(card["segment_interval"])}.</p>')
    parts.append(_reliability_figure(card))
    parts.append(_row_totals(card, segs))
    head = (
        '<tr><th class="l">segment</th><th>n</th><th>positives</th>'
        "<th>Σp/Σy before [CI]</th><th>after [CI]</th></tr>"
    )
    body = "".join(map(_row, segs))
    parts.append(
        f"<h4>Σp / Σy by segment ({len(segs)} rows)</h4>"
        f'<div class="wide">{stacked(f"<table><thead>{head}</thead><tbody>{body}</tbody></table>")}</div>'
    )
    return f'<div class="segments">{"".join(parts)}</div>'
