"""A calibflow project in any folder: the files ``calibflow init`` writes, and the installed-code stamp.

``create(folder)`` makes a folder a calibflow project when it is not one yet: ``params.yaml`` with calibflow's
defaults and no built-in datasets or papers, ``dvc.yaml`` rendered from the one declaration of the stages
(``calibflow.pipeline.dag``; ``sync_dvc_yaml`` keeps its shape in step with the sources), ``.gitignore`` /
``.dvcignore`` lines, ``git init`` and ``dvc init`` where missing, and ``.calibflow/code.json``. It never
rewrites a file the user already has (it only appends missing lines to the ignore files, and changes the shape
of a dvc.yaml only while it is exactly as calibflow rendered it); adding a source to params.yaml is the job of
``calibflow.cli.sources``.

``.calibflow/code.json`` is what a user project's stages depend on for code: the installed calibflow's
version and a sha256 over its ``.py`` files and package data (bytecode and numba's cache excluded), so a
``pip install -U calibflow`` re-runs the stages and nothing else does. ``write_code_stamp`` rewrites it only
when it changes (``calibflow run`` calls it before planning).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import calibflow
from calibflow.io import write_text

# Not named dvc.yaml: DVC would collect a dvc.yaml anywhere in a repository (this one included) as a pipeline.
TEMPLATES = Path(__file__).resolve().parent / "templates"
CODE_STAMP = Path(".calibflow/code.json")
#: The built-in datasets `calibflow init --benchmark` adds (the benchmark project's own list).
BENCHMARK_DATASETS = {"names": ["bank_marketing", "adult", "hillstrom"], "targets": {"hillstrom": "visit"}}
GITIGNORE = [
    "# calibflow: data and outputs DVC tracks (metrics/, models/ and reports/summary.md stay in git)",
    "/data/raw/",
    "/data/prepared/",
    "/data/models/",
    "/data/predictions/",
    "/data/calibrated/",
    "/data/papers/",
    "/reports/*",
    "!/reports/summary.md",
    "/plots/histograms/",
    ".prefect/",
    "__pycache__/",
]
DVCIGNORE = ["# bytecode and numba's compiled cache: never a dependency", "__pycache__/", "*.pyc"]
_CODE_SUFFIXES = (".py", ".yaml", ".yml", ".tmpl", ".json", ".csv")


@dataclass
class Created:
    """What ``create`` did, for the one-line summary ``init`` prints."""

    folder: Path
    wrote: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)


def is_project(folder: Path) -> bool:
    """A calibflow project: a dvc.yaml with a calibflow stage beside a params.yaml."""
    dvc_yaml = folder / "dvc.yaml"
    return (
        (folder / "params.yaml").is_file()
        and dvc_yaml.is_file()
        and "calibflow.pipeline" in dvc_yaml.read_text(encoding="utf-8")
    )


def code_stamp() -> dict[str, str]:
    """The installed calibflow: version and sha256 of its code files (paths and bytes, sorted)."""
    root = Path(calibflow.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in _CODE_SUFFIXES and p.is_file()):
        if "__pycache__" in path.parts:
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return {"calibflow": calibflow.__version__, "sha256": digest.hexdigest()}


def write_code_stamp(folder: Path) -> bool:
    """Write ``.calibflow/code.json`` when it is missing or differs; True when it was (re)written."""
    path = folder / CODE_STAMP
    text = json.dumps(code_stamp(), indent=2) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text(path, text)
    return True


def uses_code_stamp(folder: Path) -> bool:
    """Whether the project's stages depend on the stamp (a user project, not the benchmark checkout)."""
    dvc_yaml = folder / "dvc.yaml"
    return dvc_yaml.is_file() and CODE_STAMP.as_posix() in dvc_yaml.read_text(encoding="utf-8")


def render_dvc_yaml(scores: bool = False) -> str:
    """The user project's dvc.yaml: the full pipeline, or (``scores``) the one without fetch and train."""
    from calibflow.pipeline import dag

    return dag.render(scores=scores)


def sync_dvc_yaml(folder: Path) -> str | None:
    """Give the project's dvc.yaml the shape its params.yaml needs; a line saying so when it was rewritten.

    Every source bringing its own scores and no built-in dataset: no fetch or train stage; a source with
    features (or a dataset) brings them back. Only a dvc.yaml calibflow rendered is rewritten: one the user
    edited stays as it is (a score-shape file then fails in ``prepare --predictions`` with the fix).
    """
    import yaml

    from calibflow.pipeline import dag

    path = folder / "dvc.yaml"
    params = yaml.safe_load((folder / "params.yaml").read_text(encoding="utf-8")) or {}
    scores = dag.scores_only(params)
    want = render_dvc_yaml(scores)
    have = path.read_text(encoding="utf-8") if path.is_file() else ""
    if have == want or have not in (render_dvc_yaml(True), render_dvc_yaml(False)):
        return None
    write_text(path, want)
    return "dvc.yaml: " + ("score sources only, no fetch or train stage" if scores else "the full pipeline")


def render_params(benchmark: bool = False) -> str:
    """The user project's params.yaml, sources empty; ``benchmark`` opts the built-in datasets in."""
    text = (TEMPLATES / "params.yaml.tmpl").read_text(encoding="utf-8")
    if benchmark:
        names = ", ".join(BENCHMARK_DATASETS["names"])
        targets = ", ".join(f"{k}: {v}" for k, v in BENCHMARK_DATASETS["targets"].items())
        new = f"datasets: {{names: [{names}], targets: {{{targets}}}}}"
        text = text.replace("datasets: {names: []}", new)
    return text


def _append_lines(path: Path, lines: list[str]) -> bool:
    """Add the ``lines`` a file lacks at its end (the user's lines stay as they are)."""
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    have = set(old.splitlines())
    new = [ln for ln in lines if ln not in have]
    if all(ln.startswith("#") for ln in new):
        return False
    sep = "" if not old or old.endswith("\n") else "\n"
    write_text(path, old + sep + "\n".join(new) + "\n")
    return True


def _run(folder: Path, *argv: str, what: str = "") -> None:
    proc = subprocess.run(argv, cwd=folder, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines() or [f"exit {proc.returncode}"]
        raise ValueError(f"`{what or ' '.join(argv[-2:])}` failed in {folder}: {detail[-1]}")


#: ``dvc init`` and ``dvc config core.analytics false`` through DVC's API in one interpreter: the two
#: commands imported DVC twice (0.86 s of CPU; this 0.41 s), and the first sent analytics before the
#: second turned them off. A child process: calibflow's own process never imports DVC for ``init``.
DVC_INIT = (
    "from dvc.repo import Repo\n"
    "repo = Repo.init('.')\n"
    "with repo.config.edit() as conf:\n"
    "    conf['core']['analytics'] = False\n"
)


def create(folder: Path, benchmark: bool = False) -> Created:
    """Make ``folder`` a calibflow project (files it already has are kept); see the module docstring."""
    folder = folder.resolve()
    done = Created(folder)
    if not (folder / ".git").exists():
        _run(folder, "git", "init", "-q")
        done.ran.append("git init")
    if not (folder / ".dvc").is_dir():
        _run(folder, sys.executable, "-c", DVC_INIT, what="dvc init")
        done.ran.append("dvc init")
    # no source yet: the score shape unless the built-in datasets are in (`sync_dvc_yaml` follows the sources)
    files = (("params.yaml", render_params(benchmark)), ("dvc.yaml", render_dvc_yaml(not benchmark)))
    for name, text in files:
        if not (folder / name).exists():
            write_text(folder / name, text)
            done.wrote.append(name)
    for name, lines in ((".gitignore", GITIGNORE), (".dvcignore", DVCIGNORE)):
        if _append_lines(folder / name, lines):
            done.wrote.append(name)
    if write_code_stamp(folder):
        done.wrote.append(CODE_STAMP.as_posix())
    return done


#: What ``first_commit`` commits: the project's own files (never the user's data, never outputs).
PROJECT_FILES = ("params.yaml", "dvc.yaml", ".gitignore", ".dvcignore", CODE_STAMP.as_posix(),
                 ".dvc/config", ".dvc/.gitignore")


def ignore_data(folder: Path, data_path: str) -> bool:
    """Add a source inside the project to .gitignore (DVC tracks its hash; git never holds the data)."""
    from calibflow import sources as src

    if src.is_url(data_path):
        return False
    target = Path(src.split_glob(data_path)[0] if src._is_glob(data_path) else data_path)
    target = (folder / target).resolve() if not target.is_absolute() else target.resolve()
    try:
        rel = target.relative_to(folder.resolve())
    except ValueError:
        return False
    if rel == Path("."):
        return False
    line = "/" + rel.as_posix() + ("/" if target.is_dir() else "")
    note = "# your data (calibflow init): DVC hashes it, git does not hold it"
    return _append_lines(folder / ".gitignore", [note, line])


def first_commit(folder: Path, data_path: str) -> str:
    """Commit the new project's files (``PROJECT_FILES``) so `dvc exp show` lists runs; the line to print.

    Only those paths are committed (anything else the user staged stays staged); when git cannot commit
    (no user.name / user.email) the line says the two commands to run instead.
    """
    ignore_data(folder, data_path)
    paths = [p for p in PROJECT_FILES if (folder / p).is_file()]
    manual = f"git add {' '.join(paths)} && git commit -m 'calibflow project'"
    add = subprocess.run(["git", "add", "--", *paths], cwd=folder, capture_output=True, text=True)
    if add.returncode == 0:
        done = subprocess.run(
            ["git", "commit", "-q", "-m", "calibflow init: project files (not the data)", "--", *paths],
            cwd=folder, capture_output=True, text=True,
        )
        if done.returncode == 0:
            return f"committed the project files to git ({', '.join(paths)}); your data stays out of git"
    return f"could not commit the project files (git needs user.name and user.email?): run `{manual}`"


#: What every project command says outside a project (the README's first command).
INIT_HINT = "make one here with `calibflow init --data FILE --label COLUMN --score COLUMN` (README)"


def outside_message(root: Path, needs: tuple[str, ...] = ("params.yaml", "dvc.yaml")) -> str | None:
    """The one line a project command prints when ``root`` lacks the project files it ``needs``, else None
    (the monitor needs only ``params.yaml``: a monitor-only project has no pipeline)."""
    missing = [n for n in needs if not (root / n).is_file()]
    if not missing:
        return None
    return f"no calibflow project in {root} (no {' and '.join(missing)} here or above): {INIT_HINT}"
