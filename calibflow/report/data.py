"""What the report shows, gathered from the stage outputs into one ``ReportData``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from calibflow.io import read_json
from calibflow.results import Reproduction


@dataclass(frozen=True)
class MetricSpec:
    """A metric column: its key in the metrics JSON, a label, and which value is best.

    ``goal`` is ``"min"`` (lower is better), ``"max"`` (higher is better), ``"one"`` (closest to 1,
    for the calibration ratio ``sum p / sum y``) or ``"info"`` (shown, never marked best: a p-value).
    """

    key: str
    label: str
    goal: str


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ece", "ECE", "min"),
    MetricSpec("mce", "MCE", "min"),
    MetricSpec("brier", "Brier", "min"),
    MetricSpec("log_loss", "log loss", "min"),
    MetricSpec("ks", "KS", "min"),
    MetricSpec("calibration_ratio", "Σp / Σy", "one"),
    MetricSpec("auc", "AUC", "max"),
    MetricSpec("smooth_ece", "smooth ECE", "min"),
    MetricSpec("log_loss_miscalibration", "log loss removable by recalibration", "min"),
    MetricSpec("kuiper_pvalue", "Kuiper p (small: miscalibrated)", "info"),
)


def __getattr__(name: str):
    # RANKING_BASELINES: the ranking paper's uncalibrated baselines (Kweon et al. 2022), registered methods
    # evaluated like the others but shown apart; each class's own ``baseline_note`` fact
    if name == "RANKING_BASELINES":
        from calibflow.calibrators import ranking_baselines

        return ranking_baselines()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class ReportData:
    """Everything the page shows. Each field may be empty; the renderers say what is missing.

    - ``metadata``: ``git_revision``, ``git_dirty``, ``python``, ``packages`` {name: version} (no clock time:
      the page is a DVC output and must be byte-identical for the same inputs),
      ``checksums`` {dataset: {file: {"sha256", "bytes"}}}.
    - ``validation``: one dict per phase from the validate stage (``phase``, ``success``, ``suites``).
    - ``evaluation``: {dataset: {method: metrics dict}}; ``reliability`` and ``histograms``:
      {dataset: {method: list of per-bin records}}.
    - ``reproductions``: the papers' ``Reproduction`` objects; ``missing_reproductions``: keys with no file.
    - ``cards``: the select stage's ``models/<name>/card.json`` (docs/card.md), one answer block each.
    - ``pages``: ``(href, title)`` of the extra pages (``reports/pages/*.html``) the index links to.
    """

    params: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    validation: list[dict[str, Any]] = field(default_factory=list)
    evaluation: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    reliability: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)
    histograms: dict[str, dict[str, list[dict[str, float]]]] = field(default_factory=dict)
    reproductions: list[Reproduction] = field(default_factory=list)
    missing_reproductions: list[str] = field(default_factory=list)
    splits: dict[str, Any] = field(default_factory=dict)
    cards: list[dict[str, Any]] = field(default_factory=list)
    pages: list[tuple[str, str]] = field(default_factory=list)


def _nested_json(folder: Path | None) -> dict[str, dict[str, Any]]:
    """``folder/<a>/<b>.json`` as ``{a: {b: content}}`` (sorted, deterministic)."""
    out: dict[str, dict[str, Any]] = {}
    if folder is None or not Path(folder).is_dir():
        return out
    for sub in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        files = sorted(sub.glob("*.json"))
        if files:
            out[sub.name] = {f.stem: read_json(f) for f in files}
    return out


def load_report_data(
    *,
    params: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    validation_files: list[Path] | None = None,
    evaluation_dir: Path | None = None,
    reliability_dir: Path | None = None,
    histogram_dir: Path | None = None,
    reproduction_files: dict[str, Path] | None = None,
    splits_file: Path | None = None,
    cards_dir: Path | None = None,
    pages: list[tuple[str, str]] | None = None,
) -> ReportData:
    """Read the stage outputs named by the arguments; a missing path gives an empty section."""
    validation = [read_json(p) for p in (validation_files or []) if Path(p).is_file()]
    reps, missing = [], []
    for key, path in (reproduction_files or {}).items():
        if Path(path).is_file():
            reps.append(Reproduction.load(path))
        else:
            missing.append(key)
    return ReportData(
        params=params or {},
        metadata=metadata or {},
        validation=validation,
        evaluation=_nested_json(evaluation_dir),
        reliability=_nested_json(reliability_dir),
        histograms=_nested_json(histogram_dir),
        reproductions=reps,
        missing_reproductions=missing,
        splits=read_json(splits_file) if splits_file and Path(splits_file).is_file() else {},
        cards=load_cards(cards_dir),
        pages=list(pages or []),
    )


def load_cards(folder: Path | None) -> list[dict[str, Any]]:
    """Every ``folder/<name>/card.json``: datasets first, then sources, each by name."""
    if folder is None or not Path(folder).is_dir():
        return []
    cards = [read_json(p) for p in sorted(Path(folder).glob("*/card.json"))]
    cards = [c for c in cards if isinstance(c, dict)]
    return sorted(cards, key=lambda c: (c.get("kind") != "dataset", str(c.get("name", ""))))


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def best_methods(rows: dict[str, dict[str, Any]], spec: MetricSpec) -> set[str]:
    """Methods whose value of ``spec`` is best among ``rows`` (ties all marked; non-finite ignored)."""
    vals = {m: r.get(spec.key) for m, r in rows.items() if _finite(r.get(spec.key))}
    if not vals or spec.goal == "info":  # a p-value is evidence, not a score to win
        return set()
    key = {"min": lambda v: v, "max": lambda v: -v, "one": lambda v: abs(v - 1.0)}[spec.goal]
    best = min(key(v) for v in vals.values())
    return {m for m, v in vals.items() if math.isclose(key(v), best, rel_tol=1e-6, abs_tol=1e-12)}


def method_order(methods: list[str]) -> list[str]:
    """The uncalibrated baseline first, then the calibrators alphabetically."""
    return sorted(methods, key=lambda m: (m != "uncalibrated", m))


def split_baselines(rows: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``rows`` without and with only the ranking baselines (``RANKING_BASELINES``), order kept."""
    from calibflow.calibrators import ranking_baselines

    baselines = ranking_baselines()
    main = {m: v for m, v in rows.items() if m not in baselines}
    return main, {m: v for m, v in rows.items() if m in baselines}
