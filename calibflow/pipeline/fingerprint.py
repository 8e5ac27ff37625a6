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
from pathlib import Path
from typing import Any

from calibflow import sources as src
from calibflow.io import write_json
from calibflow.pipeline import _sources
from calibflow.pipeline._common import StageError, base_parser, cli, load_params

log = logging.getLogger("calibflow.pipeline.fingerprint")


def path_for(root: str | os.PathLike[str], name: str) -> Path:
    return Path(root) / _sources.SOURCES_DIR / name / "fingerprint.json"


def stamp(params: dict[str, Any], name: str, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The fingerprint record of source ``name`` (declared path + per-file stamps)."""
    specs = _sources.specs(params, root)
    if name not in specs:
        raise StageError(f"no source named {name!r} in params.yaml (declared: {', '.join(specs) or 'none'})")
    decl_path = (params.get("sources") or {})[name]["path"]
    return {"name": name, "path": decl_path, **src.fingerprint(specs[name])}


def run(name: str, params: dict[str, Any], root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    rec = stamp(params, name, root)
    out = path_for(root, name)
    old = json.loads(out.read_text()) if out.is_file() else None
    if old != rec:
        write_json(out, rec)
        log.info("source %s: %d file(s), %s, %d bytes", name, len(rec["files"]), rec["method"], rec["bytes"])
    return rec


def read(params: dict[str, Any], name: str, root: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The recorded fingerprint of ``name`` when it matches the declaration, else a fresh one."""
    p = path_for(root, name)
    if p.is_file():
        rec = json.loads(p.read_text())
        if rec.get("path") == (params.get("sources") or {}).get(name, {}).get("path"):
            return rec
    return stamp(params, name, root)


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("name", help="a source declared under `sources:` in params.yaml")
    args = parser.parse_args(argv)
    return cli(lambda: run(args.name, load_params(args.params), args.root))


if __name__ == "__main__":
    raise SystemExit(main())
