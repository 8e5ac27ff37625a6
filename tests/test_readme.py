"""The README's Python example is real code: run it on the real dataset and check what it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_and_calibrates():
    text = README.read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert len(code.strip().splitlines()) <= 12, "the README promises a ten-line example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    rows = dict(re.findall(r"^(\w+)\s+ECE ([0-9.]+)", out.getvalue(), re.M))
    assert set(rows) == {"platt", "isotonic", "beta", "spline"}
    assert all(float(v) < 0.03 for v in rows.values()), rows
