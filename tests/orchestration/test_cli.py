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


def test_monitor_run_help_says_when_a_window_matures_and_where_the_page_is():
    """Issue 38: the help names label_delay, pending, the deadlines and the page, and reads at 80 columns
    (the docstring's lines are wrapped so the terminal does not break them mid-phrase)."""
    res = runner.invoke(app, ["monitor", "run", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    for said in ("monitor.label_delay <= now", '"pending"', "exits 0", "monitor.label_deadline",
                 "monitor.delivery_deadline", "reports/pages/monitoring-<source>.html"):
        assert said in text, said
    assert max(len(line.rstrip()) for line in res.output.splitlines()) <= 80
    from calibflow.cli.monitor import run

    # rich keeps the docstring's line breaks: a line longer than the terminal breaks mid-phrase
    assert max(len(line.strip()) for line in (run.__doc__ or "").splitlines()[1:]) <= 78
