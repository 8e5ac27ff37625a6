"""One source's monitor step as the flow runs it, importable without Prefect.

``calibflow.flows.monitor`` runs it in each source's subflow, or ahead in worker processes
(``sources_ahead``): a spawned worker imports this module, not the flow's, so it pays no Prefect import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calibflow.flows import registry


def monitor_source(
    root: str,
    source: str,
    now: str | None,
    max_windows: int | None,
    registry_on: bool,
    rescore_from: str | None = None,
    start: str | None = None,
) -> dict[str, Any]:
    from calibflow.pipeline._common import load_params
    from calibflow.pipeline.monitor import run

    params = load_params(Path(root) / "params.yaml")
    git = (Path(root) / ".git").exists()
    prod = registry.prod_version(root, source) if registry_on and git else None
    return run(
        root,
        params,
        source,
        now=now,
        max_windows=max_windows,
        prod_version=prod,
        rescore_from=rescore_from,
        start=start,
    )


#: Thread pools a worker keeps to one thread (unless the user set them): two workers on two cores each
#: with its own BLAS, OpenMP and numba threads spun on a loaded machine (a 5-source morning took 103 s of
#: CPU against 55 s in one process).
ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def init() -> None:
    """A source worker: one thread per pool (set before numpy is imported here), dies with the flow's
    process (``kill -9`` included) and logs to the run's log."""
    import logging
    import os

    for key in ONE_THREAD:
        os.environ.setdefault(key, "1")

    from calibflow.flows import forking, runlog

    forking.die_with(os.getppid())  # SIGTERM when the flow's process dies
    logging.getLogger().addHandler(runlog.RunLogHandler())
