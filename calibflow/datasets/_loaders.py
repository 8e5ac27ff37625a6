"""Typed loaders for the registered datasets, and the binary tasks built from them.

``load(name)`` returns the raw table with proper dtypes (categoricals as ``category``, numbers as int64 or
float64, missing values as NaN); ``binary_task(name)`` turns it into a numeric design matrix and 0/1 labels.

Label definitions (documented here because papers differ):

* ``adult``: income ``>50K`` (the test file's trailing ``.`` is stripped); train and test rows together.
* ``bank_marketing``: ``y == "yes"``. All 16 inputs are kept, ``duration`` included (as in most papers).
* ``madelon``: label ``+1``; train (2,000) and valid (600) rows together.
* ``communities_crime``: ``ViolentCrimesPerPop`` above its median (0.15); the 5 non-predictive columns
  (state, county, community, communityname, fold) are dropped.
* ``splice``: junction (``EI`` or ``IE``) = 1 vs ``N`` = 0; features are one-hot nucleotides per position.
* ``hillstrom``: ``visit`` (default) or ``conversion``; ``.treatment`` holds the ``segment`` arm
  (Mens E-Mail / Womens E-Mail / No E-Mail); ``spend`` and both outcomes are excluded from ``X``.

Design matrix: numeric columns as float64, missing values imputed by the column median over all rows
(only communities_crime has missing numbers; the median is taken before any split, a mild leak we accept
for a fixed benchmark table); categoricals one-hot encoded with sorted levels, named ``<column>=<level>``.
A missing category (adult's ``?``) is an all-zero row in its block rather than a level of its own.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from ._fetch import fetch, info
from ._registry import BINARY_TASKS, HILLSTROM_TARGETS

PathLike = str | os.PathLike[str] | None


@dataclass
class BinaryTask:
    """A numeric binary classification task: ``X`` (n x d float64), ``y`` (n, int 0/1)."""

    name: str
    X: NDArray[np.float64]
    y: NDArray[np.int64]
    feature_names: list[str]
    treatment: NDArray[np.str_] | None = None
    # The source's own partition where it has one (adult: train/test, madelon: train/valid), else None.
    source_split: NDArray[np.str_] | None = None

    @property
    def positive_rate(self) -> float:
        return float(self.y.mean())


@dataclass
class Coat:
    """Coat (Schnabel et al. 2016): dense 290 x 300 rating matrices, 0 = no rating."""

    train: NDArray[np.float64]
    test: NDArray[np.float64]
    propensities: NDArray[np.float64]
    user_features: NDArray[np.float64]
    item_features: NDArray[np.float64]
    user_feature_names: list[str]
    item_feature_names: list[str]


# --------------------------------------------------------------------------------------------- raw loaders


def _load_hillstrom(root: Path) -> pd.DataFrame:
    df = pd.read_csv(root / "hillstrom.csv")  # CRLF line endings: the C parser handles them
    for col in ("history_segment", "zip_code", "channel", "segment"):
        df[col] = df[col].astype("category")
    ints = ["recency", "mens", "womens", "newbie", "visit", "conversion"]
    df[ints] = df[ints].astype("int64")
    df[["history", "spend"]] = df[["history", "spend"]].astype("float64")
    return df


_ADULT_CATS = [
    "workclass", "education", "marital-status", "occupation", "relationship", "race", "sex", "native-country",
]  # fmt: skip


def _load_adult(root: Path) -> pd.DataFrame:
    parts = []
    for split, fname in (("train", "adult.data"), ("test", "adult.test")):
        df = pd.read_csv(root / fname, skipinitialspace=True, na_values="?")
        df["income"] = df["income"].str.rstrip(".")  # UCI's test labels end in "."
        df["split"] = split
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    for col in [*_ADULT_CATS, "income", "split"]:
        df[col] = df[col].astype("category")
    nums = ["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]
    df[nums] = df[nums].astype("int64")
    return df


def _load_bank(root: Path) -> pd.DataFrame:
    df = pd.read_csv(root / "bank-full.csv")
    df.columns = [c.strip() for c in df.columns]  # the first header cell is " age "
    for col in df.columns:
        if pd.api.types.is_numeric_dtype(df[col]):
            df[col] = df[col].astype("int64")
        else:
            df[col] = df[col].astype("category")
    return df


def _load_madelon(root: Path) -> pd.DataFrame:
    parts = []
    for split in ("train", "valid"):
        x = np.loadtxt(root / f"madelon_{split}.data", dtype=np.int64)  # space-separated, trailing space
        lab = np.loadtxt(root / f"madelon_{split}.labels", dtype=np.int64)
        df = pd.DataFrame(x, columns=[f"f{i}" for i in range(x.shape[1])])
        df["label"] = lab
        df["split"] = split
        parts.append(df)
    df = pd.concat(parts, ignore_index=True)
    df["split"] = df["split"].astype("category")
    return df


def communities_columns(names_file: Path) -> list[tuple[str, str]]:
    """(name, type) of each column, in order, from the ``@attribute`` lines of communities.names."""
    pat = re.compile(r"^@attribute\s+(\S+)\s+(\S+)", re.IGNORECASE)
    cols = [
        (m.group(1), m.group(2)) for line in names_file.read_text().splitlines() if (m := pat.match(line))
    ]
    if len(cols) != 128:
        raise ValueError(f"{names_file}: expected 128 @attribute lines, found {len(cols)}")
    return cols


def _load_communities(root: Path) -> pd.DataFrame:
    cols = communities_columns(root / "communities.names")
    names = [c for c, _ in cols]
    dtypes = {c: ("string" if t == "string" else "float64") for c, t in cols}
    return pd.read_csv(root / "communities.data", header=None, names=names, na_values="?", dtype=dtypes)


def _load_splice(root: Path) -> pd.DataFrame:
    df = pd.read_csv(root / "splice.csv", skipinitialspace=True, dtype=str)
    df.columns = [c.strip() for c in df.columns]
    df = df.apply(lambda s: s.str.strip())
    df["Class"] = df["Class"].astype("category")
    return df


def _coat_matrix(path: Path) -> NDArray[np.float64]:
    return np.loadtxt(path, dtype=np.float64)


def load_coat(data_dir: PathLike = None) -> Coat:
    """The Coat matrices: train (MNAR) and test (uniform random) ratings 1..5 with 0 = missing."""
    root = fetch("coat", data_dir)
    feat = root / "user_item_features"
    coat = Coat(
        train=_coat_matrix(root / "train.ascii"),
        test=_coat_matrix(root / "test.ascii"),
        propensities=_coat_matrix(root / "propensities.ascii"),
        user_features=_coat_matrix(feat / "user_features.ascii"),
        item_features=_coat_matrix(feat / "item_features.ascii"),
        user_feature_names=_map_names(feat / "user_features_map.txt"),
        item_feature_names=_map_names(feat / "item_features_map.txt"),
    )
    for arr, shape, what in (
        (coat.train, (290, 300), "train"),
        (coat.test, (290, 300), "test"),
        (coat.propensities, (290, 300), "propensities"),
        (coat.user_features, (290, 14), "user_features"),
        (coat.item_features, (300, 33), "item_features"),
    ):
        if arr.shape != shape:
            raise ValueError(f"coat {what}: expected shape {shape}, got {arr.shape}")
    return coat


def _map_names(path: Path) -> list[str]:
    # The map files have no trailing newline, so the last entry of one may be glued to nothing else.
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


def _load_coat_long(root: Path) -> pd.DataFrame:
    """Coat as one long frame: one row per observed rating, with the propensity of that cell."""
    coat = load_coat(root.parent)
    parts = []
    for split, mat in (("train", coat.train), ("test", coat.test)):
        u, i = np.nonzero(mat)
        parts.append(
            pd.DataFrame(
                {
                    "user": u.astype(np.int64),
                    "item": i.astype(np.int64),
                    "rating": mat[u, i].astype(np.int64),
                    "propensity": coat.propensities[u, i],
                    "split": split,
                }
            )
        )
    df = pd.concat(parts, ignore_index=True)
    df["split"] = df["split"].astype("category")
    return df


OBD_POLICIES = ("random", "bts")
OBD_CAMPAIGNS = ("all", "men", "women")


def load_obd(
    policy: str = "random", campaign: str = "all", data_dir: PathLike = None, item_context: bool = False
) -> pd.DataFrame:
    """Open Bandit small-sample log for one logging ``policy`` and ``campaign``.

    Columns: timestamp (UTC), item_id, position, click, propensity_score, user_feature_0..3 (category),
    user-item_affinity_* (float). With ``item_context=True`` the 4 item features are joined on item_id.
    """
    if policy not in OBD_POLICIES:
        raise ValueError(f"policy must be one of {OBD_POLICIES}, got {policy!r}")
    if campaign not in OBD_CAMPAIGNS:
        raise ValueError(f"campaign must be one of {OBD_CAMPAIGNS}, got {campaign!r}")
    folder = fetch("obd_small", data_dir) / policy / campaign
    df = pd.read_csv(folder / f"{campaign}.csv", index_col=0)
    df["timestamp"] = pd.to_datetime(df["timestamp"], utc=True, format="ISO8601")
    df[["item_id", "position", "click"]] = df[["item_id", "position", "click"]].astype("int64")
    for col in [c for c in df.columns if c.startswith("user_feature_")]:
        df[col] = df[col].astype("category")
    if item_context:
        ctx = pd.read_csv(folder / "item_context.csv", index_col=0)
        for col in [
            c
            for c in ctx.columns
            if c.startswith("item_feature_") and not pd.api.types.is_numeric_dtype(ctx[c])
        ]:
            ctx[col] = ctx[col].astype("category")
        df = df.merge(ctx, on="item_id", how="left", validate="many_to_one")
    df.index.name = None
    return df


_LOADERS = {
    "hillstrom": _load_hillstrom,
    "adult": _load_adult,
    "bank_marketing": _load_bank,
    "madelon": _load_madelon,
    "communities_crime": _load_communities,
    "splice": _load_splice,
    "coat": _load_coat_long,
}


def load(name: str, data_dir: PathLike = None) -> pd.DataFrame:
    """The typed raw table of dataset ``name`` (fetched and verified first).

    ``coat`` comes as a long frame of observed ratings (see ``load_coat`` for the matrices); ``obd_small``
    as the random-policy, all-campaign log (see ``load_obd`` for the others).
    """
    info(name)  # unknown names raise a ValueError listing the available ones
    if name == "obd_small":
        return load_obd("random", "all", data_dir)
    return _LOADERS[name](fetch(name, data_dir))


# -------------------------------------------------------------------------------------------- binary tasks


def _design(df: pd.DataFrame) -> tuple[NDArray[np.float64], list[str]]:
    """Numeric columns as float64 (median-imputed), categoricals one-hot with sorted levels."""
    blocks: list[NDArray[np.float64]] = []
    names: list[str] = []
    for col in df.columns:
        s = df[col]
        if not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
            levels = sorted(s.dropna().unique().tolist())
            codes = pd.Categorical(s, categories=levels).codes
            onehot = np.zeros((len(s), len(levels)))
            ok = codes >= 0  # missing categories are all-zero rows in the block
            onehot[np.flatnonzero(ok), codes[ok]] = 1.0
            blocks.append(onehot)
            names += [f"{col}={lv}" for lv in levels]
        else:
            v = s.to_numpy(dtype=np.float64, na_value=np.nan)
            if np.isnan(v).any():
                v = np.where(np.isnan(v), np.nanmedian(v), v)
            blocks.append(v[:, None])
            names.append(str(col))
    return np.hstack(blocks), names


def _splice_design(seqs: pd.Series) -> pd.DataFrame:
    lengths = seqs.str.len().unique()
    if len(lengths) != 1:
        raise ValueError(f"splice sequences must all have one length, found {sorted(lengths)}")
    chars = np.array([list(s) for s in seqs])
    return pd.DataFrame({f"pos{j:02d}": pd.Categorical(chars[:, j]) for j in range(chars.shape[1])})



def binary_task(name: str, target: str | None = None, data_dir: PathLike = None) -> BinaryTask:
    """Design matrix and 0/1 labels for dataset ``name``; label definitions in the module docstring."""
    if name not in BINARY_TASKS:
        raise ValueError(
            f"{name} has no binary task (datasets with one: {', '.join(BINARY_TASKS)}); "
            f"use load_coat/load_obd or load({name!r})"
        )
    if name == "hillstrom":
        target = target or "visit"
        if target not in HILLSTROM_TARGETS:
            raise ValueError(f"hillstrom target must be one of {HILLSTROM_TARGETS}, got {target!r}")
    elif target is not None:
        raise ValueError(f"{name} has one fixed target; target must be None, got {target!r}")
    df = load(name, data_dir)
    treatment = source_split = None
    if name == "hillstrom":
        y = df[target].to_numpy()
        treatment = df["segment"].astype(str).to_numpy()
        feats = df.drop(columns=["segment", "visit", "conversion", "spend"])
    elif name == "adult":
        y = (df["income"] == ">50K").to_numpy()
        source_split = df["split"].astype(str).to_numpy()
        feats = df.drop(columns=["income", "split"])
    elif name == "bank_marketing":
        y = (df["y"] == "yes").to_numpy()
        feats = df.drop(columns=["y"])
    elif name == "madelon":
        y = (df["label"] == 1).to_numpy()
        source_split = df["split"].astype(str).to_numpy()
        feats = df.drop(columns=["label", "split"])
    elif name == "communities_crime":
        t = df["ViolentCrimesPerPop"]
        y = (t > t.median()).to_numpy()
        feats = df.drop(
            columns=["state", "county", "community", "communityname", "fold", "ViolentCrimesPerPop"]
        )
    else:  # splice
        y = df["Class"].isin(["EI", "IE"]).to_numpy()
        feats = _splice_design(df["Sequence"])
    X, names = _design(feats)
    y = np.asarray(y, dtype=np.int64)
    return BinaryTask(name, X, y, feature_names=names, treatment=treatment, source_split=source_split)
