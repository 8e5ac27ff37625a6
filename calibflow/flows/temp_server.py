"""The app factory of a run's temporary Prefect server (``server.spawn_temporary``): Prefect's own
``prefect.server.api.server:create_app``, built with Python's cyclic garbage collector paused.

Building the app imports most of Prefect's server (FastAPI routes, pydantic schemas, SQLAlchemy models):
hundreds of thousands of new objects, and the collector walked them again and again while they were
created, none of them garbage. Paused, the server's start took 1.9 s of CPU instead of 2.4 s. The
objects built then are frozen (``gc.freeze``: they live as long as the server) and the collector is back
on before the server serves anything.
"""

from __future__ import annotations

from typing import Any

from calibflow.flows.gcpause import collector_paused


def create_app() -> Any:
    with collector_paused():
        from prefect.server.api.server import create_app as prefect_app

        return prefect_app()
