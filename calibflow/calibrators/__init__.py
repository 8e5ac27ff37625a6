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

from calibflow.calibrators.base import _REGISTRY, BaseCalibrator, from_payload, register

__all__ = ["BaseCalibrator", "available", "make", "from_json", "get_class", "register"]
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


def get_class(name: str) -> type[BaseCalibrator]:
    _load_all()
    if name not in _REGISTRY:
        raise ValueError(f"unknown calibrator {name!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def make(name: str, **params: Any) -> BaseCalibrator:
    """Build the calibrator registered as ``name`` with ``params`` (an unknown param is an error)."""
    cls = get_class(name)
    try:
        return cls(**params)
    except TypeError as exc:
        raise ValueError(f"invalid parameters for calibrator {name!r}: {exc}") from exc


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
