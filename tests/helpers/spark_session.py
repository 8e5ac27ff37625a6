"""One local Spark session for every Spark test in a process (the JVM's start costs ~10 s): the engine's
``spark_session`` finds it active and uses it rather than starting its own."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from calibflow.aggregate.spark_engine import spark_session

    with spark_session("local[2]") as session:
        session.sparkContext.setLogLevel("ERROR")
        yield session
