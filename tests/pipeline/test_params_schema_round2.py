"""Values the schema can know, checked before any stage (a probe: each passed and failed later in
about 80 lines). Each bad value is one line naming the key and the fix."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from calibflow.pipeline.params_schema import (
    ParamsError,
    load_and_validate,
    validate_params,
    with_paper_profiles,
)

REPO = Path(__file__).resolve().parents[2]
BASE = with_paper_profiles(yaml.safe_load((REPO / "params.yaml").read_text()), REPO / "params.yaml")
SOURCE = {"path": "data.csv", "label": "y", "score": "p", "score_kind": "probability", "time": "t"}


def _set(path: str, value) -> dict:
    p = copy.deepcopy(BASE)
    *head, last = path.split(".")
    node = p
    for k in head:
        node = node.setdefault(k, {})
    node[last] = value
    return p


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("calibrate.options.isotonic", {"n_bin": 10}, "options.isotonic.n_bin: not an option of isotonic"),
        ("calibrate.options.histogram", {"n_bin": 10}, "did you mean n_bins?"),
        ("calibrate.methods", ["platt", "vad"], "'vad' needs inputs beyond (score, label)"),
        ("datasets.targets", {"hillstrom": "vist"}, "'vist' is not a target of hillstrom (did you mean"),
        ("datasets.targets", {"adult": "income"}, "'adult' has one fixed target"),
        ("select.rule", "vad", "select.rule: 'vad' is not in calibrate.methods"),
        ("monitor.sources", ["nosuch"], "monitor.sources: 'nosuch' is not a source under `sources:`"),
    ],
)
def test_values_the_schema_can_know_are_refused_in_one_line(path, value, message):
    with pytest.raises(ParamsError) as err:
        validate_params(_set(path, value))
    lines = str(err.value).splitlines()
    assert len(lines) == 1 and message in lines[0], str(err.value)


def test_the_good_values_still_pass():
    p = _set("datasets.targets", {"hillstrom": "conversion"})
    p["calibrate"]["options"]["isotonic"] = {}
    p["select"]["rule"] = p["calibrate"]["methods"][0]
    p["sources"] = {"ads": SOURCE}
    p["monitor"]["sources"] = ["ads"]
    validate_params(p)


def test_a_section_written_twice_is_reported_as_a_duplicate(tmp_path):
    text = (REPO / "params.yaml").read_text() + "\nevaluate:\n  n_bins: 10\n"
    f = tmp_path / "params.yaml"
    f.write_text(text)
    with pytest.raises(ParamsError) as err:
        load_and_validate(f)
    msg = str(err.value)
    first = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("evaluate:"))
    assert len(msg.splitlines()) == 1 and "missing" not in msg
    assert f"key 'evaluate' is written twice (first at line {first})" in msg


def test_a_key_written_twice_inside_a_section_is_reported_too(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text((REPO / "params.yaml").read_text().replace("evaluate:\n", "evaluate:\n  n_bins: 3\n", 1))
    with pytest.raises(ParamsError, match="key 'n_bins' is written twice"):
        load_and_validate(f)
