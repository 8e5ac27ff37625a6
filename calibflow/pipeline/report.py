"""Stage ``report``: render ``reports/index.html`` and ``reports/summary.md`` from the stage outputs.

``python -m calibflow.pipeline.report``. Gathers the select stage's ``models/<name>/card.json`` (the
answers the index
opens with), the extra pages in ``reports/pages/``, the evaluation metrics and plot data, the validation
results and run metadata (git revision, package versions, data checksums from ``data/raw/manifest.json``),
then calls the pure ``calibflow.report`` renderers. Also writes ``reports/validation.json``: every
validation suite in one file (what the Prefect flow publishes as a table artifact).

``python -m calibflow.pipeline.report --paper KEY`` (stage ``paper_page@KEY``) renders one paper's
``reports/reproductions/<KEY>.json`` as ``reports/pages/paper-<KEY>.html``. All files are written atomically.
"""

from __future__ import annotations

import html
import importlib.metadata as im
import logging
import os
import platform
import re
import subprocess
from pathlib import Path
from typing import Any

from calibflow.io import read_json, write_json, write_text
from calibflow.pipeline import _sources
from calibflow.pipeline._common import (
    PHASES,
    Layout,
    ParamsLike,
    StageError,
    as_params,
    atomic_dir,
    base_parser,
    cli,
    load_params,
)
from calibflow.report import (
    RANKING_BASELINES,
    ReportData,
    figures,
    load_report_data,
    render_html,
    render_summary,
)
from calibflow.report.data import method_order
from calibflow.report.html import render_paper_page
from calibflow.report.svg import sanitize_svg
from calibflow.results import Reproduction

log = logging.getLogger("calibflow.pipeline.report")
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


def checksums(params: ParamsLike, lay: Layout) -> dict[str, Any]:
    """The data's checksums: fetch's manifest, or (a project with no fetch stage: score sources only) the
    sources' fingerprints in the manifest's form."""
    if lay.manifest.is_file():
        return read_json(lay.manifest)
    specs = _sources.specs(params, lay.root)
    return {name: _sources.manifest_entry(params, name, lay.root) for name in specs}


def metadata(root: Path, lay: Layout, params: ParamsLike | None = None) -> dict[str, Any]:
    rev = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return {
        "git_revision": rev,
        "git_dirty": bool(status) if status is not None else None,
        "python": platform.python_version(),
        "packages": package_versions(),
        "checksums": checksums(params, lay) if params is not None else {},
    }


_TITLE = re.compile(r"<title>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def page_links(pages_dir: Path) -> list[tuple[str, str]]:
    """``(href relative to reports/, title)`` of every ``reports/pages/*.html``: papers, then the rest."""
    if not pages_dir.is_dir():
        return []
    out = []
    for p in sorted(pages_dir.glob("*.html"), key=lambda p: (not p.name.startswith("paper-"), p.name)):
        head = p.read_text(encoding="utf-8", errors="replace")[:4096]
        m = _TITLE.search(head)
        # The title is shown escaped on the index; undo the page's own escaping first.
        title = html.unescape(m.group(1).strip()) if m else p.stem
        out.append((f"pages/{p.name}", title))
    return out


def write_plot_images(data: ReportData, folder: Path) -> list[Path]:
    """``plots/report/reliability-<dataset>.svg``: the index's reliability diagrams for ``dvc plots show``.

    DVC shows SVG files as image plots, copied beside its HTML, so the page renders offline (its Vega
    templates load scripts from a CDN). Same drawing code and allow-list as the index.
    """
    with atomic_dir(folder) as tmp:
        for ds, curves in data.reliability.items():
            main = {m: curves[m] for m in method_order(list(curves)) if m not in RANKING_BASELINES}
            rows = data.evaluation.get(ds) or {}
            ece = {m: rows[m]["ece"] for m in main if isinstance((rows.get(m) or {}).get("ece"), float)}
            if main:
                write_text(tmp / f"reliability-{ds}.svg", sanitize_svg(figures.reliability_grid(main, ece)))
    return sorted(folder.glob("*.svg"))


def run(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Path]:
    """Render both files; returns their paths."""
    params = as_params(params)
    lay = Layout(Path(root))
    data = load_report_data(
        params=params.model_dump(by_alias=True),  # the params in effect, defaults included
        metadata=metadata(Path(root), lay, params),
        validation_files=[lay.validation / f"{p}.json" for p in PHASES],
        evaluation_dir=lay.evaluation,
        reliability_dir=lay.plots / "reliability",
        histogram_dir=lay.plots / "histograms",
        reproduction_files={k: lay.reproductions / f"{k}.json" for k in params.papers or []},
        splits_file=lay.prepared / "splits.json",
        cards_dir=lay.deployed,
        pages=page_links(lay.reports / "pages"),
    )
    # One file with every suite (phase-prefixed names), for the Prefect flow's validation artifact.
    suites = [s for phase in data.validation for s in phase.get("suites", [])]
    write_json(
        lay.reports / "validation.json", {"success": all(s["success"] for s in suites), "suites": suites}
    )
    html_path = write_text(lay.reports / "index.html", render_html(data))
    write_plot_images(data, lay.plots / "report")
    md_path = write_text(lay.reports / "summary.md", render_summary(data))
    log.info("report: %s (%d KiB), %s", html_path, html_path.stat().st_size // 1024, md_path)
    return {"html": html_path, "summary": md_path}


def run_paper(
    key: str, root: str | os.PathLike[str] = ".", source: str | os.PathLike[str] | None = None
) -> Path:
    """Render ``reports/pages/paper-<key>.html`` from ``reports/reproductions/<key>.json``.

    ``source``: a stored result instead (e.g. a larger profile's run committed under docs/reproductions/),
    rendered as ``paper-<key>-<profile>.html`` beside the pipeline's page, which it leaves alone; the index
    links every page in reports/pages/.
    """
    if not re.fullmatch(r"[a-z0-9_]+", key):
        raise StageError(f"paper key {key!r}: use lowercase letters, digits and _ (a name in `papers`)")
    lay = Layout(Path(root))
    src = Path(source) if source else lay.reproductions / f"{key}.json"
    if not src.is_file():
        raise StageError(
            f"reproduction missing: {src} "
            + ("(check the --source path)" if source else f"(run reproduce@{key} first)")
        )
    rep = Reproduction.load(src)
    if rep.key != key:
        raise StageError(f"{src} holds paper {rep.key!r}, not {key!r}; pass --paper {rep.key}")
    name = f"paper-{key}.html"
    if source:
        profile = re.sub(r"[^a-z0-9_]+", "_", rep.profile.lower()) or "stored"
        name = f"paper-{key}-{profile}.html"
    out = write_text(lay.reports / "pages" / name, render_paper_page(rep, stored=src.name if source else ""))
    log.info("paper page: %s (%d KiB)", out, out.stat().st_size // 1024)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--paper", metavar="KEY", help="render only reports/pages/paper-KEY.html")
    parser.add_argument(
        "--source",
        metavar="JSON",
        help="with --paper: render this stored result (e.g. docs/reproductions/calem_standard.json) "
        "as reports/pages/paper-KEY-PROFILE.html",
    )
    args = parser.parse_args(argv)
    if args.source and not args.paper:
        parser.error("--source needs --paper KEY")
    if args.paper:
        return cli(lambda: run_paper(args.paper, args.root, args.source))
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
