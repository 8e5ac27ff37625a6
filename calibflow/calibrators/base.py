"""The calibrator contract shared by every method, classic or from the papers.

Modelled on scikit-learn's estimators and probcal's ``BaseCalibrator``: the public ``fit`` and
``predict`` validate at the boundary and convert the declared input kind, subclasses implement
``_fit`` and ``_predict`` on clean float arrays. Fitted state round-trips through JSON (never pickle):
``to_json`` writes ``{"schema", "method", "params", "state"}`` and ``calibflow.calibrators.from_json``
rebuilds the object from it.

Input kinds. A calibrator is told what the caller passes (``input="probability" | "logit" |
"score"``) and declares what it works on internally (``expects``):

- ``expects="logit"``: probabilities are mapped with ``logit(clip(p, 1e-12, 1 - 1e-12))``; logits and
  ranking scores are used as they are (a ranking score is an unbounded real index, like a logit).
- ``expects="probability"``: logits go through the sigmoid; ranking scores too (``sigmoid(s)``), which
  keeps their order; probabilities are used as they are.
- ``expects="any"``: the method only uses the order or the raw value (isotonic, minmax): no conversion.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, logit

from calibflow._validation import INPUT_KINDS, check_labels, check_scores, check_weights

SCHEMA_VERSION = 1
_EPS = 1e-12
_REGISTRY: dict[str, type[BaseCalibrator]] = {}


def register(name: str):
    """Class decorator: add a calibrator class to the registry under ``name``."""

    def deco(cls: type[BaseCalibrator]) -> type[BaseCalibrator]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"calibrator name {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def to_logit(scores: NDArray[np.float64], input: str) -> NDArray[np.float64]:
    if input == "probability":
        return logit(np.clip(scores, _EPS, 1.0 - _EPS))
    return scores


def to_probability(scores: NDArray[np.float64], input: str) -> NDArray[np.float64]:
    if input == "probability":
        return scores
    return expit(scores)


class BaseCalibrator:
    """Base class: public ``fit``/``predict`` validate, subclasses implement ``_fit``/``_predict``.

    Subclass contract:
    - ``expects``: "logit", "probability" or "any" (see the module docstring).
    - ``monotone``: True when the fitted map never reverses the ranking of two scores.
    - ``negative_weights``: True when ``sample_weight`` may hold negative entries.
    - ``_state_fields``: names of fitted attributes saved by ``to_json`` (arrays become lists).
    - ``__init__`` stores each keyword argument under the same attribute name (scikit-learn style),
      so ``get_params`` and JSON round-trips need no per-class code.
    """

    name: ClassVar[str] = "base"
    expects: ClassVar[str] = "logit"
    monotone: ClassVar[bool] = True
    negative_weights: ClassVar[bool] = False
    _state_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, input: str = "score") -> None:
        self.input = input

    # ---- public API -------------------------------------------------------------------------
    def fit(self, scores: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> BaseCalibrator:
        s, yy, w = self._validate_fit(scores, y, sample_weight)
        self._fit(self._convert(s), yy, w)
        self.fitted_ = True
        return self

    def predict(self, scores: ArrayLike) -> NDArray[np.float64]:
        """Calibrated probabilities in [0, 1] for ``scores`` of the declared input kind."""
        self._check_fitted()
        s = check_scores(scores, self.input)
        return np.clip(self._predict(self._convert(s)), 0.0, 1.0)

    def get_params(self) -> dict[str, Any]:
        sig = inspect.signature(type(self).__init__)
        return {k: getattr(self, k) for k in sig.parameters if k != "self" and hasattr(self, k)}

    def to_json(self) -> str:
        self._check_fitted()
        state = {k: _to_jsonable(getattr(self, k)) for k in self._state_fields}
        payload = {"schema": SCHEMA_VERSION, "method": self.name, "params": self.get_params(), "state": state}
        return json.dumps(payload, default=_to_jsonable)

    # ---- helpers for subclasses -------------------------------------------------------------
    def _validate_fit(self, scores, y, sample_weight):
        if self.input not in INPUT_KINDS:
            raise ValueError(f"input must be one of {INPUT_KINDS}, got {self.input!r}")
        s = check_scores(scores, self.input)
        yy = check_labels(y, n=s.size)
        w = check_weights(sample_weight, s.size, allow_negative=self.negative_weights)
        return s, yy, w

    def _convert(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.expects == "logit":
            return to_logit(s, self.input)
        if self.expects == "probability":
            return to_probability(s, self.input)
        return s

    def _check_fitted(self) -> None:
        if not getattr(self, "fitted_", False):
            raise ValueError(f"{type(self).__name__} ({self.name}) is not fitted: call fit before predict")

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        raise NotImplementedError

    def _predict(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


def _to_jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return {"__ndarray__": v.tolist(), "dtype": str(v.dtype)}
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, BaseCalibrator):
        return {"__calibrator__": json.loads(v.to_json())}
    if isinstance(v, dict):
        return {k: _to_jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_to_jsonable(x) for x in v]
    return v


def _from_jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        if "__ndarray__" in v:
            return np.asarray(v["__ndarray__"], dtype=v.get("dtype", "float64"))
        if "__calibrator__" in v:
            return from_payload(v["__calibrator__"])
        return {k: _from_jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_jsonable(x) for x in v]
    return v


def from_payload(payload: dict[str, Any]) -> BaseCalibrator:
    schema = payload.get("schema")
    if schema != SCHEMA_VERSION:
        raise ValueError(f"unsupported calibrator schema {schema!r}; this calibflow reads {SCHEMA_VERSION}")
    cls = _REGISTRY.get(payload.get("method", ""))
    if cls is None:
        raise ValueError(f"unknown calibrator method {payload.get('method')!r} in JSON payload")
    obj = cls(**_from_jsonable(payload.get("params", {})))
    for k, v in payload.get("state", {}).items():
        setattr(obj, k, _from_jsonable(v))
    obj.fitted_ = True
    return obj
