"""One local Spark session for the Spark tests that run one after another in a process (the JVM's start costs
~10 s): the engine's ``spark_session`` finds it active and uses it rather than starting its own.

The session is stopped as soon as the next test of the process does not ask for it (under ``--dist
loadfile`` a worker runs a Spark file's tests together, then goes on to other files for many minutes): a
stopped context leaves no executor threads or ``pyspark.daemon`` workers burning CPU beside the other tests,
and a later Spark file in the same process starts a context on the JVM that is still there.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest

#: The open ``spark_session`` context of this process and its session (at most one).
_OPEN: list[tuple[AbstractContextManager[Any], Any]] = []


def _session() -> Any:
    if not _OPEN:
        from calibflow.aggregate.spark_engine import spark_session

        cm = spark_session("local[2]")
        session = cm.__enter__()
        session.sparkContext.setLogLevel("ERROR")
        _OPEN.append((cm, session))
    return _OPEN[0][1]


def _stop() -> None:
    while _OPEN:
        cm, _ = _OPEN.pop()
        cm.__exit__(None, None, None)


@pytest.fixture
def spark():
    return _session()


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    # xdist keeps one test queued until the worker shuts down, so ``nextitem`` is None only at the end
    if _OPEN and (nextitem is None or "spark" not in getattr(nextitem, "fixturenames", ())):
        _stop()


def pytest_sessionfinish(session):
    _stop()
