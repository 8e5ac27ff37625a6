"""Calibrator registry: ``available()``, ``make(name, **params)``, ``from_json(text)``.

Each method lives in its own submodule and registers itself with ``@register("name")``. The
registry imports every submodule of this package on first use, so adding a method means adding
a module, with no central list to edit.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
from typing import Any

from calibflow.calibrators.base import (
    _REGISTRY,
    BaseCalibrator,
    Bound,
    check_bounds,
    from_payload,
    memory_estimate,
    register,
)

__all__ = [
    "BaseCalibrator",
    "Bound",
    "available",
    "check_bounds",
    "default_methods",
    "familiarity",
    "from_json",
    "get_class",
    "glossary",
    "make",
    "memory_estimate",
    "needs_rows",
    "ranking_baselines",
    "register",
    "scale_default_methods",
    "segmented_methods",
]
_loaded = False


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_") and mod.name != "base":
            importlib.import_module(f"{__name__}.{mod.name}")
    _loaded = True


KINDS = ("all", "scores", "extra")


def available(kind: str = "all") -> list[str]:
    """Names of the registered calibration methods, sorted.

    ``kind="all"`` (the default, as before): every method. ``"scores"``: the methods that
    ``fit(scores, y, sample_weight)`` on one score column (usable in ``calibflow.sklearn_api``).
    ``"extra"``: the methods whose ``fit`` needs more inputs (their class's ``needs``: a design
    matrix, a biased set, an uncertainty, replica predictions).
    """
    _load_all()
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if kind == "all":
        return sorted(_REGISTRY)
    return sorted(n for n, c in _REGISTRY.items() if bool(c.needs) == (kind == "extra"))


# ---- lists derived from the facts each class declares (see BaseCalibrator's docstring) -------------


def default_methods() -> tuple[str, ...]:
    """The pipeline's default ``calibrate.methods``: the (score, label) methods marked default candidates."""
    return tuple(n for n in available("scores") if _REGISTRY[n].default_candidate)


def segmented_methods() -> tuple[str, ...]:
    """The methods fitted per segment (``"segments"`` in ``needs``), in order."""
    names = [n for n in available() if "segments" in _REGISTRY[n].needs]
    return tuple(sorted(names, key=lambda n: (_REGISTRY[n].list_order, n)))


def default_segmented_methods() -> tuple[str, ...]:
    """The segmented methods fitted unless ``calibrate.segmented`` says otherwise: the default candidates."""
    return tuple(n for n in segmented_methods() if _REGISTRY[n].default_candidate)


def out_of_defaults(kind: str = "all") -> dict[str, str]:
    """Methods of ``kind`` (as ``available``) kept out of the defaults on measured evidence, with why."""
    return {n: _REGISTRY[n].out_of_defaults for n in available(kind) if _REGISTRY[n].out_of_defaults}


def scale_default_methods() -> tuple[str, ...]:
    """``calibflow scale fit``'s default ``--methods``, the most familiar first."""
    names = [n for n in available() if _REGISTRY[n].scale_default]
    return tuple(sorted(names, key=lambda n: (_rank(n), n)))


def needs_rows() -> dict[str, str]:
    """Methods that cannot be fitted from a score-bucket table, with what they need."""
    _load_all()
    return {n: c.needs_rows for n, c in sorted(_REGISTRY.items()) if c.needs_rows}  # type: ignore[misc]


def familiarity() -> tuple[str, ...]:
    """The selection rule's tie-break order after the parameter count: the best known method first."""
    _load_all()
    return tuple(sorted((n for n, c in _REGISTRY.items() if c.familiarity is not None), key=_rank))


def glossary() -> dict[str, tuple[str, str]]:
    """method -> (what it does in one line, the reference), familiar methods first."""
    _load_all()
    order = sorted(_REGISTRY, key=lambda n: (_rank(n), n))
    return {n: _REGISTRY[n].glossary for n in order if _REGISTRY[n].glossary}  # type: ignore[misc]


def ranking_baselines() -> dict[str, str]:
    """The ranking paper's uncalibrated baselines and the report's note on each."""
    _load_all()
    return {n: c.baseline_note for n, c in sorted(_REGISTRY.items()) if c.baseline_note}  # type: ignore[misc]


def _rank(name: str) -> int:
    rank = _REGISTRY[name].familiarity
    return 10**6 if rank is None else rank


def get_class(name: str) -> type[BaseCalibrator]:
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"unknown calibrator {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def make(name: str, **params: Any) -> BaseCalibrator:
    """Build the calibrator registered as ``name`` with ``params`` (an unknown param is an error)."""
    cls = get_class(name)
    try:
        cal = cls(**params)
    except TypeError as exc:
        raise ValueError(f"invalid parameters for calibrator {name!r}: {exc}") from exc
    check_bounds(cls, cal.get_params(deep=False))
    return cal


MAX_JSON_BYTES = 256 * 2**20  # a fitted calibrator is kilobytes; this bounds what a payload can allocate


def from_json(text: str | bytes) -> BaseCalibrator:
    """Rebuild a fitted calibrator from the text written by its ``to_json()``.

    Any malformed or hostile payload raises ``ValueError`` (see ``base.from_payload`` for the rules);
    memory stays proportional to the payload's length (at most ``MAX_JSON_BYTES``).
    """
    _load_all()
    if not isinstance(text, str | bytes | bytearray):
        raise ValueError(f"calibrator JSON must be str or bytes, got {type(text).__name__}")
    if len(text) > MAX_JSON_BYTES:
        raise ValueError(f"calibrator JSON is {len(text)} bytes, more than the {MAX_JSON_BYTES} allowed")
    try:
        payload = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"calibrator JSON is not valid JSON: {str(exc)[:200]}") from None
    try:
        return from_payload(payload)
    except ValueError:
        raise
    except (
        TypeError,
        AttributeError,
        KeyError,
        IndexError,
        RecursionError,
        OverflowError,
        MemoryError,
    ) as exc:
        # the explicit checks should catch everything first; this keeps the promise if one is missed
        raise ValueError(
            f"calibrator JSON payload is malformed ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
