"""What `calibflow run` pays per run and per stage, cut (issue 25): one DVC process for every stage, a
stage process that skips the interpreter's teardown, a new project's Prefect database seeded from a
migrated one.

Real parts: a real DVC repository (the toy pipeline), real temporary Prefect servers on their own homes.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from helpers.flow_fixtures import make_toy_repo

from calibflow.flows import dvc_stages


@pytest.fixture
def toy(tmp_path):
    return make_toy_repo(tmp_path / "toy")


def test_every_stage_runs_in_one_dvc_worker_with_its_output_streamed(toy):
    lines: list[str] = []
    runs = [dvc_stages.reproduce_stage(toy, st.name, on_line=lines.append) for st in dvc_stages.plan(toy)]
    assert [r.ran for r in runs] == [True] * len(runs)
    worker = dvc_stages._WORKERS[str(toy.resolve())]
    assert worker.alive()
    assert any(ln.startswith("Running stage 'a'") for ln in lines)
    assert not any(dvc_stages.DvcWorker.__name__ in ln or "calibflow-dvc-worker-done" in ln for ln in lines)
    # as `python -m dvc repro` left it: nothing stale, and a second repro is a no-op in the same worker
    assert not any(s.stale for s in dvc_stages.plan(toy))
    again = dvc_stages.reproduce_stage(toy, "a")
    assert not again.ran and dvc_stages._WORKERS[str(toy.resolve())] is worker


def test_a_failing_stage_in_the_worker_keeps_its_status_and_a_dead_worker_is_replaced(toy):
    for st in dvc_stages.plan(toy):
        dvc_stages.reproduce_stage(toy, st.name)
    (toy / "params.yaml").write_text("scale: 1\nfail: a\n")
    with pytest.raises(dvc_stages.StageFailed, match=r"(?s)stage .a. failed.*told to fail") as err:
        dvc_stages.reproduce_stage(toy, "a")
    assert err.value.code != 0
    worker = dvc_stages._WORKERS[str(toy.resolve())]
    worker.proc.kill()
    worker.proc.wait()
    (toy / "params.yaml").write_text("scale: 3\nfail: none\n")
    assert dvc_stages.reproduce_stage(toy, "a").ran  # a new worker took over
    assert dvc_stages._WORKERS[str(toy.resolve())] is not worker


def test_a_second_repository_replaces_the_idle_worker_of_the_first(tmp_path):
    one, two = make_toy_repo(tmp_path / "one"), make_toy_repo(tmp_path / "two")
    assert dvc_stages.reproduce_stage(one, "a").ran
    first = dvc_stages._WORKERS[str(one.resolve())]
    assert dvc_stages.reproduce_stage(two, "a").ran
    assert list(dvc_stages._WORKERS) == [str(two.resolve())]
    assert first.proc.poll() is not None  # ended, not left idle


def test_a_stage_process_exits_with_its_status_and_runs_exit_handlers(tmp_path):
    mark = tmp_path / "handler-ran"
    code = textwrap.dedent(
        f"""
        import atexit, pathlib
        from calibflow.pipeline._common import exit_process
        atexit.register(lambda: pathlib.Path({str(mark)!r}).write_text("yes"))
        print("written before exit", flush=False)
        exit_process(3)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 3
    assert proc.stdout.strip() == "written before exit"  # a buffered line still comes out
    assert mark.read_text() == "yes"


_START = textwrap.dedent(
    """
    import json, sys, urllib.request
    from calibflow.flows import server, server_seed
    seeded = server_seed.database(server.home()).exists()
    proc, url = server.spawn_temporary()
    server.wait_temporary(proc, url)
    req = urllib.request.Request(url + "/block_types/filter", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        blocks = len(json.load(resp))
    server.stop_temporary(proc)
    print(json.dumps({"seeded_before_start": seeded, "block_types": blocks}))
    """
)


def _start(home, cache) -> dict:
    import json

    env = {**os.environ, "PREFECT_HOME": str(home), "XDG_CACHE_HOME": str(cache)}
    for key in ("PREFECT_API_URL", "CALIBFLOW_PREFECT_SEED", "PREFECT_API_DATABASE_CONNECTION_URL"):
        env.pop(key, None)
    argv = [sys.executable, "-c", _START]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_new_project_database_starts_from_the_migrated_template(tmp_path, monkeypatch):
    from calibflow.flows import server_seed

    cache = tmp_path / "cache"
    first = _start(tmp_path / "one", cache)
    assert not first["seeded_before_start"] and first["block_types"] > 0
    templates = list((cache / "calibflow").glob("prefect-*.db"))
    assert len(templates) == 1
    assert not list((cache / "calibflow").glob("*-wal"))
    with sqlite3.connect(templates[0]) as con:  # migrated, and no run in it
        assert con.execute("SELECT count(*) FROM alembic_version").fetchone()[0] == 1
        assert con.execute("SELECT count(*) FROM flow_run").fetchone()[0] == 0
    # a second project: its database is the template's copy before its server starts, and that server works
    home = tmp_path / "two"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.delenv("CALIBFLOW_PREFECT_SEED", raising=False)
    assert server_seed.seed(home) and server_seed.database(home).is_file()
    assert not server_seed.seed(home)  # an existing database is never replaced
    monkeypatch.setenv("CALIBFLOW_PREFECT_SEED", "0")
    assert not server_seed.seed(tmp_path / "three")  # switched off
    second = _start(home, cache)
    assert second["seeded_before_start"] and second["block_types"] == first["block_types"]
    assert sorted(p.name for p in (cache / "calibflow").iterdir()) == [templates[0].name]  # no -wal/-shm


def test_a_database_this_prefect_prepared_is_not_migrated_again(tmp_path, monkeypatch):
    """The marker beside the database names the Prefect whose server migrated it and registered its block
    types; only then does the next temporary server skip both, and it still answers with every block type."""
    from importlib.metadata import version

    from calibflow.flows import server, server_seed

    for key in ("CALIBFLOW_PREFECT_SEED", "PREFECT_API_DATABASE_CONNECTION_URL", *server._PREPARATION):
        monkeypatch.delenv(key, raising=False)
    cache, home = tmp_path / "cache", tmp_path / "one"
    first = _start(home, cache)  # a new database: prepared by this server, then marked
    mark = home / server_seed.MARK
    assert mark.read_text().strip() == version("prefect")
    assert server._skip_preparation(home) == {key: "false" for key in server._PREPARATION}
    again = _start(home, cache)  # skips both, and its database is the same
    assert again["block_types"] == first["block_types"] > 0
    # anything else is prepared as before: another version's marker, no marker, no database, seeding off
    mark.write_text("0.0.1\n")
    assert server._skip_preparation(home) == {}
    mark.unlink()
    assert server._skip_preparation(home) == {}
    assert server._skip_preparation(tmp_path / "none") == {}
    server_seed.mark_prepared(home)
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_MIGRATE_ON_START", "true")  # the user's setting wins
    assert "PREFECT_SERVER_DATABASE_MIGRATE_ON_START" not in server._skip_preparation(home)
    monkeypatch.setenv("CALIBFLOW_PREFECT_SEED", "0")
    assert server._skip_preparation(home) == {}
    # a new project seeded from the template is marked prepared with it
    monkeypatch.delenv("CALIBFLOW_PREFECT_SEED")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert server_seed.seed(tmp_path / "two") and server_seed.prepared(tmp_path / "two")


def test_a_no_op_run_answers_from_dvc_status_without_a_prefect_server(toy, monkeypatch):
    from typer.testing import CliRunner

    from calibflow.cli import main as cli

    for st in dvc_stages.plan(toy):
        dvc_stages.reproduce_stage(toy, st.name)
    assert cli.up_to_date(toy, []) == 4 and cli.up_to_date(toy, ["b"]) == 2

    def no_server(port: int):
        raise AssertionError("a no-op run started a Prefect server")

    def not_needed(path):
        raise AssertionError("a no-op run validated params.yaml (the last run did)")

    monkeypatch.setenv("CALIBFLOW_ROOT", str(toy))
    monkeypatch.setattr("calibflow.pipeline.params_schema.load_and_validate", not_needed)
    monkeypatch.setattr(cli, "_use_server", no_server)
    res = CliRunner().invoke(cli.app, ["run", "-q"])
    assert res.exit_code == 0, res.output
    assert "all 4 stage(s) up to date, nothing ran" in res.output
    # a wrong option is refused before the answer from status, as on a run with work to do
    res = CliRunner().invoke(cli.app, ["run", "-q", "--task-runner", "banana"])
    assert res.exit_code != 0 and "--task-runner must be" in res.output
    monkeypatch.setattr("calibflow.pipeline.params_schema.load_and_validate", lambda path: {})

    # a stale stage is no answer from status: the run goes on to the server (refused here)
    (toy / "params.yaml").write_text("scale: 2\nfail: none\n")
    assert cli.up_to_date(toy, []) is None
    res = CliRunner().invoke(cli.app, ["run", "-q"])
    assert res.exit_code != 0 and "a no-op run started a Prefect server" in repr(res.exception) + res.output


def test_the_temporary_servers_app_is_prefects_built_with_the_collector_paused_then_on_again():
    code = (
        "import gc; from calibflow.flows import temp_server; app = temp_server.create_app(); "
        "from prefect.server.api.server import APP_CACHE; "
        "print(gc.isenabled(), gc.get_freeze_count() > 100000, app in APP_CACHE.values(), "
        "any(getattr(r, 'path', '') == '/api' for r in app.routes))"
    )
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "True", "True", "True"]


_KIND = textwrap.dedent(
    """
    import json, sys, threading, pathlib
    from calibflow.flows import server, temp_server
    if sys.argv[1] == "thread":  # a process running threads must not be forked
        stop = threading.Event()
        threading.Thread(target=stop.wait, daemon=True).start()
    proc, url = server.spawn_temporary()
    server.wait_temporary(proc, url)
    name = pathlib.Path(f"/proc/{proc.pid}/comm").read_text().strip()
    kind = type(proc).__name__
    server.stop_temporary(proc)
    print(json.dumps({"kind": kind, "name": name, "stopped": proc.poll() is not None,
                      "pidfile": (server.home() / server.PIDFILE).exists()}))
    """
)


def _serve_kind(mode: str, tmp_path) -> dict:
    import json

    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PREFECT_API_URL", None)
    argv = [sys.executable, "-c", _KIND, mode]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_temporary_server_is_a_fork_unless_threads_run_then_a_new_interpreter(tmp_path):
    from calibflow.flows.temp_server import NAME

    forked = _serve_kind("plain", tmp_path)
    assert forked == {"kind": "Forked", "name": NAME, "stopped": True, "pidfile": False}
    spawned = _serve_kind("thread", tmp_path)  # the same serve(), in `python -m calibflow.flows.temp_server`
    assert spawned == {"kind": "Popen", "name": NAME, "stopped": True, "pidfile": False}


def test_the_forked_server_holds_none_of_the_runs_descriptors(tmp_path):
    """The run's checkout lock and its DVC worker's pipes must end with the run, not with its server."""
    code = textwrap.dedent(
        f"""
        import os, pathlib
        lock = os.open({str(tmp_path / "lock")!r}, os.O_CREAT | os.O_RDWR)
        from calibflow.flows import server
        proc, url = server.spawn_temporary()
        server.wait_temporary(proc, url)
        fds = [os.readlink(f"/proc/{{proc.pid}}/fd/{{fd}}") for fd in os.listdir(f"/proc/{{proc.pid}}/fd")]
        server.stop_temporary(proc)
        print(sum("lock" in target for target in fds), len(fds) > 3)
        """
    )
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0", "True"]  # no lock; its own socket and database are open
