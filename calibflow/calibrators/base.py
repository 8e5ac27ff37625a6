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

from calibflow._validation import as_1d_float, check_labels, check_scores, check_weights
from calibflow.calibrators._logistic import label_weights

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


class LikelihoodCalibrator(BaseCalibrator):
    """A parametric likelihood calibrator fitted by the shared two-weight log loss (``fit_logistic``).

    Besides ``fit(scores, y, sample_weight)`` it offers ``fit_two_weight(scores, a, b, theta0)``: the
    fit that minimises ``-sum_i [a_i log g(s_i) + b_i log(1 - g(s_i))]`` (plus the method's penalty)
    with a per-sample weight ``a_i`` on the positive and ``b_i`` on the negative term (issue 2). The
    ordinary weighted fit *is* this fit with ``a = w y``, ``b = w (1 - y)``; so is a fit on stacked
    rows (one label-1 row of weight ``a_i`` and one label-0 row of weight ``b_i`` per sample), with
    half the rows. Callers: UERM (``b = 1 - Y/propensity``, may be negative) and CalEM's M-step.

    Subclass contract (in addition to ``BaseCalibrator``'s):
    - ``_fit_ab(s, a, b, theta0)`` on converted scores; ``theta0`` (or None) is a start in the
      coordinates of ``params_``.
    - ``params_``: the fitted parameter vector; ``_n_params()`` its length before fitting.
    - ``negative_terms``: True when ``b`` may hold negative entries (``a`` never may).
    """

    negative_terms: ClassVar[bool] = True

    def fit_two_weight(
        self,
        scores: ArrayLike,
        a: ArrayLike,
        b: ArrayLike,
        theta0: ArrayLike | None = None,
        design_cache: dict | None = None,
    ) -> LikelihoodCalibrator:
        """Fit with positive-term weights ``a`` and negative-term weights ``b`` (one of each per score).

        ``theta0`` starts the solver (same optimum, fewer Newton passes when it is close); it is in the
        coordinates of ``params_`` of a fit on the same scores (for ``spline`` the knots depend on
        the range of the scores with positive weight).

        ``design_cache``: for repeated fits on the *same* scores with changing weights (CalEM's
        M-steps), a dict the caller creates empty and passes to every such fit; the calibrator keeps
        in it what depends only on the scores (``spline``: the B-spline design matrix), so it is built
        once. Never share one dict between different scores.
        """
        s = check_scores(scores, self.input)
        aa = check_weights(a, s.size, "a")  # >= 0 with a positive sum: the fit needs observed positives
        bb = check_weights(b, s.size, "b", allow_negative=True)
        if not self.negative_terms and (bb < 0).any():
            raise ValueError(
                f"b has {int((bb < 0).sum())} negative value(s); {self.name} needs negative-term weights >= 0"
            )
        if bb.sum() <= 0:
            # Along the intercept alone the risk then falls without bound. Under UERM (b = 1 - Y/propensity)
            # this means the inverse-propensity preference rate mean(Y/propensity) is >= 1.
            raise ValueError(
                f"b sums to {bb.sum():g}: negative-term weights sum to <= 0, so no curve fits (UERM: "
                "mean Y/propensity >= 1; the propensities are too small for these labels, or raise "
                "propensity_floor)"
            )
        start = None
        if theta0 is not None:
            start = as_1d_float(theta0, "theta0")
            if start.size != self._n_params():
                raise ValueError(f"theta0 must have {self._n_params()} values (params_), got {start.size}")
        self._design_cache = design_cache
        try:
            self._fit_ab(self._convert(s), aa, bb, start)
        finally:
            del self._design_cache  # the cache belongs to the caller, never to the fitted state
        self.fitted_ = True
        return self

    def _fit(self, s: NDArray[np.float64], y: NDArray[np.float64], w: NDArray[np.float64]) -> None:
        self._fit_ab(s, *label_weights(y, w), None)

    def _fit_ab(
        self,
        s: NDArray[np.float64],
        a: NDArray[np.float64],
        b: NDArray[np.float64],
        theta0: NDArray[np.float64] | None,
    ) -> None:
        raise NotImplementedError

    def _cached(self, key: tuple, build):
        """``build()``, or its value from the caller's ``design_cache`` under ``key`` (see fit_two_weight)."""
        cache = getattr(self, "_design_cache", None)
        if cache is None:
            return build()
        key = (self.name, *key)
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def _n_params(self) -> int:
        raise NotImplementedError


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
