"""Stage ``report``: render ``reports/index.html`` and ``reports/summary.md`` from the stage outputs.

``python -m tasks.report``. Gathers run metadata (git revision, package versions, data checksums from
``data/raw/manifest.json``), the validation results, the evaluation metrics and plot data, and each
paper's ``reports/reproductions/<key>.json`` (for the keys in ``papers``), then calls the pure
``calibflow.report`` renderers. Also writes ``reports/validation.json``: every validation suite in one
file (what the Prefect flow publishes as a table artifact). All files are written atomically.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata as im
import logging
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from calibflow.io import read_json, write_json, write_text
from calibflow.report import load_report_data, render_html, render_summary
from tasks._common import PHASES, Layout, base_parser, cli, load_params

log = logging.getLogger("tasks.report")
PACKAGES = (
    "calibflow",
    "numpy",
    "scipy",
    "pandas",
    "pyarrow",
    "scikit-learn",
    "xgboost-cpu",
    "xgboost",
    "matplotlib",
    "dvc",
    "great-expectations",
    "prefect",
)


def _git(root: Path, *args: str) -> str | None:
    try:
        res = subprocess.run(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = im.version(name)
        except im.PackageNotFoundError:
            continue
    return out


def metadata(root: Path, lay: Layout) -> dict[str, Any]:
    rev = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {
        "git_revision": rev,
        "git_dirty": bool(status) if status is not None else None,
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "python": platform.python_version(),
        "packages": package_versions(),
        "checksums": read_json(lay.manifest) if lay.manifest.is_file() else {},
    }


def run(params: dict[str, Any], root: str | os.PathLike[str] = ".") -> dict[str, Path]:
    """Render both files; returns their paths."""
    lay = Layout(Path(root))
    data = load_report_data(
        params=params,
        metadata=metadata(Path(root), lay),
        validation_files=[lay.validation / f"{p}.json" for p in PHASES],
        evaluation_dir=lay.evaluation,
        reliability_dir=lay.plots / "reliability",
        histogram_dir=lay.plots / "histograms",
        reproduction_files={k: lay.reproductions / f"{k}.json" for k in params.get("papers") or []},
        splits_file=lay.prepared / "splits.json",
    )
    # One file with every suite (phase-prefixed names), for the Prefect flow's validation artifact.
    suites = [s for phase in data.validation for s in phase.get("suites", [])]
    write_json(
        lay.reports / "validation.json", {"success": all(s["success"] for s in suites), "suites": suites}
    )
    html_path = write_text(lay.reports / "index.html", render_html(data))
    md_path = write_text(lay.reports / "summary.md", render_summary(data))
    log.info("report: %s (%d KiB), %s", html_path, html_path.stat().st_size // 1024, md_path)
    return {"html": html_path, "summary": md_path}


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    raise SystemExit(main())
