"""The logit grid of the bucket tables, apart from the table pass (DuckDB, numba): the ``scale:`` params
check (``calibflow.aggregate.switch``) builds one to validate ``buckets`` and ``z_max``."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class BucketGrid:
    """The logit grid: ``n_buckets`` cells on ``[-z_max, z_max]`` (rows beyond go to the end cells)."""

    n_buckets: int = 65_536
    z_max: float = 16.0

    def __post_init__(self) -> None:
        if not (isinstance(self.n_buckets, int) and self.n_buckets >= 2):
            raise ValueError(f"scale.buckets must be an integer >= 2, got {self.n_buckets!r}")
        if not (self.z_max > 0 and math.isfinite(self.z_max)):
            raise ValueError(f"scale.z_max must be a finite number > 0, got {self.z_max!r}")

    @property
    def width(self) -> float:
        return 2.0 * self.z_max / self.n_buckets


DEFAULT_GRID = BucketGrid()

#: The sums a bucket table holds per group (``kernel``'s accumulator columns, in order).
SUMS = ("n", "sum_z", "sum_q", "sum_ll", "sum_q2")
