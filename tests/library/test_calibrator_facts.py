"""A calibrator class carries its own facts; every list of method names is derived from the registry.

The lists other modules expose (the default candidates, the methods that need more than scores, the
segmented ones, the selection's familiarity order, the glossary, the ranking baselines, the scale
command's defaults, the methods that need rows) are computed from the classes, and no module outside
``calibflow/calibrators`` spells out a list of method names by hand (an AST scan).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import calibflow
import calibflow.calibrators as C
from calibflow.calibrators.base import OWN_FACTS, Bound, check_bounds

ROOT = Path(calibflow.__file__).parent

# The sets as they were before the facts moved into the classes: the derivation must reproduce them.
# bbq left the defaults on measured evidence (issue 36: its class's out_of_defaults says why)
DEFAULT_BEFORE = (
    "beta", "centered_isotonic", "gamma", "gaussian", "histogram", "isotonic", "minmax", "platt",
    "quadratic", "scaling_binning", "sigmoid", "spline", "temperature", "venn_abers",
)
FAMILIARITY_BEFORE = (
    "identity", "temperature", "platt", "isotonic", "beta", "histogram", "spline", "scaling_binning",
    "centered_isotonic", "venn_abers", "bbq", "quadratic", "gaussian", "gamma",
)

#: Lists of method names that are settings or a paper's protocol, not facts about a method: the paper
#: reproductions name the methods their paper compares; the monitor's challenger defaults are its own
#: setting (``monitor.methods`` in params.yaml).
ALLOWED = {("config.py", "MonitorConfig")}
ALLOWED_DIRS = {"experiments"}


def test_derived_lists_equal_the_registry_and_the_old_lists():
    from calibflow import segments, selection
    from calibflow.aggregate import fit as agg_fit
    from calibflow.cli import scale as cli_scale
    from calibflow.pipeline import _common, params_schema
    from calibflow.report import data, glossary

    assert params_schema.DEFAULT_METHODS == DEFAULT_BEFORE == C.default_methods()
    assert frozenset(C.available("extra")) == _common.SPECIAL_METHODS
    assert segments.SEGMENTED_METHODS == ("partial_pooling", "multicalibration")
    assert segments.DEFAULT_SEGMENTED_METHODS == ("partial_pooling",)  # multicalibration out (issue 36)
    assert set(params_schema.OUT_OF_DEFAULTS) == {"bbq"}
    assert set(C.out_of_defaults()) == {"bbq", "multicalibration"}
    assert selection.FAMILIARITY == FAMILIARITY_BEFORE
    assert set(glossary.METHODS) == set(C.available("scores"))
    assert set(data.RANKING_BASELINES) == {"sigmoid", "minmax"}
    assert set(cli_scale.DEFAULT_METHODS.split(",")) == {
        "platt", "temperature", "beta", "spline", "isotonic", "histogram", "bbq"
    }
    assert set(agg_fit.NEEDS_ROWS) == {"vad", "calem", "angular", "mist"}
    for name in C.available():
        cls = C.get_class(name)
        assert (name in params_schema.DEFAULT_METHODS) == (cls.default_candidate and not cls.needs)
        assert (name in glossary.METHODS) == (cls.glossary is not None)


def test_a_subclass_does_not_inherit_its_parents_facts():
    # quadratic is a GaussianCalibrator and centered_isotonic an IsotonicCalibrator: each states its own
    for name in C.available():
        cls = C.get_class(name)
        for fact in OWN_FACTS:
            assert fact in cls.__dict__, f"{name}: {fact} not its own"
    assert C.get_class("quadratic").familiarity != C.get_class("gaussian").familiarity


def test_a_new_default_class_joins_the_defaults_with_no_list_to_edit(monkeypatch):
    from calibflow.calibrators.base import _REGISTRY, BaseCalibrator
    from calibflow.pipeline import params_schema

    class Fresh(BaseCalibrator):
        default_candidate = True

    C._load_all()
    monkeypatch.setitem(_REGISTRY, "zz_fresh", Fresh)
    Fresh.name = "zz_fresh"
    assert "zz_fresh" in params_schema.DEFAULT_METHODS
    assert "zz_fresh" in params_schema.Calibrate().methods


def _hand_lists(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    owners = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            for child in ast.walk(node):
                owners.setdefault(id(child), node.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            elts = []
        hits = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "," in node.value:
            parts = [x.strip() for x in node.value.split(",")]
            hits = parts if all(x in names for x in parts) else []
        if len(hits) >= 2 and (path.name, owners.get(id(node))) not in ALLOWED:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {hits}")
    return found


def test_no_hand_list_of_method_names_outside_the_registry():
    names = set(C.available())
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).parts
        if rel[0] == "calibrators" or rel[0] in ALLOWED_DIRS:
            continue
        found += _hand_lists(path, names)
    assert not found, "method names listed by hand (declare a class fact instead):\n" + "\n".join(found)


def test_the_scan_finds_a_hand_list(tmp_path):
    f = tmp_path / "x.py"
    f.write_text('DEFAULTS = ("platt", "isotonic")\nS = "platt,beta"\n')
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert len(_hand_lists(f, set(C.available()))) == 2
    finally:
        ROOT = old


# ---- constructor bounds: declared by the class, checked in one place ----------------------------------


def test_every_numeric_constructor_argument_has_a_bound():
    import inspect

    for name in C.available():
        cls = C.get_class(name)
        for key, p in inspect.signature(cls.__init__).parameters.items():
            if isinstance(p.default, bool) or key in ("self", "input"):
                continue
            if isinstance(p.default, int | float):
                assert key in cls._bounds, f"{name}.{key} has no Bound"


@pytest.mark.parametrize(
    "method,key,bad",
    [
        ("histogram", "n_bins", -3),
        ("histogram", "n_bins", 100_000_000),
        ("scaling_binning", "n_bins", -1),
        ("scaling_binning", "n_bins", 2.5),
        ("bbq", "C", float("nan")),
        ("spline", "n_splines", True),
        ("multicalibration", "learning_rate", 0),
        ("partial_pooling", "alpha", float("inf")),
        ("vad", "clip", 0.7),
    ],
)
def test_make_and_fit_refuse_an_out_of_range_argument(method, key, bad):
    with pytest.raises(ValueError, match=key):
        C.make(method, **{key: bad})
    cal = C.get_class(method)()
    setattr(cal, key, bad)  # scikit-learn's set_params path: checked again at fit
    with pytest.raises(ValueError, match=key):
        if cal.needs:
            cal._check_bounds()
        else:
            cal.fit([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])


def test_a_payload_with_an_out_of_range_argument_is_refused():
    import json

    cal = C.make("histogram", n_bins=3).fit([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1])
    payload = json.loads(cal.to_json())
    payload["params"]["n_bins"] = -3
    with pytest.raises(ValueError, match="n_bins"):
        C.from_json(json.dumps(payload))


def test_bound_text_and_memory_estimate():
    b = Bound("int", ge=1, le=10)
    assert b.text() == "an integer >= 1 and <= 10"
    cls = C.get_class("histogram")
    assert C.memory_estimate(cls, {"n_bins": 1_000_000}) >= 80e6  # 1e7 bins took 817 MB in issue 39
    check_bounds(cls, {"n_bins": 10})
