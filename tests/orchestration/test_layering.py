"""The layers of the package, checked from the source: the core never reaches up, stages never reach across.

- core: ``calibflow`` outside ``calibflow.pipeline``, ``calibflow.flows`` and ``calibflow.cli``
  (numpy/scipy/sklearn/xgboost/DuckDB);
- pipeline: the stages (``calibflow.pipeline.<step>``, each a command) and the modules they share;
- flows: Prefect flows and server handling;
- cli: the ``calibflow`` command line. It may import flows and pipeline; flows and pipeline never import it,
  and the core imports none of the three.

Every ``import`` counts, also one inside a function: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "calibflow"
ORCHESTRATION = ("prefect", "prefect_dask", "dvc", "great_expectations", "gto", "typer")
# A stage is a pipeline module with a command line (what dvc.yaml or a flow runs as ``python -m``); every
# other pipeline module is shared by the stages.
STAGES = {p.stem for p in (PKG / "pipeline").glob("*.py") if '__name__ == "__main__"' in p.read_text()}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here if is_pkg else here[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            # ``from calibflow.pipeline import select`` imports the submodule ``select``
            out.update(f"{mod}.{alias.name}" for alias in node.names)
    return out


MODULES = {_module_name(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


OUTER = ("calibflow.pipeline", "calibflow.flows", "calibflow.cli")


def _in(name: str, layer: str) -> bool:
    return name == layer or name.startswith(layer + ".")


def _is_core(name: str) -> bool:
    return not any(_in(name, layer) for layer in OUTER)


def _stage(name: str) -> str | None:
    """The stage a pipeline module is (``calibflow.pipeline.select`` -> ``select``), None for shared ones."""
    parts = name.split(".")
    if len(parts) != 3 or parts[:2] != ["calibflow", "pipeline"]:
        return None
    return parts[2] if parts[2] in STAGES else None


def _known(imported: str) -> str | None:
    """The calibflow module an import names (a ``from m import function`` names ``m``)."""
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def test_the_layering_checker_sees_the_package():
    assert "calibflow.pipeline.select" in MODULES and "calibflow.cli.main" in MODULES
    assert "calibflow.flows.pipeline" in MODULES and not any(_in(m, "calibflow.flows.cli") for m in MODULES)
    assert {"fetch", "validate", "prepare", "train", "calibrate", "evaluate", "select", "report"} <= STAGES
    in_dvc = set(re.findall(r"python -m calibflow\.pipeline\.(\w+)", (ROOT / "dvc.yaml").read_text()))
    assert in_dvc <= STAGES
    assert len([m for m in MODULES if _is_core(m)]) > 40


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _is_core(m)))
def test_core_never_imports_orchestration_or_the_outer_layers(name):
    bad = sorted(
        i
        for i in MODULES[name]
        if i.split(".")[0] in ORCHESTRATION or any(_in(i, layer) for layer in OUTER)
    )
    assert not bad, f"{name} (core) imports {bad}"


@pytest.mark.parametrize(
    "name", sorted(m for m in MODULES if _in(m, "calibflow.flows") or _in(m, "calibflow.pipeline"))
)
def test_flows_and_pipeline_never_import_the_command_line(name):
    bad = sorted(i for i in MODULES[name] if _in(i, "calibflow.cli"))
    assert not bad, f"{name} imports the command line {bad}: move what they share into flows or pipeline"


def test_the_command_line_is_its_own_package():
    """Every ``typer`` app lives in calibflow.cli (flows run stages; they take no command-line options)."""
    uses_typer = sorted(m for m, deps in MODULES.items() if "typer" in deps)
    assert uses_typer and all(_in(m, "calibflow.cli") for m in uses_typer), uses_typer


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("calibflow.pipeline")))
def test_pipeline_never_imports_flows_or_prefect(name):
    bad = sorted(i for i in MODULES[name] if i.startswith("calibflow.flows") or i.split(".")[0] == "prefect")
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("calibflow.pipeline")))
def test_no_stage_imports_another_stage(name):
    me = _stage(name)
    others = sorted({s for i in MODULES[name] if (s := _stage(_known(i) or "")) and s != me})
    kind = f"stage {me}" if me else "shared pipeline module"
    assert not others, f"{name} ({kind}) imports stage(s) {others}: move what they share into the core"


def test_no_import_cycle_between_modules():
    graph = {m: {k for i in deps if (k := _known(i)) and k != m} for m, deps in MODULES.items()}
    # a package's __init__ importing its own submodules is how packages work, not a cycle to flag
    for m in graph:
        graph[m] = {k for k in graph[m] if not m.startswith(k + ".")}
    seen: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(m: str) -> None:
        seen[m] = 1
        stack.append(m)
        for k in sorted(graph.get(m, ())):
            if seen.get(k) == 1:
                cycles.append(stack[stack.index(k) :] + [k])
            elif k not in seen:
                visit(k)
        stack.pop()
        seen[m] = 2

    for m in sorted(graph):
        if m not in seen:
            visit(m)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


#: What the monitor package must never import: it is library code the stage, the flows, the report and the
#: experiments call (issue 40).
MONITOR_FORBIDDEN = ("prefect", "prefect_dask", "dvc", "great_expectations", "gto", "typer")
MONITOR_OUTER = ("calibflow.flows", "calibflow.cli", "calibflow.pipeline")


def test_the_monitor_is_one_package():
    monitor = sorted(m for m in MODULES if _in(m, "calibflow.monitor"))
    assert {"calibflow.monitor", "calibflow.monitor.deliveries", "calibflow.monitor.gate"} <= set(monitor)
    assert not any(m in MODULES for m in ("calibflow.monitoring", "calibflow.deliveries",
                                          "calibflow.monitoring_scale", "calibflow.monitoring_stream"))


@pytest.mark.parametrize("name", sorted(m for m in MODULES if _in(m, "calibflow.monitor")))
def test_the_monitor_package_imports_no_orchestration(name):
    bad = sorted(
        i for i in MODULES[name]
        if i.split(".")[0] in MONITOR_FORBIDDEN or any(_in(i, layer) for layer in MONITOR_OUTER)
    )
    assert not bad, f"{name} (the monitor package) imports {bad}"


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m.startswith("calibflow.monitor.")))
def test_the_monitor_modules_import_each_other_not_the_face(name):
    """Inside the package a module imports the module that defines a name, never the face (which imports
    them all: a cycle the moment a job module needs it)."""
    assert "calibflow.monitor" not in {_known(i) for i in MODULES[name]}, name
