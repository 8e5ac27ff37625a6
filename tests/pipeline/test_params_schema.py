"""calibflow.pipeline.params_schema: the shipped params.yaml passes; typos, bad values and hostile names
name the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from calibflow.pipeline.params_schema import (
    DEFAULT_METHODS,
    ParamsError,
    load_and_validate,
    validate_params,
    with_paper_profiles,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def params() -> dict:
    # the shipped params as a project reads them: the papers' blocks from params-papers.yaml laid under
    return with_paper_profiles(yaml.safe_load((ROOT / "params.yaml").read_text()), ROOT / "params.yaml")


def bad(params: dict, path: str, value, delete: bool = False) -> str:
    p = copy.deepcopy(params)
    *parents, last = path.split(".")
    node = p
    for k in parents:
        node = node[k]
    if delete:
        del node[last]
    else:
        node[last] = value
    with pytest.raises(ParamsError) as err:
        validate_params(p)
    return str(err.value)


def test_shipped_params_are_valid(params):
    assert validate_params(params).evaluate.n_bins == params["evaluate"]["n_bins"]


def test_typo_key_is_an_error_with_did_you_mean(params):
    msg = bad(params, "evaluate.n_bin", 5)
    assert msg == "params: evaluate.n_bin: unknown key (did you mean n_bins?)"


def test_top_level_typo(params):
    assert "papres: unknown key (did you mean papers?)" in bad(params, "papres", ["vad"])


@pytest.mark.parametrize(
    ("path", "value", "expect"),
    [
        ("evaluate.ci_level", 1.5, "evaluate.ci_level: Input should be less than 1 (got 1.5)"),
        ("model.n_estimators", "lots", "model.n_estimators: Input should be a valid integer (got 'lots')"),
        ("seed", -1, "seed:"),
        ("prepare.fractions", {"train": 0.5, "calib": 0.2, "test": 0.2}, "must sum to 1"),
        ("calibrate.input", "raw", "calibrate.input:"),
        ("reproduce.profile", "huge", "reproduce.profile:"),
    ],
)
def test_bad_values_name_the_key(params, path, value, expect):
    msg = bad(params, path, value)
    assert expect in msg and len(msg.splitlines()) == 1


def test_unknown_dataset_and_method_suggest_the_registry_name(params):
    assert "unknown dataset 'bank_marketin' (did you mean 'bank_marketing'?)" in bad(
        params, "datasets.names", ["bank_marketin"]
    )
    assert "unknown method 'plat' (did you mean 'platt'?)" in bad(params, "calibrate.methods", ["plat"])
    assert "unknown paper" in bad(params, "papers", ["vad", "nosuchpaper"])


@pytest.mark.parametrize("name", ["platt; touch X", "platt && id", "$(id)", "Platt", "../x"])
def test_shell_metacharacters_are_not_names(params, name):
    msg = bad(params, "calibrate.methods", ["platt", name])
    assert "is not a method name" in msg


def test_missing_section_takes_the_schema_defaults_a_null_one_is_named(params):
    # A project states only what it changes: a section left out is the schema's defaults, not an error.
    p = copy.deepcopy(params)
    del p["calibrate"]
    assert validate_params(p).calibrate.methods == list(DEFAULT_METHODS)
    assert "params: calibrate: Input should be a valid dictionary" in bad(params, "calibrate", None)


def test_sources_names_are_checked(params):
    msg = bad(params, "sources", {"Ads; rm": {"path": "x.csv", "label": "y"}})
    assert "not a source name" in msg


def test_file_errors_are_one_line(tmp_path):
    with pytest.raises(ParamsError, match="params file not found"):
        load_and_validate(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("seed: [1,\n")
    with pytest.raises(ParamsError, match="not valid YAML") as err:
        load_and_validate(broken)
    assert len(str(err.value).splitlines()) == 1
