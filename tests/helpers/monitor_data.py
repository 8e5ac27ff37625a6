"""Generated daily score streams with a known model, written as a folder of daily Parquet files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from calibflow import calibrators as C
from calibflow.experiments.monitoring import simulate_stream


def make_project(
    root: Path,
    scenario: str = "base_rate",
    days: int = 16,
    rows: int = 800,
    shift_day: int = 8,
    seed: int = 0,
    monitor: dict | None = None,
) -> pd.DataFrame:
    """A project folder: data/stream/<day>.parquet, the select stage's champion, params.yaml with a source."""
    import yaml

    df = simulate_stream(scenario, seed, days=days, rows=rows, warmup=14, shift_day=shift_day)
    warm = df[df["day"] < 0]
    champ = C.make("platt").fit(warm["score"].to_numpy(), warm["label"].to_numpy())
    (root / "models" / "ads").mkdir(parents=True, exist_ok=True)
    (root / "models" / "ads" / "calibrator.json").write_text(champ.to_json())
    write_days(root, df[df["day"] >= 0])
    params = {
        "seed": 7,
        "sources": {
            "ads": {
                "path": "data/stream",
                "label": "label",
                "score": "score",
                "score_kind": "score",
                "time": "time",
                "segments": ["segment"],
            }
        },
        "monitor": {
            "sources": ["ads"],
            "n_bootstrap": 50,
            "reference_windows": 4,
            "calib_windows": 6,
            "min_positives": 20,
            **(monitor or {}),
        },
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return df


def write_days(root: Path, df: pd.DataFrame) -> None:
    folder = root / "data" / "stream"
    folder.mkdir(parents=True, exist_ok=True)
    for day, part in df.groupby("day"):
        part[["time", "score", "label", "segment"]].to_parquet(
            folder / f"day={int(day):03d}.parquet", index=False
        )
