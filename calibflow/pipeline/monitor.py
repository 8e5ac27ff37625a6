"""Step ``monitor``: score the production calibrator on each new matured window, gate challengers, alert.

    python -m calibflow.pipeline.monitor --source ads [--now 2026-03-01T06:00] [--max-windows N]
        [--rescore-from DATE] [--start DATE] [--params params.yaml]

For each source named in ``monitor.sources`` (or ``--source``) it takes stock of the delivered files
(``calibflow.monitor.deliveries``: digests, windows, refused files in one line each), rescores from the oldest
window that arrived late or whose files changed, and runs ``calibflow.monitor.process_window`` on every
matured window not yet scored, oldest first. Outputs (per source), all under the monitor's own folders:

- ``monitoring/<source>/state.json``: the whole state (versions, history, gates, alerts, window
  fingerprints, notes); written atomically after EVERY window, so a run killed at any point loses at most
  the window in flight, and the next run resumes after the last saved one;
- ``monitoring/<source>/calibrator.json`` + ``card.json``: the calibrator in office (it records the
  source's ``score_kind``; the card says which score column and scale ``calibflow apply`` feeds it, the
  windows it was fitted and judged on, the gate's numbers) and ``monitoring/<source>/versions/v<k>.json``;
- ``plots/monitoring/<source>.csv``: one row per (window, segment); ``metrics/monitoring/<source>.json``:
  the newest window's overall scores, counts and open incidents;
- ``reports/pages/monitoring-<source>.html``: the "calibration over time" page.

The initial champion (version 1) is the select stage's ``models/<source>/calibrator.json`` (or
``--champion PATH``), read only. This step never commits or tags: the flow (calibflow/flows/monitor.py)
does, on a dedicated branch, and records promotions in GTO. A rollback (``calibflow monitor rollback``)
writes ``monitoring/<source>/pin.json``: the pinned version serves and nothing is promoted until
``calibflow monitor release``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd

from calibflow import calibrators as C
from calibflow import monitor as mon
from calibflow import sources as S
from calibflow.io import MAX_STATE_BYTES, read_bounded, read_json, write_json, write_text
from calibflow.monitor import deliveries as D
from calibflow.monitor import scale as MS
from calibflow.monitor import stream as MST
from calibflow.pipeline._common import (
    Layout,
    MonitorLayout,
    ParamsLike,
    StageError,
    as_params,
    base_parser,
    cli,
    load_params,
    require,
)
from calibflow.pipeline.params_schema import MONITOR_RUN_KEYS as RUN_KEYS  # not MonitorConfig fields

log = logging.getLogger("calibflow.pipeline.monitor")


def config(params: ParamsLike, seed: int | None = None) -> mon.MonitorConfig:
    sec = {k: v for k, v in (as_params(params).monitor or {}).items() if k not in RUN_KEYS}
    if seed is not None and "seed" not in sec:
        sec["seed"] = int(seed)
    return mon.MonitorConfig.from_params(sec)


def source_spec(params: ParamsLike, name: str, root: Path) -> S.SourceSpec:
    """The declared score source with a time column, its path resolved against the project."""
    decls = as_params(params).sources or {}
    if name not in decls:
        raise StageError(f"monitor: source {name!r} is not declared under `sources:` in params.yaml")
    spec = S.parse_source(name, decls[name]).at(root)
    if not spec.time:
        raise StageError(f"monitor: source {name!r} has no `time` column; the monitor needs one")
    if not spec.score:
        raise StageError(f"monitor: source {name!r} declares features, not a score; monitor a score source")
    return spec


def initial_state(paths: MonitorLayout, champion_path: str | None, score_kind: str) -> mon.MonitorState:
    if paths.state.exists():
        text = read_bounded(paths.state, MAX_STATE_BYTES, "the monitor state")  # bounded before parsed
        return mon.MonitorState.from_json(text)
    src = require(champion_path or paths.selected, "initial champion calibrator", "the select stage")
    champ = C.from_json(src.read_text(encoding="utf-8"))
    card = src.with_name("card.json")
    prov: dict[str, Any] = {
        "origin": str(src.relative_to(paths.root) if src.is_relative_to(paths.root) else src)
    }
    if card.exists():
        split = (read_json(card).get("data") or {}).get("split") or {}
        prov.update(fitted_on=split.get("calib"), judged_on=split.get("test"))
    return mon.MonitorState.start_with(paths.source, champ, prov, score_kind)


def pin_from_registry(paths: MonitorLayout, state: mon.MonitorState, version: int | None) -> int | None:
    """A ``prod`` stage assigned by hand (``gto assign``) to another version is a rollback: pin it."""
    if version is None or version == state.champion:
        return None
    if not 1 <= version <= len(state.versions):
        raise StageError(f"monitor: registry prod version {version} unknown (have 1..{len(state.versions)})")
    if state.versions[version - 1].get("withdrawn"):  # a rescore withdrew it; the flow re-assigns prod
        return None
    state.notes.append(
        f"champion set to version {version} (was {state.champion}) by the registry's prod stage; pinned "
        f"until `calibflow monitor release --source {state.source}`"
    )
    write_json(paths.pin, {"version": version})
    return version


def read_pin(paths: MonitorLayout) -> int | None:
    """The version a rollback pinned (``monitoring/<source>/pin.json``), or None."""
    if not paths.pin.exists():
        return None
    try:
        return int(json.loads(paths.pin.read_text())["version"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StageError(
            f"monitor: {paths.pin} is not a pin ({exc}); `calibflow monitor release` it"
        ) from None


def apply_pin(state: mon.MonitorState, pinned: int | None) -> mon.MonitorState:
    """A pinned version serves and blocks promotions; releasing the pin lets the gate promote again."""
    if pinned is not None and not 1 <= pinned <= len(state.versions):
        raise StageError(f"monitor: pinned version {pinned} unknown (have 1..{len(state.versions)})")
    if pinned != state.pinned:
        state.notes.append(f"pin: {'released' if pinned is None else f'v{pinned} pinned by a rollback'}")
    state.pinned = pinned
    if pinned is not None:
        state.champion = pinned
    return state


def save(paths: MonitorLayout, state: mon.MonitorState, spec: S.SourceSpec) -> None:
    """Versions and champion first (immutable per version), then the state: a kill between loses nothing."""
    for v in state.versions:
        if not paths.version(v["version"]).exists():
            write_text(paths.version(v["version"]), v["calibrator"] + "\n")
    v = state.versions[state.champion - 1]
    write_text(paths.champion, v["calibrator"] + "\n")
    write_json(paths.card, card(state, spec))
    write_text(paths.state, state.to_json() + "\n")


def card(state: mon.MonitorState, spec: S.SourceSpec) -> dict[str, Any]:
    """The champion's card; ``input`` is what ``calibflow apply`` reads to convert the score column."""
    v = dict(state.versions[state.champion - 1])
    cal = state.calibrator()
    v.pop("calibrator")
    inp = {"score": spec.score, "score_kind": state.score_kind, "calibrator_input": str(cal.input_kind)}
    if "segments" in getattr(cal, "needs", ()):  # a per-segment champion: apply must read these columns too
        inp["segments"] = [str(c) for c in cal.segment_names_]
    return {
        "name": state.source,
        "kind": "monitor-champion",
        **v,
        "input": inp,
        "pinned": state.pinned,
        "windows_processed": len(state.processed),
    }


def latest_metrics(state: mon.MonitorState, cfg: mon.MonitorConfig) -> dict[str, Any]:
    rows = [r for r in state.history if r["segment"] == mon.ALL and not r.get("skipped")]
    incs = mon.incidents(state, cfg)
    out: dict[str, Any] = {
        "windows": len(state.processed),
        "champion_version": state.champion,
        "promotions": sum(1 for v in state.versions[1:] if not v.get("withdrawn")),
        "alerts": len(state.alerts),
        "incidents": len(incs),
        "open_incidents": sum(1 for i in incs if i["closed"] is None),
        "pending": sum(1 for w in state.waits.values() if not w.get("resolved")),
    }
    if rows:
        r = rows[-1]
        out.update(
            {k: r[k] for k in ("window", "calibration_ratio", "ece", "log_loss", "brier", "n", "positives")}
        )
    return out


def _take_stock(
    spec: S.SourceSpec,
    cfg: mon.MonitorConfig,
    state: mon.MonitorState,
    now: pd.Timestamp,
    rescore: str | None,
) -> tuple[mon.MonitorState, D.Inventory, list[mon.Window], list[str], list[str]]:
    """Files, the rescore point, and the windows to score now (held ones left pending); notice lines
    (duplicates ignored, rescoring) and refusal lines (refused files, held windows)."""
    inv = D.inventory(spec, cfg, state.files)
    lines = list(inv.notes)
    refused = list(inv.refused)
    held = inv.held()
    pending = mon.pending_windows(inv.times(), now, cfg, state)
    dirty = D.dirty_from(state.processed, state.windows, inv, [w.key for w in pending if w.key not in held])
    if rescore is not None:
        key = mon.window_of(pd.Timestamp(rescore), cfg.period, mon.grid_origin(cfg.origin)).key
        if dirty is None or key < dirty[0]:
            dirty = (key, f"rescore asked from {rescore}")
    if dirty is not None:
        state = mon.truncate(state, *dirty)
        lines.append(f"source {spec.name!r}: rescoring from {dirty[0][:10]}: {dirty[1]}")
        pending = mon.pending_windows(inv.times(), now, cfg, state)
    if inv.hold_all:
        refused.append(f"source {spec.name!r}: no window scored (a refused file cannot be placed in time)")
        return state, inv, [], lines, refused
    return state, inv, [w for w in pending if w.key not in held], lines, refused


def run(
    root: str | Path,
    params: ParamsLike,
    source: str,
    now: pd.Timestamp | None = None,
    max_windows: int | None = None,
    champion_path: str | None = None,
    prod_version: int | None = None,
    render: bool = True,
    rescore_from: str | None = None,
    start: str | None = None,
    table_rows: int | None = None,
    gate_rows: int | None = None,
) -> dict[str, Any]:
    """Process every pending window of ``source`` (at most ``max_windows``); return what happened.

    ``table_rows``: a window with this many rows or more is read by DuckDB only and scored from its
    tables, its gate judged on seeded samples of about ``gate_rows`` rows (defaults:
    ``monitor.scale.AGGREGATE_ROWS`` and ``GATE_ROWS``)."""
    params = as_params(params)
    cfg = config(params, params.seed)
    paths = Layout(Path(root)).monitoring(source)
    spec = source_spec(params, source, paths.root)
    now = pd.Timestamp.now(tz="UTC").tz_convert(None) if now is None else pd.Timestamp(now)
    state = initial_state(paths, champion_path, spec.score_kind or "probability")
    _check_grid(state, cfg)
    if start is not None:
        state.start_at = pd.Timestamp(start).isoformat()
    before_ids = {i["id"]: i for i in mon.incidents(state, cfg)}
    before_versions = len(state.versions)
    before_notes = len(state.notes)
    pinned = read_pin(paths)
    if pinned is None:
        pinned = pin_from_registry(paths, state, prod_version)
    state = apply_pin(state, pinned)
    state, inv, todo, lines, refused = _take_stock(spec, cfg, state, now, rescore_from)
    todo = todo[: max_windows or None]
    waiting: dict[str, dict[str, Any]] = {}
    if todo:
        todo, more = _score(paths, spec, cfg, state, inv, todo, table_rows, gate_rows, waiting, now)
        state, refused = more[0], refused + more[1]
    waiting.update(_not_due(inv, state, cfg, now, waiting))
    waiting.update(_missing(inv, state, cfg, now))  # one MISSING line each (report_lines)
    pending = mon.update_waits(state, now, waiting, cfg)
    state.files = D.cache_of(inv)
    save(paths, state, spec)
    write_text(paths.history, mon.history_frame(state).to_csv(index=False))
    write_json(paths.metrics, latest_metrics(state, cfg))
    if render:
        _render(paths, state, cfg)
    after = mon.incidents(state, cfg)
    return {
        "source": source,
        "windows": [w.key for w in todo],
        "alerts": [a for a in state.alerts if a["window"] in {w.key for w in todo}],
        "opened": [i for i in after if i["id"] not in before_ids],
        "closed": [i for i in after if i["closed"] and not (before_ids.get(i["id"]) or {}).get("closed")],
        "incidents_open": [i for i in after if i["closed"] is None],
        "promotions": [v for v in state.versions[before_versions:] if not v.get("withdrawn")],
        "notes": state.notes[before_notes:],
        "notices": lines,
        "refused": refused,
        "pending": [p for p in pending if p["kind"] != "delivery"],
        "missing": [p for p in pending if p["kind"] == "delivery"],
        "champion": state.champion,
        "files": [
            str(p.relative_to(paths.root))
            for p in [*paths.tracked(len(state.versions)), paths.page]
            if p.exists()
        ],
    }


def _not_due(
    inv: D.Inventory, state: mon.MonitorState, cfg: mon.MonitorConfig, now: pd.Timestamp, known: dict
) -> dict[str, dict[str, Any]]:
    """Delivered windows whose labels are not due yet (``end + label_delay > now``): pending."""
    step, delay = pd.Timedelta(cfg.period), pd.Timedelta(cfg.label_delay)
    done = set(state.processed)
    out = {}
    for key in sorted({k for f in inv.good for k in f.windows}):
        due = pd.Timestamp(key) + step + delay
        if key in done or key in known or due <= now:
            continue
        if state.start_at and key < state.start_at:
            continue
        out[key] = {"kind": "due", "rows": inv.rows(key), "why": f"labels due by {due.isoformat()}"}
    return out


#: At most this many grid windows are checked for a missing delivery in one run.
MISSING_SCAN = 10_000


def _missing(
    inv: D.Inventory, state: mon.MonitorState, cfg: mon.MonitorConfig, now: pd.Timestamp
) -> dict[str, dict[str, Any]]:
    """Complete windows on the grid, from the first delivered or scored one up to now, with no row in any
    file (good or refused) and never scored: a day that never arrived. One line each; past
    ``delivery_deadline`` after its end it is an incident (``update_waits``). Off when the deadline is
    null (sources with gaps by design)."""
    if cfg.delivery_deadline is None:
        return {}
    delivered = {k for f in inv.files for k in f.windows}
    known = delivered | set(state.processed)
    if not known:
        return {}
    step = pd.Timedelta(cfg.period)
    first = pd.Timestamp(min(known))
    if state.start_at:
        first = max(first, pd.Timestamp(state.start_at))
    n = int((now - first) / step)
    out = {}
    for i in range(max(0, n - MISSING_SCAN), n):
        start = first + i * step
        key = start.isoformat()
        if key in known or start + step > now:
            continue
        out[key] = {"kind": "delivery", "rows": 0, "why": "no rows delivered"}
    return out


def _past_label_deadline(key: str, cfg: mon.MonitorConfig, now: pd.Timestamp) -> bool:
    if cfg.label_deadline is None:
        return False
    return pd.Timestamp(key) + pd.Timedelta(cfg.period) + pd.Timedelta(cfg.label_deadline) <= now


def _label_waits(
    found: dict[str, dict[str, Any]], cfg: mon.MonitorConfig, now: pd.Timestamp
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Pending entries for windows whose labels are not all in, and the first one that later windows
    wait behind (scored in order, so none is scored twice); past ``label_deadline`` a window stops
    holding the later ones (it is an incident; it is rescored when its labels arrive)."""
    out = {
        k: {"kind": "labels", "rows": v["rows"],
            "why": f"{v['rows']} row(s) without a label yet in {', '.join(v['files'])}"}
        for k, v in found.items()
    }
    blocking = [k for k in sorted(found) if not _past_label_deadline(k, cfg, now)]
    return out, (blocking[0] if blocking else None)


def _render(paths: MonitorLayout, state: mon.MonitorState, cfg: mon.MonitorConfig) -> None:
    """The page, rendered only when what it shows changed (the state and the config): a morning with
    no new window redraws no figure. The digest of what it was drawn from sits beside the state."""
    from calibflow.report.monitoring import render_page

    digest = hashlib.sha256((state.to_json() + repr(cfg)).encode()).hexdigest()
    stamp = paths.folder / "page.sha256"
    if paths.page.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return
    write_text(paths.page, render_page(state, cfg=cfg))
    write_text(stamp, digest + "\n")


def _check_grid(state: mon.MonitorState, cfg: mon.MonitorConfig) -> None:
    grid = {"origin": mon.grid_origin(cfg.origin).isoformat(), "period": str(pd.Timedelta(cfg.period))}
    if state.grid and state.grid != grid and state.processed:
        raise StageError(
            f"monitor: source {state.source!r} was scored on windows {state.grid}, params now say {grid}; "
            "put monitor.period/origin back, or move monitoring/<source>/ aside to start over"
        )
    state.grid = grid


def _score(
    paths: MonitorLayout,
    spec: S.SourceSpec,
    cfg: mon.MonitorConfig,
    state: mon.MonitorState,
    inv: D.Inventory,
    todo: list[mon.Window],
    table_rows: int | None = None,
    gate_rows: int | None = None,
    waiting: dict[str, dict[str, Any]] | None = None,
    now: pd.Timestamp | None = None,
) -> tuple[list[mon.Window], tuple[mon.MonitorState, list[str]]]:
    """Score ``todo`` (matured windows, held ones already out); rows refused here keep their window
    held; windows whose labels are not all in are added to ``waiting`` (pending), and the windows after
    them wait too (``_label_waits``). Saves after every window (the resume point). A window of
    ``table_rows`` rows or more (the inventory's count; default ``monitor.scale.AGGREGATE_ROWS``) is
    read by DuckDB only (``_stream``); when there is none, the row path below is the whole run."""
    table_rows = MS.AGGREGATE_ROWS if table_rows is None else int(table_rows)
    waiting = {} if waiting is None else waiting
    now = pd.Timestamp.now() if now is None else now
    if all(inv.rows(w.key) < table_rows for w in todo):
        return _score_rows(paths, spec, cfg, state, inv, todo, waiting=waiting, now=now)
    done: list[mon.Window] = []
    lines: list[str] = []
    held: set[str] = set()
    behind: str | None = None
    for w in todo:
        if behind is not None:
            waiting[w.key] = {"kind": "blocked", "rows": inv.rows(w.key),
                              "why": f"scored after window {behind[:10]}, whose labels are not all in"}
            continue
        if state.processed and w.key < state.processed[-1]:
            continue  # a held window sits between: it is rescored once its file is fixed
        scored: bool | None = None
        raw: dict[str, dict[str, Any]] = {}
        if inv.rows(w.key) >= table_rows:
            scored, state, more = _stream(paths, spec, cfg, state, inv, w, held, gate_rows, raw)
            lines += more
        if scored is None:  # small, or cannot stream: its rows (and its trailing windows') in pandas
            one, (state, more) = _score_rows(paths, spec, cfg, state, inv, [w], held, waiting, now)
            lines += more
            scored = bool(one)
        labels, _ = _label_waits(raw, cfg, now)
        waiting.update(labels)
        if waiting.get(w.key, {}).get("kind") == "labels" and not _past_label_deadline(w.key, cfg, now):
            behind = w.key
        if scored:
            done.append(w)
        else:
            held.add(w.key)
    return done, (state, lines)


def _score_rows(
    paths: MonitorLayout,
    spec: S.SourceSpec,
    cfg: mon.MonitorConfig,
    state: mon.MonitorState,
    inv: D.Inventory,
    todo: list[mon.Window],
    held_before: set[str] | frozenset[str] = frozenset(),
    waiting: dict[str, dict[str, Any]] | None = None,
    now: pd.Timestamp | None = None,
) -> tuple[list[mon.Window], tuple[mon.MonitorState, list[str]]]:
    """The row path: the windows' rows and their trailing calibration windows' in pandas
    (``deliveries.load``); ``held_before``: windows held earlier in this run (their rows feed no gate);
    windows whose labels are not all in go to ``waiting``, and the later ones wait behind them."""
    span = cfg.calib_windows * pd.Timedelta(cfg.period)
    waiting = {} if waiting is None else waiting
    now = pd.Timestamp.now() if now is None else now
    df = D.load(spec, inv, todo[0].start - span, todo[-1].end, cfg)
    held, lines, unlabelled = D.check_matured(spec, df, [w.key for w in todo], cfg)
    labels, block = _label_waits(unlabelled, cfg, now)
    waiting.update(labels)
    for w in todo:
        if block is not None and w.key > block and w.key not in held:
            waiting[w.key] = {"kind": "blocked", "rows": inv.rows(w.key),
                              "why": f"scored after window {block[:10]}, whose labels are not all in"}
    todo = [w for w in todo if w.key not in held and (block is None or w.key < block)]
    held = held | set(held_before)
    wkeys = pd.Series(mon.window_keys(df["time"], cfg), dtype=str)
    usable = df["label"].isin([0.0, 1.0]) & df["score"].notna() & ~wkeys.isin(held).to_numpy()
    known = df[usable.to_numpy()]  # held windows' rows never feed a challenger either
    fps, feeds = inv.fingerprints(), inv.feeds()
    done = []
    for w in todo:
        if state.processed and w.key < state.processed[-1]:
            continue  # a held window sits between: it is rescored once its file is fixed
        frame = known[(known["time"] >= w.start) & (known["time"] < w.end)]
        calib = known[(known["time"] >= w.start - span) & (known["time"] < w.start)]
        scores = _scores_from_tables(state, w, frame, cfg, spec.segments)
        state = mon.process_window(state, w, frame, calib, cfg, spec.segments, fps.get(w.key), scores)
        state.windows[w.key]["files"] = feeds.get(w.key, [])  # what a later delivery is compared with
        save(paths, state, spec)
        done.append(w)
        log.info("monitor %s: window %s scored (champion v%d)", spec.name, w.key, state.champion)
    return done, (state, lines)


def _stream(
    paths: MonitorLayout,
    spec: S.SourceSpec,
    cfg: mon.MonitorConfig,
    state: mon.MonitorState,
    inv: D.Inventory,
    w: mon.Window,
    held: set[str],
    gate_rows: int | None = None,
    unlabelled: dict[str, dict[str, Any]] | None = None,
) -> tuple[bool | None, mon.MonitorState, list[str]]:
    """One large window read by DuckDB only: checks from counts, the champion's scores from the pass's
    tables, the gate on seeded samples of at most ``monitor.scale.GATE_ROWS`` rows of the window and of
    its trailing windows. Returns (scored: True, held: False, cannot stream: None), the state, lines."""
    gate_rows = MS.GATE_ROWS if gate_rows is None else int(gate_rows)
    champ = state.calibrator()
    feeding = MST.files_in(inv.good, w.start, w.end)
    con = MST.connect()
    try:
        everything = MST.window_parts(spec, feeding, w.start, w.end, usable=False, con=con)
        if everything is None or not MS.aggregable(champ):
            why = "a per-segment champion is applied to rows" if everything is not None else (
                "its files are not Parquet with a TIMESTAMP, DATE or numeric time column")
            state.notes.append(f"{w.key} read as rows ({inv.rows(w.key)} rows): {why}")
            return None, state, []
        counts = MST.window_counts(everything, con)
        expected = [f.windows.get(w.key, 0) for f in feeding]
        if counts != expected:  # the SQL time filter must place every row where the inventory did
            state.notes.append(f"{w.key} read as rows: DuckDB placed {sum(counts)} rows in the window, the "
                               f"inventory {sum(expected)}")
            return None, state, []
        rels = [f.rel for f in feeding]
        is_held, lines, waits = MST.check_window(spec, w.key, everything, rels, con)
        if unlabelled is not None:
            unlabelled.update(waits)
        if is_held:
            return False, state, lines
        frame_parts = MST.window_parts(spec, feeding, w.start, w.end, con=con)
        assert frame_parts is not None
        seed = MS.window_seed(cfg, w)
        tabs = MS.window_tables(frame_parts, champ, state.score_kind, tuple(spec.segments), cfg.n_bins,
                                threads=None)
        scores = MS.window_scores(tabs, cfg, seed)
        frame = MST.sample_frame(spec, frame_parts, rels, sum(counts), gate_rows, seed, con)
        calib = _trailing_sample(spec, cfg, inv, w, held, seed, gate_rows, con)
    finally:
        con.close()
    n_calib = sum(inv.rows(k) for k in _trailing_keys(cfg, w) if k not in held)
    state = mon.process_window(state, w, frame, calib, cfg, spec.segments, inv.fingerprints().get(w.key),
                               scores)
    state.windows[w.key].update(
        rows=int(sum(counts)), files=inv.feeds().get(w.key, []), scored_from="tables",
        gate_sample={"window": int(len(frame)), "calib": int(len(calib)), "calib_rows": int(n_calib)},
    )
    if "challengers" in state.gates[-1]:  # the gate compared: say on how many rows
        state.gates[-1]["sample"] = (f"gate on a seeded sample: {len(frame)} of {sum(counts)} window rows, "
                                     f"{len(calib)} of {n_calib} trailing rows")
    save(paths, state, spec)
    log.info("monitor %s: window %s scored from its tables (champion v%d)", spec.name, w.key, state.champion)
    return True, state, []


def _trailing_keys(cfg: mon.MonitorConfig, w: mon.Window) -> list[str]:
    step = pd.Timedelta(cfg.period)
    return [(w.start - k * step).isoformat() for k in range(1, cfg.calib_windows + 1)]


def _trailing_sample(
    spec: S.SourceSpec,
    cfg: mon.MonitorConfig,
    inv: D.Inventory,
    w: mon.Window,
    held: set[str],
    seed: int,
    rows: int,
    con: Any,
) -> pd.DataFrame:
    """A seeded sample of the usable rows of the ``calib_windows`` periods before ``w`` (windows held in
    this run left out), about ``rows`` rows at most whatever the days hold."""
    parts, rels, total = [], [], 0
    for k in _trailing_keys(cfg, w):
        if k in held:
            continue
        start = pd.Timestamp(k)
        feeding = MST.files_in(inv.good, start, start + pd.Timedelta(cfg.period))
        got = MST.window_parts(spec, feeding, start, start + pd.Timedelta(cfg.period),
                               con=con)
        if got is None:  # a trailing file that cannot stream: no sample from it (noted by the gate's size)
            continue
        parts += got
        rels += [f.rel for f in feeding]
        total += sum(f.windows.get(k, 0) for f in feeding)
    return MST.sample_frame(spec, parts, rels, total, rows, seed + 1, con)


def _scores_from_tables(
    state: mon.MonitorState, w: mon.Window, frame: pd.DataFrame, cfg: mon.MonitorConfig, segments
) -> dict[str, dict[str, Any]] | None:
    """A window of ``monitor.scale.AGGREGATE_ROWS`` rows or more is scored from its tables (one pass,
    Poisson replicates) instead of a row bootstrap; None: the row path."""
    champ = state.calibrator()
    if len(frame) < MS.AGGREGATE_ROWS or not MS.aggregable(champ):
        return None
    return MS.score_frame(frame, champ, state.score_kind, cfg, tuple(segments), MS.window_seed(cfg, w))


def sources_to_monitor(params: ParamsLike, only: str | None) -> list[str]:
    if only:
        return [only]
    names = [str(s) for s in ((as_params(params).monitor or {}).get("sources") or [])]
    if not names:
        raise StageError("monitor: no source to monitor; list them in monitor.sources or pass --source")
    return names


def _incident_what(i: dict[str, Any]) -> str:
    """A drift incident's worst value; a wait's reason (its ``worst`` is a row count, not a metric)."""
    if i["metric"] in mon.WAIT_METRICS.values():
        return i.get("why") or f"{int(i['worst'])} row(s) waiting"
    return f"worst {i['worst']:.4f}"


def report_lines(res: dict[str, Any]) -> list[str]:
    """The console lines of one source's run (the CLI and the flow print the same)."""
    lines = [
        f"monitor {res['source']}: {len(res['windows'])} window(s), {len(res['opened'])} incident(s) opened, "
        f"{len(res['closed'])} closed, {len(res['incidents_open'])} open; "
        f"{len(res['promotions'])} promotion(s); champion v{res['champion']}"
    ]
    lines += [f"  note: {x}" for x in res["notices"]]
    for i in res["opened"]:
        what = _incident_what(i)
        lines.append(f"  INCIDENT opened {i['opened'][:10]} {i['segment']} {i['metric']} ({what})")
    for i in res["closed"]:
        lines.append(
            f"  incident closed {i['closed'][:10]} {i['segment']} {i['metric']} (opened {i['opened'][:10]})"
        )
    for v in res["promotions"]:
        lines.append(
            f"  PROMOTED v{v['version']} ({v['method']}) after {v['promoted_after'][:10]}: "
            f"{v['judged']['metric']} better by {v['judged']['delta']:.5f}"
        )
    for p in [*res.get("pending", []), *res.get("missing", [])]:
        lines.append(f"  {pending_line(p)}")
    return lines


def pending_line(p: dict[str, Any]) -> str:
    """One waiting window, as the console and the page say it."""
    what = {"due": "pending", "labels": "pending", "blocked": "pending", "delivery": "MISSING"}[p["kind"]]
    since = f" since {str(p['since'])[:16]}" if p["kind"] in ("labels", "delivery") else ""
    rows = f" ({p['rows']} rows)" if p["kind"] in ("due", "blocked") else ""
    late = ""
    if p.get("overdue_at"):
        late = f"; past its deadline {str(p['deadline'])[:16]}: INCIDENT"
    elif p.get("deadline"):
        late = f"; deadline {str(p['deadline'])[:16]}"
    return f"{what} {p['window'][:10]}: {p['why']}{rows}{since}{late}"


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(__doc__.splitlines()[0])
    ap.add_argument("--source", help="monitor only this source (default: every one in monitor.sources)")
    ap.add_argument("--now", help="the run's clock (ISO timestamp; default: now, UTC)")
    ap.add_argument("--max-windows", type=int, help="process at most N windows this run (backfill in chunks)")
    ap.add_argument("--champion", help="initial champion JSON (default models/<source>/calibrator.json)")
    ap.add_argument("--rescore-from", help="rescore from the window holding this date (a backfill)")
    ap.add_argument("--start", help="never score windows before this date (recorded in the state)")
    a = ap.parse_args(argv)

    def body() -> None:
        params = load_params(a.params)
        for name in sources_to_monitor(params, a.source):
            res = run(
                a.root,
                params,
                name,
                now=a.now,
                max_windows=a.max_windows,
                champion_path=a.champion,
                rescore_from=a.rescore_from,
                start=a.start,
            )
            print("\n".join(report_lines(res)))
            refused.extend(f"refused: {x}" for x in res["refused"])
        if refused:  # after every source ran: the others were scored, this one waits for a fix
            raise StageError("\n".join(refused))

    refused: list[str] = []
    return cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
