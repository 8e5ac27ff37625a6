"""Step ``monitor``: score the production calibrator on each new matured window, gate challengers, alert.

    python -m calibflow.pipeline.monitor --source ads [--now 2026-03-01T06:00] [--max-windows N] [--params
    params.yaml]

For each source named in ``monitor.sources`` (or ``--source``), it reads the source through
``calibflow.sources`` (DuckDB: only the time, score, label and segment columns, only the rows from the oldest
pending window's trailing calibration window on), finds the windows that are complete and whose labels have
matured, and runs ``calibflow.monitoring.process_window`` on each, oldest first. Outputs (per source):

- ``monitoring/<source>/state.json``: the whole state (versions, history, gates, alerts, notes); written
  atomically after EVERY window, so a run killed at any point loses at most the window in flight, and the
  next run resumes after the last saved one (windows are keyed; none is scored twice);
- ``plots/monitoring/<source>.csv``: one row per (window, segment) (DVC plots);
- ``metrics/monitoring/<source>.json``: the newest window's overall scores and counts (DVC metrics);
- ``models/<source>/champion.json`` + ``champion.card.json``: the calibrator in office and its card
  (method, the windows it was fitted and judged on, the gate's numbers);
- ``reports/pages/monitoring-<source>.html``: the "calibration over time" page.

The initial champion (version 1) is the select stage's ``models/<source>/calibrator.json`` (or
``--champion PATH``). This step never commits or tags: the flow (calibflow/flows/monitor.py) does, on a
dedicated
branch, and records promotions in GTO. A rollback with GTO (``calibflow monitor rollback``) is honoured at
the start of the next run through ``--prod-version``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from calibflow import calibrators as C
from calibflow import monitoring as mon
from calibflow.io import read_json, write_json, write_text
from calibflow.pipeline._common import StageError, base_parser, cli, load_params, require

log = logging.getLogger("calibflow.pipeline.monitor")
#: Keys of ``params.monitor`` that are not MonitorConfig fields.
RUN_KEYS = ("sources", "commit", "branch", "registry")

#: ``load(since, time_only)``: the rows from ``since`` on (all if None), only the time column if asked.
Loader = Callable[[pd.Timestamp | None, bool], pd.DataFrame]


@dataclass(frozen=True)
class Paths:
    root: Path
    source: str

    @property
    def state(self) -> Path:
        return self.root / "monitoring" / self.source / "state.json"

    @property
    def history(self) -> Path:
        return self.root / "plots" / "monitoring" / f"{self.source}.csv"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics" / "monitoring" / f"{self.source}.json"

    @property
    def selected(self) -> Path:
        return self.root / "models" / self.source / "calibrator.json"

    @property
    def champion(self) -> Path:
        return self.root / "models" / self.source / "champion.json"

    @property
    def card(self) -> Path:
        return self.root / "models" / self.source / "champion.card.json"

    @property
    def page(self) -> Path:
        return self.root / "reports" / "pages" / f"monitoring-{self.source}.html"

    def version(self, k: int) -> Path:
        return self.root / "models" / self.source / "versions" / f"v{k}.json"

    def tracked(self, n_versions: int = 0) -> list[Path]:
        """Files a scheduled run commits (history and metrics; the champion, its card, every version)."""
        versions = [self.version(k) for k in range(1, n_versions + 1)]
        return [self.state, self.history, self.metrics, self.champion, self.card, *versions]


def config(params: dict[str, Any], seed: int | None = None) -> mon.MonitorConfig:
    sec = {k: v for k, v in (params.get("monitor") or {}).items() if k not in RUN_KEYS}
    if seed is not None and "seed" not in sec:
        sec["seed"] = int(seed)
    return mon.MonitorConfig.from_params(sec)


def validate_section(section: dict[str, Any] | None) -> None:
    """Check ``params.monitor`` (for the params schema): a ``ValueError`` naming the key and the fix."""
    sec = dict(section or {})
    srcs = sec.get("sources") or []
    if not isinstance(srcs, list) or not all(isinstance(x, str) for x in srcs):
        raise ValueError(f"monitor.sources must be a list of source names, got {srcs!r}")
    for key in ("commit", "registry"):
        if key in sec and not isinstance(sec[key], bool):
            raise ValueError(f"monitor.{key} must be true or false, got {sec[key]!r}")
    if "branch" in sec and (not isinstance(sec["branch"], str) or not sec["branch"].strip()):
        raise ValueError(f"monitor.branch must be a branch name (e.g. calibflow/runs), got {sec['branch']!r}")
    config({"monitor": sec})


def source_loader(params: dict[str, Any], name: str, root: Path) -> tuple[Loader, tuple[str, ...]]:
    """A loader of the source's time/score/label/segment rows (through calibflow.sources) and its segments."""
    from calibflow import sources  # issue 12's reader: the one way to read user data

    decls = params.get("sources") or {}
    if name not in decls:
        raise StageError(f"monitor: source {name!r} is not declared under `sources:` in params.yaml")
    spec = sources.parse_source(name, decls[name])
    if not Path(spec.path).is_absolute():  # a relative path is relative to the project, not the cwd
        spec = replace(spec, path=str(root / spec.path))
    if not spec.time:
        raise StageError(f"monitor: source {name!r} has no `time` column; the monitor needs one")
    if not spec.score:
        raise StageError(f"monitor: source {name!r} declares features, not a score; monitor a score source")
    segs = tuple(spec.segments or ())
    cols = [spec.time, spec.score, spec.label, *segs]

    def load(since: pd.Timestamp | None, time_only: bool = False) -> pd.DataFrame:
        where = None if since is None else f"\"{spec.time}\" >= TIMESTAMP '{since.isoformat(sep=' ')}'"
        table = sources.scan(spec, [spec.time] if time_only else cols, where=where)
        df = table.to_pandas()
        df = df.rename(columns={spec.time: "time", spec.score: "score", spec.label: "label"})
        if spec.positive is not None and not time_only:
            df["label"] = (df["label"] == spec.positive).astype(float)
        return df

    return load, segs


def normalise_time(t: pd.Series) -> pd.Series:
    """UTC-naive timestamps; an unparseable one is a one-line error."""
    out = pd.to_datetime(t, utc=True, errors="coerce")
    if out.isna().any():
        raise StageError(f"monitor: {int(out.isna().sum())} time value(s) cannot be parsed as timestamps")
    return out.dt.tz_convert(None)


def normalise(df: pd.DataFrame) -> pd.DataFrame:
    """UTC-naive timestamps, float label; a bad label is a one-line error (scores: the calibrator checks)."""
    out = df.copy()
    out["time"] = normalise_time(out["time"])
    out["label"] = pd.to_numeric(out["label"], errors="coerce").astype(float)
    if not out["label"].isin([0.0, 1.0]).all():
        raise StageError(
            "monitor: label column has values other than 0/1 (declare `positive:` for text labels)"
        )
    return out.sort_values("time", kind="mergesort").reset_index(drop=True)


def initial_state(paths: Paths, champion_path: str | None) -> mon.MonitorState:
    if paths.state.exists():
        return mon.MonitorState.from_json(paths.state.read_text(encoding="utf-8"))
    src = require(champion_path or paths.selected, "initial champion calibrator", "the select stage")
    champ = C.from_json(src.read_text(encoding="utf-8"))
    card = src.with_name("card.json")
    prov: dict[str, Any] = {
        "origin": str(src.relative_to(paths.root) if src.is_relative_to(paths.root) else src)
    }
    if card.exists():
        split = (read_json(card).get("data") or {}).get("split") or {}
        prov.update(fitted_on=split.get("calib"), judged_on=split.get("test"))
    return mon.MonitorState.start(paths.source, champ, prov)


def apply_prod_version(state: mon.MonitorState, version: int | None) -> mon.MonitorState:
    """Honour the registry's ``prod`` stage (a rollback made with ``gto assign``) before scoring."""
    if version is None or version == state.champion:
        return state
    if not 1 <= version <= len(state.versions):
        raise StageError(f"monitor: registry prod version {version} unknown (have 1..{len(state.versions)})")
    state.notes.append(
        f"champion set to version {version} (was {state.champion}) by the registry's prod stage"
    )
    state.champion = version
    return state


def save(paths: Paths, state: mon.MonitorState) -> None:
    """Versions and champion first (immutable per version), then the state: a kill between loses nothing."""
    for v in state.versions:
        if not paths.version(v["version"]).exists():
            write_text(paths.version(v["version"]), v["calibrator"] + "\n")
    v = state.versions[state.champion - 1]
    write_text(paths.champion, v["calibrator"] + "\n")
    write_json(paths.card, card(state))
    write_text(paths.state, state.to_json() + "\n")


def card(state: mon.MonitorState) -> dict[str, Any]:
    v = dict(state.versions[state.champion - 1])
    v.pop("calibrator")
    return {"name": state.source, "kind": "monitor-champion", **v, "windows_processed": len(state.processed)}


def latest_metrics(state: mon.MonitorState) -> dict[str, Any]:
    rows = [r for r in state.history if r["segment"] == mon.ALL and not r.get("skipped")]
    out: dict[str, Any] = {
        "windows": len(state.processed),
        "champion_version": state.champion,
        "promotions": len(state.versions) - 1,
        "alerts": len(state.alerts),
    }
    if rows:
        r = rows[-1]
        out.update(
            {k: r[k] for k in ("window", "calibration_ratio", "ece", "log_loss", "brier", "n", "positives")}
        )
    return out


def run(
    root: str | Path,
    params: dict[str, Any],
    source: str,
    now: pd.Timestamp | None = None,
    max_windows: int | None = None,
    champion_path: str | None = None,
    prod_version: int | None = None,
    loader: Loader | None = None,
    segments: tuple[str, ...] | None = None,
    render: bool = True,
) -> dict[str, Any]:
    """Process every pending window of ``source`` (at most ``max_windows``); return what happened."""
    cfg = config(params, params.get("seed"))
    paths = Paths(Path(root), source)
    if loader is None:
        loader, segs = source_loader(params, source, paths.root)
    else:
        segs = tuple(segments or ())
    now = pd.Timestamp.now(tz="UTC").tz_convert(None) if now is None else pd.Timestamp(now)
    state = initial_state(paths, champion_path)
    before = (len(state.alerts), len(state.versions), len(state.notes))
    state = apply_prod_version(state, prod_version)
    times = normalise_time(loader(None, True)["time"])
    todo = mon.pending_windows(times, now, cfg, state)[: max_windows or None]
    if todo:
        since = todo[0].start - cfg.calib_windows * pd.Timedelta(cfg.period)
        df = normalise(loader(since, False))
        for w in todo:
            frame = df[(df["time"] >= w.start) & (df["time"] < w.end)]
            lo = w.start - cfg.calib_windows * pd.Timedelta(cfg.period)
            calib = df[(df["time"] >= lo) & (df["time"] < w.start)]
            state = mon.process_window(state, w, frame, calib, cfg, segs)
            save(paths, state)  # per window: the resume point
            log.info("monitor %s: window %s scored (champion v%d)", source, w.key, state.champion)
    else:
        save(paths, state)  # a rollback or a first run still writes the champion in office
    write_text(paths.history, mon.history_frame(state).to_csv(index=False))
    write_json(paths.metrics, latest_metrics(state))
    if render:
        from calibflow.report.monitoring import render_page

        write_text(paths.page, render_page(state))
    return {
        "source": source,
        "windows": [w.key for w in todo],
        "alerts": state.alerts[before[0] :],
        "promotions": state.versions[before[1] :],
        "notes": state.notes[before[2] :],
        "champion": state.champion,
        "files": [
            str(p.relative_to(paths.root))
            for p in [*paths.tracked(len(state.versions)), paths.page]
            if p.exists()
        ],
    }


def sources_to_monitor(params: dict[str, Any], only: str | None) -> list[str]:
    if only:
        return [only]
    names = [str(s) for s in ((params.get("monitor") or {}).get("sources") or [])]
    if not names:
        raise StageError("monitor: no source to monitor; list them in monitor.sources or pass --source")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(__doc__.splitlines()[0])
    ap.add_argument("--source", help="monitor only this source (default: every one in monitor.sources)")
    ap.add_argument("--now", help="the run's clock (ISO timestamp; default: now, UTC)")
    ap.add_argument("--max-windows", type=int, help="process at most N windows this run (backfill in chunks)")
    ap.add_argument("--champion", help="initial champion JSON (default models/<source>/calibrator.json)")
    a = ap.parse_args(argv)

    def body() -> None:
        params = load_params(a.params)
        for name in sources_to_monitor(params, a.source):
            res = run(a.root, params, name, now=a.now, max_windows=a.max_windows, champion_path=a.champion)
            print(
                f"monitor {name}: {len(res['windows'])} window(s), {len(res['alerts'])} alert(s), "
                f"{len(res['promotions'])} promotion(s); champion v{res['champion']}"
            )
            for note in res["notes"]:
                print(f"  note: {note}")
            for al in res["alerts"]:
                band = al["band"]
                print(f"  ALERT {al['window']} {al['segment']} {al['metric']}={al['value']:.4f} band={band}")

    return cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
