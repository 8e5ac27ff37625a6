"""A fitted calibrator as SQL that gives ``calibflow apply``'s numbers, in the engines teams run.

Three shapes, chosen by the map (``plan``), never by a knob that trades exactness:

- **Closed form** (platt, temperature, beta, quadratic, gaussian, gamma, sigmoid, minmax, identity): one SQL
  expression of the score column, the calibrator's own formula with ``apply``'s input conversion (the user's
  score kind, the calibrator's ``input``, its ``expects``), exact for any slope. Embeddable in any SELECT.
- **Knot table** (isotonic, centered_isotonic, histogram, bbq, scaling_binning, venn_abers, spline): the
  knots as an inline table and a query that finds each row's knot with a window (the largest knot at or
  below the score, carried forward over the sorted union of knots and the distinct scores), then one
  equi-join: O((rows + knots) log) in every engine, the query's size linear in the knots and its nesting
  constant (no CASE growing with the knots).
- **Segmented** (partial_pooling): the global map plus one LEFT JOIN per block of segment parameters, keyed
  by the segment columns read as ``apply`` reads them (text; a NULL is the level ``(null)``); a value never
  seen in fitting joins nothing and adds nothing, exactly as in ``apply``.

Every input ``apply`` refuses or keeps null gives NULL: a NULL or NaN score (``apply --on-null pass``
gives null, the default ``fail`` refuses the run), an infinite score and, for a probability, a score
outside [0, 1] (``apply`` refuses the run). The SQL's header comment says so.

SQL text is written once, in DuckDB's dialect, and translated by SQLGlot to the others; every identifier
and string goes through ``quote``/``string`` (and the result is parsed back: only the names and strings we
put in may appear). Knot rows are plain numbers spliced in after translation (SQLGlot parses 5e4 rows in
tens of seconds; the rows need no translation beyond the row syntax).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DIALECTS = ("duckdb", "postgres", "sqlite", "spark", "bigquery")
DBL_MAX = float(np.finfo(np.float64).max)
#: The sigmoid's argument is clamped here: exp() overflows near 709.8 (PostgreSQL raises an error) and
#: 1/(1+exp(700)) differs from the true sigmoid of anything smaller by less than 1e-300.
Z_CAP = 700.0
#: apply's clips: the user's probability before its logit (metrics.LOG_LOSS_CLIP) and a calibrator's own
#: (calibrators.base._EPS).
USER_CLIP = 1e-15
CAL_CLIP = 1e-12
#: beta's own clip of its probability (calibrators.beta._EPS: machine epsilon).
BETA_CLIP = float(np.finfo(np.float64).eps)
NULL_LEVEL = "(null)"
_PREFIX = "__calibflow"
#: PostgreSQL truncates identifiers at 63 bytes; a longer name would silently address another column.
MAX_NAME_BYTES = 63


class SqlExportError(ValueError):
    """A calibrator or a name that cannot be exported as SQL; the message says why and what to do."""


# ---- quoting: the one place a name or a string enters SQL --------------------------------------------------


def quote(name: str, what: str = "column") -> str:
    """``name`` as a quoted identifier (DuckDB syntax; SQLGlot re-quotes it for the target dialect).

    Refused in one line: an empty name, a control character (no engine quotes a newline or NUL the same
    way), more than 63 bytes (PostgreSQL would truncate it), or our own prefix."""
    if not isinstance(name, str) or not name:
        raise SqlExportError(f"--{what}: an empty name cannot be a SQL identifier")
    bad = [c for c in name if ord(c) < 32 or ord(c) == 127]
    if bad:
        raise SqlExportError(f"--{what} {name!r}: control character {bad[0]!r} cannot be quoted in SQL")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise SqlExportError(
            f"--{what} {name[:20]!r}...: over {MAX_NAME_BYTES} bytes (PostgreSQL truncates it)"
        )
    if name.lower().startswith(_PREFIX):
        raise SqlExportError(f"--{what} {name!r}: names starting with {_PREFIX} are the export's own")
    return '"' + name.replace('"', '""') + '"'


def string(value: str) -> str:
    """A string literal (DuckDB syntax: a quote doubled, no backslash escapes; SQLGlot re-escapes it)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SqlExportError(f"segment value {value!r} holds a control character: it cannot be put in SQL")
    return "'" + value.replace("'", "''") + "'"


def num(v: float) -> str:
    """A double literal every engine reads as a double, round-tripping exactly: the shortest repr with an
    exponent (DuckDB and Spark read ``0.5`` as DECIMAL; Spark refuses a 17-digit 1.79769313486231571e308,
    whose decimal value lies above the largest double, so never more digits than needed)."""
    v = float(v)
    if not math.isfinite(v):
        raise SqlExportError(f"a non-finite number ({v}) cannot be exported")
    r = repr(abs(v))
    r = r if "e" in r else r + "e0"
    return r if v >= 0 else f"(-{r})"


# ---- expression pieces (DuckDB dialect) --------------------------------------------------------------------


def clamp(e: str, lo: float, hi: float) -> str:
    """A CASE, not LEAST/GREATEST: SQLite has neither (SQLGlot's emulation nests too deep for its parser)."""
    return f"(CASE WHEN {e} < {num(lo)} THEN {num(lo)} WHEN {e} > {num(hi)} THEN {num(hi)} ELSE {e} END)"


def sigmoid(z: str, bounded: bool = False) -> str:
    """``1 / (1 + exp(-z))``; ``bounded``: the caller made |z| <= Z_CAP already (no clamp: an engine without
    common-subexpression reuse, SQLite, evaluates a clamped argument up to three times)."""
    return f"(1.0e+00 / (1.0e+00 + EXP(-{z if bounded else clamp(z, -Z_CAP, Z_CAP)})))"


def logit_clipped(p: str, eps: float) -> str:
    """``ln(c) - ln(1 - c)`` of ``c = clip(p, eps, 1 - eps)``: scipy's logit of the clipped value."""
    c = clamp(p, eps, 1.0 - eps)
    return f"(LN({c}) - LN(1.0e+00 - {c}))"


def _bound(width: float) -> float:
    return float(np.clip(width, -1e300, 1e300))


def linear_logit(s: str, a: float, b: float) -> tuple[str, bool]:
    """``a * s + b`` and whether it is bounded by Z_CAP: ``s`` is clamped to where ``|a s + b| <= Z_CAP``
    (beyond, the sigmoid is 1 or below 1e-304: the same answer to 1e-300, and no overflow in any engine)."""
    if a == 0:
        return num(b), abs(b) <= Z_CAP
    if abs(b) < Z_CAP:
        lo, hi = sorted(((-Z_CAP - b) / a, (Z_CAP - b) / a))
        return f"({num(a)} * {clamp(s, _bound(lo), _bound(hi))} + {num(b)})", True
    t = _bound((Z_CAP + 50.0 + abs(b)) / abs(a))
    return f"({num(a)} * {clamp(s, -t, t)} + {num(b)})", False


# ---- the plan: what the calibrator computes, from apply's input --------------------------------------------


@dataclass
class Plan:
    method: str
    input_kind: str  # what the column holds: probability | logit | score
    input_text: str
    key: Callable[[str], str]  # u (the column as DOUBLE) -> the calibrator's internal score
    closed: Callable[[str], str] | None = None  # internal score -> probability
    table: dict[str, Any] | None = None  # columns, rows, value(s, kn) for a knot table
    segments: dict[str, Any] | None = None  # partial pooling
    notes: list[str] = field(default_factory=list)


def _input_chain(cal: Any, score_kind: str | None) -> tuple[str, str, Callable[[str], str]]:
    """What the column holds and ``u -> s``: ``calibrator_input`` then the calibrator's ``_convert``."""
    cal_input, expects = str(cal.input), str(type(cal).expects)
    if score_kind is None:
        kind, text = cal_input, f"the calibrator's input ({cal_input}), as it was fitted"

        def to_x(u: str) -> str:
            return u
    else:
        kind, text = score_kind, f"the user's score ({score_kind}), converted as `calibflow apply` does"

        def to_x(u: str) -> str:
            margin = logit_clipped(u, USER_CLIP) if score_kind == "probability" else u
            prob = u if score_kind == "probability" else sigmoid(u)
            if cal_input == "probability":
                return prob
            if cal_input == "logit":
                return margin
            return u if score_kind != "probability" else margin

    def key(u: str) -> str:
        x = to_x(u)
        if expects == "logit" and cal_input == "probability":
            return logit_clipped(x, CAL_CLIP)
        if expects == "probability" and cal_input != "probability":
            return sigmoid(x)
        return x

    return kind, text, key


def plan(cal: Any, score_kind: str | None = None) -> Plan:
    """The SQL plan of a fitted calibrator (``SqlExportError`` for one with no exact SQL form)."""
    kind, text, key = _input_chain(cal, score_kind)
    name = cal.name
    build = _BUILDERS.get(name)
    if build is None:
        raise SqlExportError(
            f"{name}: no exact SQL form (its map is not a formula, a knot table or segment parameters); "
            "export --format table or onnx, or serve it with `calibflow apply`"
        )
    p = Plan(name, kind, text, key)
    build(cal, p)
    return p


#: The SQL builder of each exportable method, registered beside it (``_builds``); a method without one is
#: refused by ``plan`` in one line, and the export tests run every ``available("scores")`` method.
_BUILDERS: dict[str, Callable[[Any, Plan], None]] = {}


def _builds(*names: str) -> Callable[[Callable[[Any, Plan], None]], Callable[[Any, Plan], None]]:
    def deco(fn: Callable[[Any, Plan], None]) -> Callable[[Any, Plan], None]:
        for n in names:
            _BUILDERS[n] = fn
        return fn

    return deco


@_builds("platt")
def _platt(cal, p: Plan) -> None:
    a, b = float(cal.coef_), float(cal.intercept_)
    p.closed = lambda s: sigmoid(*linear_logit(s, a, b))


@_builds("temperature")
def _temperature(cal, p: Plan) -> None:
    t = float(cal.temperature_)
    w = _bound(Z_CAP * abs(t))  # |s / t| <= Z_CAP
    p.closed = lambda s: sigmoid(f"({clamp(s, -w, w)} / {num(t)})", bounded=Z_CAP * abs(t) < 1e300)


@_builds("sigmoid")
def _sigmoid(cal, p: Plan) -> None:
    p.closed = (lambda s: s) if cal.input == "probability" else sigmoid


@_builds("minmax")
def _minmax(cal, p: Plan) -> None:
    lo, hi = float(cal.min_), float(cal.max_)
    # clipped to [0, 1] by predict: clamping the score to [min, max] first is the same, without overflow
    p.closed = lambda s: f"(({clamp(s, lo, hi)} - {num(lo)}) / ({num(hi)} - {num(lo)}))"


@_builds("identity")
def _identity(cal, p: Plan) -> None:
    p.closed = lambda s: s  # expects a probability: s is one, in [0, 1]


@_builds("beta")
def _beta(cal, p: Plan) -> None:
    a, b = (float(v) for v in cal.coef_)
    c = float(cal.intercept_)

    # |z| <= (a + b) * ln(1 / eps) + |c| on the clipped probability
    bounded = (abs(a) + abs(b)) * -math.log(BETA_CLIP) + abs(c) <= Z_CAP

    def f(s: str) -> str:
        q = clamp(s, BETA_CLIP, 1.0 - BETA_CLIP)
        return sigmoid(f"({num(a)} * LN({q}) + {num(b)} * (-LN(1.0e+00 - {q})) + {num(c)})", bounded)

    p.closed = f


@_builds("gaussian", "quadratic", "gamma")
def _shape(cal, p: Plan) -> None:
    """Gaussian / quadratic / gamma: ``theta . phi(clip(s))`` plus the linear continuation outside."""
    lo, hi = float(cal.s_min_), float(cal.s_max_)
    th = [float(v) for v in cal.theta_]
    gamma = cal.name == "gamma"
    if gamma:
        off = float(cal.offset)

        def feats(x: str) -> tuple[str, str]:
            t = f"(({x} - {num(lo)}) / ({num(hi)} - {num(lo)}) + {num(off)})"
            return f"LN({t})", t
    else:
        m, h = 0.5 * (lo + hi), 0.5 * (hi - lo)

        def feats(x: str) -> tuple[str, str]:
            u = f"(({x} - {num(m)}) / {num(h)})"
            return f"({u} * {u})", u

    z_lo, z_hi = (float(v) for v in cal._logit(np.array([lo, hi])))
    sl, sh = float(cal._slope(lo)), float(cal._slope(hi))

    # the core is monotone on [lo, hi] (its fit's constraints): |core| <= max(|z_lo|, |z_hi|); the
    # continuations are clamped to where |z| stays <= Z_CAP (beyond, the sigmoid has saturated)
    bounded = max(abs(z_lo), abs(z_hi)) < Z_CAP and sl >= 0 and sh >= 0

    def f(s: str) -> str:
        f1, f2 = feats(clamp(s, lo, hi))
        core = f"({num(th[0])} * {f1} + {num(th[1])} * {f2} + {num(th[2])})"
        if bounded:
            wl = _bound((Z_CAP + z_lo) / sl) if sl else 0.0
            wh = _bound((Z_CAP - z_hi) / sh) if sh else 0.0
        else:
            wl = _bound((Z_CAP + 50.0 + abs(z_lo)) / abs(sl)) if sl else 0.0
            wh = _bound((Z_CAP + 50.0 + abs(z_hi)) / abs(sh)) if sh else 0.0
        below = f"{num(sl)} * ({clamp(s, lo - wl, lo)} - {num(lo)})"
        above = f"{num(sh)} * ({clamp(s, hi, hi + wh)} - {num(hi)})"
        ends = f"CASE WHEN {s} < {num(lo)} THEN {below} WHEN {s} > {num(hi)} THEN {above} ELSE 0.0e+00 END"
        z = f"({core} + {ends})"
        return sigmoid(z, bounded)

    p.closed = f


# ---- knot tables -------------------------------------------------------------------------------------------
# Row k: the knot ``x`` (row 0 at -DBL_MAX: below every finite score), ``v_at`` (the value at s == x) and
# the line ``c0 + c1 * (s - x)`` up to the next knot; a B-spline table has its own value (``_spline``).

_LINEAR = ("k", "x", "v_at", "c0", "c1")


def _linear_value(s: str, kn: str) -> str:
    # a flat piece is its constant (no subtraction: a score far from the knot would overflow in PostgreSQL)
    return (
        f"CASE WHEN {s} = {kn}.x THEN {kn}.v_at WHEN {kn}.c1 = 0.0e+00 THEN {kn}.c0 "
        f"ELSE {kn}.c1 * ({s} - {kn}.x) + {kn}.c0 END"
    )


def _table(
    p: Plan,
    x: np.ndarray,
    v_at: np.ndarray,
    c0: np.ndarray,
    c1: np.ndarray,
    key: Callable[[str], str] | None = None,
) -> None:
    rows = np.column_stack([np.arange(x.size), x, v_at, c0, c1])
    p.table = {"columns": _LINEAR, "rows": rows, "value": _linear_value}
    if key is not None:
        p.key = key


@_builds("isotonic", "centered_isotonic")
def _interp(cal, p: Plan) -> None:
    """np.interp(s, x_, y_): flat outside, ``slope * (s - x_j) + y_j`` inside (numpy's own operations)."""
    x, y = np.asarray(cal.x_, float), np.asarray(cal.y_, float)
    slope = np.zeros(x.size)
    if x.size > 1:
        slope[:-1] = (y[1:] - y[:-1]) / (x[1:] - x[:-1])
    _table(p, np.r_[-DBL_MAX, x], np.r_[y[0], y], np.r_[y[0], y], np.r_[0.0, slope])


def _steps(edges: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, ...]:
    """searchsorted(edges, s, 'right') -> values: the count of edges at or below s picks the value."""
    x = np.r_[-DBL_MAX, edges]
    return x, values, values, np.zeros(x.size)


@_builds("histogram")
def _histogram(cal, p: Plan) -> None:
    _table(p, *_steps(np.asarray(cal.edges_, float), np.asarray(cal.bin_value_, float)))


@_builds("bbq")
def _bbq(cal, p: Plan) -> None:
    _table(p, *_steps(np.asarray(cal.edges_, float), np.asarray(cal.values_, float)))


@_builds("scaling_binning")
def _scaling_binning(cal, p: Plan) -> None:
    a, b, inner = float(cal.coef_), float(cal.intercept_), p.key
    _table(
        p,
        *_steps(np.asarray(cal.edges_, float), np.asarray(cal.bin_value_, float)),
        key=lambda u: sigmoid(*linear_logit(inner(u), a, b)),
    )


@_builds("venn_abers")
def _venn_abers(cal, p: Plan) -> None:
    """p1 / (1 - p0 + p1) with (p0, p1) from the last score <= s and the first score >= s."""
    sc, p0, p1 = (np.asarray(v, float) for v in (cal.scores_, cal.p0_, cal.p1_))
    k = sc.size
    at = p1 / (1.0 - p0 + p1)  # s equal to scores_[i]
    up = np.r_[p1[1:], 1.0]  # between scores_[i] and scores_[i + 1] (above the last: p1 = 1)
    after = up / (1.0 - p0 + up)
    below = p1[0] / (1.0 - 0.0 + p1[0])
    x = np.r_[-DBL_MAX, sc]
    _table(p, x, np.r_[below, at], np.r_[below, after], np.zeros(k + 1))


@_builds("spline")
def _spline(cal, p: Plan) -> None:
    """The B-spline's own evaluation: segment j of ``u = (x - lo) * (n / (hi - lo))``, ``f = u - j``."""
    from calibflow.calibrators.spline import DEGREE

    coef = np.asarray(cal.coef_, float)
    lo, hi = float(cal.lo_), float(cal.hi_)
    n_seg = coef.size - DEGREE
    scale = n_seg / (hi - lo)
    j = np.arange(n_seg)
    x = np.r_[-DBL_MAX, lo + j / scale]
    x[1] = lo
    jj = np.r_[0, j]
    cs = np.column_stack([coef[jj + i] for i in range(DEGREE + 1)])
    rows = np.column_stack([np.arange(x.size), x, jj, cs])
    inner = p.key
    p.key = lambda u: clamp(inner(u), lo, hi)

    def value(s: str, kn: str) -> str:
        u = f"(({s} - {num(lo)}) * {num(scale)})"
        first = clamp(f"FLOOR({u})", 0.0, n_seg - 1.0)
        f = f"({u} - {first})"
        b0 = f"((1.0e+00 - {f}) * (1.0e+00 - {f}) * (1.0e+00 - {f}))"
        b1 = f"(3.0e+00 * {f} * {f} * {f} - 6.0e+00 * {f} * {f} + 4.0e+00)"
        b2 = f"(-3.0e+00 * {f} * {f} * {f} + 3.0e+00 * {f} * {f} + 3.0e+00 * {f} + 1.0e+00)"
        b3 = f"({f} * {f} * {f})"
        terms = [f"({b} / 6.0e+00) * {kn}.c{i}" for i, b in enumerate((b0, b1, b2, b3))]
        z = "(" + " + ".join(terms) + ")"
        return sigmoid(z)

    p.table = {"columns": ("k", "x", "j", "c0", "c1", "c2", "c3"), "rows": rows, "value": value}


# ---- partial pooling ---------------------------------------------------------------------------------------


@_builds("partial_pooling")
def _partial_pooling(cal, p: Plan) -> None:
    cal._check_state()
    a, b, c = (float(v) for v in cal.global_)
    blocks = []
    for blk in cal.blocks_:
        cols = [int(i) for i in blk["columns"]]
        off = np.asarray(blk["offset"], float)
        ls = np.asarray(blk["log_slope"], float)
        if len(cols) == 1:
            levels = [(lv,) for lv in cal.vocab_[cols[0]]]
        else:
            nj = len(cal.vocab_[cols[1]])
            keys = np.asarray(blk["keys"], dtype=np.int64)
            levels = [(cal.vocab_[cols[0]][int(k) // nj], cal.vocab_[cols[1]][int(k) % nj]) for k in keys]
        blocks.append(
            {
                "columns": [cal.segment_names_[i] for i in cols],
                "levels": levels,
                "offset": off,
                "log_slope": ls,
            }
        )
    p.segments = {"global": (a, b, c), "blocks": blocks, "names": list(cal.segment_names_)}




# ---- rendering ---------------------------------------------------------------------------------------------


def _valid(u: str, kind: str) -> str:
    """True for a score apply serves: finite (NULL, NaN and +-inf are not), in [0, 1] for a probability.
    Range tests only: NaN fails them whether an engine orders it above everything or compares it false."""
    if kind == "probability":
        return f"({u} >= 0.0e+00 AND {u} <= 1.0e+00)"
    return f"({u} >= {num(-DBL_MAX)} AND {u} <= {num(DBL_MAX)})"


def header(p: Plan, dialect: str, column: str) -> str:
    null_rule = (
        "NULL where apply gives null or refuses: a NULL or NaN score (apply --on-null pass: null; "
        "the default "
        "--on-null fail refuses the run), an infinite score"
        + (", a probability outside [0, 1]" if p.input_kind == "probability" else "")
        + " (apply refuses the run)"
    )
    segs = ""
    if p.segments is not None:
        names = ", ".join(repr(n) for n in p.segments["names"])
        segs = (
            f" Segment column(s) {names} are read as text, a NULL as the level '{NULL_LEVEL}'; a value never "
            "seen in fitting adds nothing (the global map), as in apply."
        )
    text = (
        f"calibflow export: {p.method} ({_shape_of(p)}), {dialect} SQL; column {column!r} holds "
        f"{p.input_text}. Same numbers as `calibflow apply` (double precision). {null_rule}.{segs}"
    )
    # a name may hold */ (ending the comment) or /* (DuckDB and PostgreSQL nest comments: opening one)
    return "/* " + text.replace("*/", "* /").replace("/*", "/ *") + " */"


def _shape_of(p: Plan) -> str:
    if p.segments is not None:
        return f"segmented: {len(p.segments['blocks'])} block(s) of segment parameters"
    if p.table is not None:
        return f"knot table, {len(p.table['rows'])} rows"
    return "closed form"


def expression(p: Plan, column: str, source: str | None = None) -> str:
    """The probability as one expression of ``column`` (closed forms only)."""
    if p.closed is None:
        raise SqlExportError(f"{p.method} is a knot table: export it as a query (--table NAME)")
    col = quote(column, "column")
    u = f"CAST({source + '.' if source else ''}{col} AS DOUBLE)"
    return f"(CASE WHEN {_valid(u, p.input_kind)} THEN {p.closed(p.key(u))} END)"


def _rows_cte(name: str, columns: tuple[str, ...], types: tuple[str, ...]) -> str:
    casts = ", ".join(f"CAST({c} AS {t}) AS {c}" for c, t in zip(columns, types, strict=True))
    return f"{name} AS (SELECT {casts} FROM {name}_rows)"


def query_sql(p: Plan, column: str, table: str, out: str) -> tuple[str, dict[str, tuple]]:
    """The DuckDB-dialect query and the row sources to splice in (name -> (columns, rows))."""
    src = "__calibflow_src"
    tbl = quote(table, "table")
    o = quote(out, "output-column")
    u = f"CAST({src}.{quote(column, 'column')} AS DOUBLE)"
    valid = _valid(u, p.input_kind)
    splice: dict[str, tuple] = {}
    if p.closed is not None:
        return f"SELECT {src}.*, {expression(p, column, src)} AS {o} FROM {tbl} AS {src}", splice
    if p.table is not None:
        cols = p.table["columns"]
        types = tuple("BIGINT" if c in ("k", "j") else "DOUBLE" for c in cols)
        splice["__calibflow_knots"] = (cols, [tuple(r) for r in p.table["rows"]], ("n",) * len(cols))
        s = p.key(u)
        keys = (
            "__calibflow_keys AS (SELECT s, MAX(k) OVER (ORDER BY s, o ROWS BETWEEN UNBOUNDED PRECEDING "
            "AND CURRENT ROW) AS k, o FROM (SELECT x AS s, k, 0 AS o FROM __calibflow_knots UNION ALL "
            f"SELECT DISTINCT {s} AS s, CAST(NULL AS BIGINT) AS k, 1 AS o FROM {tbl} AS {src} "
            f"WHERE {valid}) AS __calibflow_u)"
        )
        # the map is evaluated once per distinct score, on the plain column (no expression copied into it)
        value = p.table["value"]("__calibflow_ks.s", "__calibflow_kn")
        vals = (
            f"__calibflow_vals AS (SELECT __calibflow_ks.s AS s, {value} AS p FROM __calibflow_keys AS "
            "__calibflow_ks JOIN __calibflow_knots AS __calibflow_kn ON __calibflow_kn.k = __calibflow_ks.k "
            "WHERE __calibflow_ks.o = 1)"
        )
        sql = (
            f"WITH {_rows_cte('__calibflow_knots', cols, types)}, {keys}, {vals} "
            f"SELECT {src}.*, CASE WHEN {valid} THEN __calibflow_vs.p END AS {o} FROM {tbl} AS {src} "
            f"LEFT JOIN __calibflow_vals AS __calibflow_vs ON __calibflow_vs.s = {s}"
        )
        return sql, splice
    return _segmented_sql(p, u, valid, src, tbl, o, splice), splice


def level(src: str, name: str) -> str:
    """A segment column as apply reads it: its text, a NULL as the level '(null)'."""
    return f"COALESCE(CAST({src}.{quote(name, 'segment column')} AS VARCHAR), {string(NULL_LEVEL)})"


def _segmented_sql(p: Plan, u: str, valid: str, src: str, tbl: str, o: str, splice: dict) -> str:
    a, b, c = p.segments["global"]
    ctes, joins, off, ls = [], [], "0.0e+00", "0.0e+00"
    for i, blk in enumerate(p.segments["blocks"]):
        name = f"__calibflow_seg{i}"
        lv_cols = tuple(f"l{j}" for j in range(len(blk["columns"])))
        cols = (*lv_cols, "d", "g")
        types = (*("VARCHAR",) * len(lv_cols), "DOUBLE", "DOUBLE")
        rows = [
            (*lv, float(d), float(g))
            for lv, d, g in zip(blk["levels"], blk["offset"], blk["log_slope"], strict=True)
        ]
        splice[name] = (cols, rows, (*("s",) * len(lv_cols), "n", "n"))
        ctes.append(_rows_cte(name, cols, types))
        alias = f"__calibflow_b{i}"
        on = " AND ".join(
            f"{alias}.{lc} = {level(src, cn)}" for lc, cn in zip(lv_cols, blk["columns"], strict=True)
        )
        joins.append(f"LEFT JOIN {name} AS {alias} ON {on}")
        off = f"({off} + COALESCE({alias}.d, 0.0e+00))"
        ls = f"({ls} + COALESCE({alias}.g, 0.0e+00))"
    s = p.key(u)
    width = 1e250  # exp(b + log slope) <= e^100 (validated): no overflow, the sigmoid saturated long before
    z = f"({num(a)} + {off} + EXP({num(b)} + {ls}) * ({clamp(s, -width, width)} - {num(c)}))"
    with_ = f"WITH {', '.join(ctes)} " if ctes else ""
    return (
        f"{with_}SELECT {src}.*, CASE WHEN {valid} THEN {sigmoid(z)} END AS {o} FROM {tbl} AS {src} "
        + " ".join(joins)
    )


# ---- translation -------------------------------------------------------------------------------------------


def _lit(v: Any, kind: str, dialect: str) -> str:
    if kind == "s":
        import sqlglot.expressions as exp

        return exp.Literal.string(str(v)).sql(dialect=dialect)
    if float(v) == int(v) and abs(v) < 2**53 and kind == "i":
        return str(int(v))
    return num(v).replace("(", "").replace(")", "")


def _row_source(
    name: str, cols: tuple[str, ...], rows: list[tuple], kinds: tuple[str, ...], dialect: str
) -> str:
    """``rows`` as a FROM item with columns ``cols`` in ``dialect`` (the one piece SQLGlot does not write)."""
    kinds = tuple("i" if c in ("k", "j") else kd for c, kd in zip(cols, kinds, strict=True))

    def tup(r: tuple) -> list[str]:
        return [_lit(v, kd, dialect) for v, kd in zip(r, kinds, strict=True)]

    if dialect == "bigquery":
        structs = ", ".join(
            "STRUCT(" + ", ".join(f"{v} AS {c}" for v, c in zip(tup(r), cols, strict=True)) + ")"
            for r in rows
        )
        return f"UNNEST([{structs}])"
    values = ", ".join("(" + ", ".join(tup(r)) + ")" for r in rows)
    if dialect == "sqlite":  # no column aliases on a derived table: name VALUES' column1..n
        named = ", ".join(f"column{i + 1} AS {c}" for i, c in enumerate(cols))
        return f"(SELECT {named} FROM (VALUES {values}))"
    if dialect == "spark":  # Spark's inline table: VALUES ... AS alias(columns), no parentheses
        return f"VALUES {values} AS {name}_v({', '.join(cols)})"
    return f"(VALUES {values}) AS {name}_v({', '.join(cols)})"


def translate(sql: str, splice: dict[str, tuple], dialect: str, allowed: set[str]) -> str:
    """``sql`` (DuckDB) in ``dialect`` via SQLGlot, rows spliced in, then checked: one statement whose
    identifiers and strings are only ours and ``allowed`` (the user's names)."""
    import logging

    import sqlglot

    if dialect not in DIALECTS:
        raise SqlExportError(f"--dialect {dialect!r}: use one of {', '.join(DIALECTS)}")
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    out = sqlglot.transpile(sql, read="duckdb", write=dialect)
    if len(out) != 1:
        raise SqlExportError("internal: the export is not one SQL statement")
    text = out[0]
    _check_names(text, dialect, allowed)
    for name, (cols, rows, kinds) in splice.items():
        token = f"{name}_rows"
        if len(re.findall(rf"\b{token}\b", text)) != 1:
            raise SqlExportError(f"internal: placeholder {token} not found once in the {dialect} SQL")
        text = re.sub(
            rf"\b{token}\b",
            lambda _m, c=cols, r=rows, k=kinds, n=name: _row_source(n, c, r, k, dialect),
            text,
            count=1,
        )
    return text


def _check_names(text: str, dialect: str, allowed: set[str]) -> None:
    import sqlglot
    import sqlglot.expressions as exp

    tree = sqlglot.parse(text, read=dialect)
    if len(tree) != 1 or tree[0] is None:
        raise SqlExportError("internal: the export does not parse back as one statement")
    for node in tree[0].find_all(exp.Identifier):
        name = node.name
        if name in allowed or name.startswith(_PREFIX) or name in _OURS:
            continue
        raise SqlExportError(f"internal: unexpected identifier {name!r} in the {dialect} SQL")


_OURS = {"k", "x", "v_at", "c0", "c1", "c2", "c3", "j", "s", "o", "p", "d", "g", "l0", "l1"}
