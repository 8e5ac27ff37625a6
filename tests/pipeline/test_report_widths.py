"""The report reads well on a phone (390 px) and a desktop (1400 px): no clipped column, a card that uses
the width, and no base-model text for a score source (issue 42).

The card is a real ``models/<name>/card.json`` of a score source with segments (a 7-day click log through
``calibflow run``; tests/helpers/data/card_score_source.json), its method renamed ``centered_isotonic``,
the longest method name, so the headline table is as wide as it gets. Screenshots go to
``$CALIBFLOW_SCREENSHOTS`` when set (to look at), else the test's tmp folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from helpers.browser import measure, need_chromium, screenshot

from calibflow.report import METRICS, ReportData, render_html

CARD = Path(__file__).resolve().parents[1] / "helpers/data/card_score_source.json"
WIDTHS = (390, 1400)


def _evaluation(rng: np.random.Generator) -> dict:
    """Every metric of the report's detail table, with intervals, for the kept scores and three methods."""
    rows = {}
    for m in ("uncalibrated", "centered_isotonic", "platt", "scaling_binning"):
        vals = {s.key: float(rng.uniform(0.001, 0.5)) for s in METRICS}
        ci = {k: {"low": v * 0.912345, "high": v * 1.0876543} for k, v in vals.items()}
        rows[m] = {**vals, "ci": ci, "n_test": 12_345, "positive_rate": 0.00417}
    return {"ads": rows}


def _page(tmp_path: Path, params: dict) -> Path:
    card = json.loads(CARD.read_text())
    data = ReportData(params=params, cards=[card], evaluation=_evaluation(np.random.default_rng(0)))
    page = tmp_path / "index.html"
    page.write_text(render_html(data))
    return page


def test_report_has_no_clipped_column_at_390_and_a_full_card_at_1400(tmp_path):
    need_chromium()
    page = _page(tmp_path, {"sources": {"ads": {"path": "s.parquet", "label": "y", "score": "p"}}})
    shots = Path(os.environ.get("CALIBFLOW_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        got = measure(page, tmp_path, width)
        assert got["view_w"] == width and got["page_w"] <= width + 1, (width, got["page_w"])
        assert len(got["tables"]) >= 4 and any(t["card"] for t in got["tables"])
        for t in got["tables"]:  # a table wider than its box scrolls: a column is cut off
            assert t["scroll_w"] <= t["box_w"] + 1 and t["right"] <= width + 1, (width, t)
        (card_w,) = got["cards"]
        if width == 1400:  # the only card spans the row (it filled half of it)
            assert card_w >= 0.95 * got["body_w"], (card_w, got["body_w"])
        assert screenshot(page, shots / f"report-{width}.png", width).stat().st_size > 10_000


def test_a_score_source_report_mentions_no_base_model(tmp_path):
    decl = {"path": "s.parquet", "label": "y", "score": "p"}
    score = _page(tmp_path, {"sources": {"ads": decl}}).read_text()
    assert "XGBoost" not in score and "base model itself" not in score
    assert "own scores" in score
    feats = _page(tmp_path, {"sources": {"ads": {"path": "s.parquet", "label": "y", "features": "all"}}})
    assert "base XGBoost model" in feats.read_text()  # the control: a features source has one
