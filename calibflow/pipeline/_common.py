"""Shared helpers of the pipeline stages: params loading, the on-disk layout, atomic folder output.

Every stage is a plain CLI (``python -m calibflow.pipeline.<step>``) whose ``main(argv)`` parses arguments and
calls ``run(...)``; both are importable, so a Prefect task can call either without a subprocess. Paths are
relative to a project ``root`` (the repository root under ``dvc repro``) so tests can run a stage in a
temporary folder. ``dvc.yaml`` names the same paths: keep the two in step.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import yaml

from calibflow.io import remove_stale_temps
from calibflow.pipeline.params_schema import Params, ParamsError, construct, with_paper_profiles

log = logging.getLogger("calibflow.pipeline")

#: The row evaluated beside the calibrators: the base model's own probability.
UNCALIBRATED = "uncalibrated"
#: The splits of a prepared frame (``prepare.fractions`` names exactly these).
SPLITS = ("train", "calib", "test")
#: The validation phases, in pipeline order (``reports/validation/<phase>.json``).
PHASES = ("raw", "prepared", "calibrated")
#: Prefix of the feature columns of a prepared frame (``f:<feature name>``).
FEATURE_PREFIX = "f:"


class StageError(RuntimeError):
    """A stage failed for a reason the user can fix; the CLI prints the message, not a traceback."""


@dataclass(frozen=True)
class Layout:
    """Where each stage reads and writes, relative to the project root (mirrors ``dvc.yaml``)."""

    root: Path

    @property
    def raw(self) -> Path:
        return self.root / "data" / "raw"

    @property
    def papers_data(self) -> Path:
        """The datasets cache of the paper experiments (not a DVC output; see
        calibflow.pipeline.reproduce)."""
        return self.root / "data" / "papers"

    @property
    def manifest(self) -> Path:
        return self.root / "data" / "raw" / "manifest.json"

    @property
    def prepared(self) -> Path:
        return self.root / "data" / "prepared"

    @property
    def models(self) -> Path:
        """The trained base models (the train stage's output)."""
        return self.root / "data" / "models"

    @property
    def deployed(self) -> Path:
        """The selected calibrators and their cards, ``models/<name>/`` (what ``apply`` and the monitor
        serve; the select stage's output)."""
        return self.root / "models"

    @property
    def predictions(self) -> Path:
        return self.root / "data" / "predictions"

    @property
    def calibrated(self) -> Path:
        return self.root / "data" / "calibrated"

    def calibrated_method(self, method: str) -> Path:
        return self.calibrated / method

    @property
    def calibrated_segments(self) -> Path:
        """The segmented calibrators of sources with segments (stage calibrate_segments)."""
        return self.root / "data" / "calibrated_segments"

    @property
    def validation(self) -> Path:
        return self.root / "reports" / "validation"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics"

    @property
    def evaluation(self) -> Path:
        return self.root / "metrics" / "evaluation"

    @property
    def plots(self) -> Path:
        return self.root / "plots"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def reproductions(self) -> Path:
        return self.root / "reports" / "reproductions"

    @property
    def reproduction_metrics(self) -> Path:
        return self.root / "metrics" / "reproductions"

    def monitoring(self, source: str) -> MonitorLayout:
        """The monitor's files of ``source``."""
        return MonitorLayout(self.root, source)


@dataclass(frozen=True)
class MonitorLayout:
    """Where the monitor stage reads and writes for one source (``Layout.monitoring(source)``): its state,
    champion, versions, card and pin under ``monitoring/<source>/``, its history, metrics and page beside the
    pipeline's, and the select stage's calibrator it starts from."""

    root: Path
    source: str

    @property
    def folder(self) -> Path:
        return self.root / "monitoring" / self.source

    @property
    def state(self) -> Path:
        return self.folder / "state.json"

    @property
    def history(self) -> Path:
        return self.root / "plots" / "monitoring" / f"{self.source}.csv"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics" / "monitoring" / f"{self.source}.json"

    @property
    def selected(self) -> Path:
        return Layout(self.root).deployed / self.source / "calibrator.json"

    @property
    def champion(self) -> Path:
        return self.folder / "calibrator.json"

    @property
    def card(self) -> Path:
        return self.folder / "card.json"

    @property
    def pin(self) -> Path:
        return self.folder / "pin.json"

    @property
    def page(self) -> Path:
        return self.root / "reports" / "pages" / f"monitoring-{self.source}.html"

    def version(self, k: int) -> Path:
        return self.folder / "versions" / f"v{k}.json"

    def tracked(self, n_versions: int = 0) -> list[Path]:
        """Files a scheduled run commits (history and metrics; the champion, its card, every version)."""
        versions = [self.version(k) for k in range(1, n_versions + 1)]
        return [self.state, self.history, self.metrics, self.champion, self.card, self.pin, *versions]


def feature_columns(frame: Any) -> list[str]:
    """The feature columns (``f:*``) of a prepared frame, in order."""
    return [c for c in frame.columns if c.startswith(FEATURE_PREFIX)]


def require(path: str | os.PathLike[str], what: str, hint: str) -> Path:
    """``path`` as a ``Path`` if it is a file; otherwise a ``StageError`` naming it and the step to run."""
    p = Path(path)
    if not p.is_file():
        raise StageError(f"{what} missing: {p} (run {hint} first)")
    return p


#: What a stage's ``run`` takes: the typed params, or a plain mapping (tests, flows) made typed once at entry.
ParamsLike = Params | Mapping[str, Any]


def as_params(params: ParamsLike) -> Params:
    """The typed params: a ``Params`` as it is; a mapping (a test's, a flow's) with the schema's defaults
    for what it leaves out. Validation is the entry points' (``params_schema.load_and_validate``)."""
    if isinstance(params, Params):
        return params
    if not isinstance(params, Mapping):
        raise StageError(f"params: expected a mapping at the top level, got {type(params).__name__}")
    try:
        return construct(Params, params)
    except ParamsError as exc:
        raise StageError(str(exc)) from None


def load_params(path: str | os.PathLike[str] = "params.yaml") -> Params:
    """Read ``params.yaml`` (and the paper profiles beside it, ``params_schema.PROFILES_FILE``) once into
    the typed params (defaults: the schema's); missing: ``StageError``."""
    p = Path(path)
    if not p.is_file():
        raise StageError(f"params file not found: {p}")
    from calibflow.io import MAX_PARAMS_BYTES, read_bounded

    try:
        params = yaml.safe_load(read_bounded(p, MAX_PARAMS_BYTES, "a params file")) or {}
    except (ValueError, RecursionError) as exc:
        raise StageError(str(exc) if isinstance(exc, ValueError) else f"{p}: nested too deeply") from None
    if not isinstance(params, dict):
        raise StageError(f"{p}: expected a mapping at the top level, got {type(params).__name__}")
    return as_params(with_paper_profiles(params, p))


def special_methods() -> frozenset[str]:
    """Calibrators that need inputs other than (score, label) pairs (their class's ``needs``); the tabular
    stages skip them."""
    from calibflow.calibrators import available

    return frozenset(available("extra"))


def __getattr__(name: str):
    if name == "SPECIAL_METHODS":  # derived from the registry (see special_methods)
        return special_methods()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def dataset_names(params: ParamsLike) -> list[str]:
    names = as_params(params).datasets.names or []
    if not names:
        raise StageError("params: datasets.names is empty")
    return [str(n) for n in names]


def dataset_target(params: ParamsLike, name: str) -> str | None:
    return (as_params(params).datasets.targets or {}).get(name)


def methods(params: ParamsLike) -> list[str]:
    ms = [str(m) for m in (as_params(params).calibrate.methods or [])]
    special = sorted(set(ms) & special_methods())
    if special:
        raise StageError(
            f"params: calibrate.methods lists {special}, which need inputs the tabular stages lack"
        )
    if UNCALIBRATED in ms:
        raise StageError(f"params: {UNCALIBRATED!r} is evaluated always; do not list it in calibrate.methods")
    return ms


def segmented_methods(params: ParamsLike) -> list[str]:
    """``calibrate.segmented``: the segmented methods fitted for sources with segments."""
    return [str(m) for m in as_params(params).calibrate.segmented or []]


def seed(params: ParamsLike) -> int:
    return int(as_params(params).seed)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``target``; swap it in only if the block succeeds.

    The old folder is renamed aside, the new one renamed in, then the old one removed, so a failure
    at any point before the swap leaves the last good folder untouched (and no stale files survive a
    successful run, unlike writing file by file into the old folder). Leftovers of a killed earlier
    run are removed first (``remove_stale_temps``); the temporary names carry our pid for that.
    """
    dst = Path(target)
    dst.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(dst)
    prefix = f".{dst.name}.{os.getpid()}."
    tmp = Path(tempfile.mkdtemp(prefix=prefix, suffix=".tmp", dir=dst.parent))
    tmp.chmod(0o755)  # mkdtemp makes 0700; the output folder should read like any other
    try:
        yield tmp
        old = None
        if dst.exists():
            old = Path(tempfile.mkdtemp(prefix=prefix, suffix=".old", dir=dst.parent))
            old.rmdir()
            os.replace(dst, old)
        os.replace(tmp, dst)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="params file (default: params.yaml)")
    parser.add_argument("--root", default=".", help="project root holding data/, reports/ (default: .)")
    return parser


def exit_process(code: int | None) -> NoReturn:
    """End a stage's process with ``code``, skipping the interpreter's teardown.

    Outputs are written and closed by then; what is left is freeing the modules a stage imported (Great
    Expectations, pandas, scipy, SQLAlchemy): about 1 s of CPU per stage on the 2-core machine, twelve
    stages a run. Exit handlers still run (temporary folders, log handlers), then the streams are flushed.
    """
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(int(code or 0))


def cli(fn: Callable[[], Any]) -> int:
    """Run a stage's body: an expected error prints one readable message and returns 1.

    Expected: ``StageError``, ``ValueError`` (bad input or params), a missing file, or a dataset no source
    could provide. Anything else is a bug and keeps its traceback; ``CALIBFLOW_DEBUG=1`` shows it always.
    """
    # Our stage loggers at INFO; third-party libraries (GX logs hundreds of INFO lines) at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stderr)
    log.setLevel(logging.INFO)
    from calibflow.datasets import DatasetUnavailableError
    from calibflow.errors import exit_code, os_brief

    # an unwritable folder, a full disk: one line naming the path and what to do, not a traceback
    return exit_code(
        fn, {(StageError, ValueError, FileNotFoundError, DatasetUnavailableError): 1, OSError: os_brief}
    )
