"""A fitted calibrator in forms a serving stack can load without Python: SQL, a lookup table, ONNX.

- **SQL** (``--format sql``, ``to_sql_query``; ``calibflow.export_sql``): ``apply``'s own computation, not
  an approximation: closed forms (Platt, temperature, Beta, quadratic, ...) as their formula, step and
  spline maps as a knot table found by a window and joined, ``partial_pooling`` reading the segment
  columns; NULL wherever ``apply`` keeps null or refuses; DuckDB, PostgreSQL, SQLite, Spark SQL and
  BigQuery through SQLGlot. See docs/serving.md.
- **Segment parameters** (``--format params``): partial_pooling's per-level offsets and log slopes as CSV.

The table and ONNX forms are the same piecewise-linear approximation, so they agree with each other to
rounding:

- **The table.** Knots ``x_k`` on the logit axis of the input (a probability input is read as
  ``t = ln(p) - ln(1 - p)`` after clipping; a logit or raw score is ``t`` itself) and the calibrated
  probability's logit ``z_k`` at each knot. Between knots ``z`` is linear in ``t``; beyond the end knots the
  end segments continue; the answer is ``1 / (1 + exp(-z))``. Interpolating the *logit* of the output makes a
  Platt or temperature map exact and keeps smooth maps within 1e-6 with a few hundred knots. Knots are
  placed adaptively: an interval is halved until the interpolation error at three points inside it is below
  ``tol`` (default 1e-7) at seven points inside it or no double lies inside it, so a step map (isotonic,
  Venn-Abers) gets a pair of adjacent doubles at each jump; the knots not needed are then dropped, and a
  dense random probe adds a knot wherever the table still misses. ``max_error`` is then measured against
  ``predict`` on other points (seven inside every interval, 200,000 random ones, the extrapolated ends) and
  stated in the table. ``to_sql(table)`` writes this table as one nested-CASE expression; it is kept for
  checking the table itself, and ``calibflow export`` never writes it (a CASE grows with the knots).
- **ONNX.** The same table as an opset-17 graph (a branch-free binary search with ``Gather``/``Where``,
  then the segment's line and a ``Sigmoid``), float64 in and out: runs in onnxruntime and any ONNX runtime
  (C++, Java, C#) without calibflow. Needs the ``onnx`` package (``pip install calibflow[serve]``).

Input scale: the map takes what the calibrator was fitted on (its ``input``), unless the calibrator file
records the user's ``score_kind`` (a top-level key): then it takes the user's score, converted exactly as
``calibflow apply`` converts it, and every form says so.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from calibflow.calibrators import get_class
from calibflow.calibrators.base import BaseCalibrator
from calibflow.metrics import LOG_LOSS_CLIP, expit, logit

FORMATS = ("table", "sql", "onnx", "params")
DEFAULT_TOL = 1e-7
MAX_KNOTS = 200_000
#: Logit-axis half-width of the knots for a logit or score input (beyond it the end segments continue).
SPAN = 30.0
_CARD_KEYS = {"metrics", "reason", "rule", "candidates"}


class ExportError(ValueError):
    """A calibrator that cannot be exported in the asked form; the message says why and what to do."""


def load(
    text: str, score_kind: str | None = None, segments: bool = False
) -> tuple[BaseCalibrator, str | None]:
    """The calibrator in ``text`` (its ``to_json``) and the user's score kind: ``score_kind`` if given, else
    the one the file records (a top-level ``score_kind``), else None (the calibrator's own input).

    The file is untrusted: nesting bounded, fitted state validated (``calibflow.calibrator_file``); one line
    naming the field otherwise. ``segments``: a segmented calibrator is wanted (SQL and its parameters)."""
    from calibflow import calibrator_file

    try:
        payload = calibrator_file.parse(text)
    except calibrator_file.CalibratorFileError as exc:
        raise ExportError(f"not a calibrator file: {exc}") from None
    if not isinstance(payload, dict):
        raise ExportError("not a calibrator file: expected a JSON object")
    if _CARD_KEYS & set(payload) and "state" not in payload:
        raise ExportError("this is the card; use calibrator.json (beside it)")
    recorded = payload.pop("score_kind", None)
    score_kind = score_kind or recorded
    if score_kind is not None and score_kind not in ("probability", "logit", "score"):
        raise ExportError(f"score kind {score_kind!r} is not probability|logit|score")
    try:
        cal = calibrator_file.load_text(json.dumps(payload))
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    if cal.needs and not (segments and cal.needs == ("segments",)):
        needs = ", ".join(cal.needs)
        hint = "; export it with --format sql or params" if cal.needs == ("segments",) else ""
        raise ExportError(
            f"{cal.name} needs inputs besides the score ({needs}): cannot export this format{hint}"
        )
    return cal, score_kind


@dataclass
class Table:
    """Knots ``x`` (logit axis of the input) and output logits ``z``: the map of the module docstring."""

    method: str
    input_kind: str  # what the map takes: probability | logit | score
    input_text: str  # the same, in words (whose score)
    clip: float  # a probability input is clipped to [clip, 1 - clip] before its logit
    x: NDArray[np.float64]
    z: NDArray[np.float64]
    monotone: bool
    max_error: float = float("nan")

    def slopes(self) -> NDArray[np.float64]:
        return np.diff(self.z) / np.diff(self.x)

    def to_t(self, score: ArrayLike) -> NDArray[np.float64]:
        s = np.asarray(score, dtype=np.float64)
        if self.input_kind == "probability":
            c = np.clip(s, self.clip, 1.0 - self.clip)
            return np.log(c) - np.log1p(-c)
        return s

    def predict_t(self, t: NDArray[np.float64]) -> NDArray[np.float64]:
        k = np.clip(np.searchsorted(self.x, t, side="right") - 1, 0, self.x.size - 2)
        return expit(self.z[k] + self.slopes()[k] * (t - self.x[k]))

    def predict(self, score: ArrayLike) -> NDArray[np.float64]:
        """What the SQL and ONNX forms compute, in numpy."""
        return self.predict_t(self.to_t(score))

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "calibflow.table/1",
            "method": self.method,
            "input": self.input_kind,
            "input_description": self.input_text,
            "probability_clip": self.clip if self.input_kind == "probability" else None,
            "how": "t = input (a probability: ln(p) - ln(1 - p) after clipping); find k with "
            "x[k] <= t < x[k+1] (the end segments continue beyond the ends); "
            "z = z[k] + (z[k+1] - z[k]) / (x[k+1] - x[k]) * (t - x[k]); p = 1 / (1 + exp(-z))",
            "monotone": self.monotone,
            "max_error": self.max_error,
            "n_knots": int(self.x.size),
            "x": self.x.tolist(),
            "z": self.z.tolist(),
        }


def _map(cal: BaseCalibrator, score_kind: str | None, input_kind: str):
    """``t -> calibrated probability`` exactly as ``predict`` (and ``calibflow apply``) compute it."""
    from calibflow.sources import calibrator_input

    def f(t: NDArray[np.float64]) -> NDArray[np.float64]:
        raw = expit(t) if input_kind == "probability" else t
        if score_kind is not None:
            raw = calibrator_input(raw, score_kind, cal.input_kind)
        return cal.predict(raw)

    return f


def _zlogit(p: NDArray[np.float64]) -> NDArray[np.float64]:
    return logit(p)  # clipped to [LOG_LOSS_CLIP, 1 - LOG_LOSS_CLIP] first


def _interp(x: NDArray[np.float64], z: NDArray[np.float64], t: NDArray[np.float64]) -> NDArray[np.float64]:
    k = np.clip(np.searchsorted(x, t, side="right") - 1, 0, x.size - 2)
    return expit(z[k] + (z[k + 1] - z[k]) / (x[k + 1] - x[k]) * (t - x[k]))


#: Where an interval is checked: 7 points inside it (a kink near one end is still seen).
_FRACTIONS = (0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875)


def _inner_points(x: NDArray[np.float64]) -> NDArray[np.float64]:
    w = np.diff(x)
    return np.concatenate([x[:-1] + f * w for f in _FRACTIONS])


def _knots(f, lo: float, hi: float, tol: float, max_knots: int) -> tuple[NDArray, NDArray]:
    """Refine and prune (``_refine``), then check on a dense random probe; a miss becomes a knot and the
    table is rebuilt (a feature narrower than the checks' spacing is found this way)."""
    grid = np.linspace(lo, hi, 257)
    probe = np.random.default_rng(1).uniform(lo, hi, 100_000)
    f_probe = f(probe)
    for _ in range(8):
        x, z = _refine(f, grid, tol, max_knots)
        miss = np.abs(_interp(x, z, probe) - f_probe) > tol
        if not miss.any():
            return x, z
        grid = np.unique(np.concatenate([x, probe[miss]]))
    return x, z


def _refine(f, grid: NDArray, tol: float, max_knots: int) -> tuple[NDArray, NDArray]:
    """Halve every interval whose interpolation misses ``f`` by more than ``tol`` inside it, down to adjacent
    doubles (a jump is then bracketed exactly: no double lies inside), then drop the knots not needed."""
    x = grid
    z = _zlogit(f(x))
    for _ in range(200):
        w = np.diff(x)
        probe = _inner_points(x)
        err = np.abs(_interp(x, z, probe) - f(probe)).reshape(len(_FRACTIONS), -1).max(axis=0)
        mids = x[:-1] + w / 2
        bad = (err > tol) & (mids > x[:-1]) & (mids < x[1:])  # no double inside: nothing left to split
        if not bad.any():
            return _prune(x, z, f, tol)
        if x.size + bad.sum() > 4 * max_knots:
            break
        x = np.concatenate([x, mids[bad]])
        order = np.argsort(x, kind="stable")
        x, z = x[order], np.concatenate([z, _zlogit(f(mids[bad]))])[order]
    raise ExportError(
        f"the map needs more than {max_knots} knots for an error below {tol:g}; export with a larger --tol, "
        "or --format sql (apply's exact computation)"
    )


def _prune(x: NDArray, z: NDArray, f, tol: float) -> tuple[NDArray, NDArray]:
    """Keep the fewest knots (greedy, left to right) whose segments stay within ``tol`` of ``f`` at every
    refined knot and at the check points inside each refined interval."""
    inner = _inner_points(x).reshape(len(_FRACTIONS), -1)
    f_in = f(inner.ravel()).reshape(len(_FRACTIONS), -1)
    p = expit(z)

    def ok(i: int, j: int) -> bool:
        slope = (z[j] - z[i]) / (x[j] - x[i])
        at = x[i + 1 : j]
        if at.size and np.abs(expit(z[i] + slope * (at - x[i])) - p[i + 1 : j]).max() > tol:
            return False
        mid = inner[:, i:j]
        return bool(np.abs(expit(z[i] + slope * (mid - x[i])) - f_in[:, i:j]).max() <= tol)

    keep, i, n = [0], 0, x.size
    while i < n - 1:
        step, j = 1, i + 1
        while j + step < n and ok(i, j + step):  # gallop, then bisect back
            j += step
            step *= 2
        hi = min(j + step, n - 1)
        while hi - j > 1:
            m = (j + hi) // 2
            j, hi = (m, hi) if ok(i, m) else (j, m)
        if hi == n - 1 and hi != j and ok(i, hi):
            j = hi
        keep.append(j)
        i = j
    idx = np.asarray(keep)
    return x[idx], z[idx]


def _input(cal: BaseCalibrator, score_kind: str | None) -> tuple[str, str, float]:
    if score_kind is not None:
        clip = LOG_LOSS_CLIP  # calibflow.sources.to_margin's clip of a user probability
        return score_kind, f"the user's score ({score_kind}), converted as `calibflow apply` does", clip
    return cal.input_kind, f"the calibrator's input ({cal.input_kind}), as it was fitted", 1e-12


def to_table(cal: BaseCalibrator, score_kind: str | None = None, tol: float = DEFAULT_TOL) -> Table:
    """The lookup table of ``cal`` with its measured ``max_error`` against ``predict``."""
    kind, text, clip = _input(cal, score_kind)
    f = _map(cal, score_kind, kind)
    lo, hi = (float(logit(clip)), float(logit(1 - clip))) if kind == "probability" else (-SPAN, SPAN)
    x, z = _knots(f, lo, hi, tol, MAX_KNOTS)
    table = Table(cal.name, kind, text, clip, x, z, bool(get_class(cal.name).monotone))
    table.max_error = _max_error(table, f, lo, hi)
    return table


def _max_error(table: Table, f, lo: float, hi: float) -> float:
    rng = np.random.default_rng(0)
    probe = [_inner_points(table.x), rng.uniform(lo, hi, 200_000)]
    if table.input_kind != "probability":  # the extrapolated ends
        probe += [np.linspace(lo - 20, lo, 2001), np.linspace(hi, hi + 20, 2001)]
    t = np.concatenate(probe)
    return float(np.abs(table.predict_t(t) - f(t)).max())


# ---- SQL ------------------------------------------------------------------------------------------------


def _num(v: float) -> str:
    """A double literal every engine reads as a double (DuckDB/Spark read ``0.5`` as DECIMAL)."""
    return f"{v:.17e}"


def to_sql(table: Table, column: str = "score") -> str:
    """The *table's* probability as one nested-CASE expression of ``column`` (DuckDB): a check of the table
    only. Serving SQL is ``to_sql_query`` (exact, every dialect, no CASE growing with the knots)."""
    x, z, b = table.x, table.z, table.slopes()
    if table.input_kind == "probability":
        c = f"LEAST(GREATEST({column}, {_num(table.clip)}), {_num(1 - table.clip)})"
        t = f"(LN({c}) - LN(1 - {c}))"
        cut = expit(x)  # the knots on the column's own scale: the search compares the column itself
    else:
        t, cut = f"({column})", x

    last = x.size - 2

    def leaf(k: int) -> str:
        d = f"{t} - {_num(x[k])}"
        if table.input_kind == "probability":
            # the search compares p while the line uses t = logit(p): a p within rounding of a knot may land
            # in the neighbouring segment, so the step along it is held inside the segment (a jump's segment
            # is one double wide, where an unclamped step would overshoot)
            d = d if k == 0 else f"GREATEST({d}, 0)"
            d = d if k == last else f"LEAST({d}, {_num(x[k + 1] - x[k])})"
        return f"{_num(z[k])} + {_num(b[k])} * ({d})"

    def tree(lo: int, hi: int) -> str:  # segments lo..hi; segment k covers [x[k], x[k+1])
        if lo == hi:
            return leaf(lo)
        mid = (lo + hi + 1) // 2
        return f"CASE WHEN {column} < {_num(cut[mid])} THEN {tree(lo, mid - 1)} ELSE {tree(mid, hi)} END"

    header = (
        f"/* calibflow export: {table.method}, input {table.input_text}; {x.size} knots on the logit axis, "
        f"max error against predict {table.max_error:.2e} */"
    )
    # NULL stays NULL: DuckDB's and Spark's GREATEST skip a NULL argument, which would turn it into a number
    body = f"1 / (1 + EXP(-({tree(0, x.size - 2)})))"
    return f"{header}\n(CASE WHEN {column} IS NULL THEN NULL ELSE {body} END)"


# ---- ONNX -----------------------------------------------------------------------------------------------


def to_onnx(table: Table, input_name: str = "score") -> bytes:
    """The table as a serialized ONNX model: float64 ``score [N]`` in, float64 ``probability [N]`` out."""
    try:
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ExportError("--format onnx needs the onnx package: pip install 'calibflow[serve]'") from None
    x, z, b = table.x, table.z, table.slopes()
    n_seg = x.size - 1
    consts = {"knots": x[:-1], "z0": z[:-1], "slope": b, "last_i": np.array(n_seg - 1, dtype=np.int64)}
    nodes = []
    if table.input_kind == "probability":
        consts.update(lo=np.array(table.clip), hi=np.array(1 - table.clip), one=np.array(1.0))
        nodes += [
            helper.make_node("Max", [input_name, "lo"], ["c0"]),
            helper.make_node("Min", ["c0", "hi"], ["c"]),
            helper.make_node("Sub", ["one", "c"], ["omc"]),
            helper.make_node("Log", ["c"], ["lc"]),
            helper.make_node("Log", ["omc"], ["lomc"]),
            helper.make_node("Sub", ["lc", "lomc"], ["t"]),
        ]
    else:
        nodes.append(helper.make_node("Identity", [input_name], ["t"]))
    # branch-free binary search: idx = the largest k with knots[k] <= t (0 below the first knot)
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    nodes.append(helper.make_node("Shape", ["t"], ["t_shape"]))
    nodes.append(helper.make_node("ConstantOfShape", ["t_shape"], ["idx_0"], value=zero))
    step = 1 << max(int(math.ceil(math.log2(max(n_seg, 1)))) - 1, 0)
    i = 0
    while step >= 1:
        s = f"step_{i}"
        consts[s] = np.array(step, dtype=np.int64)
        nodes += [
            helper.make_node("Add", [f"idx_{i}", s], [f"cand_{i}"]),
            helper.make_node("Min", [f"cand_{i}", "last_i"], [f"candc_{i}"]),
            helper.make_node("Gather", ["knots", f"candc_{i}"], [f"kx_{i}"]),
            helper.make_node("LessOrEqual", [f"kx_{i}", "t"], [f"le_{i}"]),
            helper.make_node("Where", [f"le_{i}", f"candc_{i}", f"idx_{i}"], [f"idx_{i + 1}"]),
        ]
        step //= 2
        i += 1
    nodes += [
        helper.make_node("Gather", ["knots", f"idx_{i}"], ["x0"]),
        helper.make_node("Gather", ["z0", f"idx_{i}"], ["zk"]),
        helper.make_node("Gather", ["slope", f"idx_{i}"], ["bk"]),
        helper.make_node("Sub", ["t", "x0"], ["dt"]),
        helper.make_node("Mul", ["bk", "dt"], ["bdt"]),
        helper.make_node("Add", ["zk", "bdt"], ["zz"]),
        helper.make_node("Sigmoid", ["zz"], ["probability"]),
    ]
    inits = [numpy_helper.from_array(np.asarray(v), name=k) for k, v in consts.items()]
    graph = helper.make_graph(
        nodes,
        f"calibflow_{table.method}",
        [helper.make_tensor_value_info(input_name, TensorProto.DOUBLE, ["N"])],
        [helper.make_tensor_value_info("probability", TensorProto.DOUBLE, ["N"])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="calibflow")
    model.ir_version = 8
    model.doc_string = f"{table.method}: input {table.input_text}; max error vs predict {table.max_error:.2e}"
    return model.SerializeToString()


def to_sql_query(
    cal: BaseCalibrator,
    score_kind: str | None = None,
    column: str = "score",
    dialect: str = "duckdb",
    table: str | None = None,
    output_column: str = "calibrated",
) -> tuple[str, Any]:
    """SQL giving ``apply``'s numbers (``calibflow.export_sql``): one expression of ``column`` for a
    closed-form map when ``table`` is None, else a query over ``table`` adding ``output_column``."""
    from calibflow import export_sql as S

    try:
        plan = S.plan(cal, score_kind)
        allowed = {column, output_column, *(plan.segments["names"] if plan.segments else ())}
        if plan.closed is not None and table is None:
            sql, splice = f"SELECT {S.expression(plan, column)}", {}
        else:
            table = table or "scores"
            allowed.add(table)
            sql, splice = S.query_sql(plan, column, table, output_column)
        text = S.translate(sql, splice, dialect, allowed)
    except S.SqlExportError as exc:
        raise ExportError(str(exc)) from None
    if plan.closed is not None and table is None:
        text = text.removeprefix("SELECT ")
    return S.header(plan, dialect, column) + "\n" + text, plan


def segment_params_csv(cal: BaseCalibrator) -> str:
    """partial_pooling's parameters as CSV, one row per segment level (a feature store's table):
    ``logit p = offset(global) + sum offset(levels) + exp(log_slope(global) + sum log_slope(levels)) *
    (z - centre)`` with ``z`` the calibrator's logit; a level not listed adds 0."""
    import csv
    import io

    if cal.name != "partial_pooling":
        raise ExportError(f"--format params is for segmented calibrators (partial_pooling), not {cal.name}")
    from calibflow import export_sql as S

    plan = S.plan(cal)
    a, b, c = plan.segments["global"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["block", "column_1", "level_1", "column_2", "level_2", "offset", "log_slope", "centre"])
    w.writerow(["global", "", "", "", "", repr(a), repr(b), repr(c)])
    for i, blk in enumerate(plan.segments["blocks"]):
        cols = blk["columns"] + [""] * (2 - len(blk["columns"]))
        for lv, d, g in zip(blk["levels"], blk["offset"], blk["log_slope"], strict=True):
            lv2 = lv[1] if len(lv) > 1 else ""
            w.writerow([str(i), cols[0], lv[0], cols[1], lv2, repr(float(d)), repr(float(g)), ""])
    return buf.getvalue()


def export(
    text: str,
    fmt: str,
    column: str = "score",
    tol: float = DEFAULT_TOL,
    score_kind: str | None = None,
    dialect: str = "duckdb",
    table: str | None = None,
    output_column: str = "calibrated",
) -> tuple[str | bytes, Any]:
    """``fmt`` (table | sql | onnx | params) of the calibrator JSON ``text``, and what it was built from (the
    ``Table``, or the SQL plan); ``score_kind``: the user's score the map takes (default: what the file
    records, else the calibrator's own input)."""
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    cal, score_kind = load(text, score_kind, segments=fmt in ("sql", "params"))
    if fmt == "sql":
        sql, plan = to_sql_query(cal, score_kind, column, dialect, table, output_column)
        return sql + "\n", plan
    if fmt == "params":
        return segment_params_csv(cal), cal
    table_ = to_table(cal, score_kind, tol)
    if fmt == "table":
        return json.dumps(table_.to_dict(), indent=1) + "\n", table_
    return to_onnx(table_, column), table_
