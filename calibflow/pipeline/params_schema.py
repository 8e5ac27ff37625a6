"""The schema of ``params.yaml`` (pydantic): unknown keys and bad values are errors naming the key.

Checked by every entry point that can start a stage (``calibflow run``/``repro``/``validate``, ``make repro``,
served and triggered runs) before any server or stage starts, and on a ``--params-file`` before it is used;
a key written twice in the file is reported as such (``load_and_validate``). Why strict: a typo such as
``evaluate.n_bin: 5`` used to run with the default while ``dvc.lock`` recorded the typo. Why names are
checked against ``^[a-z0-9_]+$`` and the registries: method, dataset and paper names are interpolated into
DVC stage commands (``python -m calibflow.pipeline.calibrate ${item.method}``); calibflow's entry points
hand DVC a no-shell launcher (``calibflow.flows.noshell``), but a plain ``dvc repro`` runs them through a
shell, so a name such as ``platt; touch X`` must never get that far.

Sections owned by other modules are validated by their own parser, called from here:
``sources`` by ``calibflow.sources.parse_source`` (one call site: ``_check_sources``).

``validate_params(mapping)`` returns the model or raises ``ParamsError`` whose message is one line per
problem: ``params: evaluate.n_bin: unknown key (did you mean n_bins?)``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

NAME = re.compile(r"^[a-z0-9_]+$")
M = TypeVar("M", bound=BaseModel)
#: The monitor section's keys about the run itself (which sources, where to commit), not the statistics.
MONITOR_RUN_KEYS = ("sources", "commit", "branch", "registry")


def validate_monitor_section(section: dict[str, Any] | None) -> None:
    """Check ``params.monitor``: a ``ValueError`` naming the key and the fix."""
    from calibflow.monitor import MonitorConfig

    sec = dict(section or {})
    srcs = sec.get("sources") or []
    if not isinstance(srcs, list) or not all(isinstance(x, str) for x in srcs):
        raise ValueError(f"monitor.sources must be a list of source names, got {srcs!r}")
    for key in ("commit", "registry"):
        if key in sec and not isinstance(sec[key], bool):
            raise ValueError(f"monitor.{key} must be true or false, got {sec[key]!r}")
    if "branch" in sec and (not isinstance(sec["branch"], str) or not sec["branch"].strip()):
        raise ValueError(f"monitor.branch must be a branch name (e.g. calibflow/runs), got {sec['branch']!r}")
    MonitorConfig.from_params({k: v for k, v in sec.items() if k not in MONITOR_RUN_KEYS})


PROFILES = ("quick", "standard", "full")  # a paper may add its own (e.g. reproduce.decision.large)


class ParamsError(ValueError):
    """Invalid params: the message names each bad key and, where it can, the fix."""


def _default_segmented() -> tuple[str, ...]:
    from calibflow.calibrators import default_segmented_methods  # lazy, as the registries below

    return default_segmented_methods()


def _segmented_methods() -> tuple[str, ...]:
    from calibflow.calibrators import segmented_methods  # lazy, as the registries below

    return segmented_methods()


def _registry(kind: str) -> list[str]:
    if kind == "dataset":
        from calibflow.datasets import available
    elif kind == "method":
        from calibflow.calibrators import available
    else:  # paper: one module per reproduction in calibflow/experiments
        import calibflow.experiments as exp

        return sorted(p.stem for p in Path(exp.__file__).parent.glob("*.py") if not p.stem.startswith("_"))
    return list(available())


def _check_name(value: str, kind: str) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise ValueError(f"{value!r} is not a {kind} name (lowercase letters, digits and _ only)")
    known = _registry(kind)
    if value not in known:
        close = difflib.get_close_matches(value, known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
        raise ValueError(f"unknown {kind} {value!r} ({hint})")
    return value


class _Strict(BaseModel):
    # allow_inf_nan=False: a bound such as ``gt=0`` lets inf through, and nan compares false both ways
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Datasets(_Strict):
    # Empty in a user's own project (`calibflow init`): the built-in datasets are opt-in (--benchmark).
    names: list[str] = Field(default_factory=list)
    targets: dict[str, str] = Field(default_factory=dict)
    max_rows: int = Field(0, ge=0, le=10**12)

    @field_validator("names")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        from calibflow.datasets._registry import BINARY_TASKS

        for n in v:
            if _check_name(n, "dataset") not in BINARY_TASKS:
                raise ValueError(f"{n!r} has no binary task (datasets with one: {', '.join(BINARY_TASKS)})")
        return v

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: dict[str, str]) -> dict[str, str]:
        from calibflow.datasets._registry import HILLSTROM_TARGETS

        choices = {"hillstrom": HILLSTROM_TARGETS}  # the datasets with more than one label
        for k, target in v.items():
            _check_name(k, "dataset")
            if k not in choices:
                raise ValueError(f"{k!r} has one fixed target; remove datasets.targets.{k}")
            if target not in choices[k]:
                close = difflib.get_close_matches(str(target), choices[k], n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"choose from {', '.join(choices[k])}"
                raise ValueError(f"datasets.targets.{k}: {target!r} is not a target of {k} ({hint})")
        return v


class Fractions(_Strict):
    train: float = Field(0.6, ge=0, le=1)
    calib: float = Field(0.2, gt=0, le=1)
    test: float = Field(0.2, gt=0, le=1)

    @model_validator(mode="after")
    def _sum(self) -> Fractions:
        if abs(self.train + self.calib + self.test - 1.0) > 1e-9:
            raise ValueError("train + calib + test must sum to 1")
        return self


class Prepare(_Strict):
    fractions: Fractions = Field(default_factory=Fractions)
    stratify: bool = True
    # validation: a split's positive rate may leave the dataset's known range by this
    balance_tolerance: float = Field(0.03, ge=0, le=1)


class Model(_Strict):
    """The XGBoost base model per dataset (``calibflow.models.train_classifier``, scikit-learn names)."""

    # Upper bounds: past them XGBoost runs for hours or needs memory no machine has (a depth-d tree holds
    # up to 2^d nodes); the ranges of XGBoost's own documentation where it gives one.
    n_estimators: int = Field(200, gt=0, le=100_000)
    max_depth: int = Field(6, gt=0, le=30)
    learning_rate: float = Field(0.1, gt=0, le=10)
    subsample: float = Field(0.8, gt=0, le=1)
    colsample_bytree: float = Field(0.8, gt=0, le=1)
    min_child_weight: float = Field(1, ge=0, le=1e12)
    tree_method: Literal["hist", "approx", "exact"] = "hist"
    n_jobs: int = Field(2, gt=0, le=1024)


class Replicas(_Strict):
    n: int = Field(0, ge=0, le=1_000)  # each replica is a full base model
    scheme: Literal["seeds", "bootstrap"] = "seeds"


def _default_methods() -> tuple[str, ...]:
    """The default ``calibrate.methods``: the (score, label) methods whose class is a default candidate."""
    from calibflow.calibrators import default_methods

    return default_methods()


def __getattr__(name: str):
    if name == "DEFAULT_METHODS":  # derived from the registry (see _default_methods)
        return _default_methods()
    if name == "OUT_OF_DEFAULTS":  # the (score, label) methods kept out of the defaults, with why
        from calibflow.calibrators import out_of_defaults

        return out_of_defaults("scores")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Calibrate(_Strict):
    methods: list[str] = Field(default_factory=lambda: list(_default_methods()), min_length=1)
    # what the calibrators receive: the base model's margin (logit)
    input: Literal["logit", "probability", "score"] = "logit"
    # per-method constructor arguments, e.g. {histogram: {n_bins: 15}}
    options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # the segmented methods fitted for sources that declare segments (stage calibrate_segments)
    segmented: list[str] = Field(default_factory=lambda: list(_default_segmented()))

    @field_validator("methods")
    @classmethod
    def _methods(cls, v: list[str]) -> list[str]:
        from calibflow.calibrators import available

        for m in v:
            if _check_name(m, "method") not in available("scores"):
                raise ValueError(
                    f"{m!r} needs inputs beyond (score, label), so the pipeline cannot fit it; "
                    f"choose from {', '.join(available('scores'))}"
                )
        return v

    @field_validator("segmented")
    @classmethod
    def _segmented(cls, v: list[str]) -> list[str]:
        known = _segmented_methods()
        bad = [m for m in v if m not in known]
        if bad:
            raise ValueError(f"{bad[0]!r} is not a segmented method; use one of {', '.join(known)}")
        return v

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for k, opts in v.items():
            _check_options(_check_name(k, "method"), opts)
        return v


def _check_options(method: str, opts: dict[str, Any]) -> None:
    """Option names against the method's constructor (``input`` is calibrate.input's), then the values
    by building the calibrator (``calibrators.make``, which checks each numeric option against the
    class's own ``_bounds``: the schema and the class cannot disagree), then the memory the sizes need
    against the machine's; an unknown name gets a did-you-mean."""
    from calibflow.calibrators import get_class, make, memory_estimate

    allowed = sorted(set(get_class(method)().get_params(deep=False)) - {"input"})
    for key in opts:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            known = ", ".join(allowed) or "none"
            hint = f"did you mean {close[0]}?" if close else f"options of {method}: {known}"
            raise ValueError(f"calibrate.options.{method}.{key}: not an option of {method} ({hint})")
    cls = get_class(method)
    for key, value in opts.items():  # the class's own ranges (``_bounds``), named by their key here
        bound = cls._bounds.get(key)
        if bound is not None and not bound.ok(value):
            raise ValueError(f"{method}.{key} must be {bound.text()}, got {str(value)[:40]!r}")
    make(method, **opts)
    need, have = memory_estimate(get_class(method), opts), machine_memory()
    if have and need > have:
        raise ValueError(
            f"calibrate.options.{method}: these sizes need about {need / 2**30:.1f} GiB, more than this "
            f"machine's {have / 2**30:.1f} GiB; lower them"
        )


def machine_memory() -> int:
    """Bytes of memory this process may use: the physical memory, or a smaller cgroup limit; 0 if unknown."""
    from calibflow.io import machine_memory as mem

    return mem()


class Evaluate(_Strict):
    """Test-split metrics with paired percentile intervals (since issue 35 over the test table's
    ``scale.replicates`` Poisson replicate columns: ``n_bootstrap`` is no longer read by the stages; it is
    kept so that existing params files and ``dvc exp run -S evaluate.n_bootstrap=...`` still parse)."""

    n_bins: int = Field(15, gt=0, le=10_000)  # bins of ECE, MCE (equal-width) and the reliability diagrams
    # quantile: equal-mass bins, readable at low base rates
    reliability_bins: Literal["quantile", "uniform"] = "quantile"
    n_bootstrap: int = Field(200, ge=0, le=100_000)
    ci_level: float = Field(0.95, gt=0, lt=1)
    selection_alpha: float = Field(0.1, gt=0, le=1)  # selection-set metrics on the top 10% by probability
    hist_bins: int = Field(30, gt=0, le=10_000)


class Reproduce(BaseModel):
    """``profile`` plus one block per paper; each block maps a profile name to that paper's config.

    The inner configs are read by ``calibflow.experiments.<paper>.run``, which fills defaults; here
    they must be mappings with plain identifier keys (their contents are the experiments' business).
    """

    model_config = ConfigDict(extra="allow", frozen=True)
    profile: str = "quick"

    @model_validator(mode="after")
    def _papers(self) -> Reproduce:
        for key, block in (self.model_extra or {}).items():
            _check_name(key, "paper")
            if not isinstance(block, dict):
                raise ValueError(f"reproduce.{key} must be a mapping of profiles ({', '.join(PROFILES)})")
            for prof, cfg in block.items():
                if not NAME.match(str(prof)):
                    raise ValueError(f"reproduce.{key}.{prof!r}: use lowercase letters, digits and _")
                if cfg is not None and not isinstance(cfg, dict):
                    raise ValueError(f"reproduce.{key}.{prof} must be a mapping")
        if self.profile not in PROFILES and not any(
            isinstance(b, dict) and self.profile in b for b in (self.model_extra or {}).values()
        ):
            known = ", ".join(PROFILES)
            raise ValueError(f"reproduce.profile: {self.profile!r} is not {known} or a paper's own profile")
        return self


class Validate(_Strict):
    min_class_count: int = Field(10, ge=1, le=10**12)


class Select(_Strict):
    rule: str = "auto"
    # practical-equivalence margin, a fraction of the uncalibrated test log loss (calibflow.selection)
    margin: float = Field(0.001, ge=0, lt=1)

    @field_validator("rule")
    @classmethod
    def _rule(cls, v: str) -> str:
        return v if v == "auto" else _check_name(v, "method")


class Params(_Strict):
    """All of ``params.yaml``; every default lives here (a project's file states only what it changes)."""

    # Field order is params.yaml's (the report shows the params in this order).
    seed: int = Field(20261122, ge=0, lt=2**32)
    datasets: Datasets = Field(default_factory=Datasets)
    # Owned by calibflow.sources: validated by its parse_source (see _check_sources); free-form here.
    sources: dict[str, dict[str, Any]] = Field(default_factory=dict)
    prepare: Prepare = Field(default_factory=Prepare)
    model: Model = Field(default_factory=Model)
    replicas: Replicas = Field(default_factory=Replicas)
    calibrate: Calibrate = Field(default_factory=Calibrate)
    evaluate: Evaluate = Field(default_factory=Evaluate)
    validate_: Validate = Field(default_factory=Validate, alias="validate")
    select: Select = Field(default_factory=Select)
    # Checked by the core's own parsers, which hold their defaults (calibflow.aggregate.switch.ScaleConfig,
    # calibflow.monitor.MonitorConfig): free-form mappings here.
    scale: dict[str, Any] = Field(default_factory=dict)
    papers: list[str] = Field(default_factory=list)
    reproduce: Reproduce = Field(default_factory=Reproduce)
    monitor: dict[str, Any] = Field(default_factory=dict)

    @field_validator("monitor")
    @classmethod
    def _monitor(cls, v: dict[str, Any]) -> dict[str, Any]:
        validate_monitor_section(v)
        return v

    @field_validator("scale")
    @classmethod
    def _scale(cls, v: dict[str, Any]) -> dict[str, Any]:
        from calibflow.aggregate.switch import parse_scale

        parse_scale(v)
        return v

    @field_validator("papers")
    @classmethod
    def _paper_names(cls, v: list[str]) -> list[str]:
        return [_check_name(p, "paper") for p in v]

    @field_validator("sources")
    @classmethod
    def _sources(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        _check_sources(v)
        return v

    @model_validator(mode="after")
    def _something_to_run(self) -> Params:
        if not self.datasets.names and not self.sources:
            raise ValueError(
                "no datasets and no sources: add a source with `calibflow init --data FILE --label COL ...`"
            )
        return self

    @model_validator(mode="after")
    def _papers_configured(self) -> Params:
        missing = [p for p in self.papers if p not in (self.reproduce.model_extra or {})]
        if missing:
            raise ValueError(
                f"papers lists {missing} but reproduce has no block for them (see {PROFILES_FILE})"
            )
        return self

    @model_validator(mode="after")
    def _cross_sections(self) -> Params:
        """Values that name something in another section: select.rule a candidate method, monitor.sources
        declared sources."""
        rule = self.select.rule
        if rule != "auto" and rule not in self.calibrate.methods:
            raise ValueError(
                f"select.rule: {rule!r} is not in calibrate.methods ({', '.join(self.calibrate.methods)}); "
                "add it there or use auto"
            )
        for name in self.monitor.get("sources") or []:
            if name not in self.sources:
                known = ", ".join(self.sources) or "none declared"
                raise ValueError(f"monitor.sources: {name!r} is not a source under `sources:` ({known})")
        return self


def _check_sources(sources: Mapping[str, Any]) -> None:
    """Every ``sources`` entry: a registry-style name and a declaration ``parse_source`` accepts."""
    for name, decl in sources.items():
        if not NAME.match(str(name)):
            raise ValueError(f"sources: {name!r} is not a source name (lowercase letters, digits and _ only)")
        try:
            from calibflow.sources import parse_source
        except ImportError:  # calibflow.sources not merged yet: shape only (name -> mapping)
            continue
        parse_source(name, decl)


# ---- typed params without a second validation ----------------------------------------------------


def construct(model: type[M], data: Mapping[str, Any]) -> M:
    """``data`` as ``model`` with the schema's defaults for what it leaves out, without validating it.

    The stages' path (``calibflow.pipeline._common.as_params``): the entry points validated the file
    already (``load_and_validate``), and a stage keeps reporting its own problems in its own words.
    Nested sections become their models; a section that is not a mapping is an error naming it.
    """
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in data:
            continue
        value = data[key]
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            if not isinstance(value, Mapping):
                raise ParamsError(f"params: section {key!r} is missing or not a mapping")
            value = construct(sub, value)
        values[name] = value
    if model.model_config.get("extra") == "allow":
        known = {f.alias or n for n, f in model.model_fields.items()}
        values.update({k: v for k, v in data.items() if k not in known})
    return model.model_construct(**values)


# ---- messages ----------------------------------------------------------------------------------


def _fields(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys allowed at ``loc`` (for did-you-mean), walking the model's nested fields."""
    current: Any = model
    for part in loc:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return list(getattr(current, "model_fields", {}))


def _message(err: dict[str, Any]) -> str:
    loc = tuple(err["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    if err["type"] == "extra_forbidden":
        close = difflib.get_close_matches(str(loc[-1]), _fields(Params, loc[:-1]), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        return f"params: {key}: unknown key{hint}"
    if err["type"] == "missing":
        return f"params: {key}: missing"
    got = err.get("input")
    msg = str(err["msg"]).removeprefix("Value error, ")
    if isinstance(got, dict | list):  # the validator's message already names the bad element
        return f"params: {key}: {msg}"
    return f"params: {key}: {msg} (got {got!r})"


def validate_params(params: Any) -> Params:
    """The validated params, or ``ParamsError`` listing every problem one line each."""
    if not isinstance(params, Mapping):
        raise ParamsError(f"params: expected a mapping at the top level, got {type(params).__name__}")
    try:
        return Params.model_validate(dict(params))
    except ValidationError as exc:
        lines = [_message(e) for e in exc.errors(include_url=False)]
        raise ParamsError("\n".join(dict.fromkeys(lines))) from None


class DuplicateKey(ValueError):
    """A key written twice in one mapping of a YAML file (YAML keeps the last one silently)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping, naming both lines."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, str | int | float | bool) and key in seen:
                raise DuplicateKey(f"line {line}: key {key!r} is written twice (first at line {seen[key]}); "
                                   "keep one")
            if isinstance(key, str | int | float | bool):
                seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _read_yaml(p: Path) -> Any:
    """A YAML file's contents; a key written twice or broken YAML is a ``ParamsError`` naming the file."""
    from calibflow.io import MAX_PARAMS_BYTES, read_bounded

    try:
        text = read_bounded(p, MAX_PARAMS_BYTES, "a params file")  # bounded before it is parsed
    except ValueError as exc:
        raise ParamsError(str(exc)) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise ParamsError(f"{p}: nested too deeply to be a params file") from None
    except DuplicateKey as exc:
        raise ParamsError(f"{p}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ParamsError(f"{p}:{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from None


#: The paper reproductions' profiles (``reproduce.<paper>.<profile>``), in their own file beside
#: params.yaml: hundreds of lines only the reproduce stages read (DVC tracks them per paper,
#: ``params-papers.yaml:reproduce.<key>``).
PROFILES_FILE = "params-papers.yaml"


def with_paper_profiles(data: Any, params_path: str | Path) -> Any:
    """``data`` (params.yaml as read) with the paper blocks of ``params-papers.yaml`` beside it laid under
    its ``reproduce`` section; a paper's block written in params.yaml itself wins. No such file: ``data``."""
    path = Path(params_path).with_name(PROFILES_FILE)
    if not isinstance(data, Mapping) or not path.is_file():
        return data
    papers = _read_yaml(path) or {}
    extra = sorted(set(papers) - {"reproduce"}) if isinstance(papers, Mapping) else ["(not a mapping)"]
    blocks = papers.get("reproduce") if not extra else None
    if extra or not isinstance(blocks, Mapping) or "profile" in blocks:
        raise ParamsError(
            f"{path}: holds `reproduce:` with one block per paper only (reproduce.profile stays in "
            f"{Path(params_path).name}); found {extra or sorted(blocks or {})}"
        )
    own = data.get("reproduce")
    own = dict(own) if isinstance(own, Mapping) else {} if own is None else own
    if not isinstance(own, dict):
        return data  # the schema names a reproduce section that is not a mapping
    return {**data, "reproduce": {**own, **{k: v for k, v in blocks.items() if k not in own}}}


def load_and_validate(path: str | Path) -> dict[str, Any]:
    """Read a params YAML file (and the paper profiles beside it) and validate them; every failure is a
    ``ParamsError`` naming the file.

    Returns the validated params with the schema's defaults filled in, as a plain mapping."""
    p = Path(path)
    if not p.is_file():
        raise ParamsError(f"params file not found: {p} (give a path to a YAML file like params.yaml)")
    raw = _read_yaml(p)
    data = with_paper_profiles({} if raw is None else raw, p)  # an empty file: the schema says what's missing
    try:
        model = validate_params(data)  # a user project's params.yaml states only what it changes
    except ParamsError as exc:
        raise ParamsError("\n".join(f"{p}: {line}" for line in str(exc).splitlines())) from None
    return model.model_dump(by_alias=True)
