"""``calibflow.plots.window_series`` and ``window_lines``: the monitoring page's matplotlib figures."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from calibflow import plots
from calibflow.plots import window_series

SVG = "{http://www.w3.org/2000/svg}"
DAYS = [f"2026-01-{d:02d}" for d in range(1, 17)]


def _texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{SVG}text")]


def _series(**kw) -> str:
    values = [1.0 + 0.01 * i for i in range(16)]
    values[5] = None  # a skipped window
    return window_series(
        DAYS,
        values,
        "calibration ratio",
        interval=[(v - 0.1, v + 0.1) if v else None for v in values],
        band=[(0.5, 2.0)] * 16,
        reference=1.0,
        alerts=[i == 9 for i in range(16)],
        marks={10: "promoted v2"},
        **kw,
    )


def test_series_shows_band_interval_alert_promotion_and_skipped_window():
    svg = _series()
    texts = _texts(svg)  # svg.fonttype none: the labels are text, searchable on the page
    for label in ("promoted v2", "calibration ratio", "alert band", "interval", "alert", "skipped"):
        assert label in texts, label
    dates = [t for t in texts if re.fullmatch(r"2026-01-\d\d", t)]
    assert 2 <= len(dates) <= 8  # at most 8 date labels, so they do not overlap


def test_series_without_alerts_or_skips_has_no_such_legend_entries():
    svg = window_series(DAYS[:3], [0.1, 0.2, 0.15], "ECE", band=[(None, 0.5)] * 3)
    texts = _texts(svg)
    assert "ECE" in texts and "alert band" in texts
    assert "alert" not in texts and "skipped" not in texts and "interval" not in texts


def test_series_is_deterministic_and_empty_without_a_finite_value():
    assert _series() == _series()
    assert window_series(DAYS[:2], [None, float("nan")], "ECE") == ""


def test_window_lines_draws_each_series_with_its_label_and_nothing_without_values():
    labels = [f"2026-01-{d:02d}" for d in range(1, 13)]
    lines = {
        "champion": [0.40 + 0.001 * i for i in range(12)],
        "platt": [None, 0.41, 0.405, None, *[0.39] * 8],
        "partial_pooling": [None] * 6 + [0.38] * 6,
    }
    svg = plots.window_lines(labels, lines, "log_loss", marks={6: "promoted v2"})
    for text in ("champion", "platt", "partial_pooling", "promoted v2", "log_loss", "2026-01-01"):
        assert text in svg, text
    assert plots.window_lines(labels, lines, "log_loss") == plots.window_lines(labels, lines, "log_loss")
    assert plots.window_lines(labels, {"champion": [None] * 12}, "log_loss") == ""
