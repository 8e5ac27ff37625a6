"""Issue 39: the params check loads only what it needs, so a bad value is refused in about a second.

The check reads each calibrator class's own ``_bounds`` (the one source of truth), so it imports the
calibrator modules; scikit-learn, numba, xgboost and pandas are imported by the fits and stages that use
them, never by the check. Each case runs in a fresh interpreter and reads ``sys.modules`` after the
check: a module-level import of one of them anywhere on the path (a calibrator, the registry, the scale
section, the datasets, a source's time split, the command line) fails here, instead of silently costing a
second and a half on every refusal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

PY = sys.executable
#: pandas too: a source's time split and the segmented calibrators' modules are read without it
HEAVY = ("sklearn", "numba", "xgboost", "pandas")

#: Loads the params file in argv[1] the way ``calibflow run`` does (the command line's module first), then
#: prints the check's outcome and which heavy modules are loaded, as JSON.
CHECK = f"""
import json, sys
import calibflow.cli.main  # the command's own imports count too
from calibflow.pipeline.params_schema import ParamsError, load_and_validate
try:
    load_and_validate(sys.argv[1])
    outcome = "ok"
except ParamsError as exc:
    outcome = str(exc)
heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
print(json.dumps({{"outcome": outcome, "heavy": heavy}}))
"""


def _check(params: dict, folder: Path) -> dict:
    p = folder / "params.yaml"
    p.write_text(yaml.safe_dump(params))
    out = subprocess.run([PY, "-c", CHECK, str(p)], capture_output=True, text=True, timeout=120, cwd=folder)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _source_params(folder: Path) -> dict:
    """A score source with a time split, as ``calibflow init`` writes it (the source's checks run too)."""
    rng = np.random.default_rng(0)
    s = rng.random(200)
    ts = pd.Timestamp("2026-01-01") + pd.to_timedelta(rng.integers(0, 30 * 86400, 200), unit="s")
    pd.DataFrame({"p": s, "y": (rng.random(200) < s).astype(int), "ts": ts}).to_parquet(folder / "d.parquet")
    source = {"path": "d.parquet", "label": "y", "score": "p", "time": "ts", "score_kind": "probability",
              "split": {"test_last": "7d", "calib_last": "14d"}}
    return {"datasets": {"names": []}, "sources": {"s": source}}


@pytest.mark.parametrize("n_bins", [100_000_000, -3])
def test_a_bad_size_is_refused_without_sklearn_numba_xgboost_or_pandas(tmp_path, n_bins):
    params = {**_source_params(tmp_path), "calibrate": {"options": {"histogram": {"n_bins": n_bins}}}}
    got = _check(params, tmp_path)
    assert "histogram.n_bins must be an integer >= 1" in got["outcome"], got
    assert len(got["outcome"].splitlines()) == 1, got
    assert got["heavy"] == [], f"the params check imported {got['heavy']}"


def test_a_valid_params_file_with_every_section_is_checked_without_them(tmp_path):
    """The accepting path goes through every check: method names and options (the registry, each class's
    bounds and constructor), the segmented and extra-input methods, the datasets, the scale section."""
    params = {
        **_source_params(tmp_path),
        "datasets": {"names": ["adult", "hillstrom"], "targets": {"hillstrom": "visit"}},
        "calibrate": {
            "methods": ["platt", "isotonic", "histogram", "venn_abers", "spline", "beta"],
            "options": {"histogram": {"n_bins": 20}, "spline": {"n_splines": 8}, "bbq": {"C": 2.0}},
        },
        "scale": {"buckets": 4096, "replicates": 8},
    }
    got = _check(params, tmp_path)
    assert got["outcome"] == "ok", got
    assert got["heavy"] == [], f"the params check imported {got['heavy']}"


def test_the_fits_still_get_what_they_import_lazily():
    """The other side of the lazy imports: the calibrators whose fits need numba, xgboost or
    scikit-learn still fit and predict (a name missing from a lazy import would only fail here)."""
    import calibflow.calibrators as C

    rng = np.random.default_rng(1)
    s = rng.random(2_000)
    y = (rng.random(2_000) < s).astype(float)
    for name in ("venn_abers", "isotonic", "platt"):
        p = C.make(name).fit(s, y).predict(s)
        assert np.all((p >= 0) & (p <= 1)) and np.corrcoef(p, s)[0, 1] > 0.9, name
    seg = np.where(rng.random(2_000) < 0.5, "a", "b")
    mc = C.get_class("multicalibration")(n_estimators=5).fit(s, y, segments={"g": seg})
    assert mc.predict(s, segments={"g": seg}).shape == (2_000,)
