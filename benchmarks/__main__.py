"""Run every benchmark module: ``python -m benchmarks [name ...]`` (default: all, default options)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    names = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name != "__main__")
    chosen = (argv if argv is not None else sys.argv[1:]) or names
    unknown = sorted(set(chosen) - set(names))
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; available: {names}")
    for name in chosen:
        print(f"\n=== benchmarks.{name} ===", flush=True)
        entry = importlib.import_module(f"benchmarks.{name}").main
        # Defaults for every module: an empty argv where main takes one (never our own sys.argv).
        if inspect.signature(entry).parameters:
            entry([])
        else:
            entry()


if __name__ == "__main__":
    main()
