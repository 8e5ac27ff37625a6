"""Test modules share code through tests/helpers/ only: no test module imports another one.

Before, pyproject's ``pythonpath`` listed every test folder, so ``from test_pipeline_dvc import dvc`` worked
and a helper's home was whichever test happened to define it first.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_top_modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_no_test_module_imports_another_or_a_helper_by_its_bare_name():
    modules = sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    test_names = {p.stem for p in modules if p.name.startswith("test_")}
    bare_helpers = {p.stem for p in (TESTS / "helpers").glob("*.py")} - {"__init__"}
    loose = sorted(p.name for p in TESTS.glob("*.py") if p.name != "conftest.py")
    assert not loose, f"shared test code belongs in tests/helpers/, not tests/: {loose}"
    wrong = {
        str(p.relative_to(TESTS)): sorted(_imported_top_modules(p) & (test_names | bare_helpers))
        for p in modules
    }
    assert {k: v for k, v in wrong.items() if v} == {}, "import test code as helpers.<module>"
    assert len(modules) > 50 and bare_helpers >= {"source_data", "dvc_repo", "waiting"}  # the scan saw them
