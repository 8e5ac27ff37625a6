"""The ``calibflow`` command line, through typer's runner (no server, no pipeline run)."""

from __future__ import annotations

from helpers.flow_fixtures import free_port
from typer.testing import CliRunner

from calibflow import datasets
from calibflow.cli.main import app

runner = CliRunner()


def test_datasets_list_names_every_dataset():
    res = runner.invoke(app, ["datasets", "list"])
    assert res.exit_code == 0, res.output
    listed = {line.split()[0] for line in res.output.splitlines() if line.strip()}
    assert listed == set(datasets.available())


def test_datasets_fetch_unknown_name_is_a_clear_error():
    res = runner.invoke(app, ["datasets", "fetch", "no-such-dataset"])
    assert res.exit_code == 1
    assert "no-such-dataset" in res.output


def test_report_without_a_run_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIBFLOW_ROOT", str(tmp_path))
    res = runner.invoke(app, ["report"])
    assert res.exit_code == 1
    assert "calibflow run" in res.output


def test_serve_rejects_a_bad_cron_before_starting_anything():
    res = runner.invoke(app, ["serve", "--cron", "61 25 * * *"])
    assert res.exit_code != 0
    assert "invalid cron expression" in str(res.exception) + res.output


def test_server_status_reports_unhealthy_port():
    port = free_port()
    res = runner.invoke(app, ["server", "status", "--port", str(port)])
    assert res.exit_code == 1 and '"healthy": false' in res.output
