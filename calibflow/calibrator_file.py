"""A calibrator file is untrusted input: bounded before it is parsed, validated after, one line if not.

``read`` checks the size on disk before reading a byte (a 500 MB file is refused without reading it), reads
at most the limit, and parses with the nesting bounded (no RecursionError traceback). ``check`` then
validates the fitted state against what the method's own fit can produce: every number finite, knots and
edges sorted, values that are probabilities in [0, 1], the values of a method declared monotone
non-decreasing, parameters in range. ``calibflow apply`` and ``calibflow export`` both load through
``load``: a file that fails is one line naming the field, and nothing is served.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

#: What a calibrator file may weigh (the same bound ``calibrators.from_json`` enforces on text).
MAX_BYTES = 256 * 2**20
#: Nesting a calibrator file may have (the deepest one written, partial_pooling's blocks, has 4).
MAX_DEPTH = 32


class CalibratorFileError(ValueError):
    """A calibrator file that cannot be served; the message names the file and the field."""


def read(path: Path, max_bytes: int = MAX_BYTES) -> str:
    """The text of ``path``: ``io.read_bounded``'s checks (size on disk before a byte is read, the read
    itself bounded, UTF-8, bracket nesting) as a :class:`CalibratorFileError`."""
    from calibflow.io import read_bounded

    try:
        return read_bounded(path, max_bytes, "a calibrator file")
    except ValueError as exc:
        raise CalibratorFileError(str(exc)) from None


def parse(text: str, where: str = "calibrator file") -> Any:
    """JSON with the nesting bounded: one line for invalid or too deeply nested JSON."""
    try:
        payload = json.loads(text)
    except RecursionError:
        raise CalibratorFileError(
            f"{where}: JSON nested deeper than {MAX_DEPTH} levels; not a calibrator"
        ) from None
    except ValueError as exc:
        why = str(exc)[:120]
        raise CalibratorFileError(f"{where}: not a calibrator file: not valid JSON ({why})") from None
    if _depth(payload) > MAX_DEPTH:
        raise CalibratorFileError(f"{where}: JSON nested deeper than {MAX_DEPTH} levels; not a calibrator")
    return payload


def check_numbers(payload: Any) -> None:
    """Every number in the fitted state finite, checked on the parsed JSON before a calibrator is built
    (``from_json`` tries a prediction: an infinite slope would warn and fail there in more than one line)."""
    state = payload.get("state") if isinstance(payload, dict) else None
    stack = [("", state)] if isinstance(state, dict) else []
    while stack:
        path, node = stack.pop()
        if isinstance(node, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", v) for i, v in enumerate(node))
        elif isinstance(node, float) and not np.isfinite(node):
            field = path.replace(".__ndarray__", "")
            raise CalibratorFileError(
                f"calibrator field state.{field} is {node}, not a finite number; the file is damaged or "
                "edited: refit it"
            )


def _depth(obj: Any) -> int:
    """Nesting depth, iteratively (a recursive walk would itself overflow the stack)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > MAX_DEPTH:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, d + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, d + 1) for v in node)
    return deepest


# ---- the fitted state --------------------------------------------------------------------------------------

#: Rounding slack: a weighted mean may land a few ulps outside [0, 1] or below its neighbour.
_SLACK = 1e-9
#: Bound on a log slope of partial pooling (exp(100) is 2.7e43: no fit gets near it).
_MAX_LOG_SLOPE = 50.0


def _fail(field: str, what: str) -> None:
    raise CalibratorFileError(
        f"calibrator field state.{field} {what}; the file is damaged or edited: refit it"
    )


def _array(cal: Any, name: str) -> np.ndarray:
    try:
        return np.asarray(getattr(cal, name), dtype=np.float64).ravel()
    except (TypeError, ValueError):
        _fail(name, "is not numbers")
    raise AssertionError  # unreachable


def check(cal: Any) -> Any:
    """``cal`` if its fitted state is one its method's fit can produce, else one line naming the field."""
    name = cal.name
    spec = getattr(type(cal), "_state_spec", {})
    for field, (kind, _ndim) in spec.items():
        if kind == "f" and hasattr(cal, field):
            a = _array(cal, field)
            if not np.isfinite(a).all():
                _fail(field, f"holds a non-finite number at entry {int(np.flatnonzero(~np.isfinite(a))[0])}")
    checks = type(cal)._state_checks  # the class's own (calibflow.calibrators.base.StateChecks)
    for field in checks.sorted:
        a = _array(cal, field)
        if a.size == 0:
            _fail(field, "is empty")
        strict = field in checks.strict
        bad = np.flatnonzero(np.diff(a) <= 0 if strict else np.diff(a) < 0)
        if bad.size:
            _fail(
                field, f"is not {'strictly ' if strict else ''}increasing (entry {bad[0] + 1} after {bad[0]})"
            )
    for a_name, b_name, extra in checks.lengths:
        if _array(cal, a_name).size != _array(cal, b_name).size + extra:
            _fail(
                a_name,
                f"has {_array(cal, a_name).size} entries; {b_name} needs {_array(cal, b_name).size + extra}",
            )
    for field in checks.probabilities:
        a = _array(cal, field)
        bad = np.flatnonzero((a < -_SLACK) | (a > 1 + _SLACK))
        if bad.size:
            _fail(field, f"entry {bad[0]} is {a[bad[0]]:g}, not a probability in [0, 1]")
    if getattr(type(cal), "monotone", False):
        for field in checks.monotone:
            bad = np.flatnonzero(np.diff(_array(cal, field)) < -_SLACK)
            if bad.size:
                _fail(field, f"decreases at entry {bad[0] + 1}, but {name} is monotone")
    _check_params(cal)
    return cal


def _check_params(cal: Any) -> None:
    name = cal.name
    if name == "temperature" and not float(cal.temperature_) > 0:
        _fail("temperature_", "is not positive")
    if name == "beta" and (_array(cal, "coef_").size != 2 or (_array(cal, "coef_") < 0).any()):
        _fail("coef_", "must be two numbers >= 0 (beta calibration's a, b)")
    if hasattr(cal, "theta_") and hasattr(cal, "s_max_"):  # a ranking shape map (gaussian and its kin)
        if _array(cal, "theta_").size != 3:
            _fail("theta_", "must hold 3 numbers")
        if not float(cal.s_max_) > float(cal.s_min_):
            _fail("s_max_", "is not above s_min_")
    if name == "minmax" and not float(cal.max_) > float(cal.min_):
        _fail("max_", "is not above min_")
    if name == "spline":
        if not float(cal.hi_) > float(cal.lo_):
            _fail("hi_", "is not above lo_")
        if _array(cal, "coef_").size < 4:
            _fail("coef_", "needs at least 4 B-spline coefficients")
    if name == "partial_pooling":
        _check_partial_pooling(cal)


def _check_partial_pooling(cal: Any) -> None:
    try:
        cal._check_state()
    except ValueError as exc:
        raise CalibratorFileError(str(exc)) from None
    for i, blk in enumerate(cal.blocks_):
        for key in ("offset", "log_slope"):
            a = np.asarray(blk[key], dtype=np.float64)
            if not np.isfinite(a).all():
                _fail(f"blocks_[{i}].{key}", "holds a non-finite number")
            if key == "log_slope" and (np.abs(a) > _MAX_LOG_SLOPE).any():
                _fail(f"blocks_[{i}].{key}", f"holds a log slope beyond +-{_MAX_LOG_SLOPE:g}")
        if len(blk["columns"]) == 2:
            keys = np.asarray(blk.get("keys"), dtype=np.float64)
            if keys.size and (np.diff(keys) <= 0).any():
                _fail(f"blocks_[{i}].keys", "is not strictly increasing")
    if abs(float(cal.global_[1])) > _MAX_LOG_SLOPE:
        _fail("global_", f"log slope beyond +-{_MAX_LOG_SLOPE:g}")


def load_text(text: str, where: str = "calibrator file") -> Any:
    """The calibrator in ``text`` (its ``to_json``), parsed bounded and validated."""
    from calibflow.calibrators import from_json

    check_numbers(parse(text, where))  # bounded nesting, one line (from_json parses again: it is small now)
    try:
        cal = from_json(text)
    except CalibratorFileError:
        raise
    except ValueError as exc:
        raise CalibratorFileError(f"{where}: {exc}") from None
    return check(cal)


def load(path: Path) -> Any:
    """The calibrator in ``path``: size, nesting and fitted state checked (see the module docstring)."""
    return load_text(read(path), str(path))
