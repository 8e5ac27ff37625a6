"""User data sources: a declared table (CSV, Parquet, a folder of them, or a glob) read with DuckDB.

A *source* is one entry of the ``sources:`` mapping of ``params.yaml``: a path and the roles of its columns
(label, the user's own score or the features, optional weight, segments, treatment and time) and how to
split it. :func:`parse_source` turns a declaration into a :class:`SourceSpec` (a readable one-line
``ValueError`` on a bad one); :func:`relation`, :func:`scan` and :func:`batches` read it through an
in-process DuckDB connection, projecting only the columns asked for and pushing filters down, so a 1e8-row
file never has to fit in pandas with all its columns; :func:`fingerprint` stamps its content for the
manifest, the report and DVC.

Paths are always passed to DuckDB as Python values (``read_parquet(list_of_files)``), never formatted into
SQL text. This module never reads ``params.yaml`` (stages pass the declaration in).
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import hashlib
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import duckdb
import numpy as np
import pyarrow as pa

from calibflow._validation import SCORE_KINDS
from calibflow.metrics import expit, logit

SPLIT_KINDS = ("random", "time")
#: Keys a source declaration may have.
KEYS = (
    "path",
    "label",
    "positive",
    "score",
    "score_kind",
    "features",
    "weight",
    "segments",
    "treatment",
    "time",
    "time_format",
    "split",
    "glob",
)
RANDOM_KEYS = ("kind", "fractions", "stratify")
TIME_KEYS = ("kind", "test_last", "calib_last", "calib_start", "test_start", "test_end", "period")
#: Default fractions of a random split: a features source needs rows to train its base model on; a score
#: source has its model already, so its rows go to calibration and test only.
FEATURES_FRACTIONS = {"train": 0.6, "calib": 0.2, "test": 0.2}
SCORE_FRACTIONS = {"calib": 0.5, "test": 0.5}
#: Default of a random split's ``stratify``: keep each split's positive rate the source's.
RANDOM_STRATIFY = True
#: Default time split: test on the last 7 days, calibrate on the 14 days before them.
TIME_DEFAULT = {"test_last": "7d", "calib_last": "14d"}
#: fingerprint(): above this many bytes in total, or this many files, a source is stamped by size and
#: mtime per file instead of sha256 (hashing 1 GB costs ~2 s on one core; a folder of thousands of daily
#: files would be re-read in full at every ``dvc repro``). Documented in docs/sources.md.
SHA256_MAX_BYTES = 1 << 30
SHA256_MAX_FILES = 1000
_PARQUET = (".parquet", ".pq", ".parq")
_CSV = (".csv", ".tsv", ".txt", ".csv.gz", ".tsv.gz")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class SourceSpec:
    """One declared source: where its rows are and which column plays which role."""

    name: str
    path: str
    label: str
    positive: Any | None = None
    score: str | None = None
    score_kind: str | None = None  # probability | logit | score
    features: list[str] | Literal["all"] | None = None
    weight: str | None = None
    segments: tuple[str, ...] = ()
    treatment: str | None = None
    time: str | None = None
    time_format: str | None = None  # text times: ISO8601 or one strptime format (calibflow init detects it)
    split: dict = field(default_factory=dict)  # {"kind": "random"|"time", ...}

    @property
    def kind(self) -> str:
        """``score`` (calibrate the user's own score) or ``features`` (train a base model first)."""
        return "score" if self.score is not None else "features"

    def role_columns(self) -> list[str]:
        """Every column the declaration names (label, score, weight, segments, treatment, time)."""
        cols = [self.label, self.score, self.weight, *self.segments, self.treatment, self.time]
        return list(dict.fromkeys(c for c in cols if c is not None))

    def at(self, root: str | os.PathLike[str]) -> SourceSpec:
        """The same source with a relative ``path`` resolved against ``root`` (the project root)."""
        if os.path.isabs(self.path):
            return self
        return replace(self, path=str(Path(root) / self.path))


# ------------------------------------------------------------------------------------------ declarations


def did_you_mean(word: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` when a close match exists, else ``""``."""
    opts = [str(c) for c in choices]
    low = str(word).lower()
    close = [c for c in opts if c.lower() == low or (len(low) >= 3 and c.lower().startswith(low))]
    close = close or difflib.get_close_matches(str(word), opts, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _err(name: str, key: str, problem: str, fix: str) -> ValueError:
    return ValueError(f"sources.{name}.{key}: {problem} ({fix})")


def _opt_str(name: str, decl: Mapping, key: str) -> str | None:
    v = decl.get(key)
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise _err(name, key, f"expected a column name, got {v!r}", "write the column's name as a string")
    return v


def _segments(name: str, decl: Mapping) -> tuple[str, ...]:
    v = decl.get("segments")
    if v is None:
        return ()
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list | tuple) or not all(isinstance(s, str) and s for s in items):
        raise _err(name, "segments", f"expected a column name or a list of them, got {v!r}", "e.g. [country]")
    return tuple(items)


def _features(name: str, decl: Mapping) -> list[str] | Literal["all"] | None:
    v = decl.get("features")
    if v is None or v == "all":
        return v
    if isinstance(v, str):
        raise _err(name, "features", f"got {v!r}", "write `all` or a list of column names")
    if not isinstance(v, list | tuple) or not v or not all(isinstance(c, str) and c for c in v):
        raise _err(
            name, "features", f"expected `all` or a non-empty list of columns, got {v!r}", "e.g. [a, b]"
        )
    return list(v)


def _split(name: str, decl: Mapping, time_col: str | None) -> dict:
    v = decl.get("split")
    if v is None:
        v = {"kind": "time"} if time_col else {"kind": "random"}
    elif isinstance(v, str):
        v = {"kind": v}
    if not isinstance(v, Mapping):
        raise _err(
            name, "split", f"expected `random`, `time` or a mapping, got {v!r}", "e.g. {test_last: 7d}"
        )
    out = dict(v)
    kind = out.setdefault("kind", "time" if time_col else "random")
    if kind not in SPLIT_KINDS:
        raise _err(
            name,
            "split.kind",
            f"{kind!r} is not one of {'|'.join(SPLIT_KINDS)}{did_you_mean(kind, SPLIT_KINDS)}",
            "use random or time",
        )
    allowed = TIME_KEYS if kind == "time" else RANDOM_KEYS
    for k in out:
        if k not in allowed:
            raise _err(
                name,
                f"split.{k}",
                f"unknown key for a {kind} split{did_you_mean(k, allowed)}",
                f"allowed: {', '.join(allowed)}",
            )
    if kind == "time":
        if not time_col:
            raise _err(name, "split", "a time split needs a time column", "add `time: <date column>`")
        from calibflow.timesplit import check_time_split

        try:
            check_time_split(out)
        except ValueError as exc:
            raise _err(name, "split", str(exc), "e.g. {test_last: 7d, calib_last: 14d}") from None
    elif "fractions" in out:
        fr = out["fractions"]
        if (
            not isinstance(fr, Mapping)
            or not set(fr) <= {"train", "calib", "test"}
            or not {"calib", "test"} <= set(fr)
        ):
            raise _err(
                name,
                "split.fractions",
                f"got {fr!r}",
                "name calib and test (and train), e.g. {calib: 0.5, test: 0.5}",
            )
    return out


def _with_glob(name: str, path: str, pattern: Any) -> str:
    """``path`` with the declaration's ``glob`` (files of that folder matching it) joined on.

    A project's params.yaml names a glob source as its folder plus a pattern (``path: big``, ``glob:
    "*.parquet"``): DVC depends on the folder (it cannot depend on a glob), the readers on the joined glob.
    """
    if pattern is None:
        return path
    if not isinstance(pattern, str) or not _is_glob(pattern) or os.path.isabs(pattern):
        raise _err(name, "glob", f"expected a relative pattern such as '*.parquet', got {pattern!r}",
                   "files of `path` (a folder) matching it are read")
    if _is_glob(path):
        raise _err(name, "path", f"{path!r} is a glob and `glob` is given too", "make `path` the folder")
    return os.path.join(path, pattern)


def split_glob(path: str) -> tuple[str, str | None]:
    """A glob as (its base folder, the pattern under it); any other path as (itself, None).

    ``big/*.parquet`` -> ``("big", "*.parquet")``;
    ``logs/day=*/x.parquet`` -> ``("logs", "day=*/x.parquet")``.
    """
    if not _is_glob(path):
        return path, None
    head = re.split(r"[*?\[]", path, maxsplit=1)[0]
    base = os.path.dirname(head) or "."
    return base, os.path.relpath(path, base) if base != "." else path


def parse_source(name: str, decl: Mapping) -> SourceSpec:
    """Check one ``sources.<name>`` declaration; a ``ValueError`` names the source, the key and the fix."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"sources: {name!r} is not a usable source name (start with a letter; use letters, digits, _.-)"
        )
    if not isinstance(decl, Mapping):
        raise ValueError(f"sources.{name}: expected a mapping of keys (path, label, score...), got {decl!r}")
    for k in decl:
        if k not in KEYS:
            raise _err(name, str(k), f"unknown key{did_you_mean(k, KEYS)}", f"allowed: {', '.join(KEYS)}")
    for req in ("path", "label"):
        if not decl.get(req):
            raise _err(
                name, req, "missing", f"add `{req}:`" + (" (a file, folder or glob)" if req == "path" else "")
            )
    path = decl["path"]
    if not isinstance(path, str):
        raise _err(name, "path", f"expected a string, got {path!r}", "a file, a folder or a glob")
    path = _with_glob(name, path, decl.get("glob"))
    label = _opt_str(name, decl, "label")
    score = _opt_str(name, decl, "score")
    features = _features(name, decl)
    if (score is None) == (features is None):
        raise _err(
            name,
            "score",
            "declare exactly one of `score` and `features`",
            "`score: <column>` to calibrate your model's output, `features: all` to train one",
        )
    kind = decl.get("score_kind")
    if score is None and kind is not None:
        raise _err(name, "score_kind", "given without `score`", "remove it or declare `score`")
    if score is not None:
        kind = "probability" if kind is None else kind
        if kind not in SCORE_KINDS:
            raise _err(
                name,
                "score_kind",
                f"{kind!r} is not one of {'|'.join(SCORE_KINDS)}{did_you_mean(kind, SCORE_KINDS)}",
                "probability (in [0, 1]), logit or score (any real)",
            )
    time_col = _opt_str(name, decl, "time")
    time_format = _opt_str(name, decl, "time_format")
    if time_format is not None and time_col is None:
        raise _err(name, "time_format", "given without `time`", "remove it or declare `time`")
    spec = SourceSpec(
        name=name,
        path=path,
        label=label,
        positive=decl.get("positive"),
        score=score,
        score_kind=kind,
        features=features,
        weight=_opt_str(name, decl, "weight"),
        segments=_segments(name, decl),
        treatment=_opt_str(name, decl, "treatment"),
        time=time_col,
        time_format=time_format,
        split=_split(name, decl, time_col),
    )
    roles = [c for c in (spec.label, spec.score, spec.weight, spec.treatment, spec.time) if c]
    clash = sorted({c for c in roles if roles.count(c) > 1} | (set(roles) & set(spec.segments)))
    if clash:
        raise _err(name, "label", f"column(s) {clash} given two roles", "give each role its own column")
    if isinstance(features, list) and set(features) & {spec.label, spec.score, spec.weight, spec.time}:
        raise _err(name, "features", "lists the label, weight or time column", "remove it from features")
    return spec


def parse_sources(decls: Mapping | None) -> dict[str, SourceSpec]:
    """Every declaration of a ``sources:`` mapping (``None`` or ``{}``: no sources)."""
    if decls is None:
        return {}
    if not isinstance(decls, Mapping):
        raise ValueError(f"sources: expected a mapping name -> declaration, got {type(decls).__name__}")
    return {str(n): parse_source(str(n), d) for n, d in decls.items()}


# ------------------------------------------------------------------------------------------------ files


def _is_glob(path: str) -> bool:
    return any(ch in path for ch in "*?[")


def _fmt(path: str) -> str:
    low = path.lower()
    if low.endswith(_PARQUET):
        return "parquet"
    if low.endswith(_CSV):
        return "csv"
    raise ValueError(f"{path}: unknown file type (expected {', '.join(_PARQUET + _CSV)})")


def is_url(path: str) -> bool:
    """An object-store path (``s3://bucket/key``, ``gs://...``): read through fsspec, not the local disk."""
    return "://" in str(path) and not str(path).startswith("file://")


def _remote_files(path: str) -> list[str]:
    """Like :func:`files` on an object store (fsspec; for ``s3://`` s3fs, which takes its endpoint and
    keys from the usual AWS settings, e.g. ``AWS_ENDPOINT_URL``)."""
    import fsspec

    proto = path.split("://", 1)[0]
    fs, key = fsspec.core.url_to_fs(path)
    if _is_glob(key):
        found = fs.glob(key)
    elif fs.isdir(key):
        found = [f for f in fs.find(key) if f.lower().endswith(_PARQUET + _CSV)]
    elif fs.isfile(key):
        found = [key]
    else:
        raise FileNotFoundError(f"{path}: no such object or prefix (check the path and the store's settings)")
    return sorted(f"{proto}://{f}" for f in found)


def parquet_rows(path: str) -> int:
    """A Parquet file's row count from its footer (local, or on an object store through fsspec)."""
    import pyarrow.parquet as pq

    if not is_url(path):
        return pq.ParquetFile(path).metadata.num_rows
    import fsspec

    with fsspec.open(path, "rb") as fh:
        return pq.ParquetFile(fh).metadata.num_rows


def register_stores(con: duckdb.DuckDBPyConnection, paths: Any) -> duckdb.DuckDBPyConnection:
    """Give ``con`` the fsspec filesystem of each object-store protocol among ``paths`` (strings, lists or
    dicts of them: a query's parameters), so ``read_parquet('s3://...')`` works without DuckDB's httpfs
    extension (which DuckDB downloads on first use: not possible offline)."""
    protos: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, str):
            if is_url(v):
                protos.add(v.split("://", 1)[0])
        elif isinstance(v, Mapping):
            for x in v.values():
                walk(x)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)

    walk(paths)
    if protos:
        import fsspec

        for p in sorted(protos):
            con.register_filesystem(fsspec.filesystem(p))
    return con


def files(path: str) -> list[str]:
    """The files a source path names, sorted: the file itself, a folder's Parquet/CSV files, or a glob
    (on a local disk, or an object store's ``s3://bucket/prefix``)."""
    if is_url(path):
        found = _remote_files(path)
    elif _is_glob(path):
        found = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
    elif os.path.isdir(path):
        found = sorted(
            str(p) for p in Path(path).rglob("*") if p.is_file() and p.name.lower().endswith(_PARQUET + _CSV)
        )
    elif os.path.isfile(path):
        found = [path]
    else:
        raise FileNotFoundError(f"{path}: no such file or folder (check the source's `path`)")
    if not found:
        raise FileNotFoundError(f"{path}: matches no Parquet or CSV file")
    kinds = {_fmt(f) for f in found}
    if len(kinds) > 1:
        raise ValueError(f"{path}: mixes Parquet and CSV files; point the source at one kind")
    return found


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-process DuckDB connection (every one calibflow opens); ``threads`` defaults to this machine's
    usable cores.

    Its time zone is UTC whatever the machine's: DuckDB otherwise takes the system's (``TZ``), and a zoned
    time column cast to a timestamp (the time split, the monitor's windows) would land in other days on a
    laptop in Berlin than in CI, from the same data and params. ``SET GLOBAL`` so the cursors a pass's
    threads take (``con.cursor()``) have it too.
    """
    if not threads:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    con = duckdb.connect(config={"threads": int(threads or 1)})
    con.execute("SET GLOBAL TimeZone = 'UTC'")
    return con


def relation_for_path(
    path: str, con: duckdb.DuckDBPyConnection | None = None, text: Sequence[str] = ()
) -> duckdb.DuckDBPyRelation:
    """A lazy DuckDB relation over a file, folder or glob (files passed as values, never as SQL text).

    ``text``: CSV columns read as text, not typed by DuckDB's sniffer (a date column with an explicit
    ``time_format``: the sniffer would pick day- or month-first by itself).
    """
    con = con or connect()
    found = files(path)
    try:
        if _fmt(found[0]) == "parquet":
            return con.read_parquet(found, union_by_name=len(found) > 1)
        opts: dict[str, Any] = {"dtype": {c: "VARCHAR" for c in text}} if text else {}
        if len(found) > 1:
            return con.read_csv(found, union_by_name=True, **opts)
        return con.read_csv(found[0], **opts)
    except duckdb.Error as exc:
        first = str(exc).strip().splitlines()[0]
        raise ValueError(f"{path}: cannot be read as {_fmt(found[0])}: {first}") from None


def text_columns(spec: SourceSpec) -> list[str]:
    """CSV columns read as text, not typed by DuckDB's sniffer: a time column with a declared
    ``time_format`` (the sniffer would pick day- or month-first from a sample and fail on a later row)."""
    return [spec.time] if spec.time and spec.time_format else []


def relation(spec: SourceSpec, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyRelation:
    """The source's rows as a lazy DuckDB relation."""
    try:
        return relation_for_path(spec.path, con, text_columns(spec))
    except (ValueError, FileNotFoundError) as exc:
        raise type(exc)(f"source {spec.name!r}: {exc}") from None


def check_columns(spec: SourceSpec, available: Sequence[str], columns: Sequence[str]) -> None:
    """A ``ValueError`` naming the first asked-for column the table lacks, with a did-you-mean."""
    require_columns(available, columns, f"source {spec.name!r}: ", f" in {spec.path}")


def require_columns(
    available: Sequence[str], columns: Sequence[str], prefix: str = "", where: str = ""
) -> None:
    """``{prefix}column 'c' not found{where}; did you mean ...? (columns: ...)`` for the first missing one."""
    have = list(available)
    for c in columns:
        if c not in have:
            shown = ", ".join(have[:12]) + (" ..." if len(have) > 12 else "")
            hint = did_you_mean(c, have)
            raise ValueError(f"{prefix}column {c!r} not found{where}{hint} (columns: {shown})")


def quote_ident(col: str) -> str:
    """A column name as a quoted SQL identifier (a quote inside it doubled)."""
    return '"' + str(col).replace('"', '""') + '"'


def quote_literal(value: object) -> str:
    """A value as a SQL string literal (a quote inside it doubled): a user's text never becomes SQL."""
    return "'" + str(value).replace("'", "''") + "'"


def _project(spec: SourceSpec, columns: Sequence[str], where: str | None, con) -> duckdb.DuckDBPyRelation:
    rel = relation(spec, con)
    check_columns(spec, rel.columns, columns)
    rel = rel.filter(where) if where else rel  # filter before projecting: `where` may use other columns
    return rel.project(", ".join(quote_ident(c) for c in columns)) if columns else rel


def feature_columns(spec: SourceSpec, available: Sequence[str]) -> list[str]:
    """The declared features; ``all`` = every column no other role names."""
    if spec.features is None:
        return []
    if spec.features == "all":
        taken = set(spec.role_columns())
        return [c for c in available if c not in taken]
    return list(spec.features)


def scan(
    spec: SourceSpec, columns: Sequence[str], where: str | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> pa.Table:
    """The named columns of the rows matching ``where`` (SQL on column names) as one Arrow table, through
    ``con`` when given (a caller scanning many files: a new connection costs 15 ms), else its own."""
    with contextlib.nullcontext(con) if con is not None else contextlib.closing(connect()) as use:
        return _project(spec, columns, where, use).to_arrow_table()


def batches(
    spec: SourceSpec, columns: Sequence[str], batch_rows: int = 1_000_000
) -> Iterator[pa.RecordBatch]:
    """Stream the named columns as Arrow record batches of at most ``batch_rows`` rows (bounded memory)."""
    con = connect()
    try:
        reader = _project(spec, columns, None, con).to_arrow_reader(int(batch_rows))
        for batch in reader:
            if batch.num_rows:
                yield batch
    finally:
        con.close()


# ----------------------------------------------------------------------------------------- fingerprint


def _sha256(path: str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def _anchor(path: str) -> str:
    """The folder the recorded file paths are relative to (no absolute checkout path in a fingerprint)."""
    if _is_glob(path):
        head = re.split(r"[*?\[]", path, maxsplit=1)[0]
        return os.path.dirname(head) or "."
    return path if os.path.isdir(path) else os.path.dirname(path) or "."


def fingerprint(
    spec: SourceSpec, max_bytes: int = SHA256_MAX_BYTES, max_files: int = SHA256_MAX_FILES
) -> dict[str, Any]:
    """The content stamp of a source: sha256 per file, or size and mtime per file when it is large.

    ``method`` is ``"sha256"`` unless the files exceed ``max_bytes`` in total or ``max_files`` in number,
    then ``"stat"`` (size + mtime in nanoseconds: a rewrite with identical bytes counts as a change, an
    in-place edit that keeps size and mtime would not; see docs/sources.md).
    """
    try:
        found = files(spec.path)
    except (ValueError, FileNotFoundError) as exc:
        raise type(exc)(f"source {spec.name!r}: {exc}") from None
    stats = [os.stat(f) for f in found]
    total = sum(s.st_size for s in stats)
    method = "stat" if total > max_bytes or len(found) > max_files else "sha256"
    anchor = _anchor(spec.path)
    out = []
    for f, st in zip(found, stats, strict=True):
        rec: dict[str, Any] = {"path": os.path.relpath(f, anchor), "size": int(st.st_size)}
        if method == "sha256":
            rec["sha256"] = _sha256(f)
        else:
            rec["mtime"] = int(st.st_mtime_ns)
        out.append(rec)
    return {"files": out, "method": method, "bytes": int(total)}


# ------------------------------------------------------------------------------------- scores as inputs


def to_margin(score: np.ndarray, score_kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(margin, probability) of a user's score: a probability's logit, or a logit/score as is.

    A probability of exactly 0 or 1 is clipped to [LOG_LOSS_CLIP, 1 - LOG_LOSS_CLIP] first (its logit is
    infinite; ``metrics.logit``). A ``score`` (any real) is shown as ``sigmoid(score)`` before calibration,
    the only probability it implies.
    """
    s = np.asarray(score, dtype=np.float64)
    if score_kind == "probability":
        return logit(s), s
    if score_kind in ("logit", "score"):
        return s, expit(s)
    raise ValueError(f"score_kind must be one of {'|'.join(SCORE_KINDS)}, got {score_kind!r}")


def calibrator_input(score: np.ndarray, score_kind: str, input_kind: str) -> np.ndarray:
    """The user's score as the calibrator's declared ``input`` (what it was fitted on)."""
    margin, prob = to_margin(score, score_kind)
    if input_kind == "probability":
        return prob
    if input_kind == "logit":
        return margin
    return np.asarray(score, dtype=np.float64) if score_kind != "probability" else margin


def record_score_kind(cal: Any, score_kind: str, column: str | None = None) -> Any:
    """Record the scale of the user's score column in ``cal`` (saved by ``to_json``); returns ``cal``.

    Every writer of a deployable calibrator (select, fit, the monitor) calls this, and every reader goes
    through ``calibrate_scores``: a probability calibrator is then never fed logits, or the reverse.
    ``column``: the score column's name, so that ``calibflow apply`` needs no ``--score``.
    """
    if score_kind not in SCORE_KINDS:
        raise ValueError(f"score_kind must be one of {'|'.join(SCORE_KINDS)}, got {score_kind!r}")
    cal.score_kind_ = score_kind
    if column is not None:
        cal.score_column_ = str(column)
    return cal


def score_kind_of(cal: Any, score_kind: str | None = None) -> str:
    """The scale ``cal`` converts the user's scores from: the one recorded in its file, else ``score_kind``.

    ``score_kind`` given here must agree with a recorded one; a calibrator that records none needs it,
    and nothing is guessed.
    """
    recorded = getattr(cal, "score_kind_", None)
    if recorded is not None and score_kind is not None and score_kind != recorded:
        raise ValueError(
            f"this calibrator was fitted on {recorded} scores, not {score_kind}; drop --score-kind "
            f"or pass --score-kind {recorded}"
        )
    kind = recorded or score_kind
    if kind is None:
        raise ValueError(
            "this calibrator does not record the scale of the scores it was fitted on; "
            "pass --score-kind probability|logit|score"
        )
    if kind not in SCORE_KINDS:
        raise ValueError(f"--score-kind {kind!r} is not one of {'|'.join(SCORE_KINDS)}")
    return kind


def calibrate_scores(cal: Any, score: np.ndarray, score_kind: str | None = None, **extra: Any) -> np.ndarray:
    """Calibrated probabilities of the user's raw ``score`` column, converted as ``cal`` was fitted.

    The scale comes from the calibrator file (``score_kind`` recorded at fit time); see ``score_kind_of``.
    """
    kind = score_kind_of(cal, score_kind)
    x = calibrator_input(np.asarray(score, dtype=np.float64), kind, str(getattr(cal, "input", "score")))
    return cal.predict(x, **extra) if extra else cal.predict(x)


#: DuckDB column types that hold numbers (a score, a weight, a 0/1 label).
_NUMERIC = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "FLOAT", "DOUBLE", "DECIMAL")


def is_numeric_type(duckdb_type: Any, allow_bool: bool = False) -> bool:
    """Whether a DuckDB column type holds numbers (``U``-prefixed and ``DECIMAL(p, s)`` included)."""
    t = str(duckdb_type).upper().removeprefix("U")
    return t.startswith(_NUMERIC) or (allow_bool and t == "BOOLEAN")


def check_table_inputs(
    con: Any, source: str, params: dict, score: str, label: str, weight: str | None = None
) -> None:
    """Types of the score, label and weight columns of DuckDB FROM item ``source``, checked before any
    cast (a text label is one line, not a cast error), and the weights checked as the library checks
    them (``calibflow._validation.check_weights``): none missing, negative or infinite, a positive total.
    """
    types = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {source})",
                             params).fetchall())
    for role, col, allow_bool in (("score", score, False), ("label", label, True), ("weight", weight, False)):
        if col is not None and col in types and not is_numeric_type(types[col], allow_bool):
            need = "0/1 numbers or booleans" if role == "label" else "numbers"
            raise ValueError(f"{role} column {col!r} is {types[col]}, not {need}; convert it first")
    if weight is None:
        return
    w = f"CAST({quote_ident(weight)} AS DOUBLE)"
    bad, neg, total = con.execute(
        f"SELECT count(*) FILTER (WHERE {w} IS NULL OR NOT isfinite({w})), count(*) FILTER (WHERE {w} < 0), "
        f"coalesce(sum({w}) FILTER (WHERE isfinite({w})), 0) FROM {source}",
        params,
    ).fetchall()[0]
    if bad:
        raise ValueError(f"weight column {weight!r} has {bad:,} missing or non-finite value(s); fix them")
    if neg:
        raise ValueError(f"weight column {weight!r} has {neg:,} negative value(s); weights are counts (>= 0)")
    if total <= 0:
        raise ValueError(
            f"weight column {weight!r} sums to 0 (all weights zero); at least one positive weight is needed"
        )
