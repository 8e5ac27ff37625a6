"""Regenerate the generated blocks of a reproduction page (docs/reproductions/*.md) from stored JSONs.

A page keeps its prose by hand; its numbers live in blocks that name their source and are rewritten by
``python -m calibflow.experiments.pages docs/reproductions/<key>.md``:

    <!-- generated: table docs/reproductions/decision_seed_run.json Generative model -->
    ... (a table of that stored ``Reproduction`` whose title starts with "Generative model") ...
    <!-- /generated -->

    <!-- generated: claims docs/reproductions/decision_seeds.json ^generative\\. -->
    ... (the k-of-K claims table of that stored meta-run, claims whose id matches the regexes, and how the
    held-out checks stored beside it, ``decision_check_<seed>.json``, agree with its robust claims) ...
    <!-- /generated -->

Paths are relative to the working folder the command runs in (the project root).

The summary table of ``docs/reproductions.md`` is prose too, but every figure in a row's headline must be
one its page states: ``unsupported_figures`` lists those that are not (a test keeps the list empty).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from calibflow.experiments import claims as CL
from calibflow.io import read_json, write_text

BLOCK = re.compile(r"(<!-- generated: (?P<spec>[^\n]*?) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.S)


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v).replace("|", "\\|").replace("\n", " ")


def table_markdown(table: dict[str, Any]) -> str:
    """A stored ``Table`` (as in a ``Reproduction`` JSON) as a markdown table with its title and caption."""
    lines = [f"#### {table['title']}", "", "| " + " | ".join(map(_cell, table["columns"])) + " |"]
    lines.append("|" + "---|" * len(table["columns"]))
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table["rows"]]
    if table.get("caption"):
        lines += ["", table["caption"]]
    return "\n".join(lines)


def render(spec: str) -> str:
    """One block's body from its spec: ``table <json> <title prefix>`` or ``claims <json> <regex>...``."""
    kind, path, *rest = spec.split()  # regexes keep their backslashes; a title prefix is re-joined below
    data = read_json(path)
    if kind == "table":
        prefix = " ".join(rest)
        found = [t for t in data["tables"] if t["title"].startswith(prefix)]
        if not found:
            raise ValueError(f"{path} has no table whose title starts with {prefix!r}")
        head = f"From `{path}` ({data['key']}, profile `{data['profile']}`)."
        return "\n\n".join([head, *(table_markdown(t) for t in found)])
    if kind == "claims":
        return CL.page_section(data, path, rest or ["."], held_out_checks(path))
    raise ValueError(f"unknown generated block kind {kind!r} (table or claims)")


def held_out_checks(meta_path: str) -> list[tuple[int, dict[str, Any]]]:
    """The stored held-out checks of a meta-run: ``<key>_check_<seed>.json`` beside ``<key>_seeds.json``
    whose ``meta`` names it, by seed."""
    meta = Path(meta_path)
    stem = meta.name.removesuffix("_seeds.json")
    found = []
    for f in meta.parent.glob(f"{stem}_check_*.json"):
        check = read_json(f)
        if Path(check.get("meta", "")).name == meta.name:
            found.append((int(check["seed"]), check))
    return sorted(found, key=lambda sc: sc[0])


def regenerate(page: str) -> str:
    """``page`` with every generated block's body rewritten from its source."""
    return BLOCK.sub(lambda m: m.group(1) + render(m.group("spec")) + "\n" + m.group(4), page)


# A figure a headline quotes: "74 of 80", "+4.8%", "-0.34%", "0.049-0.051", "3-4x", "8.68%".
FIGURE = re.compile(
    r"(?<![\w.])(?:\d+ of \d+|[+-]?\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?(?:%|x\b)|\d+\.\d+(?:-\d+\.\d+)?)"
)
SUMMARY_ROW = re.compile(r"^\|.*\]\((?P<page>reproductions/[\w-]+\.md)\) \| (?P<headline>.*) \|$", re.M)


def unsupported_figures(index: str | Path) -> dict[str, list[str]]:
    """For each summary row of the index page, the figures of its headline that its page does not state."""
    index = Path(index)
    out: dict[str, list[str]] = {}
    for m in SUMMARY_ROW.finditer(index.read_text()):
        page = (index.parent / m.group("page")).read_text()
        missing = [f for f in FIGURE.findall(m.group("headline")) if f not in page]
        if missing:
            out[m.group("page")] = missing
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Rewrite the generated blocks of reproduction pages.")
    ap.add_argument("pages", nargs="+", help="markdown pages (docs/reproductions/*.md)")
    args = ap.parse_args(argv)
    for p in map(Path, args.pages):
        text = p.read_text()
        new = regenerate(text)
        if new != text:
            write_text(p, new)
            print(f"{p}: regenerated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
