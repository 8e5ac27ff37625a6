"""A calibrator file is untrusted input: each tampered file of issue 37 is refused in one line, nothing
served, by ``calibflow apply`` and by ``calibflow export``; a 500 MB file is refused without being read."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy.special import expit
from typer.testing import CliRunner

from calibflow import calibrators as C
from calibflow.cli.main import app


def _fitted(method: str) -> dict:
    rng = np.random.default_rng(0)
    z = rng.normal(-1.0, 1.5, 4000)
    y = (rng.random(z.size) < expit(z)).astype(np.float64)
    cal = C.make(method, input="probability").fit(expit(1.3 * z), y)
    cal.score_kind_ = "probability"
    return json.loads(cal.to_json())


def _iso(edit) -> dict:
    payload = _fitted("isotonic")
    edit(payload["state"])
    return payload


def _hist(edit) -> dict:
    payload = _fitted("histogram")
    edit(payload["state"])
    return payload


def _set(field, fn):
    def edit(state):
        v = state[field]
        if isinstance(v, dict):  # arrays are saved as {"__ndarray__": [...]}
            v["__ndarray__"] = fn(v["__ndarray__"])
        else:
            state[field] = fn(v)

    return edit


def _shuffled(v):
    return [float(t) for t in np.random.default_rng(5).permutation(v)]


def _above_one(v):
    return v[:-1] + [1.5]


def _negative_first(v):
    return [-0.25] + v[1:]


TAMPERED = {
    "isotonic reversed knots": (lambda: _iso(_set("x_", lambda v: v[::-1])), "state.x_"),
    "isotonic shuffled knots": (lambda: _iso(_set("x_", _shuffled)), "state.x_"),
    "isotonic decreasing values": (lambda: _iso(_set("y_", lambda v: v[::-1])), "state.y_"),
    "isotonic values above 1": (lambda: _iso(_set("y_", _above_one)), "state.y_"),
    "histogram reversed edges": (lambda: _hist(_set("edges_", lambda v: v[::-1])), "state.edges_"),
    "histogram negative bin value": (lambda: _hist(_set("bin_value_", _negative_first)), "state.bin_value_"),
    # refused on the parsed JSON, before from_json tries a prediction (which would warn: two lines)
    "platt infinite slope": (
        lambda: {**_fitted("platt"), "state": {"coef_": 1e400, "intercept_": 0.0}},
        "state.coef_",
    ),
}


def _deep(levels: int) -> str:
    base = json.dumps(_fitted("isotonic"))
    return base.replace('"__ndarray__": [', '"__ndarray__": ' + "[" * levels + "[", 1).replace(
        "]", "]" + "]" * levels, 1
    )


@pytest.fixture()
def scored_input(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"score": np.linspace(0.01, 0.99, 50)}), path)
    return path


def _apply(tmp_path, calibrator, input_path):
    out = tmp_path / "out.parquet"
    res = CliRunner().invoke(
        app,
        [
            "apply",
            "--calibrator",
            str(calibrator),
            "--input",
            str(input_path),
            "--output",
            str(out),
            "--score",
            "score",
        ],
    )
    return res, out


def _export(tmp_path, calibrator):
    out = tmp_path / "map.sql"
    res = CliRunner().invoke(
        app,
        ["export", "--calibrator", str(calibrator), "--format", "sql", "--output", str(out), "--table", "t"],
    )
    return res, out


def _refused(res, out, *words):
    lines = res.output.strip().splitlines()
    assert res.exit_code == 1 and len(lines) == 1, res.output
    assert "Traceback" not in res.output and not out.exists()
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("case", list(TAMPERED))
def test_tampered_file_is_refused_in_one_line_by_apply_and_export(case, tmp_path, scored_input):
    build, field = TAMPERED[case]
    path = tmp_path / "calibrator.json"
    path.write_text(json.dumps(build()))
    _refused(*_apply(tmp_path, path, scored_input), field)
    _refused(*_export(tmp_path, path), field)


def test_the_untampered_file_is_served(tmp_path, scored_input):
    """The control: the same file before tampering is applied and exported."""
    path = tmp_path / "calibrator.json"
    path.write_text(json.dumps(_fitted("isotonic")))
    res, out = _apply(tmp_path, path, scored_input)
    assert res.exit_code == 0 and out.exists(), res.output
    res, out = _export(tmp_path, path)
    assert res.exit_code == 0 and out.exists(), res.output


def test_a_file_nested_200000_deep_is_one_line(tmp_path, scored_input):
    path = tmp_path / "calibrator.json"
    path.write_text(_deep(200_000))
    _refused(*_apply(tmp_path, path, scored_input), "nested")
    _refused(*_export(tmp_path, path), "nested")
    path.write_text(_deep(40))  # deeper than a calibrator, shallow for the parser: still refused
    _refused(*_apply(tmp_path, path, scored_input), "nested")


def test_a_500mb_file_is_refused_without_reading_it(tmp_path, scored_input):
    """Sparse 500 MB file: the size is checked on disk first; Python allocates under 100 MB meanwhile."""
    path = tmp_path / "calibrator.json"
    with path.open("wb") as fh:
        fh.write(b'{"schema": 1, "method": "isotonic", "state": {"x_": [')
        fh.truncate(500 * 2**20)
    for run in (lambda: _apply(tmp_path, path, scored_input), lambda: _export(tmp_path, path)):
        tracemalloc.start()
        try:
            res, out = run()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        _refused(res, out, "MB")
        assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MB"


@pytest.mark.parametrize("seed", range(6))
def test_every_methods_own_fits_pass_the_checks(seed):
    """The control: no fit calibflow writes is refused (weighted fits included: Venn-Abers' p1 may land a
    few ulps above 1, which apply serves as it always did)."""
    from calibflow.calibrator_file import check

    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 5000))
    z = rng.normal(rng.normal(), rng.uniform(0.3, 3.0), n)
    y = (rng.random(n) < expit(z * rng.uniform(-0.2, 2.0))).astype(np.float64)
    w = rng.uniform(0.0, 3.0, n) if seed % 2 else None
    checked = 0
    for method in C.available("scores"):
        for inp in ("logit", "probability"):
            try:
                cal = C.make(method, input=inp).fit(z if inp == "logit" else expit(z), y, w)
            except ValueError:
                continue  # a method that refuses this data (anti-correlated scores for temperature, ...)
            check(C.from_json(cal.to_json()))
            checked += 1
    assert checked >= 2 * len(C.available("scores")) - 4
