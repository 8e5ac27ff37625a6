"""The scale of the user's score travels inside the calibrator file: one conversion, nothing guessed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibflow import calibrators, sources


def _fitted_on_probabilities() -> tuple[calibrators.BaseCalibrator, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    z = rng.normal(size=20_000)
    y = (rng.random(z.size) < 1.0 / (1.0 + np.exp(-(0.5 * z - 1.0)))).astype(float)
    p = 1.0 / (1.0 + np.exp(-z))
    cal = calibrators.make("platt", input="logit").fit(sources.calibrator_input(p, "probability", "logit"), y)
    return sources.record_score_kind(cal, "probability"), p, y


def test_recorded_kind_survives_json_and_drives_the_conversion():
    cal, p, y = _fitted_on_probabilities()
    back = calibrators.from_json(cal.to_json())
    assert back.score_kind_ == "probability"
    ratio = sources.calibrate_scores(back, p).sum() / y.sum()
    assert abs(ratio - 1.0) < 1e-6  # Platt is mean-matching on its fitting data


def test_a_conflicting_kind_is_refused_not_applied():
    cal, p, _ = _fitted_on_probabilities()
    with pytest.raises(ValueError, match="fitted on probability scores, not logit"):
        sources.calibrate_scores(cal, p, "logit")


def test_no_recorded_kind_and_none_given_is_refused():
    cal, p, _ = _fitted_on_probabilities()
    del cal.score_kind_
    with pytest.raises(ValueError, match="pass --score-kind"):
        sources.calibrate_scores(cal, p)
    assert np.allclose(sources.calibrate_scores(cal, p, "probability"), cal.predict(np.log(p / (1 - p))))


@pytest.mark.parametrize("bad", ["prob", 3, None, "logit; drop"])
def test_hostile_score_kind_in_payload_is_a_value_error(bad):
    cal, _, _ = _fitted_on_probabilities()
    payload = json.loads(cal.to_json())
    payload["score_kind"] = bad
    with pytest.raises(ValueError, match="score_kind"):
        calibrators.from_json(json.dumps(payload))
