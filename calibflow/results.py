"""The shape of a paper reproduction's result, shared by experiments and the report.

Each paper's experiment module returns a ``Reproduction``; ``calibflow/pipeline/reproduce.py`` saves it as
``reports/reproductions/<key>.json``, and the report renders any such file without knowing the
paper: tables (ours beside the paper's), figures (inline SVG), and notes for the choices made where
the paper is ambiguous and for where our numbers disagree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from calibflow.io import read_json, write_json


@dataclass
class Table:
    """A table: ``columns`` names, ``rows`` of cells (numbers or strings), an optional caption."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    caption: str = ""

    def __post_init__(self) -> None:
        for r in self.rows:
            if len(r) != len(self.columns):
                raise ValueError(
                    f"table {self.title!r}: row {r!r} has {len(r)} cells, expected {len(self.columns)}"
                )


@dataclass
class Figure:
    """A figure rendered to an inline SVG string (self-contained, no external resources)."""

    title: str
    svg: str
    caption: str = ""


@dataclass
class Reproduction:
    """One paper's reproduced experiments: what was run, the numbers, the figures and the choices."""

    key: str
    paper: str
    profile: str
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    choices: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    elapsed_s: float = 0.0
    # Significance claims as dicts (``calibflow.experiments.claims.Claim.to_dict``), for the seed meta-run.
    claims: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return _finite(asdict(self))

    def save(self, path) -> None:
        write_json(path, self.to_dict())

    @classmethod
    def load(cls, path) -> Reproduction:
        d = read_json(path)
        d["tables"] = [Table(**t) for t in d.get("tables", [])]
        d["figures"] = [Figure(**f) for f in d.get("figures", [])]
        return cls(**d)


def _finite(obj: Any) -> Any:
    """Replace NaN/inf with None so the JSON is strict (browsers and ``jq`` reject NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, str):
        return _finite(obj.item())
    return obj


def fmt_mean_se(values, digits: int = 4) -> str:
    """``mean ± standard error`` of replications, as the papers print them."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    se = v.std(ddof=1) / math.sqrt(v.size) if v.size > 1 else float("nan")
    return f"{v.mean():.{digits}f} ± {se:.{digits}f}"


def paired_pvalue(a, b, alternative: str = "two-sided") -> float:
    """Paired t-test p-value of ``a`` against ``b`` (``scipy.stats.ttest_rel``).

    NaN where the test is undefined: fewer than 2 pairs, or a constant difference (no variance).
    ``alternative`` is passed on: ``"greater"`` tests mean(a - b) > 0.
    """
    import numpy as np
    from scipy.stats import ttest_rel

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired samples differ in shape: {x.shape} vs {y.shape}")
    d = x - y
    if d.size < 2 or np.allclose(d, d[0]):
        return float("nan")
    return float(ttest_rel(x, y, alternative=alternative).pvalue)
