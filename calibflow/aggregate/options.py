"""The table builder's arguments as two values: what the rows are, and how the pass runs.

- :class:`TableRows`: which columns the tables sum (score, label, the score's scale ``kind``, the
  segment columns, the frequency weight) and the function of the scores they sum (``transform``).
- :class:`PassOptions`: how the pass runs and what it adds (the fine grid, coarse cells per value, ECE
  bins, worker threads, the distinct-score switch, bootstrap replicates and their seed).

Every builder (``tables.aggregate_tables``, ``aggregate_files``, ``aggregate_split_tables``, the Spark
table pass, and the tests' control ``tests/helpers/table_reference.py``) takes them, so one pair of
values builds both sides of an equivalence test. Both check their values when they are made: a bad
one is named in one line before any file is read. The engine's resources (a Dask or Spark client, a
DuckDB connection) are not values and stay arguments of the builders.

Light on purpose (no DuckDB, no numba): the stages' parameters module can build them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from numbers import Integral
from typing import Any

from calibflow._validation import SCORE_KINDS
from calibflow.aggregate.grid import DEFAULT_GRID, BucketGrid

#: The score scales the pass reads: a probability, or a logit ("score": a margin read as a logit).
KINDS = SCORE_KINDS
#: Coarse cells per segment value (fewer when many values: ``tables.SEG_KEYS_MAX``).
CELLS = 256


def _integer(name: str, value: Any, least: int) -> int:
    """``value`` as an int of at least ``least``, or one line naming it (a bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < least:
        raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    return int(value)


def _column(role: str, value: Any) -> str:
    if not (isinstance(value, str) and value):
        raise ValueError(f"the {role} column must be a non-empty column name, got {value!r}")
    return value


@dataclass(frozen=True)
class TableRows:
    """What the tables sum: the ``score`` and ``label`` columns, ``kind`` (the score's scale, one of
    :data:`KINDS`), the ``segments`` columns (one coarse table each; any sequence of names, kept as a
    tuple) and the frequency ``weight`` column (None: unit weights).

    ``transform``: a function of a batch's score array whose result (on ``kind``'s scale) is what the
    tables sum, e.g. a calibrator's probabilities row by row (``calibflow.monitor.scale``).
    """

    score: str
    label: str
    kind: str = "probability"
    segments: tuple[str, ...] = ()
    weight: str | None = None
    transform: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        _column("score", self.score)
        _column("label", self.label)
        if self.kind not in KINDS:
            raise ValueError(f"score_kind must be one of {KINDS}, got {self.kind!r}")
        # a bare string would be read as its characters: one column per letter
        if isinstance(self.segments, str | bytes) or not isinstance(self.segments, Sequence):
            raise ValueError(f"segments must be a list of column names, got {self.segments!r}")
        segments = tuple(_column("segment", c) for c in self.segments)
        if len(set(segments)) != len(segments):  # two tables under one name: the second would replace
            raise ValueError(f"segments name a column twice: {list(segments)}; name each once")
        object.__setattr__(self, "segments", segments)
        if self.weight is not None:
            _column("weight", self.weight)
        if self.transform is not None and not callable(self.transform):
            raise ValueError(f"transform must be a function of the scores, got {self.transform!r}")

    @property
    def columns(self) -> list[str]:
        """Every column the pass reads: score, label, the segments, the weight."""
        return [self.score, self.label, *self.segments, *([self.weight] if self.weight else [])]


@dataclass(frozen=True)
class PassOptions:
    """How the pass runs: the fine logit ``grid``; ``cells`` coarse cells per segment value (at most);
    ``ece_bins``, the uniform ECE bins whose edges the coarse cells keep; ``threads`` worker threads of
    the DuckDB engine (None: one per core, at most 8); ``distinct_max`` > 0: a source with at most that
    many distinct scores gets one fine group per score (DuckDB only; 0: off); ``replicates`` Poisson
    bootstrap columns drawn on the fine table with ``seed``."""

    grid: BucketGrid = DEFAULT_GRID
    cells: int = CELLS
    ece_bins: int = 15
    threads: int | None = None
    distinct_max: int = 0
    replicates: int = 0
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.grid, BucketGrid):
            raise ValueError(f"grid must be a BucketGrid, got {self.grid!r}")
        checked = {
            "cells": _integer("cells", self.cells, 1),
            "ece_bins": _integer("ece_bins", self.ece_bins, 1),
            "threads": None if self.threads is None else _integer("threads", self.threads, 1),
            "distinct_max": _integer("distinct_max", self.distinct_max, 0),
            "replicates": _integer("replicates", self.replicates, 0),
            "seed": _integer("seed", self.seed, 0),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


#: The pass with every default.
DEFAULT_PASS = PassOptions()

_ROWS = frozenset(f.name for f in fields(TableRows))
_PASS = frozenset(f.name for f in fields(PassOptions))


def table_args(
    score: str, label: str, options: Mapping[str, Any]
) -> tuple[TableRows, PassOptions, dict[str, Any]]:
    """Flat keyword ``options`` (``run.tables_for``'s, as the stages pass them) as the two values, and
    the options that are neither (``where``, ``where_params``, ``con``), for the caller to pass on."""
    rows = TableRows(score, label, **{k: v for k, v in options.items() if k in _ROWS})
    how = PassOptions(**{k: v for k, v in options.items() if k in _PASS})
    return rows, how, {k: v for k, v in options.items() if k not in _ROWS | _PASS}
