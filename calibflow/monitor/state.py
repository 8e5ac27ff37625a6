"""The monitor's state: its history, versions and incidents, round-tripped through JSON (never pickle);
``truncate`` rewinds it to a window.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pandas as pd

from calibflow import calibrators as C
from calibflow import sources as S
from calibflow.monitor.config import _check

STATE_SCHEMA = 2


@dataclass
class MonitorState:
    """Everything the monitor knows about one source; ``to_json``/``from_json`` (no pickle)."""

    source: str
    versions: list[dict[str, Any]] = field(default_factory=list)  # calibrator JSON + provenance
    champion: int = 1  # version number (1-based) in office
    processed: list[str] = field(default_factory=list)  # window keys, oldest first
    history: list[dict[str, Any]] = field(default_factory=list)  # one row per (window, segment)
    gates: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    score_kind: str = "score"  # the scale of the source's score column (every version records it too)
    windows: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> fingerprint, rows, champion
    pinned: int | None = None  # a rollback's version: kept in office, no promotion, until released
    start_at: str | None = None  # windows before this are never scored (``--start``)
    grid: dict[str, str] = field(default_factory=dict)  # origin and period the keys were cut on
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # delivered file -> digest, windows
    # Windows waiting (labels not in, no delivery, behind a pending one): key -> what, since, deadline;
    # kept after they resolve only when they went past their deadline (an incident's record).
    waits: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def start_with(
        cls, source: str, champion: C.BaseCalibrator, provenance: dict[str, Any], score_kind: str
    ) -> MonitorState:
        """Version 1 = ``champion``; it must agree with the source's ``score_kind`` (recorded if absent)."""
        recorded = getattr(champion, "score_kind_", None)
        _check(
            recorded in (None, score_kind),
            f"monitor: the initial champion of source {source!r} was fitted on {recorded} scores but the "
            f"source declares score_kind: {score_kind}; rerun `calibflow run` or fix score_kind",
        )
        S.record_score_kind(champion, score_kind)
        v = {"version": 1, "method": champion.name, "calibrator": champion.to_json(), **provenance}
        return cls(source=source, versions=[v], champion=1, score_kind=score_kind)

    @classmethod
    def start(cls, source: str, champion: C.BaseCalibrator, provenance: dict[str, Any]) -> MonitorState:
        """Version 1 = ``champion`` on its recorded score kind (``score`` when it records none)."""
        kind = getattr(champion, "score_kind_", None) or "score"
        return cls.start_with(source, champion, provenance, kind)

    def calibrator(self, version: int | None = None) -> C.BaseCalibrator:
        return C.from_json(self.versions[(version or self.champion) - 1]["calibrator"])

    def to_json(self) -> str:
        return json.dumps({"schema": STATE_SCHEMA, **asdict(self)}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> MonitorState:
        d = json.loads(text)
        schema = d.pop("schema", None)
        _check(
            schema == STATE_SCHEMA,
            f"monitor state schema is {schema}, not {STATE_SCHEMA} (written by an older calibflow): "
            "move monitoring/<source>/ aside and rerun to rescore from the start",
        )
        return cls(**d)


def truncate(state: MonitorState, key: str, why: str) -> MonitorState:
    """The state as it was before window ``key``: later windows, gates and alerts dropped.

    Versions promoted from ``key`` on stay listed, marked withdrawn (their numbers, maybe registered and
    served, are never reused); the champion is the one in office after the last kept window.
    """
    kept = [k for k in state.processed if k < key]
    champion = state.windows[kept[-1]]["champion"] if kept else 1
    versions = []
    for v in state.versions:
        v = dict(v)
        if v.get("promoted_after", "") >= key and not v.get("withdrawn") and v["version"] > 1:
            v["withdrawn"] = f"promoted on data rescored from {key}: {why}"
        versions.append(v)
    if state.pinned is not None:
        champion = state.pinned
    out = replace(
        state,
        versions=versions,
        champion=champion,
        processed=kept,
        history=[r for r in state.history if r["window"] < key],
        gates=[g for g in state.gates if g["window"] < key],
        alerts=[a for a in state.alerts if a["window"] < key],
        notes=[*state.notes, f"rescored from {key}: {why}"],
        windows={k: v for k, v in state.windows.items() if k < key},
    )
    return out


def history_frame(state: MonitorState) -> pd.DataFrame:
    """The history as a flat table (one row per window and segment), for CSV metrics and plots."""
    cols = [
        "window",
        "segment",
        "version",
        "n",
        "positives",
        "expected_positives",
        "calibration_ratio",
        "ratio_low",
        "ratio_high",
        "ece",
        "calibration_slope",
        "log_loss",
        "brier",
        "alert",
        "skipped",
    ]
    df = pd.DataFrame(state.history)
    for c in cols:
        if c not in df:
            df[c] = pd.NA
    return df[cols]
