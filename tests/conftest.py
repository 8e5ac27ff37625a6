"""Shared fixtures: seeded synthetic scores, and the rule that real data must be present in CI."""

from __future__ import annotations

import numpy as np
import pytest

#: Fixtures shared across test modules live beside their helpers (tests/helpers/); a test module never
#: imports another test module.
pytest_plugins = ["helpers.prefect_harness", "helpers.crash", "helpers.spark_session"]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def miscalibrated(rng):
    """Over-confident logits: true P(y=1|s) = sigmoid(0.5 s - 1), imbalanced (about 30% positives)."""
    n = 20_000
    s = rng.normal(0.0, 2.0, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.5 * s - 1.0)))).astype(float)
    return s, y


@pytest.fixture(scope="session", autouse=True)
def _data_mirror():
    """Point ``CALIBFLOW_DATA_MIRROR`` at ``../shared/datasets`` when it is unset and that folder exists.

    Nothing is skipped when data is missing: tests that need real data then fail with the fetch error,
    which lists every source tried.
    """
    import os
    from pathlib import Path

    shared = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
    if "CALIBFLOW_DATA_MIRROR" not in os.environ and shared.is_dir():
        os.environ["CALIBFLOW_DATA_MIRROR"] = str(shared)
    yield


@pytest.fixture(autouse=True)
def _environment_restored():
    """Each test leaves ``os.environ`` as it found it: the CLI run in-process sets PREFECT_API_URL and the
    like, and a later test's subprocess must not inherit a server that is gone."""
    import os

    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def one_blas_thread():
    """One BLAS thread: small matrix-vector products only gain contention from threads on shared cores."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


#: What each module needs beyond Python, so a lane can pick: ``make test-fast`` is the library without
#: ``slow``; ``pytest -m "not server"`` skips nothing silently, it deselects and says how many.
#: (Functions may carry their own marks too, e.g. ``@pytest.mark.slow``.)
MODULE_MARKS: dict[str, tuple[str, ...]] = {
    # library modules that run a whole experiment or pipeline, or start a server or cluster
    "test_angular_experiment": ("slow",),
    "test_aggregate_s3": ("slow",),  # a moto S3 server and a Dask cluster
    "test_calem_experiment": ("slow",),
    "test_claims": ("slow",),
    "test_decision_honest": ("slow",),
    "test_export": ("slow",),
    "test_methods_beyond": ("slow",),
    "test_ranking_experiment": ("slow",),
    "test_segments": ("slow",),
    "test_selection": ("slow",),
    "test_vad_experiment": ("slow",),
    # pipeline
    "test_clean_reruns": ("dvc", "server"),
    "test_crash_safety": ("dvc",),
    "test_dvc_cache": ("dvc",),
    "test_monitor_deliveries": ("dvc",),
    "test_monitoring": ("dvc",),
    "test_pipeline_dvc": ("dvc", "browser", "slow"),
    "test_pipeline_tasks": ("browser",),
    "test_report_widths": ("browser",),
    "test_project": ("dvc",),
    "test_sources_dvc": ("dvc", "slow"),
    # orchestration
    "test_checkout_lock_death": ("dvc", "server"),
    "test_cli": ("server",),
    "test_cli_errors": ("server",),
    "test_entry_points_no_shell": ("dvc", "server"),
    "test_fixed_cost": ("dvc", "server"),
    "test_flows_dvc": ("dvc",),
    "test_flows_prefect": ("dvc", "server"),
    "test_monitor_docs": ("dvc",),
    "test_monitor_e2e": ("dvc", "server", "slow"),
    "test_monitor_flow": ("dvc", "server"),
    "test_monitor_registry": ("dvc",),
    "test_monitor_server": ("dvc", "server"),
    "test_run_output": ("dvc", "server"),
    "test_server_identity": ("dvc", "server"),
    "test_server_ui": ("server", "browser"),
    "test_trigger_follow": ("dvc", "server"),
    "test_wheel_project": ("dvc", "server", "slow"),
}


#: The heaviest modules' seconds on one worker: CPU seconds (the test process and the commands it waits for)
#: measured file by file (--durations, under nice, on the shared machine), the rest scaled from an earlier
#: full run's per-file times. Only their order matters: update a module's entry when it grows or shrinks.
#: ``make test`` runs files whole on two workers (``--dist loadfile``) in collection order
#: (``--no-loadscope-reorder``: xdist would otherwise sort files by test count, which sends the long
#: one- to three-test files, the real pipelines and servers, last, so one worker ran alone at the end).
#: Longest first, the rest after in their usual order: the workers end within about one short file.
#: test_project builds the session's tiny repository (helpers.dvc_repo.tiny_repo) that test_pipeline_dvc
#: copies: far apart in this order, so one worker never waits on the other's build.
MODULE_SECONDS: dict[str, int] = {
    "test_monitor_streams": 400,
    "test_wheel_project": 180,
    "test_run_output": 125,
    "test_monitor_e2e": 110,
    "test_segmented_path": 100,
    "test_project": 100,
    "test_export_sql": 90,
    "test_monitor_scenarios": 70,
    "test_score_kind_flow": 68,
    "test_sources_dvc": 65,
    "test_spark_engine": 62,
    "test_flows_prefect": 61,
    "test_export": 51,
    "test_monitor_morning": 49,
    "test_hostile_round3": 40,
    "test_trigger_follow": 35,
    "test_checkout_lock_death": 32,
    "test_cli_fit": 30,
    "test_pipeline_dvc": 30,
    "test_aggregate_segments": 30,
    "test_fixed_cost": 30,
    "test_monitor_deliveries": 27,
    "test_entry_points_no_shell": 26,
    "test_crash_safety": 25,
    "test_monitor_stream_window": 25,
    "test_cli_errors": 21,
    "test_pipeline_tasks": 20,
    "test_monitoring": 20,
    "test_apply_fit_io": 15,
}


def _module(item) -> str:
    return item.module.__name__.rpartition(".")[2]


def pytest_collection_modifyitems(config, items):
    for item in items:
        for mark in MODULE_MARKS.get(_module(item), ()):
            item.add_marker(getattr(pytest.mark, mark))
    # Longest module first (a stable sort: tests keep their order inside a module, and the modules without
    # a measured time keep theirs after the measured ones). Every worker sorts alike, so xdist sees one
    # collection.
    items.sort(key=lambda item: -MODULE_SECONDS.get(_module(item), 0))
