"""Run every benchmark module: ``python -m benchmarks [name ...]`` (default: all, default options)."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    # Private modules (``_name``) are tools, not benchmarks (e.g. the wheel packer for device runs).
    names = sorted(
        m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if not m.name.startswith("_")
    )
    chosen = (argv if argv is not None else sys.argv[1:]) or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; available: {names}")
    for name in chosen:
        print(f"\n=== benchmarks.{name} ===", flush=True)
        # Every module's main(argv) with an empty argv: its defaults, never our own sys.argv.
        importlib.import_module(f"benchmarks.{name}").main([])


if __name__ == "__main__":
    main()
