"""One Prefect test server per test module (``prefect_test_harness``) as a fixture."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def harness():
    # calibflow.flows sets the environment (PREFECT_HOME, quiet logs) before prefect is imported
    import calibflow.flows  # noqa: F401, I001
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
