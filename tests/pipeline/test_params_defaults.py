"""One home for the params defaults: the schema (calibflow.pipeline.params_schema).

- No stage restates a default: ``x.get("<a param the schema knows>", <literal>)`` (or ``... or <literal>``)
  in calibflow/pipeline is a failure naming the file and line; the stages read typed fields instead.
- The typed path (``_common.load_params`` / ``as_params``) gives exactly the schema's defaults for what a
  params file leaves out, the same values ``validate_params`` gives, and the stages' helpers see them.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from calibflow.aggregate.switch import ScaleConfig
from calibflow.pipeline import _aggregate, _common, _sources
from calibflow.pipeline.params_schema import (
    DEFAULT_METHODS,
    Calibrate,
    Evaluate,
    Model,
    Params,
    Prepare,
    construct,
    validate_params,
)

PIPELINE = Path(_common.__file__).parent
TEMPLATE = PIPELINE.parent / "flows" / "templates" / "params.yaml.tmpl"


def _param_names(model: type[BaseModel] = Params) -> set[str]:
    """Every key the schema knows, at any depth (section names and the typed sections' fields)."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        names.add(field.alias or name)
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            names |= _param_names(sub)
    return names


def _is_literal(node: ast.AST) -> bool:
    """A constant default (number, string, bool) or a non-empty literal container; ``None``, ``{}`` and
    ``[]`` after ``or`` only guard against a null and restate nothing."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return bool(node.elts)
    if isinstance(node, ast.Dict):
        return bool(node.keys)
    return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)


def _get_key(node: ast.AST) -> str | None:
    """``"k"`` for a call ``<anything>.get("k", ...)``, else None."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return node.args[0].value
    return None


def restated_defaults(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, text) of every default restated for a known param in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        key = _get_key(node)
        if key in known and len(node.args) > 1 and _is_literal(node.args[1]):
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            for left, right in zip(node.values, node.values[1:], strict=False):
                inner = left.args[0] if isinstance(left, ast.Call) and left.args else left
                key = _get_key(left) or _get_key(inner)
                if key in known and _is_literal(right):
                    found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_checker_catches_restated_defaults():
    known = _param_names()
    bad = (
        'n = int(cfg.get("n_bins", 15))\n'
        'level = float(section(params, "evaluate").get("ci_level", 0.95))\n'
        'rows = int(ds.get("max_rows") or 0)\n'
        'rule = str((params.get("select") or {}).get("rule", "auto"))\n'
    )
    assert [line for line, _ in restated_defaults(bad, known)] == [1, 2, 3, 4]
    fine = (
        'x = rec.get("sha256", "(size+mtime)")\n'  # a JSON record's key, not a param
        'names = params.datasets.names or []\n'
        'decl = (params.sources or {}).get(name)\n'
        'src = (mon.get("sources") or [])\n'  # a null guard, no default value
    )
    assert restated_defaults(fine, known) == []


def test_no_stage_restates_a_schema_default():
    known = _param_names()
    assert {"n_bins", "ci_level", "n_bootstrap", "max_rows", "stratify", "rule", "margin"} <= known
    offenders = [
        f"{path.name}:{line}: {text}"
        for path in sorted(PIPELINE.glob("*.py"))
        if path.name != "params_schema.py"  # the one home
        for line, text in restated_defaults(path.read_text(encoding="utf-8"), known)
    ]
    assert offenders == [], "defaults restated outside the schema (read the typed field):\n" + "\n".join(
        offenders
    )


def test_no_second_defaults_file_in_the_package():
    assert sorted(p.name for p in PIPELINE.glob("*.y*ml")) == []


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_short_params_file_gets_the_schema_defaults(tmp_path):
    params = _common.load_params(_write(tmp_path, "datasets: {names: [adult]}\nevaluate: {n_bins: 7}\n"))
    assert isinstance(params, Params)
    assert params.seed == Params.model_fields["seed"].default
    assert params.evaluate == Evaluate(n_bins=7)  # the one value given, the rest the schema's
    assert params.evaluate.ci_level == Evaluate.model_fields["ci_level"].default
    assert params.model == Model() and params.prepare == Prepare() and params.calibrate == Calibrate()
    assert params.calibrate.methods == list(DEFAULT_METHODS)
    assert params.select.rule == "auto" and params.validate_.min_class_count == 10
    # the same values the entry points' validation gives
    validated = validate_params({"datasets": {"names": ["adult"]}, "evaluate": {"n_bins": 7}})
    assert params.model_dump(by_alias=True) == validated.model_dump(by_alias=True)


def test_the_user_template_is_the_schema_defaults(tmp_path):
    params = _common.load_params(_write(tmp_path, TEMPLATE.read_text(encoding="utf-8")))
    defaults = Params.model_construct().model_dump(by_alias=True)  # the defaults (nothing to run yet)
    assert params.model_dump(by_alias=True) == defaults


def test_stage_helpers_see_the_schema_defaults():
    params = _common.as_params({"datasets": {"names": ["adult"]}})
    assert _common.seed(params) == Params.model_fields["seed"].default
    assert _common.methods(params) == list(DEFAULT_METHODS)
    assert _sources.min_class_count(params) == 10
    assert _aggregate.scale_config(params) == ScaleConfig()  # scale's defaults: the core's ScaleConfig
    # a mapping is made typed once: a Params passes through as it is
    assert _common.as_params(params) is params


@pytest.mark.parametrize(
    ("given", "field", "value"),
    [
        ({"evaluate": {"n_bootstrap": 9}}, ("evaluate", "ci_level"), 0.95),
        ({"prepare": {"stratify": False}}, ("prepare", "fractions", "train"), 0.6),
        ({"model": {"max_depth": 2}}, ("model", "n_estimators"), 200),
        ({}, ("replicas", "scheme"), "seeds"),
    ],
)
def test_construct_fills_what_a_section_leaves_out(given: dict[str, Any], field: tuple[str, ...], value):
    node: Any = construct(Params, {"datasets": {"names": ["adult"]}, **given})
    for part in field:
        node = getattr(node, part)
    assert node == value


def test_a_section_that_is_not_a_mapping_is_one_line():
    with pytest.raises(_common.StageError, match="params: section 'evaluate' is missing or not a mapping"):
        _common.as_params({"evaluate": None})


# ---- the papers' profiles in their own file (params-papers.yaml) ------------------------------------

REPO = PIPELINE.parents[1]


def test_params_yaml_lists_papers_and_their_blocks_live_in_params_papers():
    import yaml

    from calibflow.pipeline.params_schema import PROFILES_FILE

    main = yaml.safe_load((REPO / "params.yaml").read_text())
    blocks = yaml.safe_load((REPO / PROFILES_FILE).read_text())["reproduce"]
    assert main["reproduce"] == {"profile": "quick"}  # only the choice of profile stays in params.yaml
    assert main["papers"] and set(main["papers"]) <= set(blocks)
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["reproduce"]
    assert {PROFILES_FILE: ["reproduce.${item.key}"]} in stage["params"]  # DVC tracks each paper's block
    loaded = _common.load_params(REPO / "params.yaml")
    assert sorted(loaded.reproduce.model_extra) == sorted(blocks)


def test_paper_profiles_are_laid_under_params_and_params_wins(tmp_path):
    from calibflow.pipeline.params_schema import PROFILES_FILE, ParamsError, with_paper_profiles

    (tmp_path / PROFILES_FILE).write_text("reproduce:\n  vad: {quick: {n: 1}}\n  calem: {quick: {n: 2}}\n")
    data = {"papers": ["vad", "calem"], "reproduce": {"profile": "quick", "vad": {"quick": {"n": 9}}}}
    merged = with_paper_profiles(data, tmp_path / "params.yaml")
    want = {"profile": "quick", "vad": {"quick": {"n": 9}}, "calem": {"quick": {"n": 2}}}
    assert merged["reproduce"] == want
    assert data["reproduce"] == {"profile": "quick", "vad": {"quick": {"n": 9}}}  # the caller's dict kept
    assert with_paper_profiles(data, tmp_path / "sub" / "params.yaml") == data  # no file beside: as it is
    (tmp_path / PROFILES_FILE).write_text("reproduce:\n  profile: full\n")
    with pytest.raises(ParamsError, match=r"params-papers.yaml: holds `reproduce:` with one block per paper"):
        with_paper_profiles(data, tmp_path / "params.yaml")
    (tmp_path / PROFILES_FILE).write_text("seed: 3\nreproduce: {}\n")
    with pytest.raises(ParamsError, match=r"found \['seed'\]"):
        with_paper_profiles(data, tmp_path / "params.yaml")
