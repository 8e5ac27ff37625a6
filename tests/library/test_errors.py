"""calibflow.errors: the one way a stage or a command turns an expected error into lines and an exit code."""

from __future__ import annotations

import pytest

from calibflow import errors


def _boom(exc: BaseException):
    def fn():
        raise exc

    return fn


def test_an_expected_error_is_its_message_and_code(capsys, monkeypatch):
    monkeypatch.delenv("CALIBFLOW_DEBUG", raising=False)
    assert errors.exit_code(_boom(ValueError("column 'p' not found")), {ValueError: 3}) == 3
    assert capsys.readouterr().err == "error: column 'p' not found\n"
    assert errors.exit_code(lambda: None, {ValueError: 3}) == 0
    with pytest.raises(SystemExit) as out:
        errors.guarded(_boom(KeyError("x")), {(ValueError, KeyError): 2})
    assert out.value.code == 2 and capsys.readouterr().err == "error: 'x'\n"
    assert errors.guarded(lambda: 7, {ValueError: 1}) == 7


def test_the_first_matching_entry_counts_and_brief_is_one_line(capsys, monkeypatch):
    monkeypatch.delenv("CALIBFLOW_DEBUG", raising=False)
    known = {FileNotFoundError: 1, OSError: errors.brief}
    assert errors.exit_code(_boom(FileNotFoundError("model.json: no such calibrator")), known) == 1
    assert capsys.readouterr().err == "error: model.json: no such calibrator\n"
    assert errors.exit_code(_boom(PermissionError(13, "Permission denied", "/sys/x")), known) == 1
    assert capsys.readouterr().err == "error: /sys/x: Permission denied\n"
    assert errors.exit_code(_boom(OSError("disk full\n  a long\n  trace")), known) == 1
    assert capsys.readouterr().err == "error: disk full\n"


def test_notes_follow_and_a_report_gives_its_own_lines(capsys, monkeypatch):
    monkeypatch.delenv("CALIBFLOW_DEBUG", raising=False)
    with pytest.raises(SystemExit) as out:
        try:
            raise RuntimeError("monitor failed")
        except RuntimeError as exc:
            errors.fail(exc, notes=["run log: x.log"])
    assert out.value.code == 1 and capsys.readouterr().err == "error: monitor failed\nrun log: x.log\n"

    def two(exc: BaseException) -> tuple[list[str], int]:
        return [f"error: stage failed: {exc}", "  the next line"], 7

    assert errors.exit_code(_boom(ValueError("bad")), {ValueError: two}) == 7
    assert capsys.readouterr().err == "error: stage failed: bad\n  the next line\n"


def test_debug_reraises_and_unexpected_errors_keep_their_traceback(monkeypatch, capsys):
    monkeypatch.delenv("CALIBFLOW_DEBUG", raising=False)
    with pytest.raises(ValueError, match="bad"):
        errors.guarded(_boom(ValueError("bad")), {ValueError: 1}, debug=True)
    monkeypatch.setenv("CALIBFLOW_DEBUG", "1")
    with pytest.raises(ValueError, match="bad"):
        errors.exit_code(_boom(ValueError("bad")), {ValueError: 1})
    monkeypatch.delenv("CALIBFLOW_DEBUG")
    with pytest.raises(ZeroDivisionError):
        errors.exit_code(_boom(ZeroDivisionError("a bug")), {ValueError: 1})
    assert capsys.readouterr().err == ""
