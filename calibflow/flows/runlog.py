"""The run log of one ``calibflow run``: every stage's full output and Prefect's records, in one file.

The terminal gets the progress lines (``[k/N] stage ... done in s``), warnings and, when a stage fails, the
stage's own error line and this file's path; everything else a run says (each stage's output, Prefect's
state changes and tracebacks) goes here. ``--debug`` (``CALIBFLOW_DEBUG=1``) shows it all on the terminal
too. Both parts are wired through calibflow's Prefect logging config (``logging.yml``): ``RunLogHandler`` on
the root logger writes to ``$CALIBFLOW_RUN_LOG`` when a run has set it (a no-op otherwise), and
``ConsoleFilter`` on Prefect's console handler keeps the terminal to the lines above while a run log is open.
A config file rather than handlers added at run time, because Prefect re-applies its logging config.

Logs live in ``<project>/.calibflow/logs/`` (a folder that ignores itself in git); the newest
``KEEP`` are kept.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

ENV = "CALIBFLOW_RUN_LOG"
#: A record with this attribute set to True is meant for the terminal (progress and heartbeat lines).
CONSOLE = "calibflow_console"
KEEP = 20
#: Seconds of silence from a stage before a heartbeat line says what it is doing.
HEARTBEAT_S = 10.0
FOLDER = Path(".calibflow") / "logs"


def open_run_log(root: Path, kind: str = "run") -> Path:
    """A new log file for this run under ``root``; sets ``$CALIBFLOW_RUN_LOG`` so the handlers use it."""
    folder = root / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder.parent / ".gitignore"
    if not ignore.exists():  # never shows up in `git status`, whatever the project's .gitignore says
        ignore.write_text("# calibflow run logs (created by calibflow)\n*\n")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = folder / f"{kind}-{stamp}-{os.getpid()}.log"
    path.touch()
    _prune(folder)
    os.environ[ENV] = str(path)
    return path


def _prune(folder: Path) -> None:
    logs = sorted(folder.glob("*.log"), key=lambda p: p.stat().st_mtime)
    for old in logs[:-KEEP]:
        old.unlink(missing_ok=True)


def current() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def note_lines() -> list[str]:
    """The line an error message ends with when a run log holds the rest (Prefect's tracebacks go there)."""
    log = current()
    return [] if log is None else [f"run log: {log} (--debug prints it here)"]


def write(text: str) -> None:
    """Append ``text`` to the run log (no-op without one): what is not a logging record (a traceback)."""
    path = current()
    if path is not None:
        with _LOCK, path.open("a", encoding="utf-8") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")


_LOCK = threading.Lock()


class RunLogHandler(logging.Handler):
    """Writes every record it gets to ``$CALIBFLOW_RUN_LOG`` (opened per record; runs are not hot paths)."""

    def __init__(self, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.setFormatter(
            logging.Formatter(
                "%(asctime)s.%(msecs)03d | %(levelname)-7s | %(name)s - %(message)s", "%H:%M:%S"
            )
        )

    def emit(self, record: logging.LogRecord) -> None:
        if current() is None:
            return
        try:
            write(self.format(record))
        except Exception:  # noqa: BLE001  (logging must never break a run)
            self.handleError(record)


class ConsoleFilter(logging.Filter):
    """While a run log is open (and not --debug), Prefect's console handler prints warnings only.

    Prefect's errors (a failed task's traceback, the flow's final state) are left out: the CLI prints the
    stage's own error line and the log's path instead. Without a run log (a served flow run, a test), every
    record passes, as Prefect's default config would print it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if current() is None:
            return True
        if getattr(record, CONSOLE, False):
            return False  # printed plainly by ProgressFilter's handler
        if os.environ.get("CALIBFLOW_DEBUG"):
            return True
        if record.levelno >= logging.ERROR and record.name.startswith("prefect"):
            return False
        return record.levelno >= logging.WARNING


class ProgressFilter(logging.Filter):
    """The plain terminal handler of a run: only lines marked for the terminal, while a run log is open."""

    def filter(self, record: logging.LogRecord) -> bool:
        return current() is not None and bool(getattr(record, CONSOLE, False))


def console(logger: logging.Logger | logging.LoggerAdapter, message: str, *args: object) -> None:
    """Log ``message`` at INFO marked for the terminal (and the run log, and the Prefect API)."""
    logger.info(message, *args, extra={CONSOLE: True})


class Heartbeat:
    """While a stage runs: after ``every`` seconds without a new output line, say what it is doing.

    ``emit`` gets one line, e.g. ``[4/9] train ... 20 s, still running: fitting bank_marketing``, the last
    line the stage printed (its own account of what it is doing); then again after each further silence.
    Use as a context manager around the stage and call ``saw(line)`` for each output line.
    """

    def __init__(self, label: str, emit: Callable[[str], None], every: float | None = None) -> None:
        # CALIBFLOW_HEARTBEAT_S: the silence before a heartbeat line (10 s; tests use less).
        every = float(os.environ.get("CALIBFLOW_HEARTBEAT_S", HEARTBEAT_S)) if every is None else every
        self.label, self.emit, self.every = label, emit, every
        self.t0 = self.last = time.monotonic()
        self.line = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="calibflow-heartbeat", daemon=True)

    def saw(self, line: str) -> None:
        if line.strip():
            self.line = line.strip()
        self.last = time.monotonic()

    def _loop(self) -> None:
        while not self._stop.wait(min(1.0, self.every)):
            now = time.monotonic()
            if now - self.last >= self.every:
                doing = f": {self.line[:160]}" if self.line else ""
                self.emit(f"{self.label} ... {now - self.t0:.0f} s, still running{doing}")
                self.last = now

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
