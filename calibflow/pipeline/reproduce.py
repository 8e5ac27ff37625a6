"""Stage ``reproduce@<key>``: run one paper's experiment and save its ``Reproduction``.

``python -m calibflow.pipeline.reproduce <key> [--profile quick|full]``. Calls
``calibflow.experiments.<key>.run(params["reproduce"][key][profile], params["seed"])`` where ``profile``
defaults to ``reproduce.profile``; saves ``reports/reproductions/<key>.json`` (tables, figures, notes,
rendered by the report) and the headline numbers as ``metrics/reproductions/<key>.json`` (DVC metrics).
Datasets the experiment loads are cached in ``data/papers`` (see ``paper_data_dir``).

Seeds (outside DVC; the stage's own outputs are left alone):

- ``--seed N`` runs at master seed N instead of ``params["seed"]`` and saves
  ``reports/seeds/<key>-<profile>-<config hash>-<N>.json``; with ``--check META`` it also says, for every
  claim the stored meta-run calls robust or robust null, whether this run agrees (a held-out seed's review),
  and keeps every held-out claim in ``reports/seeds/<key>-check-<N>.json`` (stored beside the meta-run as
  ``<key>_check_<N>.json``, the page counts the agreement from it).
- ``--seeds K`` is the meta-run: K master seeds derived from the project seed
  (``calibflow.experiments.claims.master_seeds``), one run each (saved as above; a seed already saved is
  reused, so an interrupted meta-run resumes), then for every claim the number of seeds where it is
  significant and the pooled effect, to ``reports/seeds/<key>-meta-<profile>.json`` or ``--out``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from calibflow.datasets import ENV_DATA_DIR
from calibflow.experiments import claims as CL
from calibflow.io import read_json, write_json
from calibflow.pipeline._common import (
    Layout,
    ParamsLike,
    StageError,
    as_params,
    base_parser,
    cli,
    load_params,
)
from calibflow.pipeline.params_schema import PROFILES
from calibflow.results import Reproduction

log = logging.getLogger("calibflow.pipeline.reproduce")


def experiment_config(params: ParamsLike, key: str, profile: str | None = None) -> tuple[str, dict[str, Any]]:
    """The active profile's name and its config block, ``reproduce.<key>.<profile>``."""
    rp = as_params(params).reproduce
    blocks = dict(rp.model_extra or {})  # one block per paper beside `profile`
    profile = profile or str(rp.profile)
    block = blocks.get(key)
    # A paper may add its own named profile (e.g. reproduce.decision.large) beside quick and full.
    if profile not in PROFILES and not (isinstance(block, dict) and isinstance(block.get(profile), dict)):
        raise StageError(f"reproduce profile must be one of {PROFILES}, got {profile!r}")
    if not isinstance(block, dict):
        raise StageError(
            f"params: reproduce.{key} is missing; known: {sorted(blocks)}"
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
    key: str, params: ParamsLike, root: str | os.PathLike[str] = ".", profile: str | None = None
) -> Reproduction:
    """Run the experiment, check what it returned, save it; return the ``Reproduction``."""
    params = as_params(params)
    lay = Layout(Path(root))
    profile, config = experiment_config(params, key, profile)
    mod = _experiment(key)
    t0 = time.perf_counter()
    with paper_data_dir(lay):
        rep = mod.run(dict(config), int(params.seed))
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


def config_hash(config: dict[str, Any]) -> str:
    """Short stable hash of a profile's config (key order does not matter)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:8]


def run_seed(
    key: str,
    params: ParamsLike,
    master: int,
    root: str | os.PathLike[str] = ".",
    profile: str | None = None,
) -> Reproduction:
    """One run at master seed ``master``, saved under ``reports/seeds/`` (reused if there)."""
    lay = Layout(Path(root))
    profile, config = experiment_config(params, key, profile)
    # Not under reports/reproductions: the report stage depends on that folder, and seed runs are not
    # pipeline outputs. The config hash in the name: a changed profile is never served from an old run.
    out = lay.reports / "seeds" / f"{key}-{profile}-{config_hash(config)}-{master}.json"
    if out.exists():
        log.info("seed %d: reusing %s", master, out)
        return Reproduction.load(out)
    t0 = time.perf_counter()
    with paper_data_dir(lay):
        rep = _experiment(key).run(dict(config), int(master))
    if not rep.claims:
        raise StageError(f"calibflow.experiments.{key}.run records no claims; nothing to check across seeds")
    log.info(
        "seed %d: %s %s profile in %.1f s, %d claim(s)",
        master,
        key,
        profile,
        time.perf_counter() - t0,
        len(rep.claims),
    )
    rep.save(out)
    return rep


def meta_run(
    key: str,
    params: ParamsLike,
    k: int,
    root: str | os.PathLike[str] = ".",
    profile: str | None = None,
    out: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The whole reproduction at K derived master seeds; the claims' k-of-K summary, saved."""
    lay = Layout(Path(root))
    profile, _ = experiment_config(params, key, profile)
    project_seed = int(as_params(params).seed)
    seeds = CL.master_seeds(project_seed, k)
    runs, failed = [], {}
    for s in seeds:
        try:
            runs.append(run_seed(key, params, s, root, profile).claims)
        except (ValueError, RuntimeError) as exc:  # a seed the method cannot run on counts against its claims
            log.info("seed %d failed: %s", s, exc)
            runs.append([])
            failed[s] = str(exc)
    meta = CL.meta_result(key, profile, project_seed, seeds, runs)
    meta["failed_seeds"] = failed
    target = Path(out) if out else lay.reports / "seeds" / f"{key}-meta-{profile}.json"
    write_json(target, meta)
    print(f"meta-run {key} ({profile}, K={k}): {meta['verdicts']} -> {target}")
    return meta


def check_seed(
    key: str, params: ParamsLike, master: int, meta_path: str | os.PathLike[str], root: str = "."
) -> list[dict[str, Any]]:
    """Re-run at a held-out seed and compare with every claim the stored meta-run marks robust."""
    meta = read_json(meta_path)
    if meta.get("key") != key:
        raise StageError(f"{meta_path} is the meta-run of {meta.get('key')!r}, not {key!r}")
    if master in meta["seeds"] or master == meta["project_seed"]:
        raise StageError(f"seed {master} is not held out: the meta-run used it; pick another --seed")
    rep = run_seed(key, params, master, root, meta["profile"])
    rows = CL.check_against(meta["claims"], rep.claims)
    # Every held-out claim is kept, so the check can be redone if the meta-run is re-judged.
    write_json(
        Layout(Path(root)).reports / "seeds" / f"{key}-check-{master}.json",
        {"meta": str(meta_path), "seed": master, "claims": rows, "held_out": rep.claims},
    )
    bad = [r for r in rows if not r["agrees"]]
    # The answer of the command, so stdout (not the stage log): one line per disagreement, then the count.
    for r in bad:
        print(f"disagrees: {r['id']} ({r['verdict']} in the meta-run; held-out p = {r['held_out_p']})")
    print(f"held-out seed {master}: {len(rows) - len(bad)} of {len(rows)} robust claim(s) agree")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("key", help="paper key: calibflow/experiments/<key>.py")
    parser.add_argument(
        "--profile", default=None, help=f"{'|'.join(PROFILES)} or a paper's own; default: reproduce.profile"
    )
    parser.add_argument("--seed", type=int, default=None, help="master seed for this run (not params' seed)")
    parser.add_argument("--seeds", type=int, default=None, help="meta-run over K derived master seeds")
    parser.add_argument("--check", default=None, help="with --seed: a stored meta-run JSON to compare with")
    parser.add_argument("--out", default=None, help="with --seeds: where to write the meta-run JSON")
    args = parser.parse_args(argv)
    if args.seed is not None and args.seeds is not None:
        parser.error("give --seed N (one run) or --seeds K (meta-run), not both")
    if args.check and args.seed is None:
        parser.error("--check needs --seed N (a held-out seed)")

    def body() -> Any:
        params = load_params(args.params)
        if args.seeds is not None:
            return meta_run(args.key, params, args.seeds, args.root, args.profile, args.out)
        if args.check:
            return check_seed(args.key, params, args.seed, args.check, args.root)
        if args.seed is not None:
            return run_seed(args.key, params, args.seed, args.root, args.profile)
        return run(args.key, params, args.root, args.profile)

    return cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
