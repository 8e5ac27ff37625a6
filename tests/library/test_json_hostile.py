"""Hostile or malformed calibrator JSON: ValueError, bounded memory, declared fields only."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calibflow import calibrators as C


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    s = rng.normal(0, 2, 3000)
    y = (rng.random(3000) < 1 / (1 + np.exp(-s))).astype(float)
    return {m: json.loads(C.make(m).fit(s, y).to_json()) for m in C.available("scores")}


def _load(payload) -> None:
    C.from_json(payload if isinstance(payload, str | bytes) else json.dumps(payload))


def test_the_119_byte_payload_does_not_allocate():
    text = (
        '{"schema":1,"method":"isotonic","params":{},"state":{"x_":{"__ndarray__":[0],'
        '"dtype":"(100000000,)f8"},"y_":[0]}}'
    )
    assert len(text) <= 119
    tracemalloc.start()
    with pytest.raises(ValueError, match="dtype must be one of"):
        C.from_json(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5 * 2**20  # was 800 MB


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        "1",
        "null",
        '"platt"',
        "[" * 100_000 + "]" * 100_000,  # RecursionError inside json
        b"\xff\xfe",
        '{"schema": true, "method": "platt", "params": {}, "state": {}}',
        '{"schema": "1", "method": "platt", "params": {}, "state": {}}',
        '{"schema": 1, "method": 5, "params": {}, "state": {}}',
        '{"schema": 1, "method": "nope", "params": {}, "state": {}}',
        '{"schema": 1, "method": "platt", "params": [], "state": {}}',
        '{"schema": 1, "method": "platt", "params": {}, "state": []}',
        '{"schema": 1, "method": "platt", "params": {"self": 1}, "state": {}}',
        '{"schema": 1, "method": "platt", "params": {"input": "x"}, "state": {"coef_": 1, "intercept_": 0}}',
        '{"schema": 1, "method": "platt", "params": {"input": []}, "state": {"coef_": 1, "intercept_": 0}}',
        '{"schema": 1, "method": "platt", "params": {}, "state": {}, "extra": 1}',
    ],
)
def test_malformed_payloads_raise_value_error(text):
    with pytest.raises(ValueError):
        C.from_json(text)


def test_non_text_is_refused():
    for bad in (None, 3, {"schema": 1}):
        with pytest.raises(ValueError, match="str or bytes"):
            C.from_json(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["_predict", "__dict__", "fitted_", "__class__", "predict"])
def test_state_cannot_set_undeclared_attributes(field, fitted):
    payload = json.loads(json.dumps(fitted["platt"]))
    payload["state"][field] = {"x": 1}
    with pytest.raises(ValueError, match="undeclared field"):
        _load(payload)


def test_empty_or_partial_state_is_not_fitted(fitted):
    for name, payload in fitted.items():
        if not C.get_class(name)._state_fields:
            continue  # sigmoid: nothing is fitted, an empty state is its whole state
        empty = dict(payload, state={})
        with pytest.raises(ValueError, match="empty state"):
            _load(empty)
        partial = dict(payload, state=dict(list(payload["state"].items())[:-1]))
        with pytest.raises(ValueError, match="missing|empty state"):
            _load(partial)
    assert C.from_json(json.dumps(fitted["sigmoid"])).predict([0.0])[0] == 0.5


def _with_state(payload, **state):
    out = json.loads(json.dumps(payload))
    out["state"].update(state)
    return out


def _arr(values, dtype="float64"):
    return {"__ndarray__": values, "dtype": dtype}


@pytest.mark.parametrize(
    "method, state, match",
    [
        ("isotonic", {"x_": _arr([[0.0, 1.0]])}, "1-D float64"),
        ("isotonic", {"x_": _arr([0.0, 1.0, 2.0])}, "does not predict"),  # y_ has another length
        ("isotonic", {"x_": _arr([0, 1], "int64")}, "1-D float64"),
        ("isotonic", {"x_": _arr([0.0, 1.0], "object")}, "dtype must be one of"),
        ("isotonic", {"x_": _arr([0.0, 1.0], "complex128")}, "dtype must be one of"),
        ("isotonic", {"x_": _arr(["a", "b"])}, "does not fit dtype"),
        ("isotonic", {"x_": _arr([[0.0], [1.0, 2.0]])}, "regular"),
        ("isotonic", {"x_": _arr([[[0.0]]])}, "at most 2 dimensions"),
        ("isotonic", {"x_": {"__ndarray__": [0.0], "dtype": "float64", "x": 1}}, "exactly the keys"),
        ("isotonic", {"x_": {"__ndarray__": 5, "dtype": "float64"}}, "must be a list"),
        ("bbq", {"bins_grid_": _arr([1.5], "int64")}, "does not fit dtype int64"),
        ("beta", {"coef_": 1.0}, "1-D float64"),
        ("platt", {"coef_": "1"}, "expected a number"),
        ("platt", {"coef_": True}, "expected a number"),
        ("platt", {"coef_": float("nan")}, "does not predict"),  # predict would be NaN
        ("histogram", {"bin_value_": _arr([0.5])}, "does not predict"),  # too few bins for the edges
        ("gaussian", {"regularised_": 1}, "expected a bool"),
        ("platt", {"coef_": {"__calibrator__": {"schema": 1}}}, "schema|method"),
        ("platt", {"coef_": json.loads("[" * 20 + "1" + "]" * 20)}, "nested deeper"),
    ],
)
def test_state_of_the_wrong_type_shape_or_dtype(method, state, match, fitted):
    with pytest.raises(ValueError, match=match):
        _load(_with_state(fitted[method], **state))


def test_nested_calibrators_are_bounded(fitted):
    inner = fitted["platt"]
    for _ in range(30):  # calibrators nested inside calibrator params
        inner = {
            "schema": 1,
            "method": "calem",
            "params": {"base": "platt"},
            "state": {"base_": {"__calibrator__": inner}},
        }
    with pytest.raises(ValueError):
        _load(inner)


def test_valid_payloads_still_load(fitted):
    s = np.linspace(-3, 3, 11)
    for name, payload in fitted.items():
        again = C.from_json(json.dumps(payload))
        assert again.__sklearn_is_fitted__() and np.isfinite(again.predict(s)).all(), name


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(["schema", "method", "params", "state", "__ndarray__", "dtype", "__calibrator__"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    method=st.sampled_from(["platt", "isotonic", "bbq", "beta", "spline", "gamma", "histogram", "calem"]),
    where=st.sampled_from(["params", "state", "top"]),
    key=KEYS | st.text(max_size=10),
    value=json_values,
)
def test_fuzzed_payloads_raise_only_value_error(method, where, key, value, fitted):
    payload = json.loads(json.dumps(fitted.get(method, fitted["platt"])))
    if method == "calem":
        payload["method"] = "calem"
    if where == "top":
        payload[key] = value
    else:
        target = payload[where]
        field = key if not target or key.endswith("_") else sorted(target)[len(key) % len(target)]
        target[field] = value
    try:
        cal = C.from_json(json.dumps(payload))
    except ValueError:
        return
    if not cal.needs:  # what loads, works
        probe = np.linspace(0, 1, 5) if cal.input == "probability" else np.linspace(-2, 2, 5)
        assert np.isfinite(cal.predict(probe)).all()
