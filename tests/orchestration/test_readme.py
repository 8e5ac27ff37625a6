"""The README's Python example is real code: run it on the real dataset and check what it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


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


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), re.S)


def test_readme_opens_with_the_user_commands_then_the_benchmark():
    """The first commands are a user's own project (install, init, run, apply), then make run / make test;
    every option they use exists in the CLI."""
    import click
    import typer.main

    from calibflow.cli.main import app

    first, second = _blocks("bash")[:2]
    steps = [ln.split("#")[0].strip() for ln in first.splitlines() if ln.strip()]
    order = [
        next(i for i, s in enumerate(steps) if s.startswith(p))
        for p in ("pip install", "calibflow init", "calibflow run", "calibflow apply")
    ]
    assert order == sorted(order), steps
    assert [ln.split()[:2] for ln in second.splitlines() if ln.strip()] == [["make", "run"], ["make", "test"]]
    cli = typer.main.get_command(app)
    for step in steps:
        words = step.split()
        if words[0] != "calibflow":
            continue
        cmd = cli.get_command(click.Context(cli), words[1])
        known = {o for p in cmd.params for o in p.opts}
        used = {w for w in words if w.startswith("--")}
        assert used <= known, (words[1], used - known)
