"""A throwaway PostgreSQL server for the export tests: Debian's binaries, a temp cluster, a free port.

``.ci/run`` installs the ``postgresql`` package where it is missing; a machine without it fails the tests
that need it, loudly (no skip). As root the cluster runs as the ``postgres`` user (initdb refuses root).
Queries go through ``psql`` (no Python driver needed): data in with COPY, results out as CSV.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import numpy as np


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): apt-get install postgresql"
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="calibflow-pg-"))
        os.chmod(self.root, 0o755)
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.sock.mkdir()
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "calibflow",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        opts = f"-p {self.port} -k {self.sock} -c listen_addresses='' -c fsync=off -c work_mem=256MB"
        self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.data),
                "-o",
                opts,
                "-w",
                "-l",
                str(self.root / "log"),
                "start",
            ]
        )

    def _run(self, cmd: list[str]) -> None:
        subprocess.run([*self.as_user, *cmd], check=True, capture_output=True, timeout=120)

    def stop(self) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.root, ignore_errors=True)

    def psql(self, sql: str, stdin: str | None = None, timeout: float = 300) -> str:
        """Run ``sql`` (a file, so any length), ON_ERROR_STOP; stdout, or RuntimeError with the error."""
        script = self.root / "q.sql"
        script.write_text(sql, encoding="utf-8")
        os.chmod(script, 0o644)
        res = subprocess.run(
            [
                str(self.bin / "psql"),
                "-h",
                str(self.sock),
                "-p",
                str(self.port),
                "-U",
                "calibflow",
                "-d",
                "postgres",
                "-X",
                "-q",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
                str(script),
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if res.returncode != 0:
            raise RuntimeError(f"psql failed: {res.stderr.strip()[:2000]}")
        return res.stdout

    def load(self, name: str, columns: dict[str, np.ndarray | list], types: dict[str, str]) -> None:
        """Table ``name`` from numpy columns (NaN and +-inf kept as float8 values, None as NULL)."""
        cols = list(columns)
        ddl = ", ".join(f'"{c}" {types[c]}' for c in cols)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        n = len(columns[cols[0]])
        for i in range(n):
            w.writerow([_cell(columns[c][i]) for c in cols])
        self.psql(
            f'DROP TABLE IF EXISTS "{name}"; CREATE TABLE "{name}" ({ddl});\n'
            f'\\copy "{name}" FROM pstdin WITH (FORMAT csv)\n',
            stdin=buf.getvalue(),
        )

    def query_floats(self, sql: str, timeout: float = 300) -> np.ndarray:
        """The first column of ``sql`` as float64 (NULL as NaN), rows in the query's order."""
        out = self.psql(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)", timeout=timeout)
        vals = [line.split(",")[0] for line in out.splitlines()]
        return np.array([np.nan if v == "" else float(v) for v in vals], dtype=np.float64)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float | np.floating):
        f = float(v)
        if np.isnan(f):
            return "NaN"
        if np.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return repr(f)
    return str(v)
