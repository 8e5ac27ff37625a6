"""A real, tiny DVC repository for flow tests: three stages, two of them independent."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from pathlib import Path

PY = sys.executable

STAGE_SCRIPT = textwrap.dedent(
    """
    import json, sys, time, pathlib, yaml
    name, out = sys.argv[1], pathlib.Path(sys.argv[2])
    params = yaml.safe_load(open("params.yaml"))
    if params.get("fail") == name:
        sys.exit(f"stage {name} told to fail")
    out.parent.mkdir(parents=True, exist_ok=True)
    deps = [pathlib.Path(p).read_text() for p in sys.argv[3:]]
    out.write_text(json.dumps({"stage": name, "scale": params["scale"], "deps": len(deps)}))
    if name == "report":
        pathlib.Path("reports/summary.md").write_text("# toy summary")
        suite = {"name": "toy", "success": True, "evaluated": 3, "failed": 0, "rows": 1}
        pathlib.Path("reports/validation.json").write_text(json.dumps({"success": True, "suites": [suite]}))
    """
)


def make_toy_repo(root: Path) -> Path:
    """git + dvc repo: a -> (b, c) -> report. b and c are independent (one parallel layer)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "stage.py").write_text(STAGE_SCRIPT)
    (root / "params.yaml").write_text("scale: 1\nfail: none\n")
    s = f"{PY} stage.py"
    (root / "dvc.yaml").write_text(
        textwrap.dedent(
            f"""
            stages:
              a:
                cmd: {s} a out/a.json
                deps: [stage.py]
                params: [scale, fail]
                outs: [out/a.json]
              b:
                cmd: {s} b out/b.json out/a.json
                deps: [out/a.json]
                params: [fail]
                outs: [out/b.json]
              c:
                cmd: {s} c out/c.json out/a.json
                deps: [out/a.json]
                outs: [out/c.json]
              report:
                cmd: {s} report reports/index.html out/b.json out/c.json
                deps: [out/b.json, out/c.json]
                params: [fail]
                outs:
                  - reports/index.html
                  - reports/summary.md:
                      cache: false
                  - reports/validation.json:
                      cache: false
            """
        )
    )
    run = lambda *a: subprocess.run(a, cwd=root, check=True, capture_output=True)  # noqa: E731
    run("git", "init", "-q")
    run("git", "config", "user.email", "t@example.invalid")
    run("git", "config", "user.name", "t")
    run(PY, "-m", "dvc", "init", "-q")
    run(PY, "-m", "dvc", "config", "core.analytics", "false")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "toy")
    return root


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
