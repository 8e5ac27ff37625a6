"""Stage ``sources@<name>``: stamp one user source's content in ``data/sources/<name>/fingerprint.json``.

``python -m calibflow.pipeline.fingerprint <name>``. DVC runs it when the source's file or folder (the
stage's dependency)
changed; it records ``calibflow.sources.fingerprint`` (sha256 per file, or size and mtime per file for large
sources) with the declared path. The file is rewritten, atomically, only when its content changes, so the
stages downstream (which depend on ``data/sources``) re-run exactly when the data did.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from calibflow.io import write_json
from calibflow.pipeline import _sources
from calibflow.pipeline._common import ParamsLike, as_params, base_parser, cli, load_params

log = logging.getLogger("calibflow.pipeline.fingerprint")


def run(name: str, params: ParamsLike, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    rec = _sources.stamp(as_params(params), name, root)
    out = _sources.fingerprint_path(root, name)
    old = json.loads(out.read_text()) if out.is_file() else None
    if old != rec:
        write_json(out, rec)
        log.info("source %s: %d file(s), %s, %d bytes", name, len(rec["files"]), rec["method"], rec["bytes"])
    return rec


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("name", help="a source declared under `sources:` in params.yaml")
    args = parser.parse_args(argv)
    return cli(lambda: run(args.name, load_params(args.params), args.root))


if __name__ == "__main__":
    from calibflow.pipeline._common import exit_process

    exit_process(main())
