"""The ``scale:`` params section (issue 35: one path, the tables; ``row_threshold`` no longer chooses).

    scale: {row_threshold: 5000000, buckets: 65536, z_max: 16.0, replicates: 32, seed: 0,
            distinct_max: 1048576, cells: 256, threads: 0, engine: duckdb, dask_address: null,
            spark_master: null, compare_rows: 5000000}

Every stage fits and evaluates from the bucket tables (``calibflow.aggregate``); rows are read only as a
bounded seeded sample (``fit_rows``, ``compare_rows``) for what needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from calibflow.aggregate.grid import BucketGrid  # not from .table, which loads DuckDB and numba


@dataclass(frozen=True)
class ScaleConfig:
    #: No longer chooses a path (issue 35: every source goes through the tables); read so that existing
    #: params files keep parsing.
    row_threshold: int = 5_000_000
    buckets: int = 65_536
    z_max: float = 16.0
    replicates: int = 32
    seed: int = 0
    #: At most this many distinct scores (exactly: ``table.is_distinct``): one group per distinct score, so
    #: step maps (isotonic, histogram, scaling_binning, bbq) fit as on the rows; 0 turns it off.
    distinct_max: int = 1_048_576
    #: Coarse cells per segment value in the per-segment tables (fewer when many values: SEG_KEYS_MAX).
    cells: int = 256
    #: Worker threads of the DuckDB engine (0: one per core).
    threads: int = 0
    #: "duckdb" (this machine), "dask" (a LocalCluster, or the scheduler at ``dask_address``) or "spark"
    #: (a local session, the master at ``spark_master``, or the process's active session).
    engine: str = "duckdb"
    dask_address: str | None = None
    spark_master: str | None = None
    #: Select's segmented challenge scores a seeded sample of about this many test rows when the test
    #: split holds more (the paired interval has ample power on a few million rows; the pass costs
    #: ~0.6 us a row); 0 scores every row. Sampled by ``segment_compare.RowSample`` (seed: ``seed``).
    compare_rows: int = 5_000_000
    #: A method that cannot be fitted from the tables (``multicalibration``: it needs each row's segments
    #: jointly) is fitted on a seeded sample of about this many calib rows (``segment_compare.RowSample``,
    #: seed ``seed``); the fit record and the card say so. 0: every calib row.
    fit_rows: int = 1_000_000

    @property
    def address(self) -> str | None:
        """The engine's address: the Dask scheduler, or the Spark master (engine spark)."""
        return self.spark_master if self.engine == "spark" else self.dask_address

    @property
    def grid(self) -> BucketGrid:
        return BucketGrid(self.buckets, self.z_max)


#: Upper bounds of the scale section's sizes: each table row or replicate costs memory per bucket.
SCALE_MAX = {"buckets": 2**24, "replicates": 10_000, "cells": 2**16, "threads": 1024, "seed": 2**32 - 1,
             "distinct_max": 2**26}
SCALE_WHY = {"buckets": "16M cells of 3 numbers each", "replicates": "a column of counts per bucket each",
             "cells": "per segment value", "threads": "more than any machine has", "seed": "a 32-bit seed",
             "distinct_max": "one table row per distinct score"}


def parse_scale(decl: Mapping[str, Any] | None) -> ScaleConfig:
    """``ScaleConfig`` from params' ``scale:`` mapping; ValueError (one line) on a typo or a bad value."""
    decl = dict(decl or {})
    known = {f.name for f in fields(ScaleConfig)}
    unknown = sorted(set(decl) - known)
    if unknown:
        raise ValueError(f"scale: unknown key(s) {unknown}; allowed: {sorted(known)}")
    for k in ("row_threshold", "buckets", "replicates", "seed", "distinct_max", "cells", "threads",
              "compare_rows", "fit_rows"):
        v = decl.get(k, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"scale.{k} must be an integer >= 0, got {v!r}")
        if v > SCALE_MAX.get(k, 2**62):
            raise ValueError(f"scale.{k} must be at most {SCALE_MAX[k]:,} ({SCALE_WHY[k]}), got {v:,}")
    z = decl.get("z_max", 16.0)
    if isinstance(z, bool) or not isinstance(z, int | float) or not (0 < z <= 1e3):
        raise ValueError(f"scale.z_max must be a number in (0, 1000], got {z!r}")
    if "cells" in decl and decl["cells"] < 2:
        raise ValueError(f"scale.cells must be an integer >= 2, got {decl['cells']!r}")
    engine, address = decl.get("engine", "duckdb"), decl.get("dask_address")
    if engine not in ("duckdb", "dask", "spark"):
        raise ValueError(f"scale.engine must be duckdb, dask or spark, got {engine!r}")
    master = decl.get("spark_master")
    if master is not None and not (isinstance(master, str) and master.strip()):
        raise ValueError(f"scale.spark_master must be a master like spark://host:7077, got {master!r}")
    if master and engine != "spark":
        raise ValueError("scale.spark_master is set but scale.engine is not spark: set scale.engine: spark")
    if address is not None and not (isinstance(address, str) and address.strip()):
        raise ValueError(f"scale.dask_address must be an address like tcp://host:8786, got {address!r}")
    if address and engine != "dask":
        raise ValueError("scale.dask_address is set but scale.engine is not dask: set scale.engine: dask")
    cfg = ScaleConfig(**decl)
    cfg.grid  # noqa: B018 - validates buckets and z_max
    return cfg
