"""The pipeline's stages, declared once: names, commands, data inputs, outputs and the params they read.

Everything else about the stage order follows from ``STAGES``:

- a user project's ``dvc.yaml`` is rendered from it (``render``; ``calibflow init`` writes it), in one of two
  shapes: the full pipeline, or, when every source brings its own scores and no built-in dataset is named, the
  same pipeline without ``fetch`` and ``train`` (nothing to download, no model to fit: ``prepare
  --predictions`` writes the score predictions train would have copied);
- the benchmark checkout's ``dvc.yaml`` (which adds the code dependencies and the paper stages) is checked
  against it (``check``, tests/pipeline/test_dag.py);
- the in-process test runner (tests/helpers/sources_pipeline.py) walks ``order``.

A dependency on an output of a stage a shape leaves out is left out with it (the score shape's ``prepare``
no longer waits for ``data/raw``). Params are the sections of ``params.yaml`` a stage reads (a dotted key
counts as its section where the benchmark's dvc.yaml names it finer); ``*`` is the whole file.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

#: The arguments that make ``prepare`` also write the score predictions (the score shape, no train stage).
SCORE_PREDICTIONS = "--predictions"


@dataclass(frozen=True)
class Out:
    path: str
    cache: bool = True  # False: small files kept in git (metrics, models, the summary)


@dataclass(frozen=True)
class Stage:
    """One stage (or one group: ``foreach`` sources, validation phases, papers) of the pipeline."""

    name: str
    module: str  # calibflow.pipeline.<module>
    args: str = ""
    deps: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    outs: tuple[Out, ...] = ()
    #: "sources": one stage per declared source (``${key}``, ``${item.path}``); "phases": validation phases
    foreach: str | None = None
    #: only in the full shape: something to download or a model to train
    features: bool = False
    #: only in the benchmark checkout (paper reproductions)
    papers: bool = False
    comment: str = ""
    #: the score shape's extra arguments and outputs (work of a stage that shape leaves out)
    score_args: str = ""
    score_outs: tuple[Out, ...] = ()
    #: deps on the paper stages' outputs (only where those stages are: the benchmark checkout)
    paper_deps: tuple[str, ...] = ()

    @property
    def cmd(self) -> str:
        return f"python -m calibflow.pipeline.{self.module}" + (f" {self.args}" if self.args else "")


#: Validation phases: the data each checks (``data``, ``also``) and the params section of what made it.
PHASES: dict[str, dict[str, str]] = {
    "raw": {"data": "data/raw", "also": "data/raw", "param": "datasets"},
    "prepared": {"data": "data/prepared", "also": "data/prepared", "param": "prepare"},
    "calibrated": {"data": "data/calibrated", "also": "data/calibrated_segments", "param": "calibrate"},
}

STAGES: tuple[Stage, ...] = (
    Stage(
        "sources",
        "fingerprint",
        "${key}",
        deps=("${item.path}",),
        outs=(Out("data/sources/${key}/fingerprint.json", cache=False),),
        foreach="sources",
    ),
    Stage(
        "fetch",
        "fetch",
        deps=("data/sources",),
        params=("datasets", "sources"),
        outs=(Out("data/raw"),),
        features=True,
    ),
    Stage(
        "validate",
        "validate",
        "${key}",
        deps=("data/sources", "${item.data}", "${item.also}"),
        params=("datasets", "sources", "validate", "scale", "${item.param}"),
        outs=(Out("reports/validation/${key}.json"),),
        foreach="phases",
        comment="Great Expectations suites; a failing suite exits 1, so the stages after it do not run.",
    ),
    Stage(
        "prepare",
        "prepare",
        deps=("data/raw", "data/sources", "reports/validation/raw.json"),
        params=("seed", "datasets", "sources", "prepare", "scale", "calibrate"),
        outs=(Out("data/prepared"),),
        score_args=SCORE_PREDICTIONS,
        score_outs=(Out("data/predictions"), Out("metrics/train.json", cache=False)),
    ),
    Stage(
        "train",
        "train",
        deps=("data/prepared", "reports/validation/prepared.json"),
        params=("seed", "datasets", "sources", "model", "replicas", "scale"),
        outs=(Out("data/models"), Out("data/predictions"), Out("metrics/train.json", cache=False)),
        features=True,
    ),
    Stage(
        "calibrate",
        "calibrate",
        "--all",
        # the prepared suites gate the fits (in the score shape no train stage waits for them)
        deps=("data/predictions", "reports/validation/prepared.json"),
        params=("scale", "datasets", "sources", "calibrate"),
        outs=(Out("data/calibrated"),),
        comment="Every method of calibrate.methods in one process (one folder each under data/calibrated).",
    ),
    Stage(
        "calibrate_segments",
        "calibrate_segments",
        # the prepared suites gate the fits (in the score shape no train stage waits for them)
        deps=("data/predictions", "reports/validation/prepared.json"),
        params=("scale", "datasets", "sources", "calibrate"),
        outs=(Out("data/calibrated_segments"),),
        comment="Per-segment calibrators for sources that declare segments; select compares the best of "
        "them with the chosen global method.",
    ),
    Stage(
        "evaluate",
        "evaluate",
        deps=(
            "data/predictions",
            "data/calibrated",
            "data/calibrated_segments",
            "reports/validation/calibrated.json",
        ),
        params=("scale", "seed", "datasets", "sources", "calibrate", "evaluate"),
        outs=(
            Out("metrics/evaluation", cache=False),
            Out("plots/reliability", cache=False),
            Out("plots/histograms"),
        ),
    ),
    Stage(
        "select",
        "select",
        deps=(
            "data/predictions",
            "data/calibrated",
            "data/calibrated_segments",
            "data/prepared",
            "data/raw",
            "data/sources",
            "reports/validation/calibrated.json",
        ),
        params=("scale", "seed", "datasets", "sources", "calibrate", "evaluate", "select"),
        outs=(Out("models", cache=False), Out("metrics/headline.json", cache=False)),
        comment='The calibrator to deploy (or "keep your scores") and its card, per source: '
        "models/<name>/calibrator.json + card.json; the verdicts with their intervals in "
        "metrics/headline.json.",
    ),
    Stage(
        "reproduce",
        "reproduce",
        "${item.key}",
        params=("seed", "reproduce"),
        outs=(
            Out("reports/reproductions/${item.key}.json"),
            Out("metrics/reproductions/${item.key}.json", cache=False),
        ),
        papers=True,
    ),
    Stage(
        "paper_page",
        "report",
        "--paper ${item.key}",
        deps=("reports/reproductions/${item.key}.json",),
        outs=(Out("reports/pages/paper-${item.key}.html"),),
        papers=True,
    ),
    Stage(
        "report",
        "report",
        deps=(
            "data/raw",
            "data/prepared",
            "reports/validation/raw.json",
            "reports/validation/prepared.json",
            "reports/validation/calibrated.json",
            "models",
            "metrics",
            "plots/reliability",
            "plots/histograms",
            "data/sources",
        ),
        paper_deps=("reports/reproductions", "reports/pages"),
        params=("*",),
        outs=(
            Out("reports/index.html"),
            Out("plots/report", cache=False),
            Out("reports/validation.json"),
            Out("reports/summary.md", cache=False),
        ),
    ),
)


def scores_only(params: dict[str, Any]) -> bool:
    """The score shape fits: no built-in dataset named, and every source brings its own scores."""
    names = ((params.get("datasets") or {}).get("names")) or []
    sources = params.get("sources") or {}
    return not names and all(isinstance(d, dict) and d.get("score") is not None for d in sources.values())


def stages(scores: bool = False, papers: bool = False) -> list[Stage]:
    """The stages of one shape, in pipeline order."""
    return [s for s in STAGES if (papers or not s.papers) and not (scores and s.features)]


def _items(st: Stage, params: dict[str, Any]) -> list[tuple[str | None, dict[str, str]]]:
    """Each item of a stage with the values its ``${...}`` placeholders take."""
    if st.foreach == "sources":
        return [
            (k, {"${key}": k, "${item.path}": str(d.get("path", ""))})
            for k, d in (params.get("sources") or {}).items()
        ]
    if st.foreach == "phases":
        return [
            (k, {"${key}": k, "${item.data}": v["data"], "${item.also}": v["also"]})
            for k, v in PHASES.items()
        ]
    return [(None, {})]


def _fill(path: str, values: dict[str, str]) -> str:
    for k, v in values.items():
        path = path.replace(k, v)
    return path


def order(params: dict[str, Any]) -> list[tuple[str, str | None]]:
    """What ``dvc repro`` runs for ``params`` (a user project's shape), upstream first: (stage, item or None).

    Items: each source of ``sources``, each phase of ``validate``. Among stages that are ready, the declared
    order decides (as DVC's own plan keeps a stable order).
    """
    scores = scores_only(params)
    nodes = []
    for st in stages(scores=scores):
        for key, values in _items(st, params):
            outs = [_fill(o.path, values) for o in st.outs + (st.score_outs if scores else ())]
            nodes.append(((st.name, key), [_fill(d, values) for d in st.deps], outs))

    def feeds(a: list[str], deps: list[str]) -> bool:
        return any(d == o or d.startswith(o + "/") or o.startswith(d + "/") for o in a for d in deps)

    done: list[tuple[str, str | None]] = []
    todo = list(nodes)
    while todo:
        ready = next(n for n in todo if not any(feeds(m[2], n[1]) for m in todo if m is not n))
        done.append(ready[0])
        todo.remove(ready)
    return done


def _dropped_outs(kept: list[Stage], scores: bool) -> list[str]:
    names = {s.name for s in kept}
    made = {o.path for s in kept for o in s.outs + (s.score_outs if scores else ())}
    return [o.path for s in STAGES if s.name not in names for o in s.outs if o.path not in made]


def _live(path: str, dropped: list[str]) -> bool:
    return not any(path == d or path.startswith(d + "/") for d in dropped)


@dataclass
class _Lines:
    lines: list[str] = field(default_factory=list)

    def add(self, indent: int, text: str) -> None:
        self.lines.append(" " * indent + text)


def _outs(w: _Lines, indent: int, outs: tuple[Out, ...]) -> None:
    w.add(indent, "outs:")
    for o in outs:
        w.add(indent + 2, f"- {o.path}:")
        if not o.cache:
            w.add(indent + 6, "cache: false")
        w.add(indent + 6, "persist: true")


def _body(w: _Lines, st: Stage, indent: int, scores: bool, dropped: list[str]) -> None:
    args = " ".join(a for a in (st.args, st.score_args if scores else "") if a)
    w.add(indent, f"cmd: python -m calibflow.pipeline.{st.module}" + (f" {args}" if args else ""))
    w.add(indent, "deps:")
    w.add(indent + 2, "- .calibflow/code.json")
    for d in st.deps:
        if _live(d, dropped):
            w.add(indent + 2, f"- {d}")
    if st.params == ("*",):
        w.add(indent, "params:")
        w.add(indent + 2, "- params.yaml:")
    elif st.params:
        w.add(indent, "params:")
        for p in st.params:
            w.add(indent + 2, f"- {p}")
    _outs(w, indent, st.outs + (st.score_outs if scores else ()))


HEADER = """\
# A calibflow project (written by `calibflow init` from calibflow/pipeline/dag.py, the one declaration of
# the stages). Every stage is `python -m calibflow.pipeline.<step>` from the installed calibflow;
# `calibflow run` runs them (or `dvc repro`). This file is the one place that names the project's paths.
# Code: every stage depends on .calibflow/code.json, the installed calibflow's version and a hash of its files
# (rewritten by `calibflow init` and `calibflow run` when it changes), never on cache files.
# Params: each stage depends on the sections of params.yaml it reads; a section left {} means calibflow's
# defaults (calibflow/pipeline/params_schema.py, part of the code stamp).
# Outputs are `persist: true`: the stages write atomically and a failed stage keeps the last good output.
"""
SCORE_NOTE = """\
# Every source brings its own scores and no built-in dataset is named: no `fetch` (nothing to download)
# and no `train` (no model to fit; `prepare --predictions` writes data/predictions). `calibflow init` and
# `calibflow run` write the full pipeline instead when a source with features or a dataset is added
# (unless you edited this file).
"""


def render(scores: bool = False) -> str:
    """A user project's ``dvc.yaml``: the full pipeline, or (``scores``) the score shape."""
    kept = stages(scores=scores)
    dropped = _dropped_outs(kept, scores)
    w = _Lines()
    w.lines.extend((HEADER + (SCORE_NOTE if scores else "")).rstrip("\n").split("\n"))
    w.add(0, "stages:")
    for st in kept:
        for line in textwrap.wrap(st.comment, 106):
            w.add(2, f"# {line}")
        w.add(2, f"{st.name}:")
        if st.foreach == "sources":
            w.add(4, "foreach: ${sources}")
            w.add(4, "do:")
            _body(w, st, 6, scores, dropped)
        elif st.foreach == "phases":
            w.add(4, "foreach:")
            for key, item in PHASES.items():
                data = item["data"] if _live(item["data"], dropped) else "data/sources"
                also = item["also"] if _live(item["also"], dropped) else "data/sources"
                w.add(6, f"{key}: {{data: {data}, also: {also}, param: {item['param']}}}")
            w.add(4, "do:")
            _body(w, st, 6, scores, dropped)
        else:
            _body(w, st, 4, scores, dropped)
        w.add(0, "")
    w.lines += ["metrics:", "  - metrics/headline.json", "", "plots:", "  - plots/report"]
    return "\n".join(w.lines) + "\n"


# ---- the benchmark checkout's dvc.yaml, checked against the declaration --------------------------------


def _sections(params: list[Any]) -> set[str]:
    out: set[str] = set()
    for p in params:
        if isinstance(p, dict):  # {"params.yaml": None} is the whole file; another file's keys stay out
            out |= {"*"} if "params.yaml" in p else set()
        else:
            out.add(str(p).split(".", 1)[0] if not str(p).startswith("${") else str(p))
    return out


def _paths(entries: list[Any]) -> dict[str, bool]:
    """path -> cache (True unless ``cache: false``), for a deps or outs list of dvc.yaml."""
    out: dict[str, bool] = {}
    for e in entries or []:
        if isinstance(e, dict):
            for path, opts in e.items():
                out[str(path)] = bool((opts or {}).get("cache", True))
        else:
            out[str(e)] = True
    return out


def check(doc: dict[str, Any]) -> list[str]:
    """How the benchmark's ``dvc.yaml`` (parsed) disagrees with the declaration (full shape, papers)."""
    problems: list[str] = []
    got = doc.get("stages") or {}
    want = stages(papers=True)
    if list(got) != [s.name for s in want]:
        problems.append(f"stages {list(got)} != declared {[s.name for s in want]}")
    for st in want:
        if st.name not in got:
            continue
        body = got[st.name].get("do") or got[st.name]
        cmd = str(body.get("cmd", ""))
        if cmd.split()[:3] != ["python", "-m", f"calibflow.pipeline.{st.module}"]:
            problems.append(f"{st.name}: cmd {cmd!r} does not run calibflow.pipeline.{st.module}")
        if st.foreach == "phases":
            found = got[st.name].get("foreach") or {}
            items = {k: {**v, "param": v["param"].split(".", 1)[0]} for k, v in found.items()}
            if items != PHASES:
                problems.append(f"{st.name}: phases {items} != declared {PHASES}")
        deps = {d for d in _paths(body.get("deps")) if not d.startswith("calibflow/")}
        if deps != set(st.deps + st.paper_deps):
            declared_deps = sorted(st.deps + st.paper_deps)
            problems.append(f"{st.name}: data deps {sorted(deps)} != declared {declared_deps}")
        params = _sections(body.get("params") or [])
        if params != set(st.params):
            problems.append(f"{st.name}: params sections {sorted(params)} != declared {sorted(st.params)}")
        outs = _paths(body.get("outs"))
        declared = {o.path: o.cache for o in st.outs}
        for path, cache in outs.items():
            # a matrix stage writes one folder per item inside the declared output
            owner = next((d for d in declared if path == d or path.startswith(d + "/")), None)
            if owner is None:
                problems.append(f"{st.name}: output {path} is not declared")
            elif declared[owner] != cache:
                problems.append(f"{st.name}: output {path} cache {cache} != declared {declared[owner]}")
        for path in declared:
            if not any(p == path or p.startswith(path + "/") for p in outs):
                problems.append(f"{st.name}: declared output {path} missing")
    return problems
