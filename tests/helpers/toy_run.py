"""A toy DVC project of three stages (a -> b -> c) that print, sleep and fail on demand (toy.yaml)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]

TOY_STAGE = textwrap.dedent(
    """
    import pathlib, sys, time, yaml
    name, out = sys.argv[1], pathlib.Path(sys.argv[2])
    params = yaml.safe_load(open("toy.yaml"))
    print(f"loading {name}", flush=True)
    time.sleep(params["sleep"].get(name, 0))
    if params.get("fail") == name:
        print(f"error: {name} was told to fail (set fail: none)", file=sys.stderr, flush=True)
        sys.exit(3)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(name)
    """
)


def toy_project(root: Path, sleep: dict[str, float]) -> Path:
    root.mkdir()
    (root / "stage.py").write_text(TOY_STAGE)
    # `calibflow run` checks params.yaml against the schema first: a real one; the toy's knobs in toy.yaml.
    for name in ("params.yaml", "params-papers.yaml"):  # the papers listed in one, their blocks in the other
        (root / name).write_text((REPO / name).read_text())
    (root / "toy.yaml").write_text(yaml.safe_dump({"sleep": sleep, "fail": "none"}))
    stages = {}
    prev: list[str] = []
    for name in ("a", "b", "c"):
        out = f"out/{name}.txt"
        stages[name] = {
            "cmd": f"{PY} stage.py {name} {out}",
            "deps": ["stage.py", "toy.yaml", *prev],
            "outs": [out],
        }
        prev = [out]
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    for cmd in (["git", "init", "-q"], [PY, "-m", "dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=root, check=True, capture_output=True)
    return root
