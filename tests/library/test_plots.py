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


def test_minor_ticks_as_marks_keeps_the_logit_axes_minor_ticks_as_one_artist_per_axis():
    import numpy as np
    from matplotlib.lines import Line2D

    fig, ax = plots.plt.subplots()
    ax.set_xscale("logit")
    ax.set_yscale("logit")
    ax.set_xlim(0.0002, 0.25)
    ax.set_ylim(0.001, 0.5)
    want = {}
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        lo, hi = sorted(axis.get_view_interval())
        want[name] = [v for v in axis.get_minorticklocs() if lo <= v <= hi]
    assert len(want["x"]) > 15  # the case it is for: many minor ticks
    plots.minor_ticks_as_marks(ax)
    assert list(ax.xaxis.get_minorticklocs()) == [] == list(ax.yaxis.get_minorticklocs())
    marks = [a for a in ax.lines if isinstance(a, Line2D)]
    assert len(marks) == 2
    x_marks, y_marks = marks
    assert np.allclose(x_marks.get_xdata(), want["x"]) and not np.any(x_marks.get_ydata())
    assert np.allclose(y_marks.get_ydata(), want["y"]) and not np.any(y_marks.get_xdata())
    assert x_marks.get_marker() == 3 and y_marks.get_marker() == 0  # TICKDOWN, TICKLEFT: outward
    assert x_marks.get_markersize() == plots.plt.rcParams["xtick.minor.size"]
    svg = plots.to_svg(fig)
    assert svg.count("<use") >= len(want["x"]) + len(want["y"])  # every mark drawn
