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


def available() -> list[str]:
    """Names of every registered calibration method, sorted."""
    _load_all()
    return sorted(_REGISTRY)


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


def from_json(text: str) -> BaseCalibrator:
    """Rebuild a fitted calibrator from the text written by its ``to_json()``."""
    _load_all()
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"calibrator JSON is not valid JSON: {exc}") from exc
    return from_payload(payload)
