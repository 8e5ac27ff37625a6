"""Daily deliveries of a score source, as the monitor sees them: files, fingerprints, windows, refusals.

A monitored source is usually a folder of day files that arrive late, arrive twice, get replaced, or
arrive broken. This module (pure library: DuckDB through ``calibflow.sources``, no Prefect, no params.yaml)
turns the files into what the monitor needs to decide honestly:

- :func:`inventory`: every file with its byte digest (sha256, or size+mtime for very large sources, as
  ``sources.fingerprint``), its *content* digest (the row count and an order-independent sum of each row's
  hash over the role columns, read as text: the same rows re-exported under another name, compression or
  row order give the same content) and the windows its rows fall in; a file with the same content as
  another is ignored with a note naming the copy and the original (the file counted before, else the
  older, else the first by name): it would double its window; a file that lacks a declared column or
  whose times do
  not parse is *refused* in one line naming the source, the file, the column and the row count, and its
  windows are *held* (a file whose rows cannot be placed in time holds the whole source);
- each window's fingerprint: a digest of the (file, digest) pairs that feed it, which the monitor keeps
  for every scored window; a changed fingerprint (a day replaced, or a late file for a day already scored)
  tells it to rescore from that window, a window with no file left (retention) keeps its scores;
- :func:`load`: the rows of the good files in a time range, as ``time, score, label, <segments>`` with the
  user's score untouched (its scale is the source's ``score_kind``) and NULL labels kept as NaN ("not
  known yet");
- :func:`check_matured`: labels of matured windows: a value outside {0, 1} refuses its file's windows,
  a NULL label keeps its window pending (its labels are not all in), both in one line.

Times are parsed as the pipeline parses them (``calibflow.timesplit.to_datetime``: timestamps, dates, ISO
text, made UTC-naive; numbers are epoch seconds, milliseconds, microseconds or nanoseconds by magnitude).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from calibflow import sources as S
from calibflow import timesplit
from calibflow.monitor.config import MonitorConfig
from calibflow.monitor.windows import window_at, window_index, window_keys
from calibflow.source_rules import pending_label_array


def to_times(values: pd.Series) -> pd.Series:
    """UTC-naive timestamps of a time column: ``calibflow.timesplit.to_datetime``, the reader the
    pipeline uses, so the run and the monitor place every row at the same time (epoch units included)."""
    return timesplit.to_datetime(pd.Series(values).reset_index(drop=True), utc_naive=True)


@dataclass
class DayFile:
    """One delivered file: where, its digest, the rows per window, and why it is refused (if it is)."""

    rel: str
    path: str
    digest: str
    windows: dict[str, int] = field(default_factory=dict)
    problem: str | None = None
    duplicate_of: str | None = None
    placed: bool = True  # False: its rows could not be put in windows (the whole source is held)
    content: str | None = None  # "<rows>:<sum of row hashes>" over the role columns (module doc)
    mtime: int = 0
    repeated: int = 1  # k > 1: every row of the file appears exactly k times (a repeated export)
    repeats: int = 0  # rows that repeat another row exactly, when the file is not a whole repetition


@dataclass
class Inventory:
    source: str
    files: list[DayFile]
    notes: list[str]

    @property
    def good(self) -> list[DayFile]:
        return [f for f in self.files if f.problem is None and f.duplicate_of is None]

    @property
    def refused(self) -> list[str]:
        return [f.problem for f in self.files if f.problem]

    @property
    def hold_all(self) -> bool:
        return any(f.problem and not f.placed for f in self.files)

    def held(self) -> set[str]:
        """Windows that a refused file feeds: not scored until the file is fixed."""
        return {k for f in self.files if f.problem for k in f.windows}

    def times(self) -> pd.Series:
        """One timestamp per window with rows (what ``matured_windows`` needs), from the good files."""
        keys = sorted({k for f in self.good for k in f.windows})
        return pd.Series(pd.to_datetime(keys), dtype="datetime64[ns]")

    def feeds(self) -> dict[str, list[str]]:
        """Window key -> sorted ``file:digest`` of the good files that feed it (what a window remembers)."""
        out: dict[str, list[str]] = {}
        for f in self.good:
            for k in f.windows:
                out.setdefault(k, []).append(f"{f.rel}:{f.digest[:16]}")
        return {k: sorted(v) for k, v in out.items()}

    def fingerprints(self) -> dict[str, str]:
        """Window key -> one digest of its feeding files (shown on the page and in the state)."""
        return {k: hashlib.sha256("\n".join(v).encode()).hexdigest()[:16] for k, v in self.feeds().items()}

    def rows(self, key: str) -> int:
        """Rows the good files hold in window ``key`` (known before any row is loaded)."""
        return sum(f.windows.get(key, 0) for f in self.good)

    def feeding(self, key: str) -> list[str]:
        return sorted(f.rel for f in self.good if key in f.windows)


def _digest(spec: S.SourceSpec, path: str) -> tuple[str, str]:
    fp = S.fingerprint(replace(spec, path=path))["files"][0]
    return fp.get("sha256") or f"{fp['size']}:{fp['mtime']}", fp["path"]  # sha256 up to 1 GB a file


def _rel(source_path: str, path: str) -> str:
    """The file's name relative to the source's folder (no absolute checkout path in the state)."""
    base = source_path if os.path.isdir(source_path) else os.path.dirname(source_path.split("*")[0])
    return os.path.relpath(path, base or ".")


def role_columns(spec: S.SourceSpec) -> list[str]:
    return [c for c in (spec.time, spec.score, spec.label, *spec.segments) if c]


#: DuckDB's memory for reading one delivered file: its repeat count groups every row by its hash, which
#: held 625 MB for a file of 1e7 rows (the monitor's peak); past this limit DuckDB spills the groups to a
#: temporary folder and gives the same counts (272 MB peak for that file, no more CPU).
PLACE_MEMORY = "200MB"


def _place(spec: S.SourceSpec, f: DayFile, cfg: MonitorConfig) -> None:
    """Fill ``f.windows`` from the file's time column, or set ``f.problem`` (one line)."""
    with tempfile.TemporaryDirectory(prefix="calibflow-place-") as tmp:
        from calibflow.monitor.stream import release_memory

        con = release_memory(S.connect())
        try:
            con.execute(f"SET memory_limit = '{PLACE_MEMORY}'")
            con.execute(f"SET temp_directory = {S.quote_literal(tmp)}")
            _place_with(spec, f, cfg, con)
        finally:
            con.close()


def _place_with(spec: S.SourceSpec, f: DayFile, cfg: MonitorConfig, con: Any) -> None:
    one = replace(spec, path=f.path)
    try:
        rel = S.relation(one, con)
        cols = list(rel.columns)
        if spec.time not in cols:
            f.placed = False
        counted = _window_counts(one, cfg) if f.placed else None
    except (ValueError, FileNotFoundError) as exc:
        f.placed, f.problem = False, f"source {spec.name!r}: file {f.rel}: {exc}; fix or remove it"
        return
    missing = [c for c in role_columns(spec) if c not in cols]
    n = int(rel.aggregate("count(*)").fetchall()[0][0])
    present = [c for c in role_columns(spec) if c in cols]
    if present and n:
        # Order-independent: a sum (not a XOR, which would cancel a row delivered twice) of row hashes.
        args = ", ".join(f"CAST({S.quote_ident(c)} AS VARCHAR)" for c in present)
        total = rel.aggregate(f"CAST(sum(hash({args})) AS VARCHAR)").fetchall()[0][0]
        f.content = f"{n}:{total}:{','.join(present)}"
        _count_repeats(rel, args, n, f)
    if counted is not None:
        f.windows, bad_t = counted
        if f.repeated > 1:  # each window's rows are k copies: count them once
            f.windows = {k: v // f.repeated for k, v in f.windows.items()}
        if bad_t:
            f.placed = False
            f.problem = (
                f"source {spec.name!r}: file {f.rel}: column {spec.time!r} has {bad_t} of {n} value(s) that "
                "are not timestamps; fix the file (its windows stay pending)"
            )
    if missing:
        f.problem = (
            f"source {spec.name!r}: file {f.rel}: column {missing[0]!r} is missing ({n} rows"
            + (f"; also {missing[1:]}" if len(missing) > 1 else "")
            + "); the file is not used and its windows stay pending until it is fixed"
        )


def _count_repeats(rel: Any, args: str, n: int, f: DayFile) -> None:
    """Rows that repeat another row of the same file exactly (every role column equal).

    A file in which *every* row appears exactly k >= 2 times is an export written k times: it is counted
    once (``repeated``). Scattered repeats can be real (coarse times, rounded scores): they are counted as
    delivered and named in a note (``repeats``), so a partly doubled export is seen, never silently halved.
    """
    lo, hi, distinct = rel.aggregate(f"hash({args}) AS h, count(*) AS c", "h").aggregate(
        "min(c), max(c), count(*)"
    ).fetchall()[0]
    if hi <= 1:
        return
    if lo == hi and distinct >= 2:
        f.repeated = int(hi)
    else:
        f.repeats = int(n - distinct)


def repeat_notes(spec: S.SourceSpec, files: list[DayFile]) -> list[str]:
    """One note per file with rows repeated inside it (``_count_repeats``)."""
    notes = []
    for f in files:
        if f.problem or f.duplicate_of:
            continue
        if f.repeated > 1:
            notes.append(
                f"source {spec.name!r}: file {f.rel} holds each of its rows {f.repeated} times "
                "(an export written more than once); each row is counted once"
            )
        elif f.repeats:
            notes.append(
                f"source {spec.name!r}: file {f.rel}: {f.repeats} row(s) repeat another row of the file "
                "exactly (time, score, label, segments); counted as delivered: if the export doubled "
                "them, replace the file"
            )
    return notes


#: Rows of the time column read at once when placing a file (memory bounded by this, not by the file).
PLACE_BATCH = 1_000_000


def _max_abs(one: S.SourceSpec) -> float:
    """The largest magnitude of a numeric time column (its epoch unit), one DuckDB scan."""
    col = S.quote_ident(one.time or "")
    top = S.relation(one).aggregate(f"max(abs(CAST({col} AS DOUBLE)))").fetchall()[0][0]
    return float(top or 0.0)


def _window_counts(one: S.SourceSpec, cfg: MonitorConfig) -> tuple[dict[str, int], int]:
    """Rows per window of one file and its count of times that do not parse, read in batches; numbers
    are epochs in the unit of the file's largest magnitude (one unit per file, as ``to_times`` reads the
    whole column)."""
    col = one.time or ""
    unit = None
    counts: dict[int, int] = {}
    bad = 0
    for batch in S.batches(one, [col], PLACE_BATCH):
        values = batch.column(0).to_pandas()
        if unit is None and pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            unit = timesplit.epoch_unit([_max_abs(one)])
        if unit is not None:
            t = pd.Series(pd.to_datetime(values, unit=unit, errors="coerce"))
        else:
            t = to_times(values)
        bad += int(t.isna().sum())
        keys, c = np.unique(window_index(t.dropna(), cfg), return_counts=True)
        for k, v in zip(keys, c, strict=True):
            counts[int(k)] = counts.get(int(k), 0) + int(v)
    return {window_at(k, cfg).key: v for k, v in sorted(counts.items())}, bad


def inventory(
    spec: S.SourceSpec, cfg: MonitorConfig, cache: dict[str, dict[str, Any]] | None = None
) -> Inventory:
    """Every file of ``spec`` (a file, folder or glob) with digest, windows and problems (module doc).

    ``cache`` (rel -> {digest, windows}) from the previous run spares re-reading an unchanged good file.
    """
    cache = cache or {}
    found = S.files(spec.path)
    by_digest: dict[str, DayFile] = {}
    out: list[DayFile] = []
    for path in found:
        digest, _ = _digest(spec, path)
        f = DayFile(rel=_rel(spec.path, path), path=path, digest=digest, mtime=_mtime(path))
        hit = cache.get(f.rel)
        same = by_digest.get(digest)
        if same is not None:  # byte-identical: same placement, no second read
            f.windows, f.content = dict(same.windows), same.content
            f.problem, f.placed = same.problem, same.placed
            f.repeated, f.repeats = same.repeated, same.repeats
        elif hit and hit.get("digest") == digest and "content" in hit:
            f.windows, f.content = dict(hit["windows"]), hit["content"]
            f.repeated, f.repeats = int(hit.get("repeated", 1)), int(hit.get("repeats", 0))
        else:
            _place(spec, f, cfg)
        by_digest.setdefault(digest, f)
        out.append(f)
    notes = _mark_copies(spec, out, cache)
    return Inventory(spec.name, out, sorted(notes + repeat_notes(spec, out)))


def _mtime(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime_ns)
    except OSError:  # an object store's file: no local stat; the name decides
        return 0


def _mark_copies(spec: S.SourceSpec, files: list[DayFile], cache: dict[str, dict[str, Any]]) -> list[str]:
    """Files with the same content as another are copies (ignored, one note each). The original is the
    file counted on an earlier run, else the older one, else the first by name."""
    groups: dict[str, list[DayFile]] = {}
    for f in files:
        if f.problem is None and f.content is not None:
            groups.setdefault(f.content, []).append(f)
    notes = []
    for group in groups.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda f: (not _counted_before(f, cache), f.mtime, f.rel))
        first = group[0]
        for f in group[1:]:
            f.duplicate_of = first.rel
            how = (
                "a byte-identical copy" if f.digest == first.digest
                else "the same rows (another name or encoding)"
            )
            notes.append(
                f"source {spec.name!r}: file {f.rel} is {how} of {first.rel}; ignored "
                "(counting it would double its rows)"
            )
    return sorted(notes)


def _counted_before(f: DayFile, cache: dict[str, dict[str, Any]]) -> bool:
    hit = cache.get(f.rel)
    return bool(hit and hit.get("digest") == f.digest)


def cache_of(inv: Inventory) -> dict[str, dict[str, Any]]:
    """What ``inventory`` may reuse next time: the good files' digests, content digests and windows."""
    return {
        f.rel: {"digest": f.digest, "content": f.content, "windows": f.windows, "repeated": f.repeated,
                "repeats": f.repeats}
        for f in inv.good
    }


def load(
    spec: S.SourceSpec, inv: Inventory, lo: pd.Timestamp, hi: pd.Timestamp, cfg: MonitorConfig
) -> pd.DataFrame:
    """Rows of the good files with ``lo <= time < hi``: time, score, label (NaN: not known yet), segments,
    ``file``. The score is the user's, untouched; the label is 0/1 through ``positive`` when declared."""
    lo_k, hi_k = lo.isoformat(), hi.isoformat()
    used = [f for f in inv.good if any(lo_k <= k < hi_k for k in f.windows)]
    parts = []
    if used:
        con = S.connect()  # one for every file (a new one costs 15 ms); each file converted in turn
        try:
            for f in used:
                table = S.scan(replace(spec, path=f.path), role_columns(spec), con=con)
                parts.append(_rows(spec, f, table, lo, hi))
        finally:
            con.close()
    cols = ["time", "score", "label", *spec.segments, "file"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in cols}).assign(
            time=pd.Series(dtype="datetime64[ns]")
        )
    frame = pd.concat(parts, ignore_index=True)
    # Ordered by (time, file), ties in file order: ``sort_values(["time", "file"], kind="mergesort")``'s
    # order, from integer keys (np.lexsort is stable); pandas factorized 8e5 timestamps for it (0.4 s).
    rank = {rel: i for i, rel in enumerate(sorted({f.rel for f in used}))}
    files = np.repeat([rank[f.rel] for f in used], [len(part) for part in parts])
    order = np.lexsort((files, frame["time"].to_numpy().view(np.int64)))
    if order.size < 2 or bool(np.all(order[1:] > order[:-1])):
        return frame  # in order already (daily files of time-sorted rows): no copy
    return frame.take(order).reset_index(drop=True)


def _rows(spec: S.SourceSpec, f: DayFile, table: Any, lo: pd.Timestamp, hi: pd.Timestamp) -> pd.DataFrame:
    """One file's rows in ``[lo, hi)`` as ``load`` returns them (its Arrow ``table`` of the role columns)."""
    df = table.to_pandas()
    if f.repeated > 1:  # an export written k times: each row once (``_count_repeats``)
        df = df.drop_duplicates(ignore_index=True)
    df["time"] = to_times(df.pop(spec.time))
    df = df[(df["time"] >= lo) & (df["time"] < hi)]
    out = pd.DataFrame({"time": df["time"], "score": pd.to_numeric(df[spec.score], errors="coerce")})
    out["label"] = _label(df[spec.label], spec.positive)
    for c in spec.segments:
        out[c] = df[c].astype("string").fillna("<missing>").astype(str)
    out["file"] = f.rel
    return out


def _label(values: pd.Series, positive: Any | None) -> pd.Series:
    """0/1 labels with NaN kept for NULL; anything else that is no label becomes -1 (refused by the check):
    ``source_rules``' rule, as the streamed path reads it."""
    return pd.Series(pending_label_array(values, positive), index=values.index)


def check_matured(
    spec: S.SourceSpec, frame: pd.DataFrame, keys: list[str], cfg: MonitorConfig
) -> tuple[set[str], list[str], dict[str, dict[str, Any]]]:
    """Windows among ``keys`` to hold; one refusal line per file with labels outside {0, 1} or
    non-finite scores (its windows are held); and the windows whose labels are not all in yet (NULL
    labels), each ``{"rows": unlabelled rows, "files": [...]}``: pending, a state, not a refusal."""
    if frame.empty:
        return set(), [], {}
    wkey = window_keys(frame["time"], cfg)
    in_scope = np.isin(wkey, keys)
    lines: list[str] = []
    held: set[str] = set()
    y, s = frame["label"].to_numpy(float), frame["score"].to_numpy(float)
    bad_s = ~np.isfinite(s) | ((spec.score_kind == "probability") & ((s < 0) | (s > 1)))
    checks = (
        (~np.isnan(y) & (y != 0) & (y != 1), spec.label, "label value(s) outside {0, 1}", "fix the file"),
        (
            bad_s,
            spec.score,
            "score(s) not finite" + (" or outside [0, 1]" if spec.score_kind == "probability" else ""),
            "fix the file",
        ),
    )
    for mask, col, what, fix in checks:
        mask = mask & in_scope
        for rel in sorted(set(frame.loc[mask, "file"])):
            m = mask & (frame["file"] == rel).to_numpy()
            ws = sorted(set(wkey[(frame["file"] == rel).to_numpy() & in_scope]))
            held |= set(ws)
            lines.append(
                f"source {spec.name!r}: file {rel}: column {col!r} has {int(m.sum())} {what}; {fix} "
                f"(window(s) {', '.join(w[:10] for w in ws)} stay pending)"
            )
    unknown = np.isnan(y) & in_scope
    waiting: dict[str, dict[str, Any]] = {}
    for k in sorted(set(wkey[unknown]) - held):
        m = unknown & (wkey == k)
        held.add(k)
        waiting[k] = {"rows": int(m.sum()), "files": sorted(set(frame.loc[m, "file"]))}
    return held, lines, waiting


def dirty_from(
    processed: list[str], recorded: dict[str, dict[str, Any]], inv: Inventory, pending: list[str]
) -> tuple[str, str] | None:
    """The oldest window to rescore from and why: a late window (older than the newest scored one), or a
    scored window fed by a file it was not scored from (a replaced day, a late part). Files that are gone
    (retention) never trigger a rescore: the window keeps the scores it had."""
    current = inv.feeds()
    reasons: list[tuple[str, str]] = []
    newest = processed[-1] if processed else None
    for k in pending:
        if newest is not None and k < newest:
            reasons.append((k, f"window {k[:10]} delivered late ({', '.join(inv.feeding(k))})"))
    for k in processed:
        was = (recorded.get(k) or {}).get("files")
        new = sorted(set(current.get(k, [])) - set(was or []))
        if was is not None and new:
            names = ", ".join(x.rsplit(":", 1)[0] for x in new)
            reasons.append((k, f"the files of window {k[:10]} changed ({names})"))
    return min(reasons) if reasons else None
