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
import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import expit, logit

from calibflow._validation import (
    AUTO,
    INPUT_KINDS,
    SCORE_KINDS,
    as_1d_float,
    check_labels,
    check_scores,
    check_weighted_classes,
    check_weights,
    resolve_input,
)
from calibflow.calibrators._logistic import label_weights

SCHEMA_VERSION = 1
DEFAULT_INPUT = "auto"  # the one default of ``input`` for every fit(scores, y) calibrator (resolve_input)
#: The default of the methods that take more inputs than (scores, y): told explicitly, never guessed.
EXTRA_DEFAULT_INPUT = "score"
_EPS = 1e-12
_REGISTRY: dict[str, type[BaseCalibrator]] = {}
# SCORE_KINDS (calibflow._validation): the scale of the user's own score column, recorded in a saved
# calibrator so that whoever applies it converts the same way it was fitted
# (calibflow.sources.calibrate_scores); ``input`` is the calibrator's own side.


@dataclass(frozen=True)
class Bound:
    """The range of one numeric constructor argument: the one source of the schema's and the fit's checks.

    ``kind`` "int" or "float"; ``ge``/``gt``/``le``/``lt`` the limits (None: open); ``bytes_each``: memory
    the fit needs per unit of the value (a histogram's arrays per bin), for the estimate against the
    machine's memory (``memory_estimate``).
    """

    kind: str  # "int", "float" or "choice" (one of ``choices``)
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    bytes_each: float = 0.0
    choices: tuple[str, ...] = ()

    def text(self) -> str:
        if self.kind == "choice":
            return f"one of {', '.join(self.choices)}"
        limits = ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
        parts = [f"{op} {v:g}" for op, v in limits if v is not None]
        what = "an integer" if self.kind == "int" else "a finite number"
        return f"{what} {' and '.join(parts)}".strip()

    def ok(self, value: Any) -> bool:
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if isinstance(value, bool):
            return False
        if self.kind == "int" and not isinstance(value, int | np.integer):
            return False
        if not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
            return False
        v = float(value)
        return not (
            (self.ge is not None and v < self.ge)
            or (self.gt is not None and v <= self.gt)
            or (self.le is not None and v > self.le)
            or (self.lt is not None and v >= self.lt)
        )


def check_bounds(cls: type[BaseCalibrator], params: dict[str, Any]) -> None:
    """Every numeric constructor argument in ``params`` within its class's ``_bounds``; a ``ValueError``
    naming the argument, the range and the value (the one place these ranges are checked)."""
    for key, bound in cls._bounds.items():
        if key in params and not bound.ok(params[key]):
            raise ValueError(f"{cls.name}: {key} must be {bound.text()}, got {str(params[key])[:40]!r}")


def memory_estimate(cls: type[BaseCalibrator], params: dict[str, Any]) -> float:
    """Bytes the fit needs for its size arguments (``Bound.bytes_each`` times the value); 0 when none."""
    total = 0.0
    for key, bound in cls._bounds.items():
        value = params.get(key)
        if bound.bytes_each and isinstance(value, numbers.Real) and not isinstance(value, bool):
            total += bound.bytes_each * max(float(value), 0.0)
    return total


@dataclass(frozen=True)
class StateChecks:
    """What a fitted state read from a file must hold (``calibflow.calibrator_file.check``): knot fields
    sorted (``strict``: increasing), entries that are probabilities, values a monotone map never lowers, and
    lengths that match (``(a, b, extra)``: ``len(a) == len(b) + extra``)."""

    sorted: tuple[str, ...] = ()
    strict: tuple[str, ...] = ()
    probabilities: tuple[str, ...] = ()
    monotone: tuple[str, ...] = ()
    lengths: tuple[tuple[str, str, int], ...] = ()


#: Facts a registered class declares for itself (never inherited from a registered parent); ``_bounds``
#: and ``needs`` are inherited, as a subclass takes its parent's arguments and inputs.
OWN_FACTS = ("default_candidate", "out_of_defaults", "scale_default", "needs_rows", "familiarity", "glossary",
             "baseline_note", "list_order")


def register(name: str):
    """Class decorator: add a calibrator class to the registry under ``name``."""

    def deco(cls: type[BaseCalibrator]) -> type[BaseCalibrator]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"calibrator name {name!r} registered twice")
        cls.name = name
        for fact in OWN_FACTS:  # a subclass states its own facts: quadratic is not gaussian's default
            if fact not in cls.__dict__:
                setattr(cls, fact, getattr(BaseCalibrator, fact))
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


def not_fitted(message: str) -> Exception:
    """scikit-learn's ``NotFittedError`` (a ``ValueError``) with ``message``, imported when raised."""
    from sklearn.exceptions import NotFittedError

    return NotFittedError(message)


class BaseCalibrator:
    """Base class: public ``fit``/``predict`` validate, subclasses implement ``_fit``/``_predict``.

    A scikit-learn estimator by its protocol, not by inheritance: ``get_params(deep)``, ``set_params`` and
    ``__sklearn_tags__`` behave as ``sklearn.base.BaseEstimator``'s (``clone`` and
    ``check_estimator`` work on them), and scikit-learn is imported only when one of them (or a fit that
    needs it) runs. Importing the calibrators, as the params check does for each class's ``_bounds``,
    stays light: no scikit-learn, numba or xgboost (tests/pipeline/test_params_check_imports.py).
    Fitted attributes end in ``_`` and ``predict`` before ``fit`` raises
    ``sklearn.exceptions.NotFittedError`` (a ``ValueError``). ``X`` may be 1-D or one column ``(n, 1)``:
    a calibrator maps one score to one probability.

    Subclass contract:
    - ``expects``: "logit", "probability" or "any" (see the module docstring).
    - ``monotone``: True when the fitted map never reverses the ranking of two scores.
    - ``negative_weights``: True when ``sample_weight`` may hold negative entries.
    - ``_state_fields``: names of fitted attributes saved by ``to_json`` (arrays become lists).
    - ``_state_spec``: optional ``{field: (kind, ndim)}`` (kind "f" float64, "i" int64, "b" bool,
      "s" str; ndim 0 scalar or 1 vector) that ``from_json`` enforces on a payload's state.
    - ``needs``: the inputs ``fit`` needs besides ``(scores, y, sample_weight)``; empty for the
      methods that ``fit(scores, y)`` (``available("scores")``).
    - ``__init__`` stores each keyword argument under the same attribute name (scikit-learn style),
      so ``get_params`` and JSON round-trips need no per-class code.

    Facts the lists elsewhere are derived from (``calibflow.calibrators.facts``), declared by each class:
    - ``_bounds``: ``{param: Bound}``, the range of each numeric constructor argument, checked by
      ``check_bounds`` in ``make``, at ``fit`` and when a payload is read, and by the params schema.
    - ``default_candidate``: in the pipeline's default ``calibrate.methods`` (or, with ``needs`` holding
      ``"segments"``, in the default ``calibrate.segmented``).
    - ``out_of_defaults``: why a method a user would expect among the defaults is not a default candidate
      (measured against its peer; it still fits when named). None for the rest.
    - ``scale_default``: in ``calibflow scale fit``'s default ``--methods`` (cheap on score tables).
    - ``needs_rows``: why the method cannot be fitted from a score-bucket table (None: it can).
    - ``familiarity``: the tie-break rank of the selection rule (smaller: better known; None: last).
    - ``glossary``: ``(what it does in one line, the reference)`` for the report.
    - ``baseline_note``: set for the ranking paper's uncalibrated baselines (the report's note on them).
    - ``list_order``: the order among methods of one kind where the name alone does not give it.
    """

    name: ClassVar[str] = "base"
    expects: ClassVar[str] = "logit"
    monotone: ClassVar[bool] = True
    negative_weights: ClassVar[bool] = False
    _state_fields: ClassVar[tuple[str, ...]] = ()
    _state_spec: ClassVar[dict[str, tuple[str, int]]] = {}
    _state_checks: ClassVar[StateChecks] = StateChecks()
    needs: ClassVar[tuple[str, ...]] = ()
    _bounds: ClassVar[dict[str, Bound]] = {}
    default_candidate: ClassVar[bool] = False
    out_of_defaults: ClassVar[str | None] = None
    scale_default: ClassVar[bool] = False
    needs_rows: ClassVar[str | None] = None
    familiarity: ClassVar[int | None] = None
    glossary: ClassVar[tuple[str, str] | None] = None
    baseline_note: ClassVar[str | None] = None
    list_order: ClassVar[int] = 0

    def __init__(self, input: str = DEFAULT_INPUT) -> None:
        self.input = input

    # ---- public API -------------------------------------------------------------------------
    def fit(self, scores: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> BaseCalibrator:
        s, yy, w = self._validate_fit(scores, y, sample_weight)
        self._fit(self._convert(s), yy, w)
        self.fitted_ = True
        return self

    @property
    def input_kind(self) -> str:
        """The input kind in effect: ``input``, or for "auto" what ``fit`` read from the scores."""
        if self.input != AUTO:
            return self.input
        kind = getattr(self, "input_", None)
        if kind is None:
            raise not_fitted(f"{type(self).__name__}: input='auto' is decided by fit; call fit first")
        return kind

    def predict(self, scores: ArrayLike) -> NDArray[np.float64]:
        """Calibrated probabilities in [0, 1] for ``scores`` of the declared input kind."""
        self._check_fitted()
        s = check_scores(scores, self.input_kind)
        return check_finite_output(np.clip(self._predict(self._convert(s)), 0.0, 1.0), self.name)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """scikit-learn's ``get_params``; params not stored (older payloads) are left out, as before."""
        sig = inspect.signature(type(self).__init__)
        names = [k for k in sig.parameters if k != "self" and hasattr(self, k)]
        out = {k: getattr(self, k) for k in names}
        if deep:
            for k, v in list(out.items()):
                if hasattr(v, "get_params") and not isinstance(v, type):
                    out.update({f"{k}__{kk}": vv for kk, vv in v.get_params(deep=True).items()})
        return out

    @property
    def n_features_in_(self) -> int:
        """One score column (scikit-learn's fitted attribute; absent before ``fit``)."""
        if not self.__sklearn_is_fitted__():
            raise AttributeError(f"{type(self).__name__} is not fitted: no n_features_in_ yet")
        return 1

    def __sklearn_is_fitted__(self) -> bool:
        return bool(getattr(self, "fitted_", False))

    @classmethod
    def _get_param_names(cls) -> list[str]:
        """The constructor's argument names, sorted (``BaseEstimator._get_param_names``)."""
        sig = inspect.signature(cls.__init__)
        return sorted(k for k, p in sig.parameters.items() if k != "self" and p.kind != p.VAR_KEYWORD)

    def set_params(self, **params: Any) -> BaseCalibrator:
        """scikit-learn's ``set_params`` (nested ``a__b`` keys too)."""
        from sklearn.base import BaseEstimator

        return BaseEstimator.set_params(self, **params)  # type: ignore[arg-type]

    def __sklearn_tags__(self):
        from sklearn.base import BaseEstimator

        tags = BaseEstimator.__sklearn_tags__(self)  # type: ignore[arg-type]
        tags.target_tags.required = True  # y in {0, 1}; binary only
        tags.input_tags.one_d_array = True  # scores may be 1-D, or one column (n, 1)
        tags.input_tags.allow_nan = False
        return tags

    def to_json(self) -> str:
        self._check_fitted()
        state = {k: _to_jsonable(getattr(self, k)) for k in self._state_fields}
        params = self.get_params(deep=False)
        payload = {"schema": SCHEMA_VERSION, "method": self.name, "params": params, "state": state}
        if getattr(self, "input", None) == AUTO:  # the kind fit decided: a reloaded map reads the same scale
            payload["input_kind"] = self.input_kind
        kind = getattr(self, "score_kind_", None)
        if kind is not None:
            payload["score_kind"] = kind
        column = getattr(self, "score_column_", None)
        if column is not None:  # the user's score column: `calibflow apply` reads it when --score is left out
            payload["score_column"] = column
        return json.dumps(payload, default=_to_jsonable)

    # ---- helpers for subclasses -------------------------------------------------------------
    def _check_bounds(self) -> None:
        check_bounds(type(self), self.get_params(deep=False))

    def _validate_fit(self, scores, y, sample_weight):
        self._check_bounds()
        s = check_scores(scores, self.input)
        self.input_ = resolve_input(s, self.input)
        yy = check_labels(y, n=s.size)
        w = check_weights(sample_weight, s.size, allow_negative=self.negative_weights)
        if not self.negative_weights:
            check_weighted_classes(yy, w)
        return s, yy, w

    def _convert(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        if self.expects == "logit":
            return to_logit(s, self.input_kind)
        if self.expects == "probability":
            return to_probability(s, self.input_kind)
        return s

    def _check_fitted(self) -> None:
        if not getattr(self, "fitted_", False):
            raise not_fitted(
                f"{type(self).__name__} ({self.name}) is not fitted: call fit before predict"
            )

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
    with a per-sample weight ``a_i`` on the positive and ``b_i`` on the negative term. The
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
        self._check_bounds()
        s = check_scores(scores, self.input)
        self.input_ = resolve_input(s, self.input)
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


def check_finite_output(p: NDArray[np.float64], name: str) -> NDArray[np.float64]:
    """Refuse to hand out NaN: a fitted map that yields it is broken, and callers would average it away."""
    if not np.isfinite(p).all():
        raise ValueError(
            f"{name} produced {int((~np.isfinite(p)).sum())} non-finite prediction(s); the fitted state is "
            "degenerate (refit on finite scores and weights with a finite total)"
        )
    return p


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


# ---- reading payloads: every check raises ValueError -------------------------------------------
MAX_DEPTH = 16  # nesting of dicts/lists/calibrators in one payload (CalEM -> base is 3 deep)
_DTYPES = {"float64": np.float64, "int64": np.int64, "bool": np.bool_}
_KIND_DTYPE = {"f": "float64", "i": "int64", "b": "bool"}


class PayloadError(ValueError):
    """A calibrator JSON payload that is malformed or not one calibflow wrote."""


def _decode_array(v: dict, where: str) -> NDArray:
    if set(v) != {"__ndarray__", "dtype"}:
        raise PayloadError(f"{where}: an array must have exactly the keys __ndarray__ and dtype")
    dtype = v["dtype"]
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        # only plain dtypes: a dtype string such as "(100000000,)f8" would allocate 800 MB per element
        raise PayloadError(f"{where}: dtype must be one of {sorted(_DTYPES)}, got {str(dtype)[:40]!r}")
    data = v["__ndarray__"]
    if not isinstance(data, list):
        raise PayloadError(f"{where}: __ndarray__ must be a list")
    flat = data if not any(isinstance(x, list) for x in data) else [y for x in data for y in _row(x, where)]
    # checked per distinct element type (a calibrator holds arrays of 10^5 numbers: a check per element was
    # most of loading one), the same rule as each element's isinstance; the first misfit named
    if not all(_fits(t, dtype) for t in set(map(type, flat))):
        bad = next(x for x in flat if not _fits(type(x), dtype))
        raise PayloadError(f"{where}: element {str(bad)[:40]!r} does not fit dtype {dtype}")
    try:
        arr = np.array(data, dtype=_DTYPES[dtype])
    except (ValueError, TypeError, OverflowError) as exc:  # ragged rows, ints beyond int64
        raise PayloadError(f"{where}: not a regular {dtype} array ({exc})") from None
    if arr.ndim > 2:
        raise PayloadError(f"{where}: arrays have at most 2 dimensions, got {arr.ndim}")
    return arr


def _fits(kind: type, dtype: str) -> bool:
    """Whether an element of type ``kind`` fits ``dtype``: bool for bool; int for int64; int or float (not
    bool) for float64."""
    if dtype == "bool":
        return issubclass(kind, bool)
    if issubclass(kind, bool):
        return False
    return issubclass(kind, int) if dtype == "int64" else issubclass(kind, int | float)


def _row(x: Any, where: str) -> list:
    if not isinstance(x, list) or any(isinstance(y, list | dict) for y in x):
        raise PayloadError(f"{where}: arrays have at most 2 dimensions of numbers")
    return x


def _from_jsonable(v: Any, where: str = "payload", depth: int = 0) -> Any:
    if depth > MAX_DEPTH:
        raise PayloadError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(v, dict):
        if "__ndarray__" in v:
            return _decode_array(v, where)
        if "__calibrator__" in v:
            if set(v) != {"__calibrator__"}:
                raise PayloadError(f"{where}: a nested calibrator must have only the key __calibrator__")
            return from_payload(v["__calibrator__"], depth + 1)
        return {str(k): _from_jsonable(x, f"{where}.{k}", depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_from_jsonable(x, f"{where}[]", depth + 1) for x in v]
    if v is None or isinstance(v, str | bool | int | float):
        return v
    raise PayloadError(f"{where}: unexpected value of type {type(v).__name__}")


def _check_spec(cls: type[BaseCalibrator], field: str, value: Any) -> None:
    spec = cls._state_spec.get(field)
    if spec is None:
        return
    kind, ndim = spec
    where = f"state.{field}"
    if ndim == 0:
        ok = {
            "f": isinstance(value, numbers.Real) and not isinstance(value, bool),
            "i": isinstance(value, int) and not isinstance(value, bool),
            "b": isinstance(value, bool),
            "s": isinstance(value, str),
        }[kind]
        if not ok:
            raise PayloadError(
                f"{where}: expected a {dict(f='number', i='integer', b='bool', s='string')[kind]}"
            )
        return
    if not (isinstance(value, np.ndarray) and value.ndim == ndim and value.dtype == _KIND_DTYPE[kind]):
        raise PayloadError(f"{where}: expected a {ndim}-D {_KIND_DTYPE[kind]} array")


def from_payload(payload: Any, depth: int = 0) -> BaseCalibrator:
    """Rebuild a calibrator from a decoded payload; anything malformed raises ``ValueError``.

    Only the class's declared ``__init__`` params and ``_state_fields`` are set (never private or
    dunder attributes); arrays are float64/int64/bool only and bounded by the payload's own size; the
    state must hold every declared field (an empty state is not a fitted calibrator); and a rebuilt
    1-D calibrator must predict finite probabilities on a probe before it is returned.
    """
    if not isinstance(payload, dict):
        raise PayloadError(f"calibrator payload must be a JSON object, got {type(payload).__name__}")
    extra = set(payload) - {"schema", "method", "params", "state", "score_kind", "score_column", "input_kind"}
    if extra:
        raise PayloadError(f"calibrator payload has unknown key(s) {sorted(map(str, extra))[:5]}")
    schema = payload.get("schema")
    if type(schema) is not int or schema != SCHEMA_VERSION:
        raise PayloadError(
            f"unsupported calibrator schema {str(schema)[:40]!r}; this calibflow reads {SCHEMA_VERSION}"
        )
    method = payload.get("method", "")
    cls = _REGISTRY.get(method) if isinstance(method, str) else None
    if cls is None:
        raise PayloadError(f"unknown calibrator method {str(method)[:40]!r} in JSON payload")
    params, state = payload.get("params", {}), payload.get("state", {})
    if not isinstance(params, dict) or not isinstance(state, dict):
        raise PayloadError("calibrator payload: params and state must be JSON objects")
    declared = [k for k in inspect.signature(cls.__init__).parameters if k != "self"]
    unknown = set(params) - set(declared)
    if unknown:
        raise PayloadError(f"{method}: unknown param(s) {sorted(unknown)[:5]}; declared: {declared}")
    try:
        obj = cls(**{k: _from_jsonable(v, f"params.{k}", depth + 1) for k, v in params.items()})
        check_bounds(cls, obj.get_params(deep=False))
    except PayloadError:
        raise
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{method}: invalid params ({exc})") from None
    if state:  # a field added later (``_optional_state``) has its old meaning in files written before it
        state = {**{k: v for k, v in getattr(cls, "_optional_state", {}).items() if k not in state}, **state}
    if set(state) != set(cls._state_fields):
        missing, bad = set(cls._state_fields) - set(state), set(state) - set(cls._state_fields)
        what = "empty state: not a fitted calibrator" if not state else f"missing {sorted(missing)[:5]}"
        if bad:
            what = f"undeclared field(s) {sorted(map(str, bad))[:5]}"
        raise PayloadError(f"{method}: state must hold exactly {list(cls._state_fields)} ({what})")
    for k in cls._state_fields:
        value = _from_jsonable(state[k], f"state.{k}", depth + 1)
        _check_spec(cls, k, value)
        setattr(obj, k, value)
    obj.fitted_ = True
    if getattr(obj, "input", None) == AUTO:
        kind = payload.get("input_kind")
        if kind not in INPUT_KINDS:
            want = "|".join(INPUT_KINDS)
            raise PayloadError(f"input 'auto' needs input_kind, one of {want}, got {str(kind)[:40]!r}")
        obj.input_ = kind
    if "score_kind" in payload:
        kind = payload["score_kind"]
        if kind not in SCORE_KINDS:
            raise PayloadError(f"score_kind must be one of {'|'.join(SCORE_KINDS)}, got {str(kind)[:40]!r}")
        obj.score_kind_ = kind
    if "score_column" in payload:
        column = payload["score_column"]
        if not isinstance(column, str) or not column or len(column) > 1000:
            raise PayloadError("score_column must be a non-empty column name")
        obj.score_column_ = column
    _probe(obj)
    return obj


def _probe(obj: BaseCalibrator) -> None:
    """Predict on a few scores: a state of the wrong shape fails here, with a ValueError."""
    if obj.needs:  # no probe without the extra inputs: a class may check its state's shape instead
        check = getattr(obj, "_check_state", None)
        if check is not None:
            try:
                check()
            except (ValueError, TypeError, AttributeError) as exc:
                raise PayloadError(f"{obj.name}: {exc}") from None
        return
    probe = np.linspace(0.0, 1.0, 7) if obj.input_kind == "probability" else np.linspace(-8.0, 8.0, 7)
    try:
        p = obj.predict(probe)
    except (
        ValueError,
        TypeError,
        IndexError,
        AttributeError,
        KeyError,
        ZeroDivisionError,
        OverflowError,
    ) as exc:
        raise PayloadError(
            f"{obj.name}: the saved state does not predict ({type(exc).__name__}: {exc})"
        ) from None
    if p.shape != probe.shape:
        raise PayloadError(f"{obj.name}: the saved state predicts {p.shape} values for {probe.shape} scores")
