"""Stage ``reproduce@<key>``: run one paper's experiment and save its ``Reproduction``.

``python -m calibflow.pipeline.reproduce <key> [--profile quick|full]``. Calls
``calibflow.experiments.<key>.run(params["reproduce"][key][profile], params["seed"])`` where ``profile``
defaults to ``reproduce.profile``; saves ``reports/reproductions/<key>.json`` (tables, figures, notes,
rendered by the report) and the headline numbers as ``metrics/reproductions/<key>.json`` (DVC metrics).
Datasets the experiment loads are cached in ``data/papers`` (see ``paper_data_dir``).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from calibflow.datasets import ENV_DATA_DIR
from calibflow.io import write_json
from calibflow.pipeline._common import Layout, StageError, base_parser, cli, load_params, section, seed
from calibflow.pipeline.params_schema import PROFILES
from calibflow.results import Reproduction

log = logging.getLogger("calibflow.pipeline.reproduce")


def experiment_config(
    params: dict[str, Any], key: str, profile: str | None = None
) -> tuple[str, dict[str, Any]]:
    """The active profile's name and its config block, ``reproduce.<key>.<profile>``."""
    rp = section(params, "reproduce")
    profile = profile or str(rp.get("profile", "quick"))
    block = rp.get(key)
    # A paper may add its own named profile (e.g. reproduce.decision.large) beside quick and full.
    if profile not in PROFILES and not (isinstance(block, dict) and isinstance(block.get(profile), dict)):
        raise StageError(f"reproduce profile must be one of {PROFILES}, got {profile!r}")
    if not isinstance(block, dict):
        raise StageError(
            f"params: reproduce.{key} is missing; known: {sorted(k for k in rp if k != 'profile')}"
        )
    config = block.get(profile)
    if config is None and profile == "standard":  # papers without a standard block run their quick one
        config = block.get("quick")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise StageError(f"params: reproduce.{key}.{profile} must be a mapping")
    return profile, config


def _experiment(key: str):
    name = f"calibflow.experiments.{key}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise StageError(
                f"no experiment module {name} (expected calibflow/experiments/{key}.py)"
            ) from exc
        raise


@contextlib.contextmanager
def paper_data_dir(lay: Layout) -> Iterator[Path]:
    """Point ``calibflow.datasets``' default cache at ``data/papers`` while an experiment runs.

    Experiments load datasets without a ``data_dir``, so they would fill ``data/raw``, the ``fetch``
    stage's DVC output, and make ``fetch`` look changed on the next ``dvc repro``. Files there are still
    verified against their pinned sha256. A user's own ``CALIBFLOW_DATA_DIR`` is kept unless it is
    ``data/raw``.
    """
    old = os.environ.get(ENV_DATA_DIR)
    keep = bool(old) and Path(old).resolve() != lay.raw.resolve()
    target = Path(old) if keep else lay.papers_data
    os.environ[ENV_DATA_DIR] = str(target)
    try:
        yield target
    finally:
        if old is None:
            os.environ.pop(ENV_DATA_DIR, None)
        else:
            os.environ[ENV_DATA_DIR] = old


def run(
    key: str, params: dict[str, Any], root: str | os.PathLike[str] = ".", profile: str | None = None
) -> Reproduction:
    """Run the experiment, check what it returned, save it; return the ``Reproduction``."""
    lay = Layout(Path(root))
    profile, config = experiment_config(params, key, profile)
    mod = _experiment(key)
    t0 = time.perf_counter()
    with paper_data_dir(lay):
        rep = mod.run(dict(config), seed(params))
    elapsed = time.perf_counter() - t0
    if not isinstance(rep, Reproduction):
        raise StageError(f"calibflow.experiments.{key}.run returned {type(rep).__name__}, not a Reproduction")
    if rep.key != key:
        raise StageError(f"calibflow.experiments.{key}.run returned a Reproduction with key {rep.key!r}")
    # Wall-clock time stays out of DVC outputs (byte-identical outputs for the same inputs, so a second
    # `dvc repro` reruns nothing downstream); it goes to the log and to an untracked timings file.
    rep.elapsed_s = 0.0
    write_json(
        lay.reports / "timings" / f"reproduce-{key}.json",
        {"stage": f"reproduce@{key}", "seconds": round(elapsed, 3)},
    )
    rep.save(lay.reproductions / f"{key}.json")
    write_json(lay.reproduction_metrics / f"{key}.json", rep.to_dict()["metrics"])
    log.info(
        "reproduced %s (%s profile) in %.1f s: %d table(s), %d figure(s)",
        key,
        profile,
        elapsed,
        len(rep.tables),
        len(rep.figures),
    )
    return rep


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("key", help="paper key: calibflow/experiments/<key>.py")
    parser.add_argument(
        "--profile", default=None, help=f"{'|'.join(PROFILES)} or a paper's own; default: reproduce.profile"
    )
    args = parser.parse_args(argv)
    return cli(lambda: run(args.key, load_params(args.params), args.root, args.profile))


if __name__ == "__main__":
    raise SystemExit(main())
