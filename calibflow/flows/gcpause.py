"""Imports with Python's cyclic garbage collector paused, then frozen (the server's app, the stage host's
imports, the flow's Prefect and DVC).

Importing Prefect, Great Expectations or DVC builds objects by the hundred thousand, none of them garbage,
and the collector walked them again and again while they were made (the temporary server's start: 2.4 ->
1.9 s of CPU paused). ``gc.freeze`` then keeps them out of every later collection, and of a forked child's
(their pages stay shared).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()
