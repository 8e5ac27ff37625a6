"""True code dependencies of the benchmark project's stages: the import closure of each stage command.

A stage ``python -m calibflow.pipeline.<step>`` runs every calibflow module it imports, directly or not,
at the top of a file or inside a function. Its ``dvc.yaml`` deps must name exactly those files, not code
folders: a folder dep also hashes the ``__pycache__`` files numba writes at run time, and a hand-kept list
drifts (``prepare`` ran ``calibflow/sources.py`` without depending on it). This module computes the closure
statically (``ast``, no import), checks a dvc.yaml against it, and rewrites the code lines of its deps.

``python -m calibflow.flows.stage_deps --check`` (exit 1 listing what is missing) or ``--write``.
A user project does not use this: its stages depend on ``.calibflow/code.json``, the stamp of the installed
calibflow (calibflow.flows.project).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from functools import cache
from pathlib import Path

import yaml

PACKAGE = "calibflow"
#: A stage whose argument names a module it loads with importlib: stage -> module pattern.
ARGUMENT_MODULES = {"reproduce": "calibflow.experiments.{key}"}
#: Package data a module reads at run time: module file -> data files (deps beside the code).
DATA_FILES: dict[str, list[str]] = {}  # none today: the params defaults live in params_schema.py
_CMD = re.compile(r"python -m (calibflow\.[\w.]+)")
_CODE_DEP = re.compile(r"^(\s*)- (calibflow/\S+)\s*$")


def package_root() -> Path:
    """The folder holding the ``calibflow`` package (the repository root in a checkout)."""
    return Path(__file__).resolve().parents[2]


def module_file(module: str, root: Path) -> Path | None:
    """The file of ``module`` under ``root`` (a package's ``__init__.py``), or None if not calibflow's."""
    base = root.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.is_file():
            return cand
    return None


def _imported(tree: ast.AST, module: str, is_pkg: bool) -> set[str]:
    """calibflow modules named by the import statements of one file (anywhere in it)."""
    out: set[str] = set()
    here = module if is_pkg else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # `from pkg import submodule`
    return {m for m in out if m == PACKAGE or m.startswith(PACKAGE + ".")}


def _loads_all_submodules(source: str) -> bool:
    """A package that imports each of its submodules by name (calibflow.calibrators' registry)."""
    return "pkgutil.iter_modules(__path__)" in source and "import_module(f\"{__name__}." in source


@cache
def _direct(module: str, root: Path) -> frozenset[str]:
    path = module_file(module, root)
    if path is None:
        return frozenset()
    source = path.read_text(encoding="utf-8")
    is_pkg = path.name == "__init__.py"
    found = _imported(ast.parse(source, str(path)), module, is_pkg)
    if is_pkg and _loads_all_submodules(source):
        found |= {f"{module}.{p.stem}" for p in path.parent.glob("*.py") if p.stem != "__init__"}
    parts = module.split(".")
    found |= {".".join(parts[:i]) for i in range(1, len(parts))}  # parent packages run their __init__
    return frozenset(m for m in found if module_file(m, root) is not None)


def closure(modules: list[str], root: Path | None = None) -> list[str]:
    """Every calibflow file (relative to ``root``, posix) that running ``modules`` may execute, sorted."""
    root = root or package_root()
    seen: set[str] = set()
    todo = list(modules)
    while todo:
        mod = todo.pop()
        if mod in seen or module_file(mod, root) is None:
            continue
        seen.add(mod)
        todo.extend(_direct(mod, root))
    files = {module_file(m, root).relative_to(root).as_posix() for m in seen}
    return sorted(files | {d for f in files for d in DATA_FILES.get(f, [])})


def _stage_items(name: str, stage: dict, params: dict) -> dict[str | None, list[str]]:
    """Matrix key (None for a plain stage) -> the modules that item runs."""
    cmd = str((stage.get("do") or stage).get("cmd", ""))
    mods = _CMD.findall(cmd)
    pattern = ARGUMENT_MODULES.get(name)
    keys = params.get("papers") or [] if pattern else []
    if not keys:
        return {None: mods}
    return {k: [*mods, pattern.format(key=k)] for k in keys}


def _item_file(name: str, key: str | None) -> str | None:
    pattern = ARGUMENT_MODULES.get(name)
    return pattern.replace(".", "/").format(key=key) + ".py" if pattern and key else None


def stage_code(name: str, stage: dict, params: dict, root: Path) -> list[str]:
    """The code deps of one dvc.yaml stage: files every item runs, a file only one item runs (the
    module its argument names) as ``${item.key}``, and any other file some item runs."""
    items = {k: set(closure(m, root)) for k, m in _stage_items(name, stage, params).items()}
    files: set[str] = set()
    for key, fs in items.items():
        own = _item_file(name, key)
        others = set().union(*(v for k, v in items.items() if k != key))
        for f in fs:
            files.add(_item_file(name, "${item.key}") if f == own and f not in others else f)
    return sorted(files)


def _dvc_deps(stage: dict) -> list[str]:
    body = stage.get("do") or stage
    return [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps") or []]


def _covered(path: str, deps: list[str]) -> bool:
    return any(path == d.rstrip("/") or path.startswith(d.rstrip("/") + "/") for d in deps)


def missing(dvc_yaml: Path, params_yaml: Path, root: Path | None = None) -> dict[str, list[str]]:
    """Stage -> calibflow files it runs that its deps do not cover (empty: every stage is honest).

    Each matrix item is checked with its own key substituted, so a paper importing another paper's
    module is caught too."""
    root = root or package_root()
    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    params = yaml.safe_load(params_yaml.read_text()) or {}
    out: dict[str, list[str]] = {}
    for name, stage in stages.items():
        deps = _dvc_deps(stage)
        gaps: set[str] = set()
        for key, mods in _stage_items(name, stage, params).items():
            item_deps = [d.replace("${item.key}", key) if key else d for d in deps]
            gaps |= {f for f in closure(mods, root) if not _covered(f, item_deps)}
        if gaps:
            out[name] = sorted(gaps)
    return out


def folder_deps(dvc_yaml: Path) -> dict[str, list[str]]:
    """Stage -> code folders among its deps (they hash ``__pycache__``, numba's cache included)."""
    stages = yaml.safe_load(dvc_yaml.read_text())["stages"]
    root = package_root()
    return {
        n: dirs
        for n, st in stages.items()
        if (dirs := [d for d in _dvc_deps(st) if d.startswith(PACKAGE + "/") and (root / d).is_dir()])
    }


def render_code_deps(text: str, params: dict, root: Path | None = None) -> str:
    """``text`` (a dvc.yaml) with each stage's ``calibflow/...`` deps replaced by its import closure.

    Only those lines change (written where the first of them was): other deps, comments and order stay.
    """
    root = root or package_root()
    stages = yaml.safe_load(text)["stages"]
    out: list[str] = []
    stage: str | None = None
    done: set[str] = set()
    for line in text.splitlines(keepends=True):
        m = re.match(r"^  (\w+):\s*$", line)
        if m and m.group(1) in stages:
            stage = m.group(1)
        dep = _CODE_DEP.match(line)
        if not dep or stage is None:
            out.append(line)
        elif stage not in done:
            done.add(stage)
            out.extend(f"{dep.group(1)}- {f}\n" for f in stage_code(stage, stages[stage], params, root))
    return "".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dvc-yaml", default="dvc.yaml")
    parser.add_argument("--params", default="params.yaml")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 when a stage's deps miss a module")
    mode.add_argument("--write", action="store_true", help="rewrite the code deps of dvc.yaml")
    args = parser.parse_args(argv)
    dvc_yaml, params_yaml = Path(args.dvc_yaml), Path(args.params)
    if args.write:
        params = yaml.safe_load(params_yaml.read_text()) or {}
        dvc_yaml.write_text(render_code_deps(dvc_yaml.read_text(), params))
    gaps = missing(dvc_yaml, params_yaml)
    for stage, files in gaps.items():
        print(f"{dvc_yaml}: stage {stage!r} runs {', '.join(files)} without depending on it", file=sys.stderr)
    return 1 if gaps else 0


if __name__ == "__main__":
    raise SystemExit(main())
