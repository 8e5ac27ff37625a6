"""docs/reliability.md states only what a test checks: every promise (a table row) names at least one test,
and every test it names exists; numbers it quotes from the code equal the code's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"


def _rows() -> list[str]:
    rows = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("|") and not line.startswith(("|---", "| Promise", "| Case")):
            rows.append(line)
    return rows


def _defined_tests() -> set[str]:
    """Test functions and test modules (a promise may name a whole file)."""
    names = {f.stem for f in (ROOT / "tests").rglob("test_*.py")}
    for f in (ROOT / "tests").rglob("test_*.py"):
        names |= set(re.findall(r"^\s*(?:async )?def (test_\w+)", f.read_text(encoding="utf-8"), re.M))
    return names


def test_every_promise_names_a_test_that_exists():
    defined = _defined_tests()
    missing, unnamed = [], []
    for row in _rows():
        named = set(re.findall(r"\b(test_\w+)", row.rsplit("|", 2)[-2]))
        files = re.findall(r"tests/[\w/]+\.py", row)
        if not named and not files:
            unnamed.append(row[:100])
        missing += [n for n in named if n not in defined]
        missing += [f for f in files if not (ROOT / f).is_file()]
    assert not unnamed, "promises with no test:\n" + "\n".join(unnamed)
    assert not missing, f"tests named in docs/reliability.md that do not exist: {sorted(set(missing))}"


def test_the_segment_values_limit_is_the_codes():
    from calibflow.aggregate.tables import SEG_VALUES_MAX

    text = DOC.read_text(encoding="utf-8")
    assert f"{SEG_VALUES_MAX:,}" in text
    assert "more than 1,000 values" not in text  # the old claim: the code allowed 131,072
