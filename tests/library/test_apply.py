"""calibflow.apply: which column is the score when ``score`` is left out (file, then card, else refused)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from calibflow import calibrators, sources
from calibflow.apply import apply_file


@pytest.fixture
def work(tmp_path: Path) -> Path:
    rng = np.random.default_rng(3)
    z = rng.normal(-1, 1.5, 4_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-(0.7 * z - 0.4)))).astype(np.int8)
    pq.write_table(pa.table({"p_model": 1 / (1 + np.exp(-z)), "y": y}), tmp_path / "in.parquet")
    cal = calibrators.make("platt", input="probability").fit(1 / (1 + np.exp(-z)), y.astype(float))
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "calibrator.json").write_text(sources.record_score_kind(cal, "probability").to_json())
    return tmp_path


def _card(work: Path, score: str) -> None:
    card = {"method": "platt", "input": {"score": score, "score_kind": "probability"}}
    (work / "m" / "card.json").write_text(json.dumps(card))


def test_an_older_file_takes_the_score_column_from_the_card_beside_it(work):
    cal = work / "m" / "calibrator.json"
    assert "score_column" not in json.loads(cal.read_text())
    _card(work, "p_model")
    n = apply_file(cal, str(work / "in.parquet"), None, work / "a.parquet")
    apply_file(cal, str(work / "in.parquet"), "p_model", work / "b.parquet")
    assert n == 4_000 and pq.read_table(work / "a.parquet").equals(pq.read_table(work / "b.parquet"))


def test_the_file_wins_over_the_card_and_an_explicit_score_over_both(work):
    cal = work / "m" / "calibrator.json"
    payload = json.loads(cal.read_text())
    payload["score_column"] = "p_model"
    cal.write_text(json.dumps(payload))
    _card(work, "some_other_column")
    assert apply_file(cal, str(work / "in.parquet"), None, work / "a.parquet") == 4_000
    with pytest.raises(ValueError, match="column 'y2' not found"):
        apply_file(cal, str(work / "in.parquet"), "y2", work / "b.parquet")
    assert not (work / "b.parquet").exists()


def test_a_features_cards_margin_is_no_column_and_asks_for_score(work):
    _card(work, "margin of data/models/ads.json")  # what select writes for a features source
    with pytest.raises(ValueError, match="does not name its score column; pass --score"):
        apply_file(work / "m" / "calibrator.json", str(work / "in.parquet"), None, work / "a.parquet")
    assert not (work / "a.parquet").exists()
